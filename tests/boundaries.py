"""The episode-boundary contract, checked on a batch: no transition spans two episodes.

For every transition of a ``[envs, time]`` batch: ``terminated`` and ``truncated`` are
never both set and ``done`` is their union; the next observation is the observation's
successor (each env family says what that means: :func:`exact_successor` for
:class:`fakes.BoundaryEnv`, :func:`stack_slides` for Atari frame stacks,
:func:`cartpole_successor` for CartPole); and the next step's observation continues the
episode (``obs[t + 1] == next_obs[t]``) unless the episode ended, where it starts one.
"""

from __future__ import annotations

import torch

from fakes import BOUNDARY_ENDS


def assert_episode_contract(batch, successor, starts, frames: int) -> int:
    """Check the contract on ``batch`` (``[envs, time]``); returns the episode ends in it."""
    assert batch.numel() == frames, (batch.shape, frames)
    obs, nxt = batch["observation"], batch["next", "observation"]
    term = batch["next", "terminated"].squeeze(-1)
    trunc = batch["next", "truncated"].squeeze(-1)
    done = batch["next", "done"].squeeze(-1)
    assert not (term & trunc).any(), "a transition both terminated and truncated"
    assert torch.equal(done, term | trunc)
    successor(obs, nxt, term, trunc)
    later = obs[:, 1:]  # what the policy saw next
    cont = ~done[:, :-1]
    assert torch.equal(later[cont], nxt[:, :-1][cont]), "an episode did not continue"
    starts(later[done[:, :-1]], obs[:, :-1][done[:, :-1]])
    return int(done.sum())


# ------------------------------------------------ BoundaryEnv: the exact state


def exact_successor(obs, nxt, term, trunc):
    """``[episode, t]`` -> ``[episode, t + 1]``; episodes end where the env's do, as it says."""
    assert torch.equal(nxt[..., 0], obs[..., 0]), "a next observation from another episode"
    assert torch.equal(nxt[..., 1], obs[..., 1] + 1), "a next observation that is not t + 1"
    for env in range(nxt.shape[0]):  # env i is BOUNDARY_FNS[i % 3] (collectors stack theirs)
        length, terminates = BOUNDARY_ENDS[env % len(BOUNDARY_ENDS)]
        ends = nxt[env, :, 1] == length
        assert torch.equal(term[env], ends if terminates else torch.zeros_like(ends)), env
        assert torch.equal(trunc[env], torch.zeros_like(ends) if terminates else ends), env


def exact_starts(first, last):
    """The observation after an episode end is the next episode's first: ``[episode + 1, 0]``."""
    assert torch.equal(first[:, 0], last[:, 0] + 1) and (first[:, 1] == 0).all()


# ------------------------------------------------ Atari: frame stacks


def stack_slides(obs, nxt, term, trunc):
    """A frame stack's successor is the stack slid by one frame: ``next[:-1] == obs[1:]``."""
    slid = (nxt[:, :, :-1] == obs[:, :, 1:]).flatten(2).all(-1)
    ends = (term | trunc) & ~slid
    assert slid.all(), f"{int((~slid).sum())} transitions do not slide, {int(ends.sum())} at ends"


def fresh_stacks(first, last):
    """A new episode's stack holds its first frame only: zero padding (ale-py) or the frame
    repeated (gymnasium, envpool)."""
    pad = first[:, :-1]
    zero = (pad == 0).flatten(1).all(-1)
    repeated = (pad == first[:, -1:]).flatten(1).all(-1)
    assert (zero | repeated).all()


# ------------------------------------------------ CartPole


CART_LIMIT, POLE_LIMIT = 2.4, 12 * 2 * 3.141592653589793 / 360


def cartpole_successor(obs, nxt, term, trunc):
    """A terminal next observation is the state that failed (the cart or the pole out of
    bounds); every other is inside them."""
    out = (nxt[..., 0].abs() > CART_LIMIT) | (nxt[..., 2].abs() > POLE_LIMIT)
    assert torch.equal(out, term), "a terminal next observation that did not fail"


def cartpole_starts(first, last):
    """CartPole's reset draws every state variable in [-0.05, 0.05]."""
    assert (first.abs() <= 0.05).all()

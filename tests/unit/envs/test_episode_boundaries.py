"""Every env a user builds keeps the episode-boundary contract, or is refused with a fix that works.

One parametrized test over the vector envs fleetrl accepts (``tests/boundaries.py`` says
what is checked on every transition): gymnasium's ``SyncVectorEnv`` and ``AsyncVectorEnv``
in each autoreset mode (on :class:`fakes.BoundaryEnv`, whose observation is its exact state,
and on CartPole), ale-py's ``AtariVectorEnv`` in both of its modes and envpool's gymnasium
API (Breakout), torchrl batched envs and factories. Each batch has episodes that end inside
it. Then the envs fleetrl refuses: the message, and the fix it names, collected and checked
the same way. (A factory inside a RayCollector worker: tests/integration/test_ray_engines.py.)
"""

from __future__ import annotations

import itertools
import re

import gymnasium as gym
import pytest
from gymnasium.vector import AutoresetMode

from boundaries import (
    assert_episode_contract,
    cartpole_starts,
    cartpole_successor,
    exact_starts,
    exact_successor,
    fresh_stacks,
    stack_slides,
)
from collecting import needs_envpool
from fakes import BOUNDARY_FNS, PlainVectorEnv
from fleetrl import SyncDataCollector
from fleetrl.envs.cpp import is_envpool
from fleetrl.errors import EnvError

MODES = {"same": AutoresetMode.SAME_STEP, "next": AutoresetMode.NEXT_STEP}
MODES["disabled"] = AutoresetMode.DISABLED
#: how many steps each family runs per env (episodes end inside: BoundaryEnv every 3-5
#: steps, CartPole every ~20 with random actions, Breakout every ~200)
STEPS = {"exact": 20, "cartpole": 100, "atari": 400}
CHECKS = {
    "exact": (exact_successor, exact_starts),
    "cartpole": (cartpole_successor, cartpole_starts),
    "atari": (stack_slides, fresh_stacks),
}


def collect(env, family: str, num_envs: int, num_envs_arg=None):
    frames = num_envs * STEPS[family]
    with SyncDataCollector(
        env, None, frames_per_batch=frames, total_frames=frames, num_envs=num_envs_arg
    ) as collector:
        if not is_envpool(env):  # envpool takes its seed when built
            collector.set_seed(0)
        batch = next(iter(collector))
    return batch, frames


def check(env, family: str, num_envs: int, num_envs_arg=None) -> None:
    batch, frames = collect(env, family, num_envs, num_envs_arg)
    assert batch.batch_size == (num_envs, STEPS[family])
    ends = assert_episode_contract(batch, *CHECKS[family], frames=frames)
    assert ends >= 1, "no episode ended inside the batch: the test would prove nothing"


# ------------------------------------------------ the envs fleetrl accepts


def gym_vector(kind: str, mode: str, fns=BOUNDARY_FNS, **kwargs):
    if kind == "sync":
        return gym.vector.SyncVectorEnv(fns, autoreset_mode=MODES[mode], **kwargs)
    # forked workers: torchrl makes spawn the default, and a spawned worker imports torch
    return gym.vector.AsyncVectorEnv(fns, autoreset_mode=MODES[mode], context="fork", **kwargs)


def cartpole(kind: str, mode: str):
    return gym.make_vec(
        "CartPole-v1",
        num_envs=3,
        vectorization_mode=kind,
        vector_kwargs={"autoreset_mode": MODES[mode]},
    )


def ale(mode: str, **kwargs):
    from ale_py.vector_env import AtariVectorEnv

    return AtariVectorEnv("breakout", num_envs=4, autoreset_mode=MODES[mode], **kwargs)


def envpool_breakout(**kwargs):
    import envpool

    return envpool.make("Breakout-v5", num_envs=4, seed=0, **kwargs)


def cycling_factory():
    """A factory whose successive envs are BOUNDARY_FNS' (num_envs=3 vectorizes it)."""
    fns = itertools.cycle(BOUNDARY_FNS)
    return lambda: next(fns)()


def torchrl_serial():
    from torchrl.envs import GymWrapper, SerialEnv

    return SerialEnv(3, [lambda fn=fn: GymWrapper(fn()) for fn in BOUNDARY_FNS])


ACCEPTED = {
    **{
        f"gymnasium-{kind}-{mode}": (lambda k=kind, m=mode: gym_vector(k, m), "exact", 3)
        for kind in ("sync", "async")
        for mode in MODES
    },
    # without shared memory, gymnasium's async workers send observations through the pipe;
    # same-step and disabled modes keep the contract (next-step mode is refused below)
    **{
        f"gymnasium-async-{mode}-no-shm": (
            lambda m=mode: gym_vector("async", m, shared_memory=False),
            "exact",
            3,
        )
        for mode in ("same", "disabled")
    },
    "gymnasium-sync-next-under-a-vector-wrapper": (
        lambda: gym.wrappers.vector.RecordEpisodeStatistics(gym_vector("sync", "next")),
        "exact",
        3,
    ),
    **{
        f"cartpole-{kind}-{mode}": (lambda k=kind, m=mode: cartpole(k, m), "cartpole", 3)
        for kind, mode in [
            ("sync", "same"),
            ("sync", "next"),
            ("sync", "disabled"),
            ("async", "next"),
        ]
    },
    # the case: same-step mode, whose final frames ale-py hands in infos["final_obs"]
    "ale-AtariVectorEnv-same": (lambda: ale("same"), "atari", 4),
    "ale-AtariVectorEnv-next": (lambda: ale("next"), "atari", 4),
    "envpool-gymnasium": (lambda: envpool_breakout(env_type="gymnasium"), "atari", 4),
    "torchrl-SerialEnv-of-GymWrappers": (torchrl_serial, "exact", 3),
}


#: accepted cases that run with the end-to-end tests only (make test-all): the fast suite
#: keeps each mechanism once (NEXT_STEP and DISABLED async, and ale-py's next-step reset,
#: are the sync and CartPole cases' mechanisms)
SLOW = {
    "ale-AtariVectorEnv-next",
    "gymnasium-async-same",
    "gymnasium-async-disabled",
    "gymnasium-async-same-no-shm",
}


def marked(name: str):
    marks = [needs_envpool] if "envpool" in name else []
    return pytest.param(name, marks=[*marks, pytest.mark.e2e] if name in SLOW else marks)


@pytest.mark.parametrize("case", [marked(name) for name in ACCEPTED])
def test_an_accepted_vector_env_keeps_the_contract(case):
    build, family, num_envs = ACCEPTED[case]
    check(build(), family, num_envs)


def test_a_factory_of_single_envs_keeps_the_contract():
    check(cycling_factory(), "exact", 3, num_envs_arg=3)


# ------------------------------------------------ the envs fleetrl refuses, and their fixes


REFUSED = {
    # (the refused env, what its message says, the fix it names, family, num_envs)
    "own-VectorEnv-class-next": (
        lambda: PlainVectorEnv(AutoresetMode.NEXT_STEP),
        "uses autoreset_mode=NEXT_STEP, which makes a transition across every episode end, "
        "and fleetrl cannot reset a PlainVectorEnv's finished envs itself",
        lambda: PlainVectorEnv(AutoresetMode.DISABLED),  # "build it with ... DISABLED"
        "exact",
        3,
    ),
    # gymnasium's async worker clears its pending reset only with shared memory: the step
    # after every episode end would be a second reset (reward 0, the action ignored)
    "gymnasium-async-next-no-shm": (
        lambda: gym_vector("async", "next", shared_memory=False),
        "has shared_memory=False and autoreset_mode=NEXT_STEP: its workers keep a finished "
        "env's pending reset",
        lambda: gym_vector("async", "next", shared_memory=True),  # "shared_memory=True"
        "exact",
        3,
    ),
    "ale-AtariVectorEnv-async": (
        lambda: ale("next", batch_size=2),
        "has batch_size=2 < num_envs=4 (its async mode",
        lambda: ale("next", batch_size=0),  # "build it with batch_size=0"
        "atari",
        4,
    ),
    "envpool-dm": (
        lambda: envpool_breakout(env_type="dm"),
        "fleetrl steps envpool's gymnasium API; build it with envpool.make(task, "
        "env_type='gymnasium'",
        lambda: envpool_breakout(env_type="gymnasium"),
        "atari",
        4,
    ),
    "envpool-async": (
        lambda: envpool_breakout(env_type="gymnasium", batch_size=2),
        "envpool's async mode (batch_size=2 < num_envs=4)",
        lambda: envpool_breakout(
            env_type="gymnasium", batch_size=4
        ),  # "build it with batch_size=4"
        "atari",
        4,
    ),
}


@pytest.mark.parametrize(
    "case",
    [  # the C++ engines' fixes collect Breakout for a second each: with the end-to-end tests
        pytest.param(name, marks=[needs_envpool, pytest.mark.e2e])
        if "envpool" in name
        else pytest.param(name, marks=[pytest.mark.e2e] if "ale" in name else [])
        for name in REFUSED
    ],
)
def test_a_refused_vector_env_is_told_a_fix_that_keeps_the_contract(case):
    refused, message, fix, family, num_envs = REFUSED[case]
    env = refused()
    with pytest.raises(EnvError, match=re.escape(message)):
        SyncDataCollector(env, None, frames_per_batch=num_envs * 10)
    env.close()
    check(fix(), family, num_envs)


@needs_envpool
def test_a_hand_built_envpool_is_not_reseeded_silently():
    env = envpool_breakout(env_type="gymnasium")
    message = re.escape("set_seed(7) cannot reseed an envpool env built by hand")
    with (
        SyncDataCollector(env, None, frames_per_batch=40) as collector,
        pytest.raises(EnvError, match=message),
    ):
        collector.set_seed(7)

"""Sequence minibatches: how the on-policy learners train recurrent policies through time.

A collected batch is ``[*env_batch, time]``: each env's row holds its steps in order,
and the recurrent state the policy read at each step (torchrl's ``LSTMModule`` /
``GRUModule`` keys, recorded by the collectors) with ``is_init`` True at each
episode's first step. Shuffling single steps (the feed-forward minibatches) runs the
network one step at a time from the stored state, so no gradient flows through time
and the network cannot learn what to remember. Here instead:

- :meth:`Sequences.split` cuts each row along time into sequences of ``seq_len``
  steps (the last one padded), after GAE or V-trace ran on the whole row. Each
  sequence starts from the state stored at its first step (``is_init`` is set
  there, and wherever an episode starts inside it, so the module starts from the
  stored state or from zeros); ``LOSS_MASK_KEY`` says which steps enter the loss.
- With ``burn_in`` > 0, consecutive sequences overlap: each one's first ``burn_in``
  steps are the ``burn_in`` steps before its own, and they are only run (without
  gradient, :meth:`Sequences.refresh_states`) to bring the stored state up to date with
  the current weights (R2D2's burn-in); every step enters the loss exactly once.
- :meth:`Sequences.minibatches` shuffles sequences, not steps.
- The loss runs the modules over each whole sequence in torchrl's recurrent mode
  (``set_recurrent_mode(True)``), so gradients flow through time, and averages
  over the steps under the loss mask only.

:func:`step_values` gives GAE and V-trace the critic's values from the stored
states, and :func:`sequence_log_prob` V-trace's log pi over whole rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torchrl.modules import GRUModule, LSTMModule, set_recurrent_mode

from fleetrl.errors import ConfigError, PolicyError
from fleetrl.keys import DONE_KEY, IS_INIT_KEY, MASK_KEY
from fleetrl.networks.kinds import BURN_IN_MSG, SEQ_LEN_MSG

__all__ = [
    "LOSS_MASK_KEY",
    "Sequences",
    "SharedTrunk",
    "is_recurrent",
    "recurrent_cores",
    "refuse_recurrent",
    "run_core",
    "sequence_log_prob",
    "step_values",
    "unroll",
]

#: True at the steps of a sequence that enter the loss (not padding, not burn-in)
LOSS_MASK_KEY = ("sequence", "loss_mask")

TOO_FEW_SEQUENCES_MSG = (
    "{algo}.num_mini_batch={num_mini_batch} is invalid for this batch: it holds {count} "
    "sequences of seq_len={seq_len} steps (its rows cut along time), fewer than the "
    "minibatches; lower num_mini_batch or seq_len, or collect longer rows"
)
UNCARRIED_STATE_MSG = (
    "the critic reads the recurrent state {key!r}, but the batch does not hold {missing!r}: "
    "a recurrent critic's state must be carried by the collected policy; share the "
    "recurrent core between the actor and the critic (as model: lstm does), or give "
    "the critic a state the actor carries"
)


def recurrent_cores(*modules: nn.Module | None) -> list[nn.Module]:
    """The torchrl ``LSTMModule`` and ``GRUModule`` inside ``modules``, each once."""
    found: list[nn.Module] = []
    for module in modules:
        if module is None:
            continue
        for sub in module.modules():
            if isinstance(sub, (LSTMModule, GRUModule)) and all(sub is not f for f in found):
                found.append(sub)
    return found


def is_recurrent(module: nn.Module | None) -> bool:
    """Whether ``module`` holds a torchrl ``LSTMModule`` or ``GRUModule``.

    Examples:
        >>> is_recurrent(LSTMModule(input_size=3, hidden_size=4, in_key="x", out_key="y"))
        True
        >>> is_recurrent(nn.Linear(3, 4))
        False
    """
    return bool(recurrent_cores(module))


@dataclass
class SharedTrunk:
    """An actor and a critic that begin with the same modules (fleetrl's default recurrent
    networks: one torso and one LSTM/GRU core, :func:`~fleetrl.networks.models.make_recurrent_actor_critic`),
    split so that a sequence minibatch runs the trunk once, then each head: the actor's
    distribution and the critic's value as each network alone computes them, at half the
    recurrent work (forward and backward).

    Examples:
        >>> from fleetrl.networks.models import ModelKind, make_recurrent_actor_critic
        >>> from fleetrl.envs.spec import EnvSpec
        >>> info = EnvSpec(4, 2, 1, None, None, (4,), torch.float32)
        >>> actor, critic = make_recurrent_actor_critic(ModelKind.LSTM, info, [8], 4)
        >>> [type(m).__name__ for m in SharedTrunk.of(actor, critic).trunk]
        ['TensorDictModule', 'LSTMModule']
        >>> SharedTrunk.of(actor, nn.Linear(4, 1)) is None  # nothing shared
        True
    """

    trunk: list[nn.Module]
    actor_head: list[nn.Module]
    #: the actor's last module: its distribution from the head's outputs
    distribution: Any
    critic_head: list[nn.Module]

    @classmethod
    def of(cls, actor: nn.Module, critic: nn.Module) -> SharedTrunk | None:
        """The split of ``actor`` (a ``ProbabilisticActor`` over a ``TensorDictSequential``)
        and ``critic`` (a ``TensorDictSequential``) at the end of their common modules, the
        same objects in the same order; None where they share no recurrent core."""
        try:
            body, distribution = actor.module  # ProbabilisticActor: [module, distribution]
            a, c = list(body.module), list(critic.module)
        except (AttributeError, TypeError, ValueError):
            return None
        n = 0
        while n < min(len(a), len(c)) and a[n] is c[n]:
            n += 1
        if not any(is_recurrent(m) for m in a[:n]) or not hasattr(distribution, "get_dist"):
            return None
        return cls(a[:n], a[n:], distribution, c[n:])

    def __call__(self, data: TensorDictBase) -> tuple[Any, TensorDictBase]:
        """The actor's distribution, and ``data`` with the critic's outputs written (a core
        over ``[sequences, steps]`` data runs as :func:`run_core` runs it)."""
        for module in self.trunk:
            if isinstance(module, (LSTMModule, GRUModule)) and data.ndim == 2:
                data = run_core(module, data)
            else:
                data = module(data)
        for module in self.actor_head:
            data = module(data)
        dist = self.distribution.get_dist(data)
        for module in self.critic_head:
            data = module(data)
        return dist, data


def run_core(core: nn.Module, data: TensorDictBase) -> TensorDictBase:
    """``core`` (an ``LSTMModule`` or ``GRUModule``) over ``data`` ``[sequences, steps]``
    in recurrent mode, as torchrl's module computes it, on plain tensors: each stretch from
    an ``is_init`` step (a sequence's first step counts as one) to the next runs from the
    state stored at its first step; writes the output key only.

    torchrl's recurrent mode splits the sequences into stretches and pads them through
    TensorDicts, and writes the next states at every step; the loss reads neither, and that
    bookkeeping cost more than a quarter of a small LSTM's update
    (``benchmarks/learner_throughput.py``, case ``ppo_lstm_cartpole``).
    """
    keys = core.in_keys
    rnn = core.lstm if isinstance(core, LSTMModule) else core.gru
    x = data.get(keys[0])
    states = [data.get(k) for k in keys[1:-1]]  # [B, T, layers, H] each: h (and c)
    starts = data.get(keys[-1])[..., 0]
    y = unroll(rnn, x, states, starts)
    data.set(core.out_keys[0], y)
    return data


def unroll(
    rnn: nn.Module, x: torch.Tensor, states: list[torch.Tensor], starts: torch.Tensor
) -> torch.Tensor:
    """The outputs ``[B, T, H]`` of ``rnn`` (batch first) over ``x`` ``[B, T, D]``, each
    stretch of steps from a start (``starts`` ``[B, T]``; step 0 always is one) to the next
    run from the stored state at its first step (``states``: ``[B, T, layers, H]`` each).

    Without a start after step 0 the rows run as they are, in one call; otherwise each
    stretch becomes a row of its own, packed with its length, and one call runs them all.
    """
    rows, steps = starts.shape
    lstm = len(states) == 2
    if not bool(starts[:, 1:].any()):
        first = [s[:, 0].transpose(0, 1).contiguous() for s in states]
        y, _ = rnn(x, tuple(first) if lstm else first[0])
        return y
    flat = starts.reshape(-1).clone()
    flat[::steps] = True
    stretch = flat.cumsum(0) - 1  # each step's stretch
    first_step = flat.nonzero().squeeze(1)  # each stretch's first step
    pos = torch.arange(flat.numel(), device=x.device) - first_step[stretch]
    lengths = torch.bincount(stretch, minlength=first_step.numel())
    padded = x.new_zeros(first_step.numel(), steps, x.shape[-1])
    padded[stretch, pos] = x.reshape(-1, x.shape[-1])
    first = [s.flatten(0, 1)[first_step].transpose(0, 1).contiguous() for s in states]
    packed = nn.utils.rnn.pack_padded_sequence(
        padded, lengths.cpu(), batch_first=True, enforce_sorted=False
    )
    out, _ = rnn(packed, tuple(first) if lstm else first[0])
    y, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=steps)
    return y[stretch, pos].reshape(rows, steps, -1)


RECURRENT_REPLAY_MSG = (
    "{name}={module!r} is recurrent (it holds an LSTMModule or GRUModule): {algo} learns from "
    "single transitions of its replay buffer, not sequences, so it cannot train it through "
    "time; pass a feed-forward network, or train the recurrent policy with ppo, a2c, impala "
    "or appo"
)


def refuse_recurrent(algo: str, **modules: nn.Module | None) -> None:
    """Raise :class:`~fleetrl.errors.PolicyError` where one of ``modules`` (by argument
    name) is recurrent: an algorithm without sequence minibatches (DQN, SAC) would train it
    one step at a time from stored states, which is not training a memory.

    Examples:
        >>> refuse_recurrent("sac", actor=nn.Linear(3, 2))  # feed-forward: accepted
    """
    for name, module in modules.items():
        if is_recurrent(module):
            raise PolicyError(RECURRENT_REPLAY_MSG.format(name=name, module=module, algo=algo))


def state_keys(core: nn.Module) -> list[tuple[Any, Any]]:
    """``(state key, next state key)`` of a core: what it reads at a step, what it writes."""
    count = 2 if isinstance(core, LSTMModule) else 1
    return list(zip(core.in_keys[1 : 1 + count], core.out_keys[1 : 1 + count]))


class Sequences:
    """How an on-policy learner cuts batches into sequences (see the module docstring).

    Args:
        seq_len: steps per sequence, burn-in included (>= 1).
        burn_in: steps at the start of each sequence run without gradient and left
            out of the loss (>= 0 and < ``seq_len``).
        algo: the config section's name, for messages.

    Examples:
        >>> batch = TensorDict({"x": torch.arange(10.0).reshape(2, 5)}, [2, 5])
        >>> seqs = Sequences(seq_len=2).split(batch)
        >>> seqs.shape, seqs["x"][:3].tolist()
        (torch.Size([6, 2]), [[0.0, 1.0], [2.0, 3.0], [4.0, 4.0]])
        >>> seqs[LOSS_MASK_KEY][:3].tolist()
        [[True, True], [True, True], [True, False]]
    """

    def __init__(self, seq_len: int, burn_in: int = 0, *, algo: str = "ppo"):
        problems = []
        if seq_len < 1:
            problems.append(f"{algo}.seq_len={seq_len} is invalid: {SEQ_LEN_MSG}")
        elif not 0 <= burn_in < seq_len:
            message = BURN_IN_MSG.format(seq_len=seq_len)
            problems.append(f"{algo}.burn_in={burn_in} is invalid: {message}")
        if problems:
            raise ConfigError(problems)
        self.seq_len = seq_len
        self.burn_in = burn_in
        self.algo = algo

    @property
    def stride(self) -> int:
        """Steps between the starts of consecutive sequences: the steps each one trains on."""
        return self.seq_len - self.burn_in

    def split(self, batch: TensorDictBase, keys: Iterable[Any] | None = None) -> TensorDictBase:
        """The batch's rows cut into sequences: ``[sequences, seq_len]``.

        ``batch`` is ``[*env_batch, time]`` (GAE already on it); ``keys``: only these are
        kept. Sequence ``j`` of a row holds the steps ``j * stride - burn_in`` to
        ``j * stride + stride - 1``; a step before the row's first or after its last
        (or masked out by ``("collector", "mask")``) is padding. ``is_init`` is True at
        each sequence's first real step and where an episode starts in it;
        ``LOSS_MASK_KEY`` is True at the real steps after the burn-in. Sequences with no
        step in the loss (a padded row's tail) are dropped.
        """
        steps = batch.shape[-1]
        present = set(batch.keys(include_nested=True))
        valid = batch.get(MASK_KEY) if MASK_KEY in present else None
        done = batch.get(DONE_KEY)[..., 0] if DONE_KEY in present else None
        is_init = batch.get(IS_INIT_KEY)[..., 0] if IS_INIT_KEY in present else None
        if keys is not None:
            batch = batch.select(*keys, strict=False)
        rows = batch.reshape(-1, steps)
        count = rows.shape[0]
        device = rows.device if rows.device is not None else _first_leaf(rows).device
        valid = (
            torch.ones(count, steps, dtype=torch.bool, device=device)
            if valid is None
            else valid.reshape(count, steps)
        )
        # an episode starts after a done step (and where the collector says so)
        starts = torch.zeros(count, steps, dtype=torch.bool, device=device)
        if done is not None:
            starts[:, 1:] = done.reshape(count, steps)[:, :-1]
        if is_init is not None:
            starts |= is_init.reshape(count, steps)

        per_row = math.ceil(steps / self.stride)
        slot = torch.arange(self.seq_len, device=device)
        time = torch.arange(per_row, device=device)[:, None] * self.stride - self.burn_in + slot
        inside = (time >= 0) & (time < steps)  # [per_row, seq_len]
        index = time.clamp(0, steps - 1)
        first = time == time.clamp_min(0)[:, :1]  # each sequence's first step in the row

        seqs = rows[:, index.reshape(-1)].reshape(count * per_row, self.seq_len)
        real = (valid[:, index] & inside).reshape(count * per_row, self.seq_len)
        loss_mask = real & (slot >= self.burn_in)
        init = (starts[:, index] & inside | first).reshape(count * per_row, self.seq_len, 1)
        seqs.set(IS_INIT_KEY, init)
        seqs.set(LOSS_MASK_KEY, loss_mask)
        keep = loss_mask.any(-1)
        return seqs if bool(keep.all()) else seqs[keep]

    def minibatches(self, data: TensorDictBase, num_mini_batch: int) -> Iterator[TensorDictBase]:
        """A fresh random split of the sequences into ``num_mini_batch`` minibatches.

        Sequences are shuffled whole; minibatch sizes differ by one at most, so no
        sequence is left out.

        Raises:
            ConfigError: fewer sequences than minibatches.
        """
        count = data.shape[0]
        if count < num_mini_batch:
            raise ConfigError(
                [
                    TOO_FEW_SEQUENCES_MSG.format(
                        algo=self.algo,
                        num_mini_batch=num_mini_batch,
                        count=count,
                        seq_len=self.seq_len,
                    )
                ]
            )
        if num_mini_batch == 1:
            yield data
            return
        device = data.device if data.device is not None else _first_leaf(data).device
        order = torch.randperm(count, device=device)
        for part in order.tensor_split(num_mini_batch):
            yield data[part]

    def refresh_states(self, data: TensorDictBase, networks: Sequence[nn.Module]) -> TensorDictBase:
        """The steps after the burn-in, each sequence's state brought up to date.

        The burn-in steps run through ``networks`` (in recurrent mode, without
        gradient) from the stored state; the state each recurrent core reaches
        replaces the stored one at the first step after the burn-in, unless an
        episode (or the row) starts there. ``data`` is not changed. Without burn-in,
        ``data`` itself.
        """
        if self.burn_in == 0:
            return data
        head, train = data[:, : self.burn_in], data[:, self.burn_in :]
        fresh = train.get(IS_INIT_KEY)[:, 0]  # [batch, 1]
        cores = recurrent_cores(*networks)
        warmed = head.clone(False)  # the networks' outputs go here, not into data
        covered: list[nn.Module] = []
        with torch.no_grad(), set_recurrent_mode(True):
            for network in networks:
                own = recurrent_cores(network)
                if all(any(c is d for d in covered) for c in own):
                    continue  # its cores ran already (a core shared by actor and critic)
                network(warmed)
                covered += own
        train = train.clone(False)
        for core in cores:
            for key, next_key in state_keys(core):
                stored = train.get(key)
                reached = warmed.get(next_key)[:, -1]
                pick = fresh.reshape(-1, *[1] * (reached.dim() - 1))
                state = stored.clone()
                state[:, 0] = torch.where(pick, stored[:, 0], reached)
                train.set(key, state)
        is_init = train.get(IS_INIT_KEY).clone()
        is_init[:, 0] = True
        train.set(IS_INIT_KEY, is_init)
        return train


def step_values(critic: nn.Module, batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
    """A recurrent critic's values of each step and of each next observation, one step each.

    V(x_t) is read from the state stored at step t; V(x_{t+1}) from the next observation
    and the state the policy wrote after step t (``("next", state)``), which continues
    the episode even where it ended (a truncated episode's bootstrap). Both in one call,
    without gradient, outside recurrent mode.

    Raises:
        PolicyError: the critic reads a state the batch does not carry.
    """
    keys = [k for k in critic.in_keys if k != IS_INIT_KEY]
    present = set(batch.keys(include_nested=True))
    for key in keys:
        next_key = ("next", *key) if isinstance(key, tuple) else ("next", key)
        for needed in (key, next_key):
            if needed not in present:
                raise PolicyError(UNCARRIED_STATE_MSG.format(key=key, missing=needed))
    flat = batch.reshape(-1)
    now = flat.select(*keys)
    later = TensorDict({k: flat.get(("next", k)) for k in keys}, now.batch_size)
    both = torch.cat([now, later])
    both.set(IS_INIT_KEY, torch.zeros(*both.batch_size, 1, dtype=torch.bool, device=both.device))
    with torch.no_grad(), set_recurrent_mode(False):
        value = critic(both).get("state_value")
    value, next_value = value.chunk(2)
    shape = (*batch.batch_size, *value.shape[1:])
    return value.reshape(shape), next_value.reshape(shape)


def sequence_log_prob(actor: nn.Module, batch: TensorDictBase, action_key: Any) -> torch.Tensor:
    """log pi of each action of a ``[*env_batch, time]`` batch, the actor run over each
    whole row in recurrent mode from the state stored at the row's first step (V-trace's
    log pi with the current weights). Shaped like the batch."""
    steps = batch.shape[-1]
    rows = batch.reshape(-1, steps).select(*actor.in_keys, action_key).clone(False)
    is_init = rows.get(IS_INIT_KEY).clone()
    is_init[:, 0] = True
    rows.set(IS_INIT_KEY, is_init)
    with set_recurrent_mode(True):
        dist = actor.get_dist(rows)
    return dist.log_prob(rows.get(action_key)).reshape(batch.shape)


def _first_leaf(data: TensorDictBase) -> torch.Tensor:
    return next(iter(data.values(include_nested=True, leaves_only=True)))

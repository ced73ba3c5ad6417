"""Overlapped collection: env steps of one half of the envs run while the policy acts on the other.

On a few cores a step-then-infer loop leaves the cores idle in turn: the
engine's threads wait for the policy, then the policy waits for the engine.
Sample Factory's double-buffered sampling splits the envs in two halves
(A: envs ``0..N/2-1``, B: ``N/2..N-1``) and keeps one half stepping while the
policy runs on the other::

    infer A(0), send A; infer B(0), send B
    for t: recv A(t), write A's rows, infer A(t+1), send A
           recv B(t), write B's rows, infer B(t+1), send B

Each half is its own C++ engine instance (:class:`HalvedEnv`), never one
engine in async mode answering the first ready envs, so the halves never mix
and row i of a batch is env i at every step. Env i is seeded with ``seed + i``
as in the unsplit engine, so the per-env streams are the unsplit engine's, and
a policy that acts on each env's row alone gives bit-identical batches with
and without overlap (``tests/unit/collectors/test_overlap.py``).

The halves are two env groups of the one rollout loop
(:func:`fleetrl.collectors.local.rollout.rollout`). At a batch end both halves are
received: no step is in flight across batches, so ``update_policy_weights_``,
``state_dict`` and the policy-version tags stay exact. Random batches
(``init_random_frames``) step the two halves as one group (both stepped at
once), with the same random actions as unsplit.

Cost against the plain loop: two policy calls of N/2 rows per step instead of
one of N, and per-half row slices (numpy views, allocated once per batch).
"""

from __future__ import annotations

import enum
import os
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fleetrl.envs.base import BatchedEnv, StepResult
from fleetrl.errors import Problems
from fleetrl.keys import NestedKey

if TYPE_CHECKING:
    from fleetrl.envs.atari import AtariEnv

__all__ = [
    "HalvedEnv",
    "Overlap",
    "SplitEnv",
    "as_overlap",
    "available_cores",
    "check_overlap_kwargs",
    "overlap_spec",
    "pays_off",
    "worker_overlap",
]

OVERLAP_VALUE_MSG = (
    "must be None (automatic), True (required), False (off), or one of 'auto', 'on', 'off'"
)
OVERLAP_ENV_MSG = (
    "overlapped collection steps two halves of a C++ Atari engine, and create_env_fn={env!r} "
    "is not one; pass an AtariEnv with engine 'ale_vector' or 'envpool' (or an ALE id with "
    "create_env_kwargs={{'engine': 'envpool'}}), or overlap=None or False"
)
OVERLAP_NUM_ENVS_MSG = (
    "overlapped collection steps the envs in two equal halves, so num_envs={n!r} must be even "
    "and >= 2; use num_envs={even}, or overlap=None or False"
)


class Overlap(str, enum.Enum):
    """Whether a :class:`~fleetrl.SyncDataCollector` overlaps env steps with inference."""

    #: on where it was measured faster: a C++ Atari engine, an even number of envs, and
    #: a core for the engine besides the policy's (:func:`pays_off`)
    AUTO = "auto"
    #: required: refused with a ConfigError where the envs cannot be split
    ON = "on"
    OFF = "off"


_FROM_PYTHON = {None: Overlap.AUTO, True: Overlap.ON, False: Overlap.OFF}


def available_cores() -> int:
    """CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def pays_off(processes: int, cores: int) -> bool:
    """Whether :attr:`Overlap.AUTO` overlaps, for ``processes`` collector processes on ``cores``.

    Overlap pays when the engine's threads get a core while the policy runs on
    another. Measured on 2 cores (Pong, Nature CNN, 8 envs per collector): one
    collector 1.29x (envpool) to 1.47x (ale_vector) faster with overlap; two
    (RayCollector workers) 0.85x, as both cores were busy already and two
    half-batch policy calls cost more than one.
    """
    return cores >= 2 * processes


def worker_overlap(value: Any, num_collectors: int, cores: int) -> Any:
    """What a RayCollector passes its workers for ``overlap``: automatic becomes off where
    ``num_collectors`` workers leave no core per worker for the engine (see :func:`pays_off`)."""
    if value in (None, Overlap.AUTO, Overlap.AUTO.value) and not pays_off(num_collectors, cores):
        return Overlap.OFF
    return value


def as_overlap(value: Any, problems: Problems, arg: str = "overlap") -> Overlap:
    """``None``/``True``/``False``, an :class:`Overlap` or its value -> :class:`Overlap`."""
    if isinstance(value, bool) or value is None:
        return _FROM_PYTHON[value]
    try:
        return Overlap(value)
    except ValueError:
        problems.add(arg, value, OVERLAP_VALUE_MSG)
        return Overlap.OFF


def overlap_spec(
    create_env_fn: Any,
    num_envs: int | None,
    create_env_kwargs: dict[str, Any] | None,
    overlap: Overlap,
    problems: Problems,
    arg: str = "overlap",
) -> AtariEnv | None:
    """The Atari spec whose envs the collector steps in two halves, or None (the plain loop).

    With :attr:`Overlap.ON`, an env that cannot be split is a problem naming
    ``arg``; with :attr:`Overlap.AUTO` it quietly gets the plain loop.
    """
    from fleetrl.config import EnvEngine
    from fleetrl.envs.atari import AtariEnv, is_atari_id

    if overlap is Overlap.OFF:
        return None
    spec = create_env_fn
    if isinstance(spec, str) and is_atari_id(spec):
        try:
            spec = AtariEnv.from_kwargs(spec, dict(create_env_kwargs or {}))
        except Exception:  # make_env reports the bad kwargs with its own message
            return None
    n = 1 if num_envs is None else num_envs
    splittable = isinstance(spec, AtariEnv) and spec.engine in (
        EnvEngine.ALE_VECTOR,
        EnvEngine.ENVPOOL,
    )
    even = isinstance(n, int) and n >= 2 and n % 2 == 0
    if overlap is Overlap.AUTO and not pays_off(1, available_cores()):
        return None
    if overlap is Overlap.ON:
        if not splittable:
            problems.add(arg, True, OVERLAP_ENV_MSG.format(env=create_env_fn))
        elif not even:
            even_n = max(2, n + n % 2) if isinstance(n, int) else 2
            problems.add(arg, True, OVERLAP_NUM_ENVS_MSG.format(n=n, even=even_n))
    return spec if splittable and even else None


def check_overlap_kwargs(
    problems: Problems, env_fns: list[Any], kwargs_list: list[Any], num_envs: Any
) -> None:
    """RayCollector: refuse a ``collector_kwargs['overlap']`` that its workers' envs cannot
    honour, before any actor starts (each distinct problem once)."""
    arg = "collector_kwargs['overlap']"
    for env_fn, kwargs in zip(env_fns, kwargs_list):
        if not isinstance(kwargs, dict) or "overlap" not in kwargs:
            continue
        p = Problems()
        n = num_envs if isinstance(num_envs, int) and not isinstance(num_envs, bool) else None
        overlap_spec(
            env_fn,
            n,
            kwargs.get("create_env_kwargs"),
            as_overlap(kwargs["overlap"], p, arg),
            p,
            arg,
        )
        problems.items.extend(item for item in p.items if item not in problems.items)


class SplitEnv(BatchedEnv):
    """Two :class:`BatchedEnv` groups stepped as one batch: rows ``0..h-1`` are the first,
    ``h..N-1`` the second.

    As a :class:`BatchedEnv` it steps both groups at once (send both, then receive both)
    and answers the whole batch, so everything built on a ``BatchedEnv`` works unchanged;
    the rollout (:func:`fleetrl.collectors.local.rollout.rollout`) drives the groups one at a time
    as two env :attr:`groups`. Env i is seeded with ``seed + i``, as in one env of N: a
    group built as part of a larger batch applies its offset itself (``seed_offsets`` 0),
    any other group is reset with ``seed + offset``.

    Args:
        halves: the two groups.
        seed_offsets: what :meth:`reset` adds to a seed, per group.
    """

    def __init__(self, halves: tuple[BatchedEnv, BatchedEnv], seed_offsets: tuple[int, int]):
        first, second = halves
        n = first.num_envs + second.num_envs
        self.halves = halves
        self.seed_offsets = seed_offsets
        #: the rows of each group in the batch
        self.rows = (slice(0, first.num_envs), slice(first.num_envs, n))
        #: (engine, rows) per group: the env groups the rollout steps in turn
        self.groups = list(zip(self.halves, self.rows))
        self.num_envs = n
        self.batch_shape = torch.Size([n])
        self.observation_spec = first.observation_spec
        self.action_shape, self.action_dtype = first.action_shape, first.action_dtype
        self.num_actions = first.num_actions
        self.unbatched_copies = first.unbatched_copies

    @classmethod
    def build(cls, create_env_fn: Any, num_envs: int | None, create_env_kwargs: Any) -> BatchedEnv:
        """The envs in two groups of ``num_envs // 2`` and the rest, where ``create_env_fn``
        builds any number of envs; otherwise (one env, an env already built, or a factory of
        envs that keep their own batch) the one env :func:`~fleetrl.envs.make_env` builds
        from ``num_envs`` (None: the env's own size, or one env): accepted and refused as
        without groups."""
        from fleetrl.envs.atari import AtariEnv, is_atari_id
        from fleetrl.envs.grouped import is_grouped
        from fleetrl.envs.make import _call_factory, make_env
        from fleetrl.envs.mujoco import MujocoEnv
        from fleetrl.envs.torchrl_env import is_torchrl_env

        half = 0 if num_envs is None else num_envs // 2
        # an env already built is one object: it cannot be two groups
        if half < 1 or _built(create_env_fn):
            return make_env(create_env_fn, num_envs, create_env_kwargs)
        spec = create_env_fn
        if isinstance(spec, str) and is_atari_id(spec):
            spec = AtariEnv.from_kwargs(spec, dict(create_env_kwargs or {}))
        if isinstance(spec, (AtariEnv, MujocoEnv)):  # seeded as part of the larger batch
            return cls(_spec_halves(spec, num_envs), (0, 0))
        if callable(create_env_fn):
            # what the factory builds says whether its envs split: asked of one call, whose
            # env is kept (the first group's first env), so the factory runs as often as
            # without groups
            made = _call_factory(create_env_fn, dict(create_env_kwargs or {}))
            if is_torchrl_env(made) and is_grouped(made):  # a multi-agent env: one group
                return make_env(_Reusing(create_env_fn, made), num_envs, create_env_kwargs)
            if _batched(made):  # keeps its own batch: one group, where it is num_envs
                whole = make_env(made, None)
                if whole.num_envs == num_envs:
                    return whole
                whole.close()  # refused in make_env's words, naming the num_envs given
                return make_env(create_env_fn, num_envs, create_env_kwargs)
            create_env_fn = _Reusing(create_env_fn, made)
        first = make_env(create_env_fn, half, create_env_kwargs)
        if first.num_envs != half or first.batch_shape != torch.Size([half]):
            first.close()  # e.g. a factory of an id: one env whatever num_envs says
            return make_env(create_env_fn, num_envs, create_env_kwargs)
        try:
            second = make_env(create_env_fn, num_envs - half, create_env_kwargs)
        except Exception:
            first.close()
            raise
        return cls((first, second), (0, half))

    def reset(self, seed: int | None = None) -> dict[NestedKey, np.ndarray]:
        return self._join(
            [
                h.reset(seed=None if seed is None else seed + offset)
                for h, offset in zip(self.halves, self.seed_offsets)
            ]
        )

    def reset_static(self, seed: int) -> dict[NestedKey, np.ndarray]:
        return self._join([h.reset_static(seed) for h in self.halves])

    def state_dict(self) -> dict[str, Any] | None:
        states = [h.state_dict() for h in self.halves]
        return None if any(s is None for s in states) else {"groups": states}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for h, s in zip(self.halves, state["groups"]):
            h.load_state_dict(s)

    @property
    def action_bounds(self) -> tuple[np.ndarray, np.ndarray] | None:
        bounds = [h.action_bounds for h in self.halves]
        if any(b is None for b in bounds):
            return None
        return (
            np.concatenate([b[0] for b in bounds]),  # type: ignore[index]
            np.concatenate([b[1] for b in bounds]),  # type: ignore[index]
        )

    def _join(self, parts: list[dict[NestedKey, np.ndarray]]) -> dict[NestedKey, np.ndarray]:
        return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}

    def reset_envs(self, mask: np.ndarray) -> dict[NestedKey, np.ndarray]:
        return self._join([h.reset_envs(mask[r]) for h, r in zip(self.halves, self.rows)])

    def step(self, action: np.ndarray | torch.Tensor) -> StepResult:
        for h, r in zip(self.halves, self.rows):
            h.send(action[r])
        a, b = (h.recv() for h in self.halves)
        return StepResult(
            self._join([a.next_obs, b.next_obs]),
            self._join([a.obs, b.obs]),
            np.concatenate([a.reward, b.reward]),
            np.concatenate([a.terminated, b.terminated]),
            np.concatenate([a.truncated, b.truncated]),
        )

    def random_action(self) -> torch.Tensor:
        return torch.cat([h.random_action() for h in self.halves])

    def seed_actions(self, seed: int) -> None:
        for h, r in zip(self.halves, self.rows):
            h.seed_actions(seed + r.start)

    def close(self) -> None:
        for h in self.halves:
            h.close()


class HalvedEnv(SplitEnv):
    """The envs of a C++ Atari engine as two engine instances of ``num_envs / 2`` envs
    (a :class:`SplitEnv`: overlapped collection).

    Args:
        spec: an ``ale_vector`` or ``envpool`` :class:`~fleetrl.envs.AtariEnv`.
        num_envs: an even number of envs >= 2.

    Examples:
        >>> from fleetrl.envs import AtariEnv
        >>> env = HalvedEnv(AtariEnv("ALE/Pong-v5", engine="ale_vector", num_threads=1), 4)
        >>> env.rows
        (slice(0, 2, None), slice(2, 4, None))
        >>> env.reset(seed=0)["observation"].shape
        (4, 4, 84, 84)
        >>> env.close()
    """

    def __init__(self, spec: AtariEnv, num_envs: int):
        super().__init__(_spec_halves(spec, num_envs), (0, 0))
        self.spec = spec
        # one sampler for the whole batch: random actions are the unsplit engine's
        self._rng = np.random.default_rng()

    def random_action(self) -> torch.Tensor:
        return torch.from_numpy(self._rng.integers(0, self.num_actions, size=self.num_envs))

    def seed_actions(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)


def _spec_halves(spec: Any, num_envs: int) -> tuple[BatchedEnv, BatchedEnv]:
    """An Atari or MuJoCo spec's envs as two engines of ``num_envs // 2`` and the rest, the
    second seeded as the rest of one batch (env i is seeded with ``seed + i``)."""
    half = num_envs // 2
    first = spec.make(half)
    try:
        second = spec.make(num_envs - half, seed_offset=half)
    except Exception:
        first.close()
        raise
    return first, second


def _built(obj: Any) -> bool:
    """Whether ``obj`` is an env already built (gymnasium, torchrl, envpool), not a spec, an
    id or a factory."""
    import gymnasium as gym

    from fleetrl.envs.cpp import is_envpool
    from fleetrl.envs.torchrl_env import is_torchrl_env

    return (
        isinstance(obj, (gym.Env, gym.vector.VectorEnv)) or is_torchrl_env(obj) or is_envpool(obj)
    )


def _batched(obj: Any) -> bool:
    """Whether a factory's env keeps its own batch, as :func:`~fleetrl.envs.make_env` tells
    (a vector env, an envpool, a torchrl env with a batch): never vectorized again."""
    import gymnasium as gym

    from fleetrl.envs.cpp import is_envpool
    from fleetrl.envs.torchrl_env import is_torchrl_env

    if isinstance(obj, gym.vector.VectorEnv) or is_envpool(obj):
        return True
    return is_torchrl_env(obj) and obj.batch_size != torch.Size([])


class _Reusing:
    """A factory whose first call returns an env it already built; it reads as the factory
    in every message."""

    def __init__(self, factory: Any, made: Any):
        self.factory = factory
        self._made = [made]

    def __call__(self, **kwargs: Any) -> Any:
        return self._made.pop() if self._made else self.factory(**kwargs)

    def __repr__(self) -> str:
        return repr(self.factory)

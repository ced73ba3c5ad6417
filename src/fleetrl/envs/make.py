"""make_env: one batched env from whatever a user passes as an environment.

:func:`make_env` accepts a gymnasium id, a gymnasium ``Env`` or ``VectorEnv``,
a torchrl ``EnvBase``, an :class:`~fleetrl.envs.AtariEnv` or
:class:`~fleetrl.envs.MujocoEnv` spec, or a callable returning any of these,
and returns a :class:`~fleetrl.envs.BatchedEnv`: N environments stepped as one
batch, speaking numpy (the engines: :mod:`fleetrl.envs.gymnasium`,
:mod:`fleetrl.envs.torchrl_env`, :mod:`fleetrl.envs.atari`,
:mod:`fleetrl.envs.mujoco`). :func:`create_env_fn` is what a config's ``env``
section builds.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import torch
from gymnasium.vector import AutoresetMode

from fleetrl.config import EnvConfig
from fleetrl.envs.atari import AtariEnv
from fleetrl.envs.base import BatchedEnv
from fleetrl.envs.cpp import BuiltEnvPool, is_envpool
from fleetrl.envs.engine import ResolvedEnv, resolve_env
from fleetrl.envs.grouped import GroupedEnv, is_grouped
from fleetrl.envs.gymnasium import GymVectorEnv, make_gym_vector_env
from fleetrl.envs.mujoco import MujocoEnv
from fleetrl.envs.partial import GymId, PartialEnv
from fleetrl.envs.registry import EnvKind, lookup_id
from fleetrl.envs.torchrl_env import TorchRLEnv, is_torchrl_env
from fleetrl.errors import EnvError

__all__ = ["create_env_fn", "make_env"]

ENV_TYPE_MSG = (
    "create_env_fn={value!r} is invalid: pass a gymnasium id (e.g. 'CartPole-v1'), a gymnasium "
    "Env or VectorEnv, a torchrl EnvBase, or a callable returning one of these"
)
NUM_ENVS_MSG = (
    "num_envs={value!r} is invalid for an already built {kind}: it is only used to vectorize a "
    "gymnasium id or factory; leave num_envs=None (or equal to the env's {n} sub-envs)"
)
FACTORY_GYM_MSG = (
    "create_env_fn={value!r} raised gymnasium's {kind}: {err}; check the env id and the "
    "arguments the factory passes to gymnasium"
)


def make_env(
    create_env_fn: Any,
    num_envs: int | None = None,
    create_env_kwargs: dict[str, Any] | None = None,
) -> BatchedEnv | GroupedEnv:
    """Turn what a user passes as an env into a :class:`BatchedEnv`, or a
    :class:`~fleetrl.envs.grouped.GroupedEnv` for a torchrl env with agent groups.

    Args:
        create_env_fn: a gymnasium id, a gymnasium ``Env`` or ``VectorEnv``, a
            torchrl ``EnvBase``, or a callable returning one of these; or a
            :class:`fleetrl.envs.AtariEnv`, :class:`fleetrl.envs.MujocoEnv` or
            :class:`fleetrl.envs.PartialEnv` (a gymnasium id keeping chosen observation entries)
            or :class:`fleetrl.envs.GymId` (a gymnasium id with the env's own arguments).
            An ALE id (``"ALE/Pong-v5"``) is
            built as ``AtariEnv(id)``: the standard Atari preprocessing in the
            gymnasium engine.
        num_envs: how many copies to vectorize in-process. Used for gymnasium ids
            and factories (default 1); an already built vector or torchrl env
            keeps its own batch.
        create_env_kwargs: keyword arguments for ``create_env_fn`` (or for
            ``gymnasium.make`` when it is an id; for an ALE id, ``engine`` and
            :class:`~fleetrl.config.AtariConfig` fields, e.g. ``{"engine": "envpool"}``; for a
            MuJoCo id with an ``engine``, :class:`~fleetrl.envs.MujocoEnv`'s fields and
            the env's own arguments).

    Examples:
        >>> env = make_env("CartPole-v1", num_envs=4)
        >>> env.num_envs, env.num_actions
        (4, 2)
        >>> env.close()
    """
    kwargs = dict(create_env_kwargs or {})
    kind = lookup_id(create_env_fn)[0] if isinstance(create_env_fn, str) else None
    if kind is EnvKind.ATARI:
        create_env_fn = AtariEnv.from_kwargs(create_env_fn, kwargs)
    elif kind is EnvKind.MUJOCO and "engine" in kwargs:
        create_env_fn = MujocoEnv.from_kwargs(create_env_fn, kwargs)
    elif kind is EnvKind.PETTINGZOO:  # the extra's import of torchrl's specs, only here
        from fleetrl.envs.pettingzoo import PettingZooId

        create_env_fn = PettingZooId(create_env_fn, kwargs)
    elif kind is EnvKind.VMAS:
        from fleetrl.envs.vmas import VmasId

        create_env_fn = VmasId(create_env_fn, kwargs)
    if isinstance(create_env_fn, (AtariEnv, MujocoEnv, PartialEnv, GymId)) or _is_id_of(
        create_env_fn
    ):
        return create_env_fn.make(num_envs or 1)
    if isinstance(create_env_fn, str):
        return GymVectorEnv(make_gym_vector_env(create_env_fn, num_envs or 1, **kwargs))
    if is_envpool(create_env_fn):  # a gymnasium VectorEnv (or dm_env) with its own resets
        env = BuiltEnvPool(create_env_fn)
        _check_prebuilt_num_envs(num_envs, env.num_envs, "envpool env")
        return env
    if isinstance(create_env_fn, gym.vector.VectorEnv):
        _check_prebuilt_num_envs(num_envs, create_env_fn.num_envs, "gymnasium VectorEnv")
        return GymVectorEnv(create_env_fn)
    if isinstance(create_env_fn, gym.Env):
        if num_envs not in (None, 1):
            raise EnvError(NUM_ENVS_MSG.format(value=num_envs, kind="gymnasium Env", n=1))
        env = create_env_fn
        return GymVectorEnv(
            gym.vector.SyncVectorEnv([lambda: env], autoreset_mode=AutoresetMode.SAME_STEP)
        )
    if is_torchrl_env(create_env_fn):
        _check_prebuilt_num_envs(num_envs, max(1, create_env_fn.batch_size.numel()), "torchrl env")
        return GroupedEnv(create_env_fn) if is_grouped(create_env_fn) else TorchRLEnv(create_env_fn)
    if callable(create_env_fn):
        return _make_from_factory(create_env_fn, num_envs, kwargs)
    raise EnvError(ENV_TYPE_MSG.format(value=create_env_fn))


def _is_id_of(obj: Any) -> bool:
    """A multi-agent env's id (its module imported only where one is used)."""
    kind = (type(obj).__module__, type(obj).__name__)
    return kind in (("fleetrl.envs.pettingzoo", "PettingZooId"), ("fleetrl.envs.vmas", "VmasId"))


def _check_prebuilt_num_envs(num_envs: int | None, n: int, kind: str) -> None:
    if num_envs is not None and num_envs != n:
        raise EnvError(NUM_ENVS_MSG.format(value=num_envs, kind=kind, n=n))


def _call_factory(factory: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    try:
        return factory(**kwargs)
    except gym.error.Error as err:  # e.g. an unknown id inside the factory
        raise EnvError(
            FACTORY_GYM_MSG.format(value=factory, kind=type(err).__name__, err=err)
        ) from err


def _make_from_factory(
    factory: Callable[..., Any], num_envs: int | None, kwargs: dict[str, Any]
) -> BatchedEnv | GroupedEnv:
    first = _call_factory(factory, kwargs)
    if num_envs not in (None, 1) and is_torchrl_env(first) and first.batch_size == torch.Size([]):
        copies = _serial_copies(first, factory, num_envs, kwargs)
        if is_grouped(first):  # torchrl's grouped policies take any batch dims
            return GroupedEnv(copies)
        return TorchRLEnv(copies, unbatched_copies=True)
    if isinstance(first, gym.Env) and not isinstance(first, gym.vector.VectorEnv):
        n = num_envs or 1
        envs = [first] + [_call_factory(factory, kwargs) for _ in range(n - 1)]
        fns = [(lambda e=e: e) for e in envs]
        return GymVectorEnv(gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP))
    if num_envs not in (None, 1) and (
        isinstance(first, gym.vector.VectorEnv) or is_torchrl_env(first) or is_envpool(first)
    ):
        # A factory of batched envs cannot be vectorized again in-process.
        if is_envpool(first):
            n = int(first.config["num_envs"])
        elif isinstance(first, gym.vector.VectorEnv):
            n = first.num_envs
        else:
            n = first.batch_size.numel()
        if num_envs != n:
            first.close()
            raise EnvError(NUM_ENVS_MSG.format(value=num_envs, kind=type(first).__name__, n=n))
    if isinstance(first, (gym.vector.VectorEnv, str)) or is_torchrl_env(first) or is_envpool(first):
        return make_env(first, None)
    raise EnvError(ENV_TYPE_MSG.format(value=factory) + f" (the callable returned {first!r})")


def _serial_copies(first: Any, factory: Callable[..., Any], n: int, kwargs: dict[str, Any]) -> Any:
    """``n`` copies of an unbatched torchrl env as one ``SerialEnv`` of batch ``[n]``.

    torchrl's collectors give each copy of a factory its own worker; we step
    the copies in-process instead (a ``ParallelEnv`` would start n processes
    inside a collector that Ray gives one CPU). The first copy is the env
    already built. Copies of fleetrl's :class:`~fleetrl.envs.pettingzoo.PettingZooEnv`
    become one adapter of batch ``[n]`` (:meth:`~fleetrl.envs.pettingzoo.PettingZooEnv.stack`),
    which builds one TensorDict per step for all of them.
    """
    from torchrl.envs import SerialEnv

    # fleetrl's PettingZoo adapter steps its copies as one batched env (its module is loaded
    # where such an env was built)
    pettingzoo = sys.modules.get("fleetrl.envs.pettingzoo")
    if pettingzoo is not None and isinstance(first, pettingzoo.PettingZooEnv):
        copies = [first] + [_call_factory(factory, kwargs) for _ in range(n - 1)]
        if all(isinstance(c, pettingzoo.PettingZooEnv) and not c.batch_size for c in copies):
            return pettingzoo.PettingZooEnv.stack(copies)
        return SerialEnv(n, [lambda c=c: c for c in copies])
    fns = [lambda: first] + [lambda: _call_factory(factory, kwargs)] * (n - 1)
    return SerialEnv(n, fns)


def create_env_fn(env: EnvConfig | ResolvedEnv) -> Any:
    """What the collectors build for a config's ``env`` section: an ALE id becomes an
    :class:`~fleetrl.envs.AtariEnv` with ``env.engine`` and ``env.atari``; a MuJoCo id in the
    envpool engine a :class:`~fleetrl.envs.MujocoEnv`; an id with ``env.observation_indices``
    a :class:`~fleetrl.envs.PartialEnv`; an id with ``env.kwargs`` a
    :class:`~fleetrl.envs.GymId`; other ids stay ids.

    Give the run's :class:`~fleetrl.envs.engine.ResolvedEnv` where there is one (a section
    is resolved here otherwise); a section whose engine cannot step it raises ConfigError.
    """
    resolved = env if isinstance(env, ResolvedEnv) else resolve_env(env)
    return resolved.create_env_fn

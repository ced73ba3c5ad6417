"""The :class:`~fleetrl.envs.spec.EnvSpec` of an env: one env built, read and closed.

Examples:
    >>> spec = env_spec("CartPole-v1")
    >>> spec.obs_shape, spec.num_actions, spec.discrete
    ((4,), 2, True)
    >>> env_spec("Pendulum-v1").action_high.tolist()
    [2.0]
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from fleetrl.config import EnvEngine
from fleetrl.envs.atari import AtariEnv
from fleetrl.envs.grouped import GroupedEnv, GroupedSpecs
from fleetrl.envs.make import make_env
from fleetrl.envs.mujoco import MujocoEnv
from fleetrl.envs.partial import GymId, PartialEnv
from fleetrl.envs.spec import EnvSpec
from fleetrl.envs.torchrl_env import is_torchrl_env

__all__ = ["env_spec"]


def env_spec(create_env_fn: Any, create_env_kwargs: dict[str, Any] | None = None) -> EnvSpec:
    """The :class:`EnvSpec` of what ``create_env_fn`` builds (one env, closed at once).

    Takes what :func:`~fleetrl.envs.make_env` takes (a gymnasium id, an
    :class:`~fleetrl.envs.AtariEnv`, :class:`~fleetrl.envs.MujocoEnv` or
    :class:`~fleetrl.envs.PartialEnv`, a gymnasium or torchrl env or a factory); the
    observation is what the collectors see (an Atari game's preprocessed frame stack, e.g.
    uint8 ``(4, 84, 84)``; MuJoCo's ``float32``; a PartialEnv's kept entries).
    """
    env = make_env(create_env_fn, num_envs=None, create_env_kwargs=create_env_kwargs)
    built_here = not isinstance(create_env_fn, (gym.Env, gym.vector.VectorEnv)) and not (
        is_torchrl_env(create_env_fn)
    )
    try:
        if isinstance(env, GroupedEnv):
            return _grouped_spec(env, create_env_fn)
        (shape, dtype), *_ = env.observation_spec.values()
        obs_dtype = torch.uint8 if dtype == np.uint8 else torch.float32
        obs_dim = int(np.prod(shape)) if shape else 1
        low, high = _bounds(env)
        action_dim = 1 if env.num_actions is not None else int(np.prod(env.action_shape or (1,)))
        engine = getattr(create_env_fn, "engine", None)
        if isinstance(create_env_fn, str):
            engine = EnvEngine.GYMNASIUM
        return EnvSpec(
            obs_dim,
            env.num_actions,
            action_dim,
            low,
            high,
            tuple(int(d) for d in shape),
            obs_dtype,
            env_id=_name(create_env_fn),
            engine=None if engine is None else EnvEngine(engine),
            integer_actions=env.num_actions is None
            and (np.issubdtype(env.action_dtype, np.integer) or env.action_dtype == np.bool_),
        )
    finally:
        if built_here:  # an env the caller built stays open for the caller
            env.close()


def _grouped_spec(env: GroupedEnv, create_env_fn: Any) -> EnvSpec:
    """A multi-agent env's spec: its torchrl specs, and one agent of its first group in the
    single-agent fields (what messages and the checks of spaces read)."""
    specs = GroupedSpecs.of(env.env)
    group = specs.groups[0] if specs.groups else None
    batch = len(specs.batch_size)
    obs_keys = [k for k in specs.observation_keys if isinstance(k, tuple) and k[0] == group]
    obs = specs.observation_spec[obs_keys[0]] if obs_keys else None
    shape = tuple(int(d) for d in obs.shape[batch + 1 :]) if obs is not None else ()
    action = specs.full_action_spec[specs.action_keys[0]]
    n = getattr(getattr(action, "space", None), "n", None)
    return EnvSpec(
        int(np.prod(shape)) if shape else 1,
        int(n) if n is not None else None,
        1 if n is not None else int(np.prod(action.shape[batch + 1 :] or (1,))),
        None,
        None,
        shape,
        torch.uint8 if obs is not None and obs.dtype == torch.uint8 else torch.float32,
        env_id=getattr(create_env_fn, "env_id", _name(create_env_fn)),
        engine=None,  # fleetrl's PettingZoo adapter or a user's torchrl env: no engine
        groups=specs,
    )


def _bounds(env: Any) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """A continuous action space's bounds (None for discrete actions)."""
    if env.num_actions is not None:
        return None, None
    bounds = getattr(env, "action_bounds", None)
    if bounds is None:
        return None, None
    low, high = bounds
    return torch.as_tensor(low, dtype=torch.float32), torch.as_tensor(high, dtype=torch.float32)


def _name(create_env_fn: Any) -> str:
    if isinstance(create_env_fn, str):
        return create_env_fn
    if isinstance(create_env_fn, (AtariEnv, MujocoEnv, PartialEnv, GymId)):
        return create_env_fn.env_id
    return type(create_env_fn).__name__

"""Save and restore the state of gymnasium envs, for exact resume.

A checkpoint must load with ``torch.load(weights_only=True)``, so an env's
state is written as tensors, ints, floats, strings, lists and dicts, never as
pickled objects. That is possible only where we know what the state is:

- the env itself: gymnasium's classic-control envs (CartPole, Pendulum,
  Acrobot, MountainCar...), whose dynamics state is the ``state`` attribute
  (plus ``steps_beyond_terminated`` and ``last_u`` where they exist);
- its random generator (``np_random``): the bit generator's state dict;
- the wrappers ``gymnasium.make`` adds: ``TimeLimit`` (steps in the episode),
  ``OrderEnforcing`` (whether it was reset) and ``PassiveEnvChecker`` (no
  state that changes what the env does); fleetrl's wrappers that set
  ``stateless = True`` (``KeepEntries``: ``env.observation_indices``);
- a ``SyncVectorEnv`` around them: its autoreset flags and its action space's
  random generator (the collector's uniform random actions).

Anything else (another env, an unknown wrapper, an async vector env) cannot be
saved: :func:`vector_env_state` returns None and a resume reseeds the envs
instead (approximate resume).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker, TimeLimit

from fleetrl.errors import EnvError

__all__ = [
    "STATE_MISMATCH_MSG",
    "load_vector_env_state",
    "rng_state",
    "set_rng_state",
    "vector_env_state",
]

#: attributes of a classic-control env that make up its state
CLASSIC_CONTROL_FIELDS = ("state", "steps_beyond_terminated", "last_u")
CLASSIC_CONTROL_MODULE = "gymnasium.envs.classic_control."

STATE_MISMATCH_MSG = (
    "env state={saved} from the checkpoint does not fit the env built now ({built}); resume with "
    "the env settings the run was checkpointed with (env.id, env.num_envs)"
)


class _Unsaveable(Exception):
    """Raised inside this module when a value or a layer has no known saved form."""


def _save_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, np.ndarray):
        return {"array": torch.from_numpy(value.copy())}
    if isinstance(value, np.generic):
        return {"scalar": torch.from_numpy(np.asarray(value).copy())}
    raise _Unsaveable(type(value).__name__)


def _load_value(saved: Any) -> Any:
    if isinstance(saved, dict) and "array" in saved:
        return saved["array"].numpy().copy()
    if isinstance(saved, dict) and "scalar" in saved:
        return saved["scalar"].numpy()[()]
    return saved


def rng_state(generator: np.random.Generator) -> dict[str, Any]:
    """A numpy Generator's bit-generator state (plain ints and strings)."""
    return generator.bit_generator.state


def set_rng_state(
    generator: np.random.Generator | None, state: dict[str, Any]
) -> np.random.Generator:
    """Put ``state`` into ``generator`` (a new one when absent or of another kind); return it."""
    kind = state["bit_generator"]
    if generator is None or type(generator.bit_generator).__name__ != kind:
        generator = np.random.Generator(getattr(np.random, kind)())
    generator.bit_generator.state = state
    return generator


def _layers(env: gym.Env) -> tuple[list[gym.Wrapper], gym.Env]:
    wrappers = []
    while isinstance(env, gym.Wrapper):
        wrappers.append(env)
        env = env.env
    return wrappers, env


def _wrapper_state(wrapper: gym.Wrapper) -> dict[str, Any]:
    kind = type(wrapper)
    if kind is TimeLimit:
        return {"elapsed_steps": wrapper._elapsed_steps}
    if kind is OrderEnforcing:
        return {"has_reset": bool(wrapper._has_reset)}
    if kind is PassiveEnvChecker or getattr(kind, "stateless", False):
        return {}  # a wrapper that says it holds no state, e.g. KeepEntries (not imported here)
    raise _Unsaveable(kind.__name__)


def _load_wrapper_state(wrapper: gym.Wrapper, state: dict[str, Any]) -> None:
    if "elapsed_steps" in state:
        wrapper._elapsed_steps = state["elapsed_steps"]
    if "has_reset" in state:
        wrapper._has_reset = state["has_reset"]


def env_state(env: gym.Env) -> dict[str, Any] | None:
    """The state of one gymnasium env with its wrappers, or None when it cannot be saved."""
    wrappers, base = _layers(env)
    if not type(base).__module__.startswith(CLASSIC_CONTROL_MODULE) or not hasattr(base, "state"):
        return None
    try:
        return {
            "env_class": type(base).__name__,
            "wrappers": [_wrapper_state(w) for w in wrappers],
            "fields": {
                name: _save_value(getattr(base, name))
                for name in CLASSIC_CONTROL_FIELDS
                if hasattr(base, name)
            },
            "np_random": None if base._np_random is None else rng_state(base._np_random),
            "np_random_seed": base._np_random_seed,
        }
    except _Unsaveable:
        return None


def load_env_state(env: gym.Env, state: dict[str, Any]) -> None:
    """Restore what :func:`env_state` saved into an env built the same way."""
    wrappers, base = _layers(env)
    if type(base).__name__ != state["env_class"] or len(wrappers) != len(state["wrappers"]):
        raise EnvError(
            STATE_MISMATCH_MSG.format(
                saved=f"{state['env_class']} under {len(state['wrappers'])} wrappers",
                built=f"{type(base).__name__} under {len(wrappers)} wrappers",
            )
        )
    for wrapper, saved in zip(wrappers, state["wrappers"]):
        _load_wrapper_state(wrapper, saved)
    for name, saved in state["fields"].items():
        setattr(base, name, _load_value(saved))
    if state["np_random"] is not None:
        base._np_random = set_rng_state(base._np_random, state["np_random"])
    base._np_random_seed = state["np_random_seed"]


def vector_env_state(env: gym.vector.VectorEnv) -> dict[str, Any] | None:
    """The state of a ``SyncVectorEnv`` and its sub-envs, or None when it cannot be saved."""
    if not isinstance(env, gym.vector.SyncVectorEnv):
        return None
    envs = [env_state(sub) for sub in env.envs]
    if any(state is None for state in envs):
        return None
    return {
        "envs": envs,
        "autoreset_envs": torch.from_numpy(np.asarray(env._autoreset_envs, dtype=bool).copy()),
        "action_space_rng": rng_state(env.action_space.np_random),
    }


def load_vector_env_state(env: gym.vector.VectorEnv, state: dict[str, Any]) -> None:
    """Restore what :func:`vector_env_state` saved into a vector env built the same way."""
    if len(state["envs"]) != env.num_envs:
        raise EnvError(
            STATE_MISMATCH_MSG.format(
                saved=f"{len(state['envs'])} envs", built=f"{env.num_envs} envs"
            )
        )
    for sub, saved in zip(env.envs, state["envs"]):
        load_env_state(sub, saved)
    env._autoreset_envs = state["autoreset_envs"].numpy().copy()
    env.action_space._np_random = set_rng_state(
        env.action_space._np_random, state["action_space_rng"]
    )

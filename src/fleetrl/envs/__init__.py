"""Environments: one batched interface over every env a user builds, three engines, one spec per run.

- :func:`make_env` turns what a user passes as an env into a :class:`BatchedEnv`
  (:mod:`fleetrl.envs.make`): gymnasium (:mod:`~fleetrl.envs.gymnasium`),
  torchrl (:mod:`~fleetrl.envs.torchrl_env`), Atari (:class:`AtariEnv`,
  :mod:`~fleetrl.envs.atari`) and MuJoCo (:class:`MujocoEnv`,
  :mod:`~fleetrl.envs.mujoco`) in the engines of :class:`EnvEngine`; a POMDP
  keeping chosen observation entries (:class:`PartialEnv`), and a gymnasium id with the
  env's own arguments (:class:`GymId`; both :mod:`~fleetrl.envs.partial`); the C++
  engines' episode boundaries: :mod:`~fleetrl.envs.cpp`; a torchrl env with agent
  groups becomes a :class:`GroupedEnv` (:mod:`~fleetrl.envs.grouped`), stepped in
  torchrl's grouped layout; a PettingZoo parallel env becomes such a torchrl env
  through :class:`PettingZooEnv` (:mod:`~fleetrl.envs.pettingzoo`).
- :func:`env_spec` reads an env's spaces once (:class:`EnvSpec`).
- :mod:`~fleetrl.envs.state` saves and restores gymnasium envs for exact resume.

Imported when first used (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetrl._lazy import lazy_exports

_EXPORTS = {
    "AtariEnv": "fleetrl.envs.atari",
    "BatchedEnv": "fleetrl.envs.base",
    "EnvEngine": "fleetrl.config",
    "EnvSpec": "fleetrl.envs.spec",
    "GroupedEnv": "fleetrl.envs.grouped",
    "GymId": "fleetrl.envs.partial",
    "MujocoEnv": "fleetrl.envs.mujoco",
    "PartialEnv": "fleetrl.envs.partial",
    "PettingZooEnv": "fleetrl.envs.pettingzoo",
    "StepResult": "fleetrl.envs.base",
    "create_env_fn": "fleetrl.envs.make",
    "env_spec": "fleetrl.envs.probe",
    "make_env": "fleetrl.envs.make",
}

__all__ = [
    "AtariEnv",
    "BatchedEnv",
    "EnvEngine",
    "EnvSpec",
    "GroupedEnv",
    "GymId",
    "MujocoEnv",
    "PartialEnv",
    "PettingZooEnv",
    "StepResult",
    "create_env_fn",
    "env_spec",
    "make_env",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:
    from fleetrl.config import EnvEngine
    from fleetrl.envs.atari import AtariEnv
    from fleetrl.envs.base import BatchedEnv, StepResult
    from fleetrl.envs.grouped import GroupedEnv
    from fleetrl.envs.make import create_env_fn, make_env
    from fleetrl.envs.mujoco import MujocoEnv
    from fleetrl.envs.partial import GymId, PartialEnv
    from fleetrl.envs.pettingzoo import PettingZooEnv
    from fleetrl.envs.probe import env_spec
    from fleetrl.envs.spec import EnvSpec

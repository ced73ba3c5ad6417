"""Algorithms on torchrl loss modules: a shared :class:`Algorithm` API, one file each."""

from __future__ import annotations

from typing import Any

from fleetrl.algorithms.a2c import A2C, A2CConfig
from fleetrl.algorithms.base import Algorithm
from fleetrl.algorithms.dqn import DQN, DQNConfig
from fleetrl.algorithms.models import EnvInfo, env_info
from fleetrl.algorithms.ppo import PPO, PPOConfig
from fleetrl.algorithms.sac import SAC, SACConfig

__all__ = [
    "A2C",
    "ALGORITHMS",
    "DQN",
    "PPO",
    "SAC",
    "A2CConfig",
    "Algorithm",
    "DQNConfig",
    "EnvInfo",
    "PPOConfig",
    "SACConfig",
    "env_info",
    "make_algorithm",
]

#: the one registry: a config's ``algorithm`` -> the class (which knows its config class,
#: whether it is on-policy and whether it starts with random actions)
ALGORITHMS: dict[str, type[Algorithm]] = {cls.name: cls for cls in (PPO, A2C, DQN, SAC)}


def make_algorithm(name: str, config: Any, info: EnvInfo, **modules: Any) -> Algorithm:
    """Build the algorithm ``name`` from its config section (custom actor/critic as keywords)."""
    return ALGORITHMS[name](config, info, **modules)

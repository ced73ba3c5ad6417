"""Algorithms on torchrl loss modules: a shared :class:`Algorithm` API, one file each."""

from __future__ import annotations

from typing import Any

from fleetrl.algorithms.a2c import A2C
from fleetrl.algorithms.base import Algorithm
from fleetrl.algorithms.dqn import DQN
from fleetrl.algorithms.models import EnvInfo, env_info
from fleetrl.algorithms.ppo import PPO
from fleetrl.algorithms.sac import SAC

__all__ = ["A2C", "DQN", "PPO", "SAC", "Algorithm", "EnvInfo", "env_info", "make_algorithm"]

ALGORITHMS = {"ppo": PPO, "a2c": A2C, "dqn": DQN, "sac": SAC}


def make_algorithm(name: str, config: Any, info: EnvInfo, **modules: Any) -> Algorithm:
    """Build the algorithm ``name`` from its config section (custom actor/critic as keywords)."""
    return ALGORITHMS[name](config, info, **modules)

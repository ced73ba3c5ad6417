"""Algorithms on torchrl loss modules: a shared :class:`Algorithm` API, one file each."""

from __future__ import annotations

from fleetrl.algorithms.a2c import A2C, A2CConfig
from fleetrl.algorithms.appo import APPO, APPOConfig
from fleetrl.algorithms.base import Algorithm
from fleetrl.algorithms.dqn import DQN, DQNConfig
from fleetrl.algorithms.impala import IMPALA, IMPALAConfig
from fleetrl.algorithms.mappo import IPPO, MAPPO, IPPOConfig, MAPPOConfig
from fleetrl.algorithms.ppo import PPO, PPOConfig
from fleetrl.algorithms.sac import SAC, SACConfig

__all__ = [
    "A2C",
    "ALGORITHMS",
    "APPO",
    "DQN",
    "IMPALA",
    "IPPO",
    "MAPPO",
    "MULTI_AGENT_ALGORITHMS",
    "PPO",
    "SAC",
    "A2CConfig",
    "APPOConfig",
    "Algorithm",
    "DQNConfig",
    "IMPALAConfig",
    "IPPOConfig",
    "MAPPOConfig",
    "PPOConfig",
    "SACConfig",
]

#: the one registry: a config's ``algorithm`` -> the class (which knows its config class,
#: whether it is on-policy and whether it starts with random actions); a run builds it with
#: :func:`fleetrl.build.make_algorithm`. MAPPO and IPPO train multi-agent envs (a run's
#: EnvSpec carries their torchrl specs); the others single-agent ones
ALGORITHMS: dict[str, type[Algorithm]] = {
    cls.name: cls for cls in (PPO, A2C, DQN, SAC, IMPALA, APPO, MAPPO, IPPO)
}

#: the algorithms that train an agent group of a multi-agent env (``EnvSpec.grouped``)
MULTI_AGENT_ALGORITHMS: tuple[str, ...] = (MAPPO.name, IPPO.name)

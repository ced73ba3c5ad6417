"""fleetrl: TensorDict-centric distributed RL collection and training on Ray.

The names below are imported when first used (PEP 562), so ``import fleetrl``
and ``fleetrl --help`` load neither torch, torchrl nor ray; ``from fleetrl
import PPO`` loads what PPO needs, and only that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetrl._lazy import lazy_exports

#: public name -> the module that defines it
_EXPORTS = {
    "A2C": "fleetrl.algorithms.a2c",
    "A2CConfig": "fleetrl.algorithms.sections",
    "APPO": "fleetrl.algorithms.appo",
    "APPOConfig": "fleetrl.algorithms.sections",
    "Algorithm": "fleetrl.algorithms.base",
    "AtariEnv": "fleetrl.envs.atari",
    "BatchedEnv": "fleetrl.envs.base",
    "CheckpointError": "fleetrl.errors",
    "Collector": "fleetrl.collectors.front",
    "CollectorClosedError": "fleetrl.errors",
    "Config": "fleetrl.config",
    "ConfigError": "fleetrl.errors",
    "DQN": "fleetrl.algorithms.dqn",
    "DQNConfig": "fleetrl.algorithms.sections",
    "DataCollectorBase": "fleetrl.collectors.base",
    "EnvEngine": "fleetrl.config",
    "EnvError": "fleetrl.errors",
    "EpisodeStats": "fleetrl.collectors.base",
    "FleetError": "fleetrl.errors",
    "IMPALA": "fleetrl.algorithms.impala",
    "IMPALAConfig": "fleetrl.algorithms.sections",
    "MujocoEnv": "fleetrl.envs.mujoco",
    "PPO": "fleetrl.algorithms.ppo",
    "PPOConfig": "fleetrl.algorithms.sections",
    "PolicyError": "fleetrl.errors",
    "RandomPolicy": "fleetrl.networks.policies",
    "RayCollector": "fleetrl.collectors.remote.collector",
    "RemoteReplayBuffer": "fleetrl.collectors.remote.replay",
    "SAC": "fleetrl.algorithms.sac",
    "SACConfig": "fleetrl.algorithms.sections",
    "SweepResult": "fleetrl.run.sweep",
    "SyncDataCollector": "fleetrl.collectors.local.sync",
    "Trainer": "fleetrl.run.trainer",
    "WorkerError": "fleetrl.errors",
    "WorkerLostError": "fleetrl.errors",
    "as_policy": "fleetrl.networks.policies",
    "episode_stats": "fleetrl.collectors.base",
    "load_config": "fleetrl.setup.load",
    "make_env": "fleetrl.envs.make",
    "tune": "fleetrl.run.sweep",
}

__all__ = [
    "A2C",
    "APPO",
    "DQN",
    "IMPALA",
    "PPO",
    "SAC",
    "A2CConfig",
    "APPOConfig",
    "Algorithm",
    "AtariEnv",
    "BatchedEnv",
    "CheckpointError",
    "Collector",
    "CollectorClosedError",
    "Config",
    "ConfigError",
    "DQNConfig",
    "DataCollectorBase",
    "EnvEngine",
    "EnvError",
    "EpisodeStats",
    "FleetError",
    "IMPALAConfig",
    "MujocoEnv",
    "PPOConfig",
    "PolicyError",
    "RandomPolicy",
    "RayCollector",
    "RemoteReplayBuffer",
    "SACConfig",
    "SweepResult",
    "SyncDataCollector",
    "Trainer",
    "WorkerError",
    "WorkerLostError",
    "as_policy",
    "episode_stats",
    "load_config",
    "make_env",
    "tune",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__version__ = "0.1.0"


if TYPE_CHECKING:  # what type checkers and IDEs see
    from fleetrl.algorithms import (
        A2C,
        APPO,
        DQN,
        IMPALA,
        PPO,
        SAC,
        A2CConfig,
        Algorithm,
        APPOConfig,
        DQNConfig,
        IMPALAConfig,
        PPOConfig,
        SACConfig,
    )
    from fleetrl.collectors import (
        Collector,
        DataCollectorBase,
        EpisodeStats,
        RayCollector,
        RemoteReplayBuffer,
        SyncDataCollector,
        episode_stats,
    )
    from fleetrl.config import Config, EnvEngine
    from fleetrl.envs.atari import AtariEnv
    from fleetrl.envs.base import BatchedEnv
    from fleetrl.envs.make import make_env
    from fleetrl.envs.mujoco import MujocoEnv
    from fleetrl.errors import (
        CheckpointError,
        CollectorClosedError,
        ConfigError,
        EnvError,
        FleetError,
        PolicyError,
        WorkerError,
        WorkerLostError,
    )
    from fleetrl.networks.policies import RandomPolicy, as_policy
    from fleetrl.run.sweep import SweepResult, tune
    from fleetrl.run.trainer import Trainer
    from fleetrl.setup.load import load_config

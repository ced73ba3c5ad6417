"""fleetrl: TensorDict-centric distributed RL collection and training on Ray."""

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
    DataCollectorBase,
    EpisodeStats,
    RayCollector,
    RemoteReplayBuffer,
    SyncDataCollector,
    episode_stats,
)
from fleetrl.config import Config, load_config
from fleetrl.engines import AtariEnv, EnvEngine
from fleetrl.envs import BatchedEnv, make_env
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
from fleetrl.mujoco_envs import MujocoEnv
from fleetrl.policies import RandomPolicy, as_policy
from fleetrl.trainer import Trainer

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
    "SyncDataCollector",
    "Trainer",
    "WorkerError",
    "WorkerLostError",
    "as_policy",
    "episode_stats",
    "load_config",
    "make_env",
]

__version__ = "0.1.0"

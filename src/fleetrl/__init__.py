"""fleetrl: TensorDict-centric distributed RL collection and training on Ray."""

from fleetrl.collectors import (
    DataCollectorBase,
    EpisodeStats,
    RayCollector,
    SyncDataCollector,
    episode_stats,
)
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
from fleetrl.policies import RandomPolicy, as_policy

__all__ = [
    "AtariEnv",
    "BatchedEnv",
    "CheckpointError",
    "CollectorClosedError",
    "ConfigError",
    "DataCollectorBase",
    "EnvEngine",
    "EnvError",
    "EpisodeStats",
    "FleetError",
    "PolicyError",
    "RandomPolicy",
    "RayCollector",
    "SyncDataCollector",
    "WorkerError",
    "WorkerLostError",
    "as_policy",
    "episode_stats",
    "make_env",
]

__version__ = "0.1.0"

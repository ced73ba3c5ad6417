"""Collectors: one process (:class:`SyncDataCollector`) or Ray actors (:class:`RayCollector`)."""

from fleetrl.collectors.base import DataCollectorBase, EpisodeStats, episode_stats, frames_in
from fleetrl.collectors.ray import RayCollector
from fleetrl.collectors.replay import RemoteReplayBuffer
from fleetrl.collectors.sync import SyncDataCollector

__all__ = [
    "DataCollectorBase",
    "EpisodeStats",
    "RayCollector",
    "RemoteReplayBuffer",
    "SyncDataCollector",
    "episode_stats",
    "frames_in",
]

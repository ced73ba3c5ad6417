"""Collectors: one process (:class:`SyncDataCollector`) or Ray actors (:class:`RayCollector`).

Imported when first used (PEP 562): ``from fleetrl.collectors import
SyncDataCollector`` does not load Ray.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetrl._lazy import lazy_exports

_EXPORTS = {
    "CollectTimes": "fleetrl.collectors.timing",
    "Collector": "fleetrl.collectors.front",
    "DataCollectorBase": "fleetrl.collectors.base",
    "EpisodeStats": "fleetrl.collectors.base",
    "FleetOptions": "fleetrl.collectors.remote.fleet_options",
    "InferenceOptions": "fleetrl.collectors.inference.options",
    "RayCollector": "fleetrl.collectors.remote.collector",
    "RemoteReplayBuffer": "fleetrl.collectors.remote.replay",
    "RolloutOptions": "fleetrl.collectors.rollout_options",
    "SyncDataCollector": "fleetrl.collectors.local.sync",
    "episode_stats": "fleetrl.collectors.base",
    "frames_in": "fleetrl.collectors.base",
}

__all__ = [
    "CollectTimes",
    "Collector",
    "DataCollectorBase",
    "EpisodeStats",
    "FleetOptions",
    "InferenceOptions",
    "RayCollector",
    "RemoteReplayBuffer",
    "RolloutOptions",
    "SyncDataCollector",
    "episode_stats",
    "frames_in",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:
    from fleetrl.collectors.base import DataCollectorBase, EpisodeStats, episode_stats, frames_in
    from fleetrl.collectors.front import Collector
    from fleetrl.collectors.inference.options import InferenceOptions
    from fleetrl.collectors.local.sync import SyncDataCollector
    from fleetrl.collectors.remote.collector import RayCollector
    from fleetrl.collectors.remote.fleet_options import FleetOptions
    from fleetrl.collectors.remote.replay import RemoteReplayBuffer
    from fleetrl.collectors.rollout_options import RolloutOptions
    from fleetrl.collectors.timing import CollectTimes

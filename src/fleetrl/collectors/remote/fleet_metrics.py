"""FleetMetrics: a RayCollector's workers, as an operator reads them in Prometheus.

Each served task updates its worker's series through Ray's metrics API
(``ray.util.metrics``). Ray exports them in Prometheus format at each node's metrics
port (``ray.nodes()[i]["MetricsExportPort"]``, ``/metrics``), where Ray's dashboard,
Prometheus and Grafana read them; Ray prefixes each name with ``ray_``, and a counter's
name ends in ``_total`` there (``ray_fleetrl_collector_frames_total``). Every series
is tagged with its ``worker`` (the worker id) and ``node`` (the Ray node id it ran on),
so a query sums by node as well as it reads one worker; and ``collector``, an id of its
collector (:attr:`FleetMetrics.tag`), so two collectors of one process (or one run after
another) keep their series apart.

| name | kind | what |
|---|---|---|
| ``fleetrl_collector_frames`` | counter | frames served from the worker |
| ``fleetrl_collector_frames_per_s`` | gauge | its last task's frames over its collection time |
| ``fleetrl_collector_env_step_s`` | gauge | its last task's seconds per env step (all its envs) |
| ``fleetrl_collector_policy_lag`` | gauge | its last served batch's policy lag, in versions |
| ``fleetrl_collector_restarts`` | gauge | times its worker id was replaced so far |
| ``fleetrl_collector_queue_depth`` | gauge | its tasks issued and not yet returned |

The same figures stay in :meth:`RayCollector.stats() <fleetrl.collectors.RayCollector.stats>`
and ``fleetrl report``; these are for watching a fleet while it runs. An update costs a few
microseconds a series, once per task (thousands of frames), never per step.
"""

from __future__ import annotations

import math
import uuid
from typing import Any

from fleetrl.collectors.remote.pool import WorkerPool
from fleetrl.collectors.remote.worker import TaskResult

__all__ = ["METRICS", "FleetMetrics"]

#: name -> (kind, description): the series each worker has
METRICS: dict[str, tuple[str, str]] = {
    "fleetrl_collector_frames": ("counter", "frames served from the worker"),
    "fleetrl_collector_frames_per_s": (
        "gauge",
        "the worker's last task: frames over its collection time",
    ),
    "fleetrl_collector_env_step_s": (
        "gauge",
        "the worker's last task: seconds per env step (all its envs at once)",
    ),
    "fleetrl_collector_policy_lag": ("gauge", "the worker's last served batch's policy lag"),
    "fleetrl_collector_restarts": ("gauge", "times the worker id was replaced so far"),
    "fleetrl_collector_queue_depth": ("gauge", "the worker's tasks issued, not yet returned"),
}
#: the tags of every series
TAGS = ("collector", "worker", "node")


class FleetMetrics:
    """The series of :data:`METRICS` for a pool's workers; called with each served task
    (``ServedStats(on_task=...)``). The series are made at the first task, once per process
    (Ray keeps a metric by name)."""

    _made: dict[str, Any] = {}

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool
        #: this collector's id in its series' ``collector`` tag
        self.tag = uuid.uuid4().hex[:12]

    @classmethod
    def series(cls) -> dict[str, Any]:
        if not cls._made:
            from ray.util.metrics import Counter, Gauge

            for name, (kind, description) in METRICS.items():
                made = Counter if kind == "counter" else Gauge
                cls._made[name] = made(name, description=description, tag_keys=TAGS)
        return cls._made

    def __call__(self, worker: int, result: TaskResult, lag: int) -> None:
        """Update the series of the worker whose task was served."""
        slot = self.pool.slots[worker]
        tags = {"collector": self.tag, "worker": str(slot.worker_id), "node": slot.node_id or "-"}
        s = self.series()
        if result.frames > 0:  # a counter takes only positive increments
            s["fleetrl_collector_frames"].inc(float(result.frames), tags=tags)
        if result.collect_s > 0:
            s["fleetrl_collector_frames_per_s"].set(result.frames / result.collect_s, tags=tags)
        steps = result.frames / max(1, slot.num_envs or 1)
        if steps > 0 and math.isfinite(result.times.env_s):
            s["fleetrl_collector_env_step_s"].set(result.times.env_s / steps, tags=tags)
        s["fleetrl_collector_policy_lag"].set(float(lag), tags=tags)
        s["fleetrl_collector_restarts"].set(float(slot.restarts), tags=tags)
        s["fleetrl_collector_queue_depth"].set(float(self.pool.in_flight(slot)), tags=tags)

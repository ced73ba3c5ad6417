"""What a :class:`~fleetrl.collectors.RayCollector` shows of its work: stats, times, handles.

Read from the driver's own books (:class:`~fleetrl.collectors.remote.served.ServedStats`, the worker
pool, the inference servers, an elastic fleet): no worker is asked, but the inference servers
for :meth:`RayViews.inference_stats`.
"""

from __future__ import annotations

from typing import Any

from fleetrl.collectors.base import DataCollectorBase
from fleetrl.collectors.timing import CollectTimes
from fleetrl.distributed import warm
from fleetrl.errors import ConfigError, Problem

__all__ = ["STATS_VIEWS", "RayViews"]

#: torchrl's ``stats(workers=...)`` views
STATS_VIEWS = ("aggregate", "per_worker", "both")


class RayViews(DataCollectorBase):
    """The views of :class:`~fleetrl.collectors.RayCollector` (its base: see there)."""

    _served: Any
    _pool: Any
    _servers: Any
    _fleet: Any
    inference: str

    def take_times(self) -> CollectTimes:
        """Where the served batches' collection time went since the last call (reset), part by
        part (:mod:`fleetrl.collectors.timing`): summed over the batches, each batch's parts
        the mean over the workers that collected it (one in first-ready mode, every worker
        with a share in a sync round), so they compare with one worker's time."""
        return self._served.take_times()

    def stats(self, workers: str = "aggregate", *, timeout: float | None = 10.0) -> dict[str, Any]:
        """Frames, policy lag, stale and pending work, per-worker frames and restarts, compression
        and preemption counts, and per worker where the collection time went; with the keys
        torchrl 0.14's ``RayCollector.stats()`` gives (``frames``, ``batches``,
        ``requested_frames_per_batch``, ``total_frames``, ``completed``, ``policy_version``,
        ``workers``, ``workers_alive``, ``worker_frames``). ``workers="per_worker"`` or
        ``"both"`` adds torchrl's per-worker keys, ``worker_<id>/frames``, ``.../restarts`` and
        each part of ``time_per_worker``. Everything is the driver's own books: no worker is
        asked, so ``timeout`` (torchrl's bound on asking them) is accepted and never waited.

        The keys besides torchrl's are :meth:`ServedStats.report
        <fleetrl.collectors.remote.served.ServedStats.report>`'s: ``policy_lag`` (and its
        ``bound``), ``stale_batches``, ``stale_frames``, ``pending``, ``wire``,
        ``compression``, ``time_per_worker`` (per worker id, the seconds of each part of its
        served tasks: :mod:`fleetrl.collectors.timing`), and with central inference
        ``inference`` (:meth:`inference_stats`).

        Examples:
            >>> collector.stats()["time_per_worker"][0]  # doctest: +SKIP
            {'env_s': 0.41, 'policy_s': 0.23, 'pack_s': 0.02, 'weights_s': 0.001,
             'transfer_s': 0.004, 'unpack_s': 0.003, 'collect_s': 0.66, 'frames': 4000,
             'batches': 10, 'per_batch': {'env_s': 0.041, ...}}
        """
        if workers not in STATS_VIEWS:
            raise ConfigError([Problem("workers", workers, f"must be one of {list(STATS_VIEWS)}")])
        slots = self._pool.slots if self._pool is not None else []
        out = {
            **super().stats(),
            **self._served.report(self._frames, self.policy_version, self._pool),
        }
        if self._servers is not None:
            out["inference"] = self.inference_stats(timeout)
        if self._fleet is not None:
            out["fleet"] = self._fleet.report()
        if workers != "aggregate":  # torchrl's per-worker view: "worker_<id>/<metric>"
            out.update(self._served.per_worker(slots, out["time_per_worker"]))
        return out

    def inference_stats(self, timeout: float | None = 10.0) -> dict[str, Any]:
        """Central inference: per server its ``requests``, ``batches``, ``observations``,
        ``mean_batch`` (observations per policy call), ``compute_s``, ``version`` and
        ``device`` since it (last) started, asked with ``timeout``; the totals; and
        ``latency``: the median and 95th percentile, in milliseconds, of the latest
        requests' latencies as the workers saw them (from sending the observations to holding
        the answer). Empty with ``inference="local"``."""
        if self._servers is None:
            return {}
        return {"mode": self.inference, **self._servers.report(self._served.latencies, timeout)}

    def server_handles(self) -> list[Any]:
        """The backend's handles of the inference servers (empty with ``inference="local"``),
        for inspection and fault-injection tests."""
        return [] if self._servers is None else [s.handle for s in self._servers.servers]

    def worker_handles(self) -> list[Any]:
        """The backend's handles of the workers, by worker id (Ray actor handles, which
        ``ray.kill`` takes; with warm workers on, each worker's host process's; the worker
        objects in process; None for a dead one), for inspection and fault-injection tests."""
        return [warm.ray_handle(h) for h in self._pool.handles()]

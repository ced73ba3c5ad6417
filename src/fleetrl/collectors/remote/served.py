"""ServedStats: what a :class:`~fleetrl.collectors.RayCollector` counts about the batches it serves.

Policy lag as running aggregates (constant memory however long the run), the
``max_served_lag`` bound (a batch that breaks it is counted, not served), bytes
on the wire (see :mod:`fleetrl.distributed.wire`), preempted tasks and the
workers' collection time, whole and part by part
(:mod:`fleetrl.collectors.timing`): per worker since the start, and per served
batch since the learner last took them.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

from tensordict import TensorDictBase

from fleetrl.collectors.remote.pool import CollectorSlot, Task, WorkerPool
from fleetrl.collectors.remote.replay import progress_record
from fleetrl.collectors.remote.worker import TaskResult
from fleetrl.collectors.timing import CollectTimes
from fleetrl.distributed.wire import unpack_batch

__all__ = ["ServedStats"]

#: central inference: request latencies kept for ``stats()["inference"]``
LATENCY_WINDOW = 10_000


class ServedStats:
    """Running counts over served batches.

    Args:
        max_served_lag: ``None`` (no bound) or the versions a served batch may be behind.
        compress: the collector's codec; ``compression()`` counts compressed traffic only.
        on_task: told of each served task's result, its worker and policy lag (the
            collector's exported metrics: :mod:`fleetrl.collectors.remote.fleet_metrics`).
    """

    def __init__(
        self,
        max_served_lag: int | None,
        compress: str | None,
        on_task: Callable[[int, TaskResult, int], None] | None = None,
    ):
        self.max_served_lag = max_served_lag
        self.compress = compress
        self.on_task = on_task
        self.counts: dict[str, Any] = {
            "batches": 0,
            # policy lag of served batches, as running aggregates (constant memory)
            "lag_count": 0,
            "lag_sum": 0,
            "lag_max": 0,
            "lag_last": 0,
            "stale_batches": 0,
            "stale_frames": 0,
            "bytes_raw": 0,  # compressed traffic only
            "bytes_sent": 0,
            "wire_full": 0,  # all traffic
            "wire_sent": 0,
            "compact_batches": 0,
            "preempted_tasks": 0,
            "collect_s": 0.0,
        }
        #: per worker id: the parts of its served tasks since the start, and their collect_s
        self.worker_times: dict[int, CollectTimes] = {}
        self.worker_collect_s: dict[int, float] = {}
        self._taken = CollectTimes()  # per served batch, since the last take_times()
        #: central inference: the latest requests' latencies (seconds), as the workers saw them
        self.latencies: collections.deque[float] = collections.deque(maxlen=LATENCY_WINDOW)

    def stale(self, result: TaskResult, task: Task, version: int) -> bool:
        """Whether a batch breaks ``max_served_lag`` at ``version``; such a batch is counted, not served."""
        if self.max_served_lag is None or task.random:  # random actions: no policy to lag
            return False
        if version - result.policy_version <= self.max_served_lag:
            return False
        self.counts["stale_batches"] += 1
        self.counts["stale_frames"] += result.frames
        return True

    def receive(self, result: TaskResult, worker: int, version: int) -> TensorDictBase:
        """A first-ready task's batch (with a replay buffer: its progress record), unpacked
        and counted (:meth:`account`, :meth:`add_batch`)."""
        start = time.perf_counter()
        if result.progress is not None:  # the worker wrote the batch into the replay buffer
            batch = progress_record(result, worker)
        else:
            batch = unpack_batch(result.batch)  # one copy per leaf, into fresh writable memory
        result.times.unpack_s = time.perf_counter() - start
        self.account(result, version, worker)
        self.add_batch(result.times)
        return batch

    def account(self, result: TaskResult, version: int, worker: int | None = None) -> None:
        """Count a served task's result: policy lag against ``version``, bytes, preemption,
        time; with ``worker``, its parts in that worker's times."""
        st = self.counts
        lag = version - result.policy_version
        st["lag_count"] += 1
        st["lag_sum"] += lag
        st["lag_max"] = max(st["lag_max"], lag)
        st["lag_last"] = lag
        if self.compress is not None:  # stats()["compression"] counts compressed traffic only
            st["bytes_raw"] += result.bytes_raw
            st["bytes_sent"] += result.bytes_sent
        st["wire_full"] += result.bytes_raw
        st["wire_sent"] += result.bytes_sent
        st["compact_batches"] += int(result.compact)
        st["preempted_tasks"] += int(result.preempted)
        st["collect_s"] += result.collect_s
        if result.latencies:
            self.latencies.extend(result.latencies)
        if worker is not None:
            if self.on_task is not None:
                self.on_task(worker, result, lag)
            self.worker_times.setdefault(worker, CollectTimes()).add(result.times)
            self.worker_collect_s[worker] = self.worker_collect_s.get(worker, 0.0) + (
                result.collect_s
            )

    def add_batch(self, times: CollectTimes) -> None:
        """The parts of one served batch (a sync round's: the mean over its workers)."""
        self._taken.add(times)

    def take_times(self) -> CollectTimes:
        """The served batches' parts since the last call (reset)."""
        taken, self._taken = self._taken, CollectTimes()
        return taken

    def time_per_worker(self, worker_ids: list[int]) -> dict[int, dict[str, Any]]:
        """Per worker id: each part's seconds, ``collect_s``, ``frames``, ``batches`` and
        ``per_batch`` (each part's seconds per task); zeros and NaN before its first task."""
        out = {}
        for w in worker_ids:
            times = self.worker_times.get(w, CollectTimes())
            out[w] = {
                **times.seconds(),
                "collect_s": self.worker_collect_s.get(w, 0.0),
                "frames": times.frames,
                "batches": times.batches,
                "per_batch": times.per_batch(),
            }
        return out

    def report(self, frames: int, version: int, pool: WorkerPool) -> dict[str, Any]:
        """What :meth:`RayCollector.stats() <fleetrl.collectors.RayCollector.stats>` returns
        besides torchrl's keys.

        ``policy_lag`` holds running aggregates over served batches (``last``, ``mean``,
        ``max``, ``count``) and the ``bound`` (``max_served_lag``); ``stale_batches`` /
        ``stale_frames`` count batches discarded for breaking it; ``pending`` counts tasks
        issued and not yet returned (those lost with a dead worker included) and the frames
        issued and not yet served. ``wire`` counts every batch served: its bytes in the full
        layout, the bytes that crossed Ray (compact and/or compressed, see
        :mod:`fleetrl.distributed.wire`) and how many batches came compact. ``time_per_worker`` holds,
        per worker id, the seconds of each part of its served tasks since the start
        (``env_s``, ``policy_s``, ``pack_s``, ``weights_s``, ``transfer_s``, ``unpack_s``:
        :mod:`fleetrl.collectors.timing`), its tasks' ``collect_s``, the ``frames`` and
        ``batches`` (tasks) they held, and ``per_batch``, each part's seconds per task.
        """
        slots = pool.slots
        return {
            # torchrl's keys: the workers, those alive as far as the driver knows (a death is
            # seen when a task fails), and the frames they collected
            "workers": len(slots),
            "workers_alive": sum(s.actor is not None for s in slots),
            "worker_frames": sum(s.frames for s in slots),
            "frames": frames,
            "batches": self.counts["batches"],
            "policy_version": version,
            "policy_lag": self.policy_lag(),
            "stale_batches": self.counts["stale_batches"],
            "stale_frames": self.counts["stale_frames"],
            "pending": {"tasks": pool.owed_tasks, "frames": pool.issued},
            "frames_per_worker": {s.worker_id: s.frames for s in slots},
            "restarts": {s.worker_id: s.restarts for s in slots},
            "nodes": {s.worker_id: s.node_id for s in slots},
            "preempted_tasks": self.counts["preempted_tasks"],
            "worker_collect_s": self.counts["collect_s"],
            "compression": self.compression(),
            "wire": self.wire(),
            "time_per_worker": self.time_per_worker([s.worker_id for s in slots]),
        }

    @staticmethod
    def per_worker(slots: list[CollectorSlot], times: dict[int, Any]) -> dict[str, Any]:
        """torchrl's per-worker view: ``worker_<id>/frames``, ``.../restarts`` and each part
        of its ``times`` (:meth:`time_per_worker`)."""
        out: dict[str, Any] = {}
        for slot in slots:
            prefix = f"worker_{slot.worker_id}/"
            out[prefix + "frames"] = slot.frames
            out[prefix + "restarts"] = slot.restarts
            parts = times.get(slot.worker_id, {})
            out.update({prefix + k: v for k, v in parts.items() if k != "per_batch"})
        return out

    def policy_lag(self) -> dict[str, Any]:
        """``last``, ``mean``, ``max``, ``count`` of the lag of served batches, and the ``bound``."""
        st = self.counts
        count = st["lag_count"]
        return {
            "last": st["lag_last"],
            "mean": st["lag_sum"] / count if count else 0.0,
            "max": st["lag_max"],
            "count": count,
            "bound": self.max_served_lag,
        }

    def compression(self) -> dict[str, Any]:
        """Bytes before and after the codec, over compressed traffic."""
        raw, sent = self.counts["bytes_raw"], self.counts["bytes_sent"]
        return {
            "codec": self.compress,
            "bytes_raw": raw,
            "bytes_sent": sent,
            "bytes_saved": raw - sent,
            "ratio": raw / sent if sent else None,
        }

    def wire(self) -> dict[str, Any]:
        """Bytes in the full layout, bytes that crossed Ray, and the batches that came compact."""
        st = self.counts
        return {
            "bytes_full": st["wire_full"],
            "bytes_sent": st["wire_sent"],
            "compact_batches": st["compact_batches"],
        }

"""FirstReady: the tasks of a first-ready :class:`~fleetrl.collectors.RayCollector` (``sync=False``).

The twin of :class:`~fleetrl.collectors.remote.rounds.StackedRounds`. Each worker is kept
at a number of tasks in flight (``max(1, prefetch)``) while the frame budget
holds frames: a task asks for ``frames_per_batch`` frames, the last one for
exactly the remainder, and its frames count as issued
(:attr:`WorkerPool.issued <fleetrl.collectors.remote.pool.WorkerPool.issued>`) until
its result is got. Results are served in the order tasks end. A task lost with
its worker is issued again by the pool; a batch that breaks ``max_served_lag``
is counted (:meth:`ServedStats.stale <fleetrl.collectors.remote.served.ServedStats.stale>`),
not served, and its task issued again with the current weights. So frames stay
exact: every frame served is counted once, and none is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from fleetrl.collectors.remote.pool import Task, WorkerPool
from fleetrl.collectors.remote.served import ServedStats
from fleetrl.collectors.remote.weights import WeightStore
from fleetrl.collectors.remote.worker import TaskResult
from fleetrl.distributed.workers import Pending

__all__ = ["FirstReady"]


class FirstReady:
    """The first-ready tasks in flight: issued within the budget, taken as they end.

    Args:
        pool: the workers that run the tasks.
        served: where served batches are counted (and stale ones found).
        weights: the published versions (a batch's lag is measured against the newest).

    Keyword Args:
        frames_per_batch: frames a task asks for (the last one: what the budget holds).
        budget: the frames the budget still holds, not yet issued (None: endless).
        random_next: whether the next task acts at random (``init_random_frames``).
    """

    def __init__(
        self,
        pool: WorkerPool,
        served: ServedStats,
        weights: WeightStore,
        *,
        frames_per_batch: int,
        budget: Callable[[], int | None],
        random_next: Callable[[], bool],
    ):
        self._pool = pool
        self._served = served
        self._weights = weights
        self.frames_per_batch = frames_per_batch
        self._budget = budget
        self._random_next = random_next

    def top_up(self, limit: int) -> None:
        """Issue tasks until each worker has ``limit`` in flight or the budget is spent."""
        pool = self._pool
        for slot in pool.active:  # an elastic fleet's retired workers get none
            while pool.in_flight(slot) < limit:
                budget = self._budget()
                if budget is not None and budget <= 0:
                    return
                frames = (
                    self.frames_per_batch if budget is None else min(self.frames_per_batch, budget)
                )
                pool.submit(Task(slot.worker_id, frames, self._random_next()))
                pool.issued += frames

    def next(self) -> tuple[TaskResult, int] | None:
        """The next result to serve and its worker id, waiting for a task to end; None when
        no task is in flight."""
        pool = self._pool
        while pool.pending:
            [pending] = pool.wait(pool.pending, num_returns=1)
            result = self._fresh(pending)
            if result is not None:
                return result, pending.task.worker
        return None

    def done(self, timeout: float | None) -> Iterator[tuple[TaskResult, int]]:
        """The results to serve of every task done now, and their worker ids, once the first
        has ended within ``timeout`` seconds (0: none waited for; None: until one ends)."""
        pool = self._pool
        pendings = pool.pending
        if not pendings:
            return
        ready = pool.wait(pendings, num_returns=1, timeout=timeout)
        if ready:  # and every other task that is done by now
            ready = pool.wait(pendings, num_returns=len(pendings), timeout=0)
        for pending, ref in [(p, p.ref) for p in ready]:
            if pending.ref is not ref:  # issued again meanwhile (its worker died): not done
                continue
            result = self._fresh(pending)
            if result is not None:
                yield result, pending.task.worker

    def _fresh(self, pending: Pending) -> TaskResult | None:
        """A done task's result; None where its worker died (the pool replaced it and issued
        the task again) or its batch is stale (counted, and the task issued again)."""
        result = self._pool.get(pending)
        if result is None:
            return None
        if self._served.stale(result, pending.task, self._weights.version):
            self._pool.reissue_stale(pending)
            return None
        return result

"""StackedRounds: the rounds of a sync :class:`~fleetrl.collectors.RayCollector`.

Each round, every worker collects its share of ``frames_per_batch`` (split as
evenly as whole env steps allow); the shares are stacked along a leading
collector dim, ``[num_collectors, *env_batch, time]``, with a
``("collector", "mask")`` marking the steps collected. Straggler preemption:
once ``fraction_workers`` of the workers have finished a round, the others are
asked to stop, each once it holds ``fraction_samples`` of its share; shares
then end unequal and the padded steps are zeros, masked False. A round's frames
stay issued (:attr:`WorkerPool.issued <fleetrl.collectors.remote.pool.WorkerPool.issued>`)
until the round is served whole; the frames it delivered are those the mask marks.

An elastic fleet (:mod:`fleetrl.collectors.remote.elastic`): a round's shares go to the workers
in the fleet when it starts; a worker that joins takes part from the next round, and the
rows of workers that left are masked False. The collector dim counts every worker id the
fleet has had (at most its maximum: a joining worker takes a free id first). The task of
a worker that left mid-round is collected by another worker, into the leaving one's row.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from tensordict import TensorDictBase

from fleetrl.collectors.remote.pool import Task, WorkerPool
from fleetrl.collectors.remote.served import ServedStats
from fleetrl.collectors.remote.worker import TaskResult
from fleetrl.collectors.timing import CollectTimes
from fleetrl.distributed.wire import empty_round, unpack_batch
from fleetrl.distributed.workers import Pending
from fleetrl.keys import MASK_KEY

__all__ = ["Round", "StackedRounds", "split_frames"]

logger = logging.getLogger(__name__)


@dataclass
class Round:
    """One round in flight: a task per worker with a share."""

    round_id: int
    refs: dict[int, Pending]  # worker id -> its task for this round (in flight)
    shares: dict[int, int]
    preempt_sent: bool = False
    issued: int = 0  # frames it added to the issued count
    results: dict[int, TaskResult] = field(default_factory=dict)  # kept across a WorkerError


class StackedRounds:
    """The rounds in flight, oldest first; starts, gathers and stacks them.

    Args:
        pool: the workers that collect the shares.
        served: where served batches are counted (and stale ones found).

    Keyword Args:
        fraction_workers: once this fraction of the workers have finished a
            round, the others are preempted (1.0: never).
        fraction_samples: a preempted straggler stops once it holds at least
            this fraction of its share.
        frames_per_batch: frames a round collects (the last one: what the budget holds).
        budget: the frames the budget still holds, not yet issued (None: endless).
        random_next: whether the next round acts at random (``init_random_frames``).
    """

    def __init__(
        self,
        pool: WorkerPool,
        served: ServedStats,
        *,
        fraction_workers: float,
        fraction_samples: float,
        frames_per_batch: int,
        budget: Callable[[], int | None],
        random_next: Callable[[], bool],
    ):
        self._pool = pool
        self.frames_per_batch = frames_per_batch
        self._budget = budget
        self._random_next = random_next
        self._served = served
        self.fraction_workers = fraction_workers
        self.fraction_samples = fraction_samples
        self._rounds: deque[Round] = deque()
        self._counter = 0
        pool.on_resubmit = self._reissued

    def __len__(self) -> int:
        return len(self._rounds)

    @property
    def _preempt(self) -> bool:
        return self.fraction_workers < 1.0 or self.fraction_samples < 1.0

    def top_up(self, limit: int) -> None:
        """Start rounds until ``limit`` are in flight or the budget is spent."""
        while len(self._rounds) < limit:
            budget = self._budget()
            frames = self.frames_per_batch if budget is None else min(self.frames_per_batch, budget)
            if frames <= 0:
                return
            self.start(frames, self._random_next())

    def start(self, frames: int, random: bool) -> None:
        """Start a round of ``frames`` frames (random actions when ``random``)."""
        pool = self._pool
        active = pool.active  # an elastic fleet's retired workers take no share
        split = split_frames(frames, [s.num_envs or 1 for s in active])
        shares = {slot.worker_id: split[i] for i, slot in enumerate(active)}
        preempt = self._preempt
        rnd = Round(round_id=self._counter, refs={}, shares=shares, issued=frames)
        self._counter += 1
        for slot in active:
            share = shares[slot.worker_id]
            if share == 0:
                continue
            n = slot.num_envs or 1
            min_frames = None
            if preempt:
                min_frames = min(share, max(n, math.ceil(self.fraction_samples * share / n) * n))
            rnd.refs[slot.worker_id] = pool.submit(
                Task(slot.worker_id, share, random, round_id=rnd.round_id, min_frames=min_frames)
            )
        pool.issued += frames
        self._rounds.append(rnd)

    def serve(self) -> tuple[TensorDictBase, int]:
        """Gather the oldest round and stack it; returns the batch and the frames it holds."""
        rnd = self._rounds[0]
        results = self._gather(rnd)
        self._rounds.popleft()
        batch, frames = self._stack(rnd, results)
        self._pool.issued -= rnd.issued
        return batch, frames

    def clear(self) -> None:
        """Forget the rounds in flight (at shutdown)."""
        self._rounds = deque()

    def _reissued(self, pending: Pending) -> None:
        """A task of a round was issued again (a new worker, or a stale batch): a new worker
        is asked to stop too when its round's preemption was sent already."""
        task = pending.task
        if task.round_id < 0:
            return
        for rnd in self._rounds:
            if rnd.round_id == task.round_id and rnd.preempt_sent:
                pending.slot.actor.fire("preempt", rnd.round_id)

    def _gather(self, rnd: Round) -> dict[int, TaskResult]:
        pool = self._pool
        results = rnd.results
        need = len(rnd.refs)
        if self._preempt:
            need = max(1, math.ceil(self.fraction_workers * len(rnd.refs)))
        while len(results) < len(rnd.refs):
            waiting = {pending: w for w, pending in rnd.refs.items() if w not in results}
            if len(results) >= need and not rnd.preempt_sent:
                rnd.preempt_sent = True
                for pending in waiting:  # its worker (another, where its own retired)
                    if pending.slot.actor is not None:
                        pending.slot.actor.fire("preempt", rnd.round_id)
            [pending] = pool.wait(list(waiting), num_returns=1)
            worker = waiting[pending]
            result = pool.get(pending)
            if result is None:  # worker replaced, its task issued again (the same pending)
                continue
            if self._served.stale(result, pending.task, pool.weights.version):  # issued again
                pool.reissue_stale(pending)
                continue
            results[worker] = result
            if result.preempted:
                logger.debug(
                    "worker %d preempted with %d of %d frames",
                    worker,
                    result.frames,
                    pending.task.frames,
                )
        return results

    def _stack(self, rnd: Round, results: dict[int, TaskResult]) -> tuple[TensorDictBase, int]:
        pool = self._pool
        for w, r in results.items():
            pool.slots[w].frames += r.frames
        metas = {w: r.batch for w, r in results.items()}
        steps = max(m["batch_size"][-1] for m in metas.values())
        frames = sum(r.frames for r in results.values())
        # each batch is unpacked straight into its slice of the round: one copy per leaf from
        # Ray's memory (an unpack, a pad and a stack would copy a rebuilt next observation twice)
        out = empty_round(next(iter(metas.values())), len(pool.slots), steps)
        mask = torch.zeros(out.shape, dtype=torch.bool)
        for slot in pool.slots:
            i, meta = slot.worker_id, metas.get(slot.worker_id)
            t = 0 if meta is None else meta["batch_size"][-1]  # None: no share this round
            if meta is not None:
                start = time.perf_counter()
                unpack_batch(meta, out=out[i][..., :t])
                results[i].times.unpack_s = time.perf_counter() - start
                mask[i, ..., :t] = True
            if t < steps:  # padded steps (a preempted straggler, no share) are zeros, as pad() does
                out[i][..., t:].zero_()
        out.set(MASK_KEY, mask)
        out.names = [None] * (out.batch_dims - 1) + ["time"]
        for w, r in results.items():
            self._served.account(r, pool.weights.version, w)
        # the workers collected their shares at once: the round's parts are their mean
        self._served.add_batch(CollectTimes.mean(r.times for r in results.values()))
        return out, frames


def split_frames(frames: int, num_envs: list[int]) -> dict[int, int]:
    """Split ``frames`` over workers as evenly as whole env steps allow (all envs equal in sync mode).

    Examples:
        >>> split_frames(12, [2, 2, 2])
        {0: 4, 1: 4, 2: 4}
        >>> split_frames(10, [2, 2, 2])
        {0: 4, 1: 4, 2: 2}
    """
    n = num_envs[0]
    steps = frames // n
    base, extra = divmod(steps, len(num_envs))
    return {i: (base + (1 if i < extra else 0)) * n for i in range(len(num_envs))}

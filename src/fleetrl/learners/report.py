"""One metric schema: the columns of an iteration's metrics, the same in every scheme.

Every scheme (the central learner; sync, async and decentralized gradient
workers) reports the same columns, built here by :func:`metrics_row`, so
``metrics.csv`` has one shape whatever the config. A column a scheme has no
value for is NaN, never absent:

==============================  =====================================================
``train/policy_lag``, ``_max``  lag of the iteration's optimizer steps
                                (:mod:`fleetrl.learners.versions`); NaN without a step
``train/policy_version``        the learner's optimizer-step count after the iteration
``train/grad_asynchrony``,      versions between the weights a gradient was computed
``_max``                        on and those it is applied to (central: 0)
``train/dropped_gradients``     async gradients dropped past ``scheme.max_gradient_lag``
                                (0 elsewhere)
``train/dropped_batches``       batches dropped past the algorithm's ``max_learn_lag``
                                on arrival (IMPALA/APPO's central learner; 0
                                elsewhere: gradient workers learn every batch)
``train/grad_workers_restarted`` gradient workers replaced so far (central: NaN)
``train/collectors``            remote collector workers in the fleet at the iteration's
                                end (local collection, gradient workers: NaN)
``train/collectors_joined``,    collector workers that joined and left an elastic fleet
``_left``                       so far (a fixed fleet: 0; NaN as ``train/collectors``)
``train/collectors_restarted``  collector workers replaced so far (NaN as above)
``time/collect_s``              waiting for the batch (distributed: mean per worker)
``time/env_s``                  the collectors' rollout loops outside the policy:
                                stepping envs, writing steps
``time/policy_s``               the policy's calls in the collectors' rollout loops
``time/pack_s``                 building the batches around the loops and packing
                                them for the wire (or the replay buffer)
``time/weights_s``              remote collector workers loading new weights
                                (local collection: NaN)
``time/transfer_s``             batches crossing from the workers to the learner
                                (local collection: NaN)
``time/unpack_s``               unpacking them from the wire (local collection: NaN)
``time/learn_s``                the central learner's whole update (distributed: NaN)
``time/prepare_s``              preparing batches for the optimizer steps (GAE,
                                flattening; replay: storing and sampling); central:
                                part of ``learn_s``; distributed: mean per worker
``time/optimize_s``             the central learner's optimizer steps: ``learn_s``
                                less ``prepare_s`` (distributed: NaN, see ``grad_s``
                                and ``update_s``)
``time/grad_s``                 computing gradients, mean per worker (central: NaN)
``time/update_s``               applying them (central: NaN)
``time/broadcast_s``            publishing weights (decentralized: the all-reduce)
``time/collect_to_process``     ``collect_s`` over the time spent processing
``time/iteration_s``            the whole iteration
==============================  =====================================================

The collection parts (``env_s`` to ``unpack_s``,
:mod:`fleetrl.collectors.timing`) are measured where they happen (in the
rollout loop, on the collector worker, on receipt) and summed over the
iteration's batches; a batch's parts are one worker's seconds (a sync round's:
the mean over its workers), and under gradient workers the mean per gradient
worker, as ``collect_s``. They are the collectors' time, not the learner's
wait: with prefetching they overlap learning and may exceed ``collect_s``.

:class:`IterationReport` gathers one iteration of any learner and is the one
place that builds the row (through :func:`metrics_row`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

from fleetrl.algorithms.base import InfoMean
from fleetrl.collectors.timing import CollectTimes
from fleetrl.errors import FleetError
from fleetrl.learners.records import Collected, IterationResult
from fleetrl.learners.versions import PolicyLag

__all__ = ["METRIC_COLUMNS", "IterationReport", "metrics_row"]

METRIC_COLUMNS: tuple[str, ...] = (
    "train/policy_lag",
    "train/policy_lag_max",
    "train/policy_version",
    "train/grad_asynchrony",
    "train/grad_asynchrony_max",
    "train/dropped_gradients",
    "train/dropped_batches",
    "train/grad_workers_restarted",
    "train/collectors",
    "train/collectors_joined",
    "train/collectors_left",
    "train/collectors_restarted",
    "time/collect_s",
    "time/env_s",  # the collection parts: fleetrl.collectors.timing.PARTS, in order
    "time/policy_s",
    "time/pack_s",
    "time/weights_s",
    "time/transfer_s",
    "time/unpack_s",
    "time/learn_s",
    "time/prepare_s",
    "time/optimize_s",
    "time/grad_s",
    "time/update_s",
    "time/broadcast_s",
    "time/collect_to_process",
    "time/iteration_s",
)

UNKNOWN_COLUMNS_MSG = (
    "metrics {names} are not in the metric schema (fleetrl.learners.report.METRIC_COLUMNS): "
    "add them there, so that every scheme reports them"
)


def metrics_row(values: Mapping[str, float]) -> dict[str, float]:
    """Every column of :data:`METRIC_COLUMNS`, in order: ``values``'s, NaN for the rest.

    Examples:
        >>> row = metrics_row({"train/policy_version": 4})
        >>> row["train/policy_version"], math.isnan(row["time/grad_s"]), len(row)
        (4.0, True, 27)
    """
    unknown = sorted(set(values) - set(METRIC_COLUMNS))
    if unknown:  # a scheme's own column would give metrics.csv another shape in that scheme
        raise FleetError(UNKNOWN_COLUMNS_MSG.format(names=unknown))
    return {name: float(values.get(name, math.nan)) for name in METRIC_COLUMNS}


class IterationReport:
    """One iteration of a learner (central or distributed), gathered as it happens.

    Args:
        workers: the gradient workers whose times are averaged; 0 for the
            central learner, which has no gradient worker (its ``learn_s`` is
            measured whole and split into ``prepare_s`` and ``optimize_s``, and its
            ``grad_s``, ``update_s`` and ``grad_workers_restarted`` are NaN).

    Examples:
        >>> it = IterationReport(workers=0)
        >>> it.add_collection(0, Collected(frames=8, returns=[2.0], lengths=[4], collect_s=0.5))
        >>> it.info.add({"loss": 1.0})
        >>> it.learn_s, it.broadcast_s = 0.25, 0.25
        >>> r = it.result(version=4)
        >>> r.frames, r.info, r.metrics["time/collect_to_process"]
        (8, {'loss': 1.0}, 1.0)
        >>> r.metrics["time/optimize_s"], math.isnan(r.metrics["time/env_s"])
        (0.25, True)
    """

    def __init__(self, workers: int = 0) -> None:
        self.workers = workers
        self.frames = 0
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.group_returns: dict[str, list[float]] = {}
        self.info = InfoMean()
        self.lag = PolicyLag()
        self._asynchrony_sum = 0
        self._asynchrony_count = 0
        self._asynchrony_max = 0
        self.dropped = 0
        self.dropped_batches = 0  # batches past the algorithm's max_learn_lag (central)
        #: the remote collectors' fleet (``train/collectors...``; empty: NaN)
        self.fleet: dict[str, float] = {}
        self.collect_s: dict[int, float] = {}
        self.grad_s: dict[int, float] = {}
        self.prepare_s: dict[int, float] = {}
        self.collect_times: dict[int, CollectTimes] = {}  # per worker: the collectors' parts
        self.learn_s = 0.0
        self.update_s = 0.0
        self.broadcast_s = 0.0
        self.start = time.perf_counter()

    def add_collection(
        self, worker: int, collected: Collected, grad_s: float = 0.0, prepare_s: float = 0.0
    ) -> None:
        """What ``worker`` collected (with its collectors' parts) and, a gradient worker, the
        time its gradients took; ``prepare_s``: preparing batches (GAE) meanwhile."""
        self.frames += collected.frames
        self.returns.extend(collected.returns)
        self.lengths.extend(collected.lengths)
        for name, returns in collected.group_returns.items():
            self.group_returns.setdefault(name, []).extend(returns)
        self.collect_s[worker] = self.collect_s.get(worker, 0.0) + collected.collect_s
        self.grad_s[worker] = self.grad_s.get(worker, 0.0) + grad_s
        self.add_prepare(worker, prepare_s)
        self.collect_times.setdefault(worker, CollectTimes()).add(collected.times)

    def add_prepare(self, worker: int, seconds: float) -> None:
        """``worker`` (the central learner: 0) spent ``seconds`` preparing batches."""
        self.prepare_s[worker] = self.prepare_s.get(worker, 0.0) + seconds

    def add_asynchrony(self, versions: int, steps: int = 1) -> None:
        """``steps`` gradients applied ``versions`` versions after the weights they were
        computed on."""
        self._asynchrony_sum += versions * steps
        self._asynchrony_count += steps
        if steps:
            self._asynchrony_max = max(self._asynchrony_max, versions)

    def result(self, version: int, restarts: int | None = None) -> IterationResult:
        """The iteration's result; ``version``: the learner's after it; ``restarts``: the
        gradient workers replaced so far (None: the central learner)."""
        central = self.workers == 0
        per = max(1, self.workers)
        collect = sum(self.collect_s.values()) / per
        prepare = sum(self.prepare_s.values()) / per
        if central:
            timings = {
                "time/learn_s": self.learn_s,
                "time/prepare_s": prepare,
                "time/optimize_s": self.learn_s - prepare,
            }
            process = self.learn_s + self.broadcast_s
        else:
            grad = sum(self.grad_s.values()) / per
            timings = {
                "time/prepare_s": prepare,
                "time/grad_s": grad,
                "time/update_s": self.update_s,
            }
            process = grad + self.update_s + self.broadcast_s
        count = self._asynchrony_count
        return IterationResult(
            frames=self.frames,
            returns=self.returns,
            lengths=self.lengths,
            group_returns=self.group_returns,
            info=self.info.mean(),
            metrics=metrics_row(
                {
                    **self.lag.metrics(),
                    "train/policy_version": version,
                    "train/grad_asynchrony": self._asynchrony_sum / count if count else 0.0,
                    "train/grad_asynchrony_max": float(self._asynchrony_max),
                    "train/dropped_gradients": self.dropped,
                    "train/dropped_batches": self.dropped_batches,
                    **({} if restarts is None else {"train/grad_workers_restarted": restarts}),
                    **self.fleet,
                    "time/collect_s": collect,
                    **self._collect_parts(per),
                    **timings,
                    "time/broadcast_s": self.broadcast_s,
                    "time/collect_to_process": collect / process if process else math.nan,
                    "time/iteration_s": time.perf_counter() - self.start,
                }
            ),
        )

    def _collect_parts(self, per: int) -> dict[str, float]:
        """The collectors' parts, summed over the iteration's batches, the mean per worker
        (NaN: a part no collector measured)."""
        total = CollectTimes()
        for times in self.collect_times.values():
            total.add(times)
        return {f"time/{name}": s / per for name, s in total.seconds().items()}

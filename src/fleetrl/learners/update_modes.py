"""How the update worker updates: one strategy object per learner mode.

The :class:`~fleetrl.learners.update_worker.UpdateWorker` keeps the gradient
workers alive (start, replace, weights, parameters, checkpoints); which
updates an iteration makes is a strategy's one job, chosen once at
construction from the :class:`~fleetrl.config.LearnerMode`
(:func:`update_strategy`):

- :class:`SyncUpdate`: every worker's gradient on the same weights, averaged,
  one optimizer step, the new weights to every worker with its next step;
- :class:`AsyncUpdate`: gradients applied first ready (those more than
  ``scheme.max_gradient_lag`` versions old are dropped), the new weights only to
  the worker whose gradient came back;
- :class:`DecentralizedUpdate`: the workers all-reduce among themselves and
  each steps its own optimizer; the master only gathers reports and mirrors
  rank 0.

A strategy uses the update worker's public calls only (submit a step, wait for
the first, read a report, apply a gradient, mirror rank 0) and answers
:meth:`UpdateStrategy.start` (after the workers answered),
:meth:`UpdateStrategy.run` (one iteration into an
:class:`~fleetrl.learners.report.IterationReport`) and
:meth:`UpdateStrategy.master_state` (the state a checkpoint holds).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from fleetrl.algorithms.base import InfoMean
from fleetrl.config import LearnerMode
from fleetrl.distributed.backends import WorkerDied, WorkerRaised
from fleetrl.errors import WorkerError
from fleetrl.learners.records import StepReport
from fleetrl.learners.report import IterationReport

if TYPE_CHECKING:
    import numpy as np

    from fleetrl.algorithms import Algorithm
    from fleetrl.config import SchemeConfig
    from fleetrl.distributed.backends import Actor, Backend
    from fleetrl.distributed.workers import Pending


class GradientWorkers(Protocol):
    """What a strategy may ask of the update worker: its public calls, nothing else."""

    algorithm: Algorithm
    scheme: SchemeConfig
    num_workers: int
    backend: Backend
    dropped_gradients: int
    applied_gradients: int

    @property
    def version(self) -> int: ...

    @property
    def workers(self) -> list[Actor | None]: ...

    @property
    def weights_sent(self) -> bool: ...

    def submit_step(self, index: int, send_weights: bool) -> Pending: ...

    def wait_first(self, pendings: list[Pending]) -> Pending: ...

    def step_report(self, pending: Pending) -> StepReport | None: ...

    def apply(self, flat_grads: np.ndarray, it: IterationReport) -> float | None: ...

    def apply_mean_gradients(
        self, grads: list[np.ndarray], it: IterationReport | None = None
    ) -> float | None: ...

    def mirror(self, report: StepReport) -> None: ...

    def ask_all(self, method: str, args: list[tuple[Any, ...]] | None = None) -> list[Any]: ...


__all__ = [
    "AsyncUpdate",
    "DecentralizedUpdate",
    "GradientWorkers",
    "SyncUpdate",
    "UpdateStrategy",
    "update_strategy",
]

GROUP_MEMBER_LOST_MSG = (
    "a decentralized (all-reduce) group cannot continue without one of its members; resume "
    "the run from its last checkpoint (fleetrl train --resume RUN_DIR). Cause:\n{cause}"
)


def _with_norm(info: dict[str, float], norm: float | None) -> dict[str, float]:
    return {**info, **({"grad_norm": norm} if norm is not None else {})}


def _mean_over_workers(reports: list[StepReport]) -> dict[str, float]:
    """Each logged value averaged over the workers' reports."""
    info = InfoMean()
    for r in reports:
        info.add(r.info)
    return info.mean()


class UpdateStrategy(abc.ABC):
    """One learner mode's updates, on the gradient workers of ``learner``."""

    mode: ClassVar[LearnerMode]

    def __init__(self, learner: GradientWorkers):
        self.learner = learner

    def start(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Called once every gradient worker answered."""

    @abc.abstractmethod
    def run(self, it: IterationReport) -> None:
        """Updates worth one collected batch per gradient worker, recorded in ``it``."""

    def master_state(self) -> dict[str, Any]:
        """The algorithm state a checkpoint holds: the master's."""
        return self.learner.algorithm.state_dict()


class SyncUpdate(UpdateStrategy):
    """``steps_per_batch`` steps, each on the mean of every worker's gradient."""

    mode = LearnerMode.SYNC

    def run(self, it: IterationReport) -> None:
        uw = self.learner
        for _ in range(uw.algorithm.steps_per_batch):
            send = uw.weights_sent
            steps = [uw.submit_step(i, send) for i in range(uw.num_workers)]
            reports: list[StepReport] = []
            for step in steps:
                report = uw.step_report(step)
                while report is None:  # replaced: the new worker starts on current weights
                    report = uw.step_report(step)
                reports.append(report)
            for r in reports:
                it.add_collection(r.worker, r.collected, r.grad_s, r.prepare_s)
                it.lag.add(uw.version, 1, r.collection_version)
                it.add_asynchrony(uw.version - r.version)
            norm = uw.apply_mean_gradients([r.grads for r in reports], it)
            it.info.add(_with_norm(_mean_over_workers(reports), norm))


class AsyncUpdate(UpdateStrategy):
    """``steps_per_batch x G`` gradients received, each applied (or dropped) first ready.

    A step stays in flight on every worker between iterations.
    """

    mode = LearnerMode.ASYNC

    def __init__(self, learner: GradientWorkers):
        super().__init__(learner)
        self._inflight: list[Pending] = []  # the step each worker is computing

    def run(self, it: IterationReport) -> None:
        uw = self.learner
        if not self._inflight:
            self._inflight = [uw.submit_step(i, uw.weights_sent) for i in range(uw.num_workers)]
        received = 0
        while received < uw.algorithm.steps_per_batch * uw.num_workers:
            step = uw.wait_first(self._inflight)
            report = uw.step_report(step)
            if report is None:  # replaced: the step was issued again on the current weights
                continue
            self._inflight.remove(step)
            received += 1
            index = step.slot.index
            it.add_collection(index, report.collected, report.grad_s, report.prepare_s)
            asynchrony = uw.version - report.version
            if asynchrony > uw.scheme.max_gradient_lag:
                uw.dropped_gradients += 1
                it.dropped += 1
            else:
                it.lag.add(uw.version, 1, report.collection_version)
                it.add_asynchrony(asynchrony)
                norm = uw.apply(report.grads, it)
                it.info.add(_with_norm(report.info, norm))
            # new weights go only to this worker (after a drop too: it must catch up)
            self._inflight.append(uw.submit_step(index, send_weights=True))


class DecentralizedUpdate(UpdateStrategy):
    """One batch on every worker, its steps all-reduced among the workers (gloo)."""

    mode = LearnerMode.DECENTRALIZED

    def start(self) -> None:
        """Form the workers' gloo group (rank 0 hosts the rendezvous)."""
        uw = self.learner
        address, port = uw.workers[0].ask("node_address")
        n = uw.num_workers
        timeout = uw.scheme.collective_timeout_s
        uw.ask_all("init_process_group", [(address, port, rank, n, timeout) for rank in range(n)])

    def run(self, it: IterationReport) -> None:
        uw = self.learner
        refs = {w.call("train_batch"): i for i, w in enumerate(uw.workers)}
        by_worker: dict[int, StepReport] = {}
        pending = list(refs)
        while pending:  # first failure first: the others would wait for it in the all-reduce
            [ref], pending = uw.backend.wait(pending, num_returns=1)
            try:
                by_worker[refs[ref]] = uw.backend.get(ref)
            except (WorkerRaised, WorkerDied) as err:
                cause = err.text if isinstance(err, WorkerRaised) else err.cause
                raise WorkerError(
                    refs[ref], GROUP_MEMBER_LOST_MSG.format(cause=cause), role="gradient worker"
                ) from None
        reports = [by_worker[i] for i in range(uw.num_workers)]
        steps = reports[0].steps  # the same on every replica (same frames, same schedule)
        for r in reports:
            it.add_collection(r.worker, r.collected, r.grad_s, r.prepare_s)
            # each replica took its steps at versions r.version - steps, ..., r.version - 1
            it.lag.add(r.version - steps, steps, r.collection_version)
            it.add_asynchrony(0, steps)
            it.update_s += r.update_s / uw.num_workers
            it.broadcast_s += r.reduce_s / uw.num_workers  # the all-reduce replaces it
        it.info.add(_mean_over_workers(reports), weight=steps)
        uw.mirror(reports[0])
        uw.applied_gradients += steps

    def master_state(self) -> dict[str, Any]:
        """Rank 0's state: its optimizer state is the live one."""
        state = self.learner.workers[0].ask("state_dict")
        state.pop("version")
        return state


_STRATEGIES: dict[LearnerMode, type[UpdateStrategy]] = {
    cls.mode: cls for cls in (SyncUpdate, AsyncUpdate, DecentralizedUpdate)
}


def update_strategy(mode: LearnerMode, learner: GradientWorkers) -> UpdateStrategy:
    """The strategy of ``mode`` (sync, async or decentralized) on ``learner``'s workers."""
    return _STRATEGIES[mode](learner)

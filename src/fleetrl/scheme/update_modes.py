"""How the update worker updates: one strategy object per learner mode.

The :class:`~fleetrl.scheme.update_worker.UpdateWorker` keeps the gradient
workers alive (start, replace, weights, parameters, checkpoints); which
updates an iteration makes is a strategy's one job, chosen once at
construction from the :class:`~fleetrl.scheme.modes.LearnerMode`
(:func:`update_strategy`):

- :class:`SyncUpdate`: every worker's gradient on the same weights, averaged,
  one optimizer step, the new weights to every worker with its next step;
- :class:`AsyncUpdate`: gradients applied first ready (those more than
  ``scheme.max_policy_lag`` versions old are dropped), the new weights only to
  the worker whose gradient came back;
- :class:`DecentralizedUpdate`: the workers all-reduce among themselves and
  each steps its own optimizer; the master only gathers reports and mirrors
  rank 0.

A strategy answers :meth:`UpdateStrategy.start` (after the workers answered),
:meth:`UpdateStrategy.run` (one iteration into an
:class:`~fleetrl.scheme.report.IterationReport`) and
:meth:`UpdateStrategy.master_state` (the state a checkpoint holds).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar

import ray
from ray.exceptions import RayActorError, RayTaskError

from fleetrl.algorithms.base import InfoMean
from fleetrl.collectors.ray_checks import remote_traceback
from fleetrl.errors import WorkerError
from fleetrl.scheme.modes import LearnerMode
from fleetrl.scheme.report import IterationReport

if TYPE_CHECKING:  # the update worker builds its strategy: no import at run time
    from fleetrl.scheme.grad_worker import StepReport
    from fleetrl.scheme.update_worker import UpdateWorker

__all__ = [
    "AsyncUpdate",
    "DecentralizedUpdate",
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
        info.add(r["info"])
    return info.mean()


class UpdateStrategy(abc.ABC):
    """One learner mode's updates, on the gradient workers of ``learner``."""

    mode: ClassVar[LearnerMode]

    def __init__(self, learner: UpdateWorker):
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
            send = uw._weights_ref_version == uw.version
            refs = [uw._step(i, send) for i in range(uw.num_workers)]
            reports: list[StepReport] = []
            for i in range(uw.num_workers):
                report = uw._get_step(i, refs[i])
                while report is None:  # replaced: the new worker starts on current weights
                    report = uw._get_step(i, uw._step(i, send_weights=False))
                reports.append(report)
            for r in reports:
                it.add_collection(r["worker"], r)
                it.lag.add(uw.version, 1, r["collection_version"])
                it.add_asynchrony(uw.version - r["version"])
            norm = uw.apply_mean_gradients([r["grads"] for r in reports], it)
            it.info.add(_with_norm(_mean_over_workers(reports), norm))


class AsyncUpdate(UpdateStrategy):
    """``steps_per_batch x G`` gradients received, each applied (or dropped) first ready.

    A step stays in flight on every worker between iterations.
    """

    mode = LearnerMode.ASYNC

    def __init__(self, learner: UpdateWorker):
        super().__init__(learner)
        self._inflight: dict[Any, int] = {}  # the step each worker is computing

    def run(self, it: IterationReport) -> None:
        uw = self.learner
        if not self._inflight:
            for i in range(uw.num_workers):
                send = uw._weights_ref_version == uw.version
                self._inflight[uw._step(i, send)] = i
        received = 0
        while received < uw.algorithm.steps_per_batch * uw.num_workers:
            [ref], _ = ray.wait(list(self._inflight), num_returns=1)
            index = self._inflight.pop(ref)
            report = uw._get_step(index, ref)
            if report is None:  # replaced: resubmit on the current weights it started with
                self._inflight[uw._step(index, send_weights=False)] = index
                continue
            received += 1
            it.add_collection(index, report)
            asynchrony = uw.version - report["version"]
            if asynchrony > uw.scheme.max_policy_lag:
                uw.dropped_gradients += 1
                it.dropped += 1
            else:
                it.lag.add(uw.version, 1, report["collection_version"])
                it.add_asynchrony(asynchrony)
                norm = uw._apply(report["grads"], it)
                it.info.add(_with_norm(report["info"], norm))
            # new weights go only to this worker (after a drop too: it must catch up)
            self._inflight[uw._step(index, send_weights=True)] = index


class DecentralizedUpdate(UpdateStrategy):
    """One batch on every worker, its steps all-reduced among the workers (gloo)."""

    mode = LearnerMode.DECENTRALIZED

    def start(self) -> None:
        """Form the workers' gloo group (rank 0 hosts the rendezvous)."""
        uw = self.learner
        address, port = ray.get(uw.workers[0].node_address.remote())
        ray.get(
            [
                w.init_process_group.remote(
                    address, port, rank, uw.num_workers, uw.scheme.collective_timeout_s
                )
                for rank, w in enumerate(uw.workers)
            ]
        )

    def run(self, it: IterationReport) -> None:
        uw = self.learner
        refs = {w.train_batch.remote(): i for i, w in enumerate(uw.workers)}
        by_worker: dict[int, StepReport] = {}
        pending = list(refs)
        while pending:  # first failure first: the others would wait for it in the all-reduce
            [ref], pending = ray.wait(pending, num_returns=1)
            try:
                by_worker[refs[ref]] = ray.get(ref)
            except (RayTaskError, RayActorError) as err:
                raise WorkerError(
                    refs[ref],
                    GROUP_MEMBER_LOST_MSG.format(cause=remote_traceback(err)),
                    role="gradient worker",
                ) from None
        reports = [by_worker[i] for i in range(uw.num_workers)]
        steps = reports[0]["steps"]  # the same on every replica (same frames, same schedule)
        for r in reports:
            it.add_collection(r["worker"], r)
            # each replica took its steps at versions r["version"] - steps, ..., r["version"] - 1
            it.lag.add(r["version"] - steps, steps, r["collection_version"])
            it.add_asynchrony(0, steps)
            it.update_s += r["update_s"] / uw.num_workers
            it.broadcast_s += r["reduce_s"] / uw.num_workers  # the all-reduce replaces it
        it.info.add(_mean_over_workers(reports), weight=steps)
        uw._mirror(reports)
        uw.applied_gradients += steps

    def master_state(self) -> dict[str, Any]:
        """Rank 0's state: its optimizer state is the live one."""
        state = ray.get(self.learner.workers[0].state_dict.remote())
        state.pop("version")
        return state


_STRATEGIES: dict[LearnerMode, type[UpdateStrategy]] = {
    cls.mode: cls for cls in (SyncUpdate, AsyncUpdate, DecentralizedUpdate)
}


def update_strategy(mode: LearnerMode, learner: UpdateWorker) -> UpdateStrategy:
    """The strategy of ``mode`` (sync, async or decentralized) on ``learner``'s workers."""
    return _STRATEGIES[mode](learner)

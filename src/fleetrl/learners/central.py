"""CentralLearner: one learner in the driver process, fed by its collectors.

The scheme with one gradient worker: collect a batch and run the whole update
on it (:meth:`~fleetrl.algorithms.Algorithm.learn`). Collecting, publishing the
version (and to remote collectors the weights, every
``trainer.weight_update_interval`` batches) and the episode statistics are the
gradient workers' too: :class:`~fleetrl.learners.collection.Collection`. The policy
lag is measured from the batches' tags (:mod:`fleetrl.learners.versions`).

Resume is exact with local collection (``collector.num_collectors: 0``) and
an env whose state can be saved (:mod:`fleetrl.envs.state`): the collector is
built unseeded and loads its saved state, so the envs, the episodes in
progress and the random-action generator go on where the checkpoint left
them. Otherwise a resumed run gets freshly seeded collectors (every env
starts a new episode): :attr:`CentralLearner.approximate_resume` says why.
"""

from __future__ import annotations

import time
from typing import Any

from fleetrl.algorithms import Algorithm
from fleetrl.config import Config
from fleetrl.errors import EnvError
from fleetrl.learners.base import Learner
from fleetrl.learners.collection import Collection
from fleetrl.learners.records import IterationResult
from fleetrl.learners.report import IterationReport
from fleetrl.learners.versions import StaleBatchFilter, batch_version

__all__ = ["CentralLearner"]

APPROX_RAY_MSG = (
    "collection runs on Ray (collector.num_collectors={n}): the workers' envs and episodes are "
    "not saved; only collector.num_collectors=0 resumes exactly"
)
APPROX_ENV_MSG = (
    "env.id={env!r} cannot be saved (only gymnasium classic-control envs and MPE's simple, "
    "simple_spread and simple_tag can): its envs are reseeded and start new episodes"
)
APPROX_NO_STATE_MSG = "the checkpoint holds no collector state: the envs are reseeded"
APPROX_MISMATCH_MSG = "{err}; the envs are reseeded instead"


class CentralLearner(Learner):
    """Collect and learn in one process (the collectors themselves may be remote).

    Args:
        config: the run's config.
        algorithm: the learner.
        frames: frames already trained on (a resumed run); the collector is
            given exactly the rest of ``trainer.total_frames``.
        seed: seeds the collectors (unused when they load ``collector_state``).
        collector_state: the local collector's :meth:`collector_state` from a
            checkpoint; loaded instead of seeding where the resume can be exact.
    """

    def __init__(
        self,
        config: Config,
        algorithm: Algorithm,
        *,
        frames: int = 0,
        seed: int = 0,
        collector_state: dict[str, Any] | None = None,
    ):
        super().__init__(config, algorithm)
        n = config.collector.num_collectors
        if config.collector.fleet.min > 0:
            self.approximate_resume = APPROX_RAY_MSG.format(n=n)
        elif collector_state is None:
            self.approximate_resume = APPROX_NO_STATE_MSG
        elif collector_state.get("env") is None:
            self.approximate_resume = APPROX_ENV_MSG.format(env=config.env.id)
        if self.approximate_resume is None:
            # the straight run's collector: the whole budget and the same random-action phase;
            # its frame count, envs and episodes come from the saved state
            try:
                self.collection = Collection(
                    config,
                    algorithm,
                    total_frames=config.trainer.total_frames,
                    seed=None,
                    state=collector_state,
                )
            except EnvError as err:  # the env settings changed since the checkpoint
                self.approximate_resume = APPROX_MISMATCH_MSG.format(err=err)
        if self.approximate_resume is not None:
            self.collection = Collection(
                config,
                algorithm,
                total_frames=config.trainer.total_frames - frames,
                seed=seed,
                collected=frames,
            )
        #: IMPALA/APPO bound the lag of the batches they learn from (others: no bound)
        self.stale = StaleBatchFilter(algorithm.max_learn_lag)

    def run_iteration(self) -> IterationResult | None:
        """One collected batch and the update on it; None once the collector is exhausted."""
        it = IterationReport(workers=0)
        batch = self.collection.next_batch()
        # first ready: a batch past the lag bound is dropped (its frames and episodes still
        # count, through the collection's books), never waited out or learned from
        while batch is not None and not self.stale.admit(self.version, batch):
            it.dropped_batches += 1
            batch = self.collection.next_batch()
        if batch is None:
            if not it.dropped_batches:
                return None
            # the budget ran out on dropped batches: report their frames, learn nothing
            collected, it.broadcast_s = self.collection.take()
            it.add_collection(0, collected)
            it.fleet = self.collection.fleet_metrics()
            return it.result(self.version)
        learn_start = time.perf_counter()
        prepared = self.algorithm.prepare_s
        first_version = self.version
        it.info.add(self.algorithm.learn(batch))
        steps = self.version - first_version
        it.lag.add(first_version, steps, batch_version(batch))
        # one learner: every gradient is applied to the weights it was computed on
        it.add_asynchrony(0, steps)
        it.learn_s = time.perf_counter() - learn_start
        collected, it.broadcast_s = self.collection.take()
        it.add_collection(0, collected, prepare_s=self.algorithm.prepare_s - prepared)
        it.fleet = self.collection.fleet_metrics()
        return it.result(self.version)

    def collector_state(self) -> dict[str, Any] | None:
        """The local collector's state for a checkpoint (None for remote collectors)."""
        return self.collection.state()

    def shutdown(self) -> None:
        self.collection.shutdown()

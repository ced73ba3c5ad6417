"""CentralLearner: one learner in the driver process, fed by its collectors.

The scheme with one gradient worker: collect a batch, run the whole update on
it (:meth:`~fleetrl.algorithms.Algorithm.learn`), publish the weights to the
collectors every ``trainer.weight_update_interval`` batches. The version
published is the algorithm's optimizer-step count; a local collector (acting
with the learner's own module) is told it before each batch, so its batches
carry it too, and the policy lag is measured from the tags
(:mod:`fleetrl.scheme.versions`).

Resume is exact with local collection (``collector.num_collectors: 0``) and
an env whose state can be saved (:mod:`fleetrl.env_state`): the collector is
built unseeded and loads its saved state, so the envs, the episodes in
progress and the random-action generator go on where the checkpoint left
them. Otherwise a resumed run gets freshly seeded collectors (every env
starts a new episode): :attr:`CentralLearner.approximate_resume` says why.
"""

from __future__ import annotations

import time
from typing import Any

from fleetrl.algorithms import Algorithm
from fleetrl.build import make_collector
from fleetrl.collectors import episode_stats, frames_in
from fleetrl.config import Config
from fleetrl.errors import EnvError
from fleetrl.scheme.modes import LearnerMode
from fleetrl.scheme.report import metrics_row
from fleetrl.scheme.versions import PolicyLag, batch_version

__all__ = ["CentralLearner"]

APPROX_RAY_MSG = (
    "collection runs on Ray (collector.num_collectors={n}): the workers' envs and episodes are "
    "not saved; only collector.num_collectors=0 resumes exactly"
)
APPROX_ENV_MSG = (
    "env.id={env!r} cannot be saved (only gymnasium classic-control envs can): its envs are "
    "reseeded and start new episodes"
)
APPROX_NO_STATE_MSG = "the checkpoint holds no collector state: the envs are reseeded"
APPROX_MISMATCH_MSG = "{err}; the envs are reseeded instead"


class CentralLearner:
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

    mode = LearnerMode.CENTRAL

    def __init__(
        self,
        config: Config,
        algorithm: Algorithm,
        *,
        frames: int = 0,
        seed: int = 0,
        collector_state: dict[str, Any] | None = None,
    ):
        self.config = config
        self.algorithm = algorithm
        self.batches_learned = 0  # for publishing every weight_update_interval batches
        n = config.collector.num_collectors
        #: why resuming from a checkpoint is approximate here; None where it is exact
        self.approximate_resume: str | None = None
        if n > 0:
            self.approximate_resume = APPROX_RAY_MSG.format(n=n)
        elif collector_state is None:
            self.approximate_resume = APPROX_NO_STATE_MSG
        elif collector_state.get("env") is None:
            self.approximate_resume = APPROX_ENV_MSG.format(env=config.env.id)
        random_start = algorithm.random_start
        if self.approximate_resume is None:
            # the straight run's collector: the whole budget and the same random-action phase;
            # its frame count, envs and episodes come from the saved state
            self.collector = make_collector(
                config,
                algorithm.policy,
                total_frames=config.trainer.total_frames,
                seed=None,
                init_random_frames=algorithm.start_steps if random_start else -1,
            )
            try:
                self.collector.load_state_dict(collector_state)
            except EnvError as err:  # the env settings changed since the checkpoint
                self.collector.shutdown()
                self.approximate_resume = APPROX_MISMATCH_MSG.format(err=err)
        if self.approximate_resume is not None:
            # a random-start algorithm acts uniformly at random for its first start_steps frames
            random_frames = max(0, algorithm.start_steps - frames) if random_start else -1
            self.collector = make_collector(
                config,
                algorithm.policy,
                total_frames=config.trainer.total_frames - frames,
                seed=seed,
                init_random_frames=random_frames,
            )
        self._batches = iter(self.collector)
        self.remote = hasattr(self.collector, "worker_handles")
        # a resumed learner is past version 0: its collectors act with its current weights
        if self.version > self.collector.policy_version:
            self._publish()

    @property
    def version(self) -> int:
        """The learner's optimizer-step count (the algorithm's ``num_updates``)."""
        return self.algorithm.num_updates

    def _publish(self) -> None:
        """Give the collector the current version (remote: with the weights).

        The same version again when no optimizer step was taken since the last
        publish: the acting policy's buffers (DQN's epsilon) may have changed.
        """
        self.collector.update_policy_weights_(version=self.version)

    def run_iteration(self) -> dict[str, Any] | None:
        """One collected batch and the update on it; None once the collector is exhausted."""
        if not self.remote:  # acts with our own module: only its tag must follow
            self._publish()
        start = time.perf_counter()
        batch = next(self._batches, None)
        if batch is None:
            return None
        collect_s = time.perf_counter() - start
        stats = episode_stats(batch)
        learn_start = time.perf_counter()
        first_version = self.version
        info = self.algorithm.learn(batch)
        lag = PolicyLag()
        lag.add(first_version, self.version - first_version, batch_version(batch))
        self.batches_learned += 1
        learn_s = time.perf_counter() - learn_start
        publish_start = time.perf_counter()
        if self.remote and self.batches_learned % self.config.trainer.weight_update_interval == 0:
            self._publish()
        publish_s = time.perf_counter() - publish_start
        return {
            "frames": frames_in(batch),
            "returns": stats.returns.tolist(),
            "lengths": stats.lengths.tolist(),
            "info": info,
            "metrics": metrics_row(
                {
                    **lag.metrics(),
                    "train/policy_version": self.version,
                    # one learner: every gradient is applied to the weights it was computed on
                    "train/grad_asynchrony": 0.0,
                    "train/grad_asynchrony_max": 0.0,
                    "train/dropped_gradients": 0.0,
                    "time/collect_s": collect_s,
                    "time/learn_s": learn_s,
                    "time/broadcast_s": publish_s,
                    "time/collect_to_process": collect_s / (learn_s + publish_s),
                    "time/iteration_s": time.perf_counter() - start,
                }
            ),
        }

    def update_algorithm_parameter(self, name: str, value: float) -> None:
        self.algorithm.update_algorithm_parameter(name, value)

    def state_dict(self) -> dict[str, Any]:
        return self.algorithm.state_dict()

    def collector_state(self) -> dict[str, Any] | None:
        """The local collector's state for a checkpoint (None for remote collectors).

        Without the policy weights: the local collector acts with the learner's
        own module, which the checkpoint holds already.
        """
        if self.remote:
            return None
        state = self.collector.state_dict()
        state.pop("policy_state_dict", None)
        return state

    def shutdown(self) -> None:
        self.collector.shutdown()

"""Rollouts: the one collection path of every learner (central and gradient workers).

The central learner and each gradient worker collect the same way, through a
:class:`Rollouts`. It owns

- the collector: remote (a :class:`~fleetrl.collectors.RayCollector`) or local
  (a :class:`~fleetrl.collectors.SyncDataCollector` acting with the learner's
  own module), told apart by its type;
- the warm-up rule: an algorithm whose class says ``random_start`` acts
  uniformly at random for its first ``learning_starts`` frames, shared out among
  the learners that collect (:func:`warmup_frames`);
- publishing: before each batch the collector is given the learner's version
  (its optimizer-step count, :mod:`fleetrl.scheme.versions`): a local one every
  batch (it only tags, the module is the learner's own), a remote one with the
  weights every ``trainer.weight_update_interval`` batches, and before the
  first batch of a learner that starts past the collector's version;
- the episode statistics and frame counts of what was collected since the
  last report (:class:`Collection`).
- the normalization statistics (:mod:`fleetrl.normalization`): the moments
  of each batch delivered (stale batches dropped later count too) are held
  until :meth:`Rollouts.take`, which comes after the update on the batch; the
  central learner's are merged there into its algorithm's statistics (which
  the next publish carries to remote collectors); a gradient worker's are
  handed out by :meth:`Rollouts.take_moments` for its master instead.

Loss info is averaged everywhere with :class:`~fleetrl.algorithms.base.InfoMean`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tensordict import TensorDictBase

from fleetrl.algorithms import Algorithm
from fleetrl.algorithms.replay import ReplayAlgorithm
from fleetrl.build import make_collector
from fleetrl.collectors import RayCollector, episode_stats, frames_in
from fleetrl.config import Config
from fleetrl.normalization import Moments

__all__ = ["Collection", "Rollouts", "warmup_frames"]


def warmup_frames(algorithm: Algorithm, *, collected: int, share: int = 1) -> int:
    """The collector's ``init_random_frames``: -1 (none) unless the algorithm's class says
    ``random_start``; then this learner's part of ``learning_starts`` (a ``share``-th, rounded
    up, when ``share`` learners collect) less the frames it ``collected`` already.

    Example:
        >>> from types import SimpleNamespace
        >>> sac = SimpleNamespace(random_start=True, learning_starts=1000)
        >>> warmup_frames(sac, collected=0), warmup_frames(sac, collected=300, share=3)
        (1000, 34)
    """
    if not algorithm.random_start:
        return -1
    return max(0, -(-algorithm.learning_starts // share) - collected)


@dataclass
class Collection:
    """What a learner collected since its last report: frames, finished episodes, time.

    Plain values (lists, not tensors): a gradient worker sends it through Ray.
    """

    frames: int = 0
    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    collect_s: float = 0.0

    def add(self, batch: TensorDictBase, seconds: float) -> None:
        stats = episode_stats(batch)
        self.frames += frames_in(batch)
        self.returns.extend(stats.returns.tolist())
        self.lengths.extend(stats.lengths.tolist())
        self.collect_s += seconds

    def as_report(self) -> dict[str, Any]:
        """The report keys a learner's step report carries (``frames``, ``returns``, ...)."""
        return {
            "frames": self.frames,
            "returns": self.returns,
            "lengths": self.lengths,
            "collect_s": self.collect_s,
        }


class Rollouts:
    """A learner's collector with its publishing rule and episode statistics.

    Args:
        config: the run's config (``collector`` and ``env`` sections, and
            ``trainer.weight_update_interval``).
        algorithm: the learner's algorithm: its policy acts, its
            ``num_updates`` is the version published.
        total_frames: the collector's frame budget (-1: endless).
        seed: seeds the collector; None leaves it unseeded, for ``state``.
        collected: frames this learner collected before (a resumed run), for
            the warm-up rule.
        share: how many learners split the warm-up (the gradient workers).
        state: a local collector's saved state to load instead of seeding; a
            mismatch raises :class:`~fleetrl.errors.EnvError` (the collector is
            shut down first).
        merge_moments: merge the normalization moments into the algorithm in
            :meth:`take` (the central learner); False: hold them for
            :meth:`take_moments` (a gradient worker, whose master merges them).
    """

    def __init__(
        self,
        config: Config,
        algorithm: Algorithm,
        *,
        total_frames: int,
        seed: int | None,
        collected: int = 0,
        share: int = 1,
        state: dict[str, Any] | None = None,
        merge_moments: bool = True,
    ):
        self.algorithm = algorithm
        self.interval = config.trainer.weight_update_interval
        self.collector = make_collector(
            config,
            algorithm.policy,
            total_frames=total_frames,
            seed=seed,
            init_random_frames=warmup_frames(algorithm, collected=collected, share=share),
        )
        if state is not None:
            try:
                self.collector.load_state_dict(state)
            except BaseException:
                self.collector.shutdown()
                raise
        #: the collector runs on Ray actors (it then needs the weights, not only the version)
        self.remote = isinstance(self.collector, RayCollector)
        self.batches = 0  # collected so far: publishing counts them
        self.collection = Collection()
        self.publish_s = 0.0  # time spent publishing since the last take()
        self.normalization = algorithm.normalization
        self.merge_moments = merge_moments
        #: the moments of the frames delivered since the last take() (None: no normalization)
        self.moments: Moments | None = (
            self.normalization.empty() if self.normalization is not None else None
        )
        self._batches = iter(self.collector)
        # a resumed learner is past version 0: its collectors act with its current weights
        if self.version > self.collector.policy_version:
            self.publish()

    @property
    def version(self) -> int:
        """The learner's optimizer-step count: the version it publishes."""
        return self.algorithm.num_updates

    def publish(self) -> None:
        """Give the collector the current version (remote: with the weights).

        The same version again when no optimizer step was taken since the last
        publish: the acting policy's buffers (DQN's epsilon) may have changed.
        """
        start = time.perf_counter()
        self.collector.update_policy_weights_(version=self.version)
        self.publish_s += time.perf_counter() - start

    def _publish_due(self) -> bool:
        if not self.remote:  # acts with the learner's own module: only its tag must follow
            return True
        if self.batches == 0:  # a replica that caught up on the master's weights since start
            return self.version > self.collector.policy_version
        return self.batches % self.interval == 0

    def next_batch(self) -> TensorDictBase | None:
        """Publish if due, then the next batch (None once the budget is spent); its frames
        and finished episodes are added to :attr:`collection`."""
        if self._publish_due():
            self.publish()
        start = time.perf_counter()
        batch = next(self._batches, None)
        if batch is None:
            return None
        self.batches += 1
        self.collection.add(batch, time.perf_counter() - start)
        if self.moments is not None:
            self.moments.add(self.normalization.moments(batch))
        return batch

    def take_moments(self) -> Moments | None:
        """The normalization moments held since the last call (reset); None: no normalization."""
        moments = self.moments
        if moments is not None:
            self.moments = self.normalization.empty()
        return moments

    def take(self) -> tuple[Collection, float]:
        """What was collected and the time spent publishing since the last call; both reset.

        Called after the update on what was collected: with ``merge_moments``, the
        normalization moments of those batches are merged into the algorithm here.
        """
        if self.merge_moments and self.moments is not None:
            self.normalization.merge(self.take_moments())
        collection, publish_s = self.collection, self.publish_s
        self.collection, self.publish_s = Collection(), 0.0
        return collection, publish_s

    def batch_info(self) -> dict[str, float]:
        """What the algorithm logs about the last batch it took in (a replay algorithm's
        buffer size, epsilon); empty for the others."""
        if isinstance(self.algorithm, ReplayAlgorithm):
            return dict(self.algorithm.batch_info)
        return {}

    def stats(self) -> dict[str, Any]:
        """The collector's stats (remote: frames, lag, preemption, compression)."""
        if not self.remote:
            return {"frames": self.collector.frames}
        return self.collector.stats()

    def state(self) -> dict[str, Any] | None:
        """A local collector's state for a checkpoint, without the policy weights (the
        learner's own module, which the checkpoint holds); None for remote collectors."""
        if self.remote:
            return None
        state = self.collector.state_dict()
        state.pop("policy_state_dict", None)
        return state

    def shutdown(self) -> None:
        self.collector.shutdown()

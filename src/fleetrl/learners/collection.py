"""Collection: the one way every learner collects (central, gradient workers, decoupled).

A :class:`Collection` owns

- the collector (:func:`~fleetrl.setup.build.make_collector`): in this process,
  acting with the learner's own module, or on remote workers; with a replay
  buffer, remote workers that write into it and report progress;
- the random-start rule: an algorithm whose class says ``random_start`` acts
  uniformly at random for its first ``learning_starts`` frames, shared out among
  the learners that collect (:func:`random_start_frames`);
- publishing: the collector is given the learner's version (its optimizer-step
  count, :mod:`fleetrl.learners.versions`). A collector that acts with the
  learner's own module (:meth:`~fleetrl.collectors.DataCollectorBase.acts_with`)
  gets it before every batch: only its tag moves. Any other gets the weights
  every ``trainer.weight_update_interval`` batches, and before the first batch
  of a learner that starts past the collector's version. Remote collectors of a
  learner on an accelerator (``trainer.device: cuda``) act on the CPU: they are
  given a CPU copy of the policy (:class:`~fleetrl.networks.policies.HostPolicy`), which
  each publish brings up to date with one device-to-host copy, whatever the
  number of workers (:func:`host_policy`);
- the books of what was collected since the last report (:class:`Collected`):
  frames and the episodes that ended, from batches or from progress records, and
  where the collectors' time went (:mod:`fleetrl.collectors.timing`);
- the normalization moments (:mod:`fleetrl.networks.normalization`) of each batch
  delivered (stale batches dropped later count too), held until :meth:`take`,
  which comes after the update on the batch: the central learner's are merged
  there into its algorithm's statistics (which the next publish carries to
  remote collectors); a gradient worker's are handed out by
  :meth:`take_moments` for its master instead.
"""

from __future__ import annotations

import time
from typing import Any

from tensordict import TensorDictBase

from fleetrl.algorithms import Algorithm
from fleetrl.algorithms.replay import ReplayAlgorithm
from fleetrl.config import Config
from fleetrl.learners.records import Collected
from fleetrl.networks.normalization import Moments
from fleetrl.networks.policies import HostPolicy, module_device
from fleetrl.setup.build import make_collector

__all__ = ["Collection", "host_policy", "random_start_frames"]


def random_start_frames(algorithm: Algorithm, *, collected: int, share: int = 1) -> int:
    """The collector's ``init_random_frames``: -1 (none) unless the algorithm's class says
    ``random_start``; then this learner's part of ``learning_starts`` (a ``share``-th, rounded
    up, when ``share`` learners collect) less the frames it ``collected`` already.

    Examples:
        >>> from types import SimpleNamespace
        >>> sac = SimpleNamespace(random_start=True, learning_starts=1000)
        >>> random_start_frames(sac, collected=0), random_start_frames(sac, collected=300, share=3)
        (1000, 34)
    """
    if not algorithm.random_start:
        return -1
    return max(0, -(-algorithm.learning_starts // share) - collected)


def host_policy(config: Config, algorithm: Algorithm) -> HostPolicy | None:
    """The CPU copy that remote collectors act with where the learner's policy lives on an
    accelerator; None where the collectors get the learner's module itself (a CPU learner,
    or a local collector, ``collector.num_collectors: 0``, which acts on the learner's
    device)."""
    device = module_device(algorithm.policy)
    if config.collector.fleet.min == 0 or device is None or device.type == "cpu":
        return None
    return HostPolicy(algorithm.policy)


class Collection:
    """A learner's collector with its publishing rule and its books.

    Args:
        config: the run's config (``collector`` and ``env`` sections,
            ``trainer.weight_update_interval`` and ``trainer.backend``).
        algorithm: the learner's algorithm: its policy acts, its
            ``num_updates`` is the version published.
        total_frames: the collector's frame budget (-1: endless).
        seed: seeds the collector; None leaves it unseeded, for ``state``.
        collected: frames this learner collected before (a resumed run), for
            the random-start rule.
        share: how many learners split the random start (the gradient workers).
        state: a local collector's saved state to load instead of seeding; a
            mismatch raises :class:`~fleetrl.errors.EnvError` (the collector is
            shut down first).
        merge_moments: merge the normalization moments into the algorithm in
            :meth:`take` (the central learner); False: hold them for
            :meth:`take_moments` (a gradient worker, whose master merges them).
        replay_buffer: a replay buffer the remote workers write into (decoupled
            learning): :meth:`poll` then returns their progress records.
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
        replay_buffer: Any = None,
    ):
        self.algorithm = algorithm
        self.interval = config.trainer.weight_update_interval
        #: the CPU copy the remote collectors act with (None: they get the learner's module)
        self.host = host_policy(config, algorithm)
        self.collector = make_collector(
            config,
            algorithm.policy if self.host is None else self.host.module,
            total_frames=total_frames,
            seed=seed,
            init_random_frames=random_start_frames(algorithm, collected=collected, share=share),
            replay_buffer=replay_buffer,
            reads=algorithm.env_keys_read(),
        )
        if state is not None:
            try:
                self.collector.load_state_dict(state)
            except BaseException:
                self.collector.shutdown()
                raise
        #: the collector acts with the learner's own module: a publish moves only its tag
        self.shares_policy = self.collector.acts_with(algorithm.policy)
        self.batches = 0  # collected so far: publishing counts them
        self.collected = Collected()
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

    @property
    def published(self) -> int:
        """The version the collector has now."""
        return self.collector.policy_version

    def publish(self) -> float:
        """Give the collector the current version (with the weights, unless it acts with the
        learner's own module); returns the seconds it took.

        The same version again when no optimizer step was taken since the last
        publish: the acting policy's buffers (DQN's epsilon) may have changed. A
        learner on an accelerator first brings its CPU copy up to date (one
        device-to-host copy), which the collector publishes from.
        """
        start = time.perf_counter()
        if self.host is not None:
            self.host.refresh()
        self.collector.update_policy_weights_(version=self.version)
        seconds = time.perf_counter() - start
        self.publish_s += seconds
        return seconds

    def _publish_due(self) -> bool:
        if self.shares_policy:  # acts with the learner's own module: only its tag must follow
            return True
        if self.batches == 0:  # a replica that caught up on the master's weights since start
            return self.version > self.collector.policy_version
        return self.batches % self.interval == 0

    def next_batch(self) -> TensorDictBase | None:
        """Publish if due, then the next batch (None once the budget is spent); its frames
        and finished episodes are added to :attr:`collected`."""
        if self._publish_due():
            self.publish()
        start = time.perf_counter()
        batch = next(self._batches, None)
        if batch is None:
            return None
        self.batches += 1
        self.collected.add(batch, time.perf_counter() - start)
        self.collected.add_times(self.collector.take_times())
        if self.moments is not None:
            self.moments.add(self.normalization.moments(batch))
        return batch

    def poll(self, timeout: float | None = 0.0, *, issue: bool = True) -> list[TensorDictBase]:
        """The progress records of the tasks done now (decentralized collection into a replay
        buffer, :meth:`~fleetrl.collectors.RayCollector.poll`), added to :attr:`collected`;
        the seconds spent waiting count as collection time."""
        start = time.perf_counter()
        records = self.collector.poll(timeout, issue=issue)
        self.collected.collect_s += time.perf_counter() - start
        self.collected.add_times(self.collector.take_times())
        for record in records:
            self.collected.add_progress(record)
        return records

    @property
    def exhausted(self) -> bool:
        """The budget is spent and every task served."""
        return self.collector.remaining_frames == 0 and self.collector.frames_in_flight == 0

    @property
    def frames_in_flight(self) -> int:
        """Frames of tasks issued and not yet served."""
        return self.collector.frames_in_flight

    def take_moments(self) -> Moments | None:
        """The normalization moments held since the last call (reset); None: no normalization."""
        moments = self.moments
        if moments is not None:
            self.moments = self.normalization.empty()
        return moments

    def take(self) -> tuple[Collected, float]:
        """What was collected and the time spent publishing since the last call; both reset.

        Called after the update on what was collected: with ``merge_moments``, the
        normalization moments of those batches are merged into the algorithm here.
        """
        if self.merge_moments and self.moments is not None:
            self.normalization.merge(self.take_moments())
        collected, publish_s = self.collected, self.publish_s
        self.collected, self.publish_s = Collected(), 0.0
        return collected, publish_s

    def batch_info(self) -> dict[str, float]:
        """What the algorithm logs about the last batch it took in (a replay algorithm's
        buffer size, epsilon); empty for the others."""
        if isinstance(self.algorithm, ReplayAlgorithm):
            return dict(self.algorithm.batch_info)
        return {}

    def stats(self) -> dict[str, Any]:
        """The collector's stats (remote: frames, lag, preemption, compression)."""
        return self.collector.stats()

    def fleet_metrics(self) -> dict[str, float]:
        """The remote collectors' fleet, as the metrics row's ``train/collectors...`` columns
        (empty for a local collector: NaN there)."""
        fleet = getattr(self.collector, "fleet", None)
        if fleet is None:
            return {}
        return {
            "train/collectors": float(fleet["collectors"]),
            **{f"train/collectors_{k}": float(fleet[k]) for k in ("joined", "left", "restarted")},
        }

    def state(self) -> dict[str, Any] | None:
        """The collector's state for a checkpoint where it acts with the learner's module
        (without those weights: the checkpoint holds them); None for any other."""
        if not self.shares_policy:
            return None
        state = self.collector.state_dict()
        state.pop("policy_state_dict", None)
        return state

    def shutdown(self) -> None:
        self.collector.shutdown()

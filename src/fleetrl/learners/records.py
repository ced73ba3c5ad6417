"""The records that cross the learners' seams, as dataclasses.

- :class:`Collected`: what a learner collected since its last report (frames,
  the episodes that ended, the time it took, and where the collectors' time went);
- :class:`StepReport`: what a gradient worker returns for a step (or, in the
  decentralized mode, for a whole batch) to the update worker;
- :class:`IterationResult`: what a learner's ``run_iteration`` returns to the
  :class:`~fleetrl.run.trainer.Trainer`: frames, episodes, loss info and the row of
  the metric schema (:mod:`fleetrl.learners.report`).

Plain values and arrays only: a step report travels through Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tensordict import TensorDictBase

from fleetrl.collectors import episode_stats, frames_in
from fleetrl.collectors.timing import CollectTimes

__all__ = ["Collected", "IterationResult", "StepReport"]


@dataclass
class Collected:
    """What a learner collected since its last report.

    Examples:
        >>> c = Collected()
        >>> c.add_episodes(frames=8, returns=[2.0], lengths=[4], seconds=0.5)
        >>> c.frames, c.returns, c.collect_s
        (8, [2.0], 0.5)
    """

    frames: int = 0
    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    collect_s: float = 0.0
    #: a multi-agent env's: per agent group, the returns of its episodes that ended
    group_returns: dict[str, list[float]] = field(default_factory=dict)
    #: the collector's parts (:mod:`fleetrl.collectors.timing`) for the batches taken
    times: CollectTimes = field(default_factory=CollectTimes)

    def add_times(self, times: CollectTimes | None) -> None:
        """The collector's parts for what was taken (None: the collector does not measure)."""
        if times is not None:
            self.times.add(times)

    def add(self, batch: TensorDictBase, seconds: float) -> None:
        """A batch's frames and the episodes that ended in it."""
        stats = episode_stats(batch)
        self.add_episodes(
            frames=frames_in(batch),
            returns=stats.returns.tolist(),
            lengths=stats.lengths.tolist(),
            seconds=seconds,
        )
        for name, returns in stats.group_returns.items():
            self.group_returns.setdefault(name, []).extend(returns.tolist())

    def add_progress(self, record: TensorDictBase) -> None:
        """A replay-buffer collector's progress record (frames written, episodes ended)."""
        self.add_episodes(
            frames=int(record["frames"]),
            returns=record["episode_return"].tolist(),
            lengths=record["episode_length"].tolist(),
        )

    def add_episodes(
        self, *, frames: int, returns: list[float], lengths: list[int], seconds: float = 0.0
    ) -> None:
        self.frames += frames
        self.returns.extend(returns)
        self.lengths.extend(lengths)
        self.collect_s += seconds


@dataclass
class StepReport:
    """A gradient worker's report of one step (decentralized: of one batch's steps).

    ``grads`` are the flat gradients (sync and async; None when decentralized,
    where they were all-reduced among the workers), computed on weights of
    ``version``, from data collected with weights of ``collection_version``.
    """

    worker: int
    collected: Collected
    info: dict[str, float]
    version: int
    collection_version: int
    grads: Any = None
    grad_s: float = 0.0
    #: preparing batches for the gradients (GAE; part of grad_s in sync and async)
    prepare_s: float = 0.0
    #: this was the last step on the current batch
    batch_done: bool = False
    #: normalization moments of the frames collected since the last report (sync/async)
    moments: Any = None
    #: decentralized: the steps taken on the batch, the all-reduce and update times
    steps: int = 1
    reduce_s: float = 0.0
    update_s: float = 0.0
    #: decentralized, rank 0: its flat weights and normalization statistics (the master mirrors)
    weights: Any = None
    statistics: dict[str, Any] | None = None


@dataclass
class IterationResult:
    """What a learner's ``run_iteration`` returns to the Trainer."""

    frames: int  #: frames collected in the iteration
    returns: list[float]  #: returns of the episodes that ended in it
    lengths: list[int]  #: their lengths
    info: dict[str, float]  #: loss info, the mean over the iteration's optimizer steps
    metrics: dict[str, float]  #: the metric schema's row
    #: a multi-agent env's: per agent group, the returns of its episodes that ended in it
    group_returns: dict[str, list[float]] = field(default_factory=dict)

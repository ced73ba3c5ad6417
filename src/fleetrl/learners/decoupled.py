"""DecoupledLearner: off-policy learning while the collectors write into a replay buffer.

``collector.decoupled: true`` (DQN, SAC; the central learner, remote
collectors). The layout of Ape-X: the buffer is a Ray actor
(:class:`~fleetrl.collectors.remote.replay.RemoteReplayBuffer`); every collector
worker extends it with its batches' transitions itself and keeps collecting,
first ready, while the learner samples minibatches from it and updates. Only
progress records reach the learner (frames written, the policy version, the
episodes that ended), so frames are counted exactly and episode returns are
still reported.

Ratio control. With ``F`` frames written and ``S`` = ``learning_starts``, the
learner may have taken

    allowed(F) = (F - S) * updates_per_batch // frames_per_batch   (0 while F < S)

optimizer steps, i.e. ``updates_per_frame = updates_per_batch /
frames_per_batch`` per frame past the random start: the ratio of the alternating
mode, counted in frames written. The learner never takes more (it waits for
progress when it is ahead), and when it is behind it holds the collection
back: no new task is issued while the frames written and in flight exceed
what its updates so far need by more than ``collector.decoupled_frames_ahead``
(default: one ``frames_per_batch`` per collector), so the workers run dry and
leave the cores to it. The budget's last frames are followed by every update
they allow, as in the alternating mode, except the alternating mode's one
batch's worth of updates at the random start's end.

Weights are published every ``trainer.weight_update_interval`` batches'
worth of updates, ``updates_per_batch`` optimizer steps each: as often as the
alternating mode publishes, in updates (by default once per batch's worth);
each worker receives the newest version with its next task. An *iteration* (a metrics
row) is ``frames_per_batch`` frames written or more, with the updates taken
meanwhile (the updates still owed then are taken in the next one).
``train/policy_lag`` is the learner's version minus the version of
the newest progress record when each step is taken.

Checkpoints hold the actor's buffer where the alternating mode holds its own
(the algorithm state's ``"buffer"``), so a resumed run (in either mode) goes
on with the same data; the collectors are reseeded, as with any Ray
collection. The workers write before the learner hears of it, so tasks in
flight at a checkpoint (after a signal, or every ``checkpoint_every``) may have
written transitions the run's frames do not include yet: the learner keeps
the account of the writes it counted (:class:`~fleetrl.collectors.remote.replay.CountedWrites`),
and the checkpoint's buffer holds those writes only. A resumed run would
otherwise collect those frames again, and end with more transitions than its
budget.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from tensordict import TensorDictBase

from fleetrl.algorithms.replay import ReplayAlgorithm
from fleetrl.collectors.remote.replay import CountedWrites, RemoteReplayBuffer
from fleetrl.config import Config
from fleetrl.errors import ConfigError
from fleetrl.keys import POLICY_VERSION_KEY
from fleetrl.learners.base import Learner
from fleetrl.learners.central import APPROX_RAY_MSG
from fleetrl.learners.collection import Collection
from fleetrl.learners.records import IterationResult
from fleetrl.learners.report import IterationReport

__all__ = ["DecoupledLearner", "allowed_updates"]

logger = logging.getLogger(__name__)

#: minibatches sampled per call (one round trip serves this many optimizer steps); the next
#: call is in flight while they are learned from
SAMPLE_CHUNK = 8
NOT_REPLAY_MSG = (
    "algorithm={name!r} is invalid with collector.decoupled=true: it needs a replay "
    "algorithm (dqn, sac)"
)


def allowed_updates(
    frames: int, *, start: int, updates_per_batch: int, frames_per_batch: int
) -> int:
    """The optimizer steps the ratio allows after ``frames`` frames written.

    Examples:
        >>> [allowed_updates(f, start=100, updates_per_batch=4, frames_per_batch=8)
        ...  for f in (0, 99, 100, 101, 102, 116)]
        [0, 0, 0, 0, 1, 8]
    """
    if frames < start:
        return 0
    return (frames - start) * updates_per_batch // frames_per_batch


class DecoupledLearner(Learner):
    """The central learner of decoupled off-policy training (see the module docstring).

    Args:
        config: the run's config (``collector.decoupled: true``).
        algorithm: a :class:`~fleetrl.algorithms.replay.ReplayAlgorithm` (DQN, SAC); a
            resumed one brings its checkpoint's buffer, which moves into the actor.
        frames: frames already trained on (a resumed run).
        seed: seeds the collectors.
    """

    def __init__(self, config: Config, algorithm: Any, *, frames: int = 0, seed: int = 0):
        if not isinstance(algorithm, ReplayAlgorithm):
            raise ConfigError([NOT_REPLAY_MSG.format(name=config.algorithm)])
        super().__init__(config, algorithm)
        c = config.collector
        self.algorithm: ReplayAlgorithm = algorithm
        self.frames_per_batch = c.frames_per_batch
        self.updates_per_batch = algorithm.update_every
        #: optimizer steps between publishes: the interval's batches, in updates
        self.interval = config.trainer.weight_update_interval * self.updates_per_batch
        self.start = algorithm.learning_starts
        self.frames_ahead = c.decoupled_frames_ahead or c.frames_per_batch * c.fleet.min
        #: the collectors run remotely: their envs and episodes are not saved
        self.approximate_resume = APPROX_RAY_MSG.format(n=c.num_collectors)
        #: the buffer's writes the progress records counted, resumes included
        self.counted = CountedWrites(algorithm.frames_seen)
        self.newest_version = 0  # of the newest progress record
        self.buffer = RemoteReplayBuffer(
            config.algo.buffer_size, config.algo.batch_size, backend=config.trainer.backend
        )
        self.collection: Collection | None = None
        #: minibatches sampled ahead (oldest first), and the sample call in flight
        self._sampled: list[TensorDictBase] = []
        self._asked: Any = None
        try:
            if len(algorithm.buffer):  # a resumed run: its checkpoint's buffer moves to the actor
                state = {"buffer": algorithm.buffer.state_dict(), "written": self.written}
                self.buffer.load_state_dict(state)
                algorithm.buffer.empty()
            self.collection = Collection(
                config,
                algorithm,
                total_frames=config.trainer.total_frames - frames,
                seed=seed,
                collected=frames,
                replay_buffer=self.buffer,
            )
        except BaseException:
            self.shutdown()
            raise

    @property
    def written(self) -> int:
        """Frames written to the buffer that the learner counted (its progress records)."""
        return self.counted.total

    def allowed(self) -> int:
        """The optimizer steps the ratio allows for the frames written so far."""
        return allowed_updates(
            self.written,
            start=self.start,
            updates_per_batch=self.updates_per_batch,
            frames_per_batch=self.frames_per_batch,
        )

    def _frames_needed(self) -> int:
        """Frames written that the updates taken so far account for."""
        return self.start + -(-self.version * self.frames_per_batch // self.updates_per_batch)

    def _take(self, records: list[TensorDictBase]) -> int:
        """Account the progress records: frames written, the newest version, the buffer size."""
        frames = 0
        for record in records:
            n, written = int(record["frames"]), int(record["written"])
            frames += n
            self.counted.add(written, n)
            # writes older than the buffer's capacity were overwritten: no account kept
            self.counted.forget_below(written - self.buffer.capacity)
            self.newest_version = max(self.newest_version, int(record[POLICY_VERSION_KEY]))
            self.algorithm.take_frames(n, min(written, self.buffer.capacity))
        return frames

    def _minibatches(self, n: int) -> list[TensorDictBase]:
        """``n`` sampled minibatches, oldest first; the next sample call is left in flight,
        so the actor samples while the learner updates."""
        while len(self._sampled) < n:
            if self._asked is None:
                self._asked = self.buffer.request(SAMPLE_CHUNK)
            asked, self._asked = self._asked, None
            # the actor's samples are on the CPU: on the learner's device in one move
            self._sampled.extend(self.algorithm.on_device(self.buffer.receive(asked)).unbind(0))
        taken, self._sampled = self._sampled[:n], self._sampled[n:]
        if self._asked is None:
            self._asked = self.buffer.request(SAMPLE_CHUNK)
        return taken

    def _update(self, owed: int, it: IterationReport) -> None:
        """Up to ``owed`` optimizer steps (at most :data:`SAMPLE_CHUNK`, none past the next
        publish), then the publish if it is due."""
        collection = self.collection
        start = time.perf_counter()
        n = min(owed, SAMPLE_CHUNK, collection.published + self.interval - self.version)
        minibatches = self._minibatches(n)
        it.add_prepare(0, time.perf_counter() - start)  # sampling: the batch's preparation
        first = self.version
        it.info.add(self.algorithm.update_on(minibatches), weight=n)
        it.lag.add(first, self.version - first, self.newest_version)
        it.add_asynchrony(0, self.version - first)  # one learner: applied where computed
        it.learn_s += time.perf_counter() - start
        if self.version - collection.published >= self.interval:
            collection.publish()

    def run_iteration(self) -> IterationResult | None:
        """Learn while at least ``frames_per_batch`` frames are written (fewer at the end of
        the budget, followed by every update they allow); None once nothing is left."""
        collection = self.collection
        it = IterationReport(workers=0)
        frames = 0
        version_before = self.version
        while True:
            owed = self.allowed() - self.version
            if collection.exhausted:
                if owed <= 0:
                    break
                self._update(owed, it)  # the budget's last frames: every update they allow
                continue
            if frames >= self.frames_per_batch:
                break  # the updates still owed are taken in the next iteration
            if owed > 0:
                self._update(owed, it)
                # behind the ratio: take what is done, issuing only within the frames ahead
                ahead = self.written + collection.frames_in_flight - self._frames_needed()
                frames += self._take(collection.poll(0.0, issue=ahead < self.frames_ahead))
                continue
            # ahead of the ratio: wait for the workers
            frames += self._take(collection.poll(None))
        if frames == 0 and self.version == version_before:
            return None
        collected, it.broadcast_s = collection.take()
        it.add_collection(0, collected)
        it.fleet = collection.fleet_metrics()
        result = it.result(self.version)
        # what the algorithm logs about the frames taken in (epsilon, the buffer's size), as
        # the alternating learners log it with each batch
        result.info.update(self.algorithm.batch_info)
        return result

    def state_dict(self) -> dict[str, Any]:
        """The algorithm's state with the actor's buffer where its own would be: the writes
        counted (:attr:`written`, its ``frames_seen``), none of the tasks in flight."""
        state = self.algorithm.state_dict()
        state["buffer"] = self.buffer.state_dict(self.counted)["buffer"]
        state["frames_seen"] = self.written
        return state

    def shutdown(self) -> None:
        if self.collection is not None:
            self.collection.shutdown()
        self.buffer.shutdown()

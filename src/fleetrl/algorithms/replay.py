"""ReplayAlgorithm: what DQN and SAC share. Store each batch, then sampled gradient steps.

:meth:`ReplayAlgorithm.gradient_batches` puts a collected batch's valid
transitions into a torchrl replay buffer (on the learner's device) and, once
``learning_starts`` frames were seen, draws the ``update_every`` minibatches of
the batch's steps in one sample call and yields them one at a time (uniform
draws with replacement either way: one call of ``k x batch_size`` is ``k``
calls of ``batch_size``, without ``k - 1`` calls' overhead). Each optimizer
step is followed by a target-network update
(:meth:`ReplayAlgorithm.after_update`). The buffer is part of the checkpoint
(its filled rows: :func:`~fleetrl.collectors.remote.replay.buffer_state`), so a resumed
run learns from the same data. In decoupled mode
(``collector.decoupled``) the buffer lives in a Ray actor that the collectors
write to (:mod:`fleetrl.learners.decoupled`); the learner counts its frames with
:meth:`ReplayAlgorithm.take_frames` and checkpoints that buffer in the same
place.

In the distributed scheme each gradient worker keeps its own buffer and sees
1/G of the frames; ``frame_scale = G`` makes ``learning_starts`` and annealing
schedules count the frames of the whole run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from tensordict import TensorDictBase
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

from fleetrl.algorithms.base import Algorithm
from fleetrl.algorithms.batches import flatten_valid
from fleetrl.algorithms.sections import ReplayConfig
from fleetrl.collectors.remote.replay import buffer_state, load_buffer_state
from fleetrl.keys import TRANSITION_KEYS

__all__ = ["ReplayAlgorithm", "ReplayConfig"]


class ReplayAlgorithm(Algorithm):
    """Off-policy base: subclasses set ``target_updater`` and call :meth:`init_replay`."""

    config_class = ReplayConfig
    target_updater: Any

    def init_replay(self, buffer_size: int, batch_size: int) -> None:
        # sampled with an explicit size: the minibatches of a whole batch's steps at once
        self.buffer = TensorDictReplayBuffer(
            storage=LazyTensorStorage(buffer_size, device=self.device)
        )
        self.batch_size = batch_size
        self.frames_seen = 0
        self.frame_scale = 1  # G on each of G gradient workers: schedules count all G's frames
        self.batch_info: dict[str, float] = {}

    def on_frames(self, frames: int) -> dict[str, float]:
        """Hook after storing ``frames`` new frames (e.g. epsilon annealing); returns what to log."""
        return {}

    @property
    def steps_per_batch(self) -> int:
        return self.update_every

    def gradient_batches(self, batch: TensorDictBase) -> Iterator[TensorDictBase]:
        """Store the batch; then, once ``learning_starts`` frames were seen, ``update_every``
        sampled minibatches (storing and sampling add to :attr:`prepare_s`)."""
        start = time.perf_counter()
        data = flatten_valid(batch, TRANSITION_KEYS)
        self.buffer.extend(self.on_device(data))
        self.frames_seen += data.numel()
        self.batch_info = {
            **self.on_frames(data.numel() * self.frame_scale),
            "train/buffer_size": float(len(self.buffer)),
        }
        if self.frames_seen * self.frame_scale < self.learning_starts:
            self.prepare_s += time.perf_counter() - start
            return
        samples = self.buffer.sample(self.batch_size * self.update_every)
        samples = samples.reshape(self.update_every, self.batch_size)
        self.prepare_s += time.perf_counter() - start
        for i in range(self.update_every):
            yield samples[i]

    def take_frames(self, frames: int, buffer_size: int) -> None:
        """Count ``frames`` written to a replay buffer outside this algorithm (decoupled
        collection, :mod:`fleetrl.learners.decoupled`): the schedules advance as if they were
        stored here, and ``buffer_size`` is what :attr:`batch_info` reports."""
        self.frames_seen += frames
        self.batch_info = {
            **self.on_frames(frames * self.frame_scale),
            "train/buffer_size": float(buffer_size),
        }

    def after_update(self) -> None:
        self.target_updater.step()

    def learn(self, batch: TensorDictBase) -> dict[str, float]:
        info = super().learn(batch)
        return {**self.batch_info, **info}

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["buffer"] = buffer_state(self.buffer)  # the filled rows only
        state["frames_seen"] = self.frames_seen
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        load_buffer_state(self.buffer, state["buffer"])
        self.frames_seen = int(state["frames_seen"])

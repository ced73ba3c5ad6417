"""ReplayAlgorithm: what DQN and SAC share. Store each batch, then sampled gradient steps.

:meth:`ReplayAlgorithm.learn` puts a collected batch's valid transitions into a
torchrl replay buffer and, once ``start_steps`` frames were seen, runs
``update_every`` gradient steps on sampled minibatches, each followed by a
target-network update. The buffer is part of the checkpoint, so a resumed run
learns from the same data.
"""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

from fleetrl.algorithms.base import Algorithm, flatten_valid

__all__ = ["TRANSITION_KEYS", "ReplayAlgorithm"]

#: what an off-policy loss reads from a transition (policy outputs are not stored)
TRANSITION_KEYS = (
    "observation",
    "action",
    ("next", "observation"),
    ("next", "reward"),
    ("next", "done"),
    ("next", "terminated"),
    ("next", "truncated"),
)


class ReplayAlgorithm(Algorithm):
    """Off-policy base: subclasses set ``target_updater`` and call :meth:`init_replay`."""

    target_updater: Any

    def init_replay(self, buffer_size: int, batch_size: int) -> None:
        self.buffer = TensorDictReplayBuffer(
            storage=LazyTensorStorage(buffer_size), batch_size=batch_size
        )
        self.frames_seen = 0

    def on_frames(self, frames: int) -> dict[str, float]:
        """Hook after storing ``frames`` new frames (e.g. epsilon annealing); returns what to log."""
        return {}

    def learn(self, batch: TensorDictBase) -> dict[str, float]:
        data = flatten_valid(batch)
        self.buffer.extend(data.select(*TRANSITION_KEYS, strict=False))
        self.frames_seen += data.numel()
        info = {**self.on_frames(data.numel()), "train/buffer_size": float(len(self.buffer))}
        if self.frames_seen < self.start_steps:
            return info
        totals: dict[str, float] = {}
        for _ in range(self.update_every):
            grads, step_info = self.compute_gradients(self.buffer.sample())
            norm = self.apply_gradients(grads)
            self.target_updater.step()
            if norm is not None:
                step_info["grad_norm"] = norm
            for k, v in step_info.items():
                totals[k] = totals.get(k, 0.0) + v / self.update_every
        return {**info, **totals}

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["buffer"] = self.buffer.state_dict()
        state["frames_seen"] = self.frames_seen
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.buffer.load_state_dict(state["buffer"])
        self.frames_seen = int(state["frames_seen"])

"""Batches of whole trajectories (``trajs_per_batch``, torchrl 0.14's meaning).

A collector built with ``trajs_per_batch=k`` still collects batches of
``frames_per_batch`` frames (the polling granularity), and feeds each into a
:class:`TrajectoryBatcher`. The batcher cuts every env row at its episode
ends (``("next", "done")``), joins the pieces of an episode that spans
batches by ``("collector", "traj_ids")``, and holds an episode until it ends.
Once k trajectories are complete, it yields them as one batch of shape
``[k, max_len]``, zero-padded along time, with ``("collector", "mask")``
True on the valid steps, as torchrl's ``"padded"`` layout. Trajectories are
served in the order they completed; those completing in the same batch in
the order of their trajectory ids.

Frame budget: ``total_frames`` bounds the frames collected, as in torchrl.
The frames of episodes still running when the budget ends, and of complete
trajectories fewer than k at that point, are collected but never yielded.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from tensordict import TensorDictBase

from fleetrl.keys import DONE_KEY, MASK_KEY, TRAJ_IDS_KEY

__all__ = ["TrajectoryBatcher"]


class TrajectoryBatcher:
    """Assembles whole trajectories from rollout batches and serves them ``k`` at a time.

    Args:
        trajs_per_batch: trajectories per served batch (k).

    Keyword Args:
        drop_partial: forget the episodes still running after each batch (a
            collector that resets its envs at each batch never continues them).
    """

    def __init__(self, trajs_per_batch: int, *, drop_partial: bool = False):
        self.trajs_per_batch = trajs_per_batch
        self.drop_partial = drop_partial
        self._partial: dict[int, list[TensorDictBase]] = {}
        self._complete: list[TensorDictBase] = []

    @property
    def ready(self) -> bool:
        """Whether a batch of ``trajs_per_batch`` complete trajectories can be served."""
        return len(self._complete) >= self.trajs_per_batch

    @property
    def held_frames(self) -> int:
        """Frames held: complete trajectories not yet served and episodes still running."""
        running = sum(piece.shape[0] for pieces in self._partial.values() for piece in pieces)
        return running + sum(t.shape[0] for t in self._complete)

    def add(self, batch: TensorDictBase) -> None:
        """Take a rollout batch ``[*env_batch, time]`` (a mask's False steps are left out)."""
        steps = batch.shape[-1]
        has_mask = MASK_KEY in batch.keys(include_nested=True)
        rows = batch.exclude(MASK_KEY) if has_mask else batch
        rows = rows.reshape(-1, steps)
        rows.names = None
        done = rows.get(DONE_KEY).reshape(rows.shape[0], steps).numpy()
        traj_ids = rows.get(TRAJ_IDS_KEY).numpy()
        valid = (
            batch.get(MASK_KEY).reshape(-1, steps).sum(-1).numpy()
            if has_mask
            else np.full(rows.shape[0], steps)
        )
        ended: list[tuple[int, TensorDictBase]] = []
        # one pass per env row and per episode end: the batch is cut, never copied step by step
        for r in range(rows.shape[0]):
            length = int(valid[r])
            start = 0
            for end in np.flatnonzero(done[r, :length]).tolist():
                tid = int(traj_ids[r, start])
                pieces = self._partial.pop(tid, [])
                pieces.append(rows[r, start : end + 1])
                ended.append((tid, pieces[0] if len(pieces) == 1 else torch.cat(pieces, 0)))
                start = end + 1
            if start < length:
                self._partial.setdefault(int(traj_ids[r, start]), []).append(rows[r, start:length])
        ended.sort(key=lambda item: item[0])  # same batch: by trajectory id, as torchrl
        self._complete.extend(traj for _, traj in ended)
        if self.drop_partial:
            self._partial.clear()

    def next_batch(self, next_frames: Callable[[], TensorDictBase | None]) -> TensorDictBase | None:
        """The next batch of whole trajectories: frames are pulled from ``next_frames`` (a
        collector's frame batches) until enough trajectories have ended; None once it is
        exhausted first."""
        while not self.ready:
            batch = next_frames()
            if batch is None:
                return None
            self.add(batch)
        return self.emit()

    def emit(self) -> TensorDictBase:
        """Serve the oldest ``trajs_per_batch`` complete trajectories: ``[k, max_len]``, padded."""
        k = self.trajs_per_batch
        trajs, self._complete = self._complete[:k], self._complete[k:]
        max_len = max(t.shape[0] for t in trajs)
        # zeros shaped like one step, then each trajectory written into its row
        out = trajs[0][0].unsqueeze(0).unsqueeze(0).expand(k, max_len).clone().zero_()
        mask = torch.zeros(k, max_len, dtype=torch.bool)
        for i, traj in enumerate(trajs):
            length = traj.shape[0]
            out[i, :length] = traj
            mask[i, :length] = True
        out.set(MASK_KEY, mask)
        out.names = [None, "time"]
        return out

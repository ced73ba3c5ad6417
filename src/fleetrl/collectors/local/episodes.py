"""Episode bookkeeping: the episodes in progress, and the episode columns of each batch.

:class:`EpisodeBook` holds, per env, the episode in progress (its trajectory
id, running return and length, and discounted return) and the next free
trajectory id; it fills a batch's episode columns (done, running return and
length, trajectory ids, discounted return) once per batch from the rewards and
episode ends the rollout wrote, with numpy cumulative sums instead of five
writes per step in the hot loop (:func:`episode_columns`,
:func:`discounted_returns`), and saves and restores itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fleetrl.keys import (
    DONE_KEY,
    EPISODE_LENGTH_KEY,
    EPISODE_RETURN_KEY,
    REWARD_KEY,
    TERMINATED_KEY,
    TRAJ_IDS_KEY,
    TRUNCATED_KEY,
    NestedKey,
)

__all__ = ["EpisodeBook", "discounted_returns", "episode_columns"]


class EpisodeBook:
    """The episodes in progress in ``num_envs`` envs, and the trajectory ids they take.

    Args:
        num_envs: envs in the batch.
        traj_id_start: the first trajectory id (a RayCollector gives each worker
            its own range, so ids are unique across workers).
        return_discount: also track each env's running discounted return with
            this discount (what reward scaling takes the variance of); None: off.

    Examples:
        >>> book = EpisodeBook(2, traj_id_start=10)
        >>> book.start_all()
        >>> book.traj_ids.tolist(), book.next_traj_id
        ([10, 11], 12)
    """

    def __init__(self, num_envs: int, traj_id_start: int = 0, return_discount: float | None = None):
        self.num_envs = num_envs
        self.return_discount = return_discount
        self.next_traj_id = traj_id_start
        self.traj_ids = np.zeros(num_envs, dtype=np.int64)
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)
        self.discounted = np.zeros(num_envs, dtype=np.float64)

    def start_all(self) -> None:
        """A new episode in every env (after a full reset), each with a new trajectory id."""
        n = self.num_envs
        self.traj_ids = np.arange(self.next_traj_id, self.next_traj_id + n, dtype=np.int64)
        self.next_traj_id += n
        self.returns = np.zeros(n, dtype=np.float64)
        self.lengths = np.zeros(n, dtype=np.int64)
        self.discounted = np.zeros(n, dtype=np.float64)

    def fill(self, views: dict[NestedKey, np.ndarray]) -> np.ndarray | None:
        """Fill a batch's episode columns in place (see :func:`episode_columns`) and carry
        the episodes on; returns the discounted return at every step (``[N, steps]``
        float64) when tracked, else None."""
        self.returns, self.lengths, self.traj_ids, self.next_traj_id = episode_columns(
            views, self.returns, self.lengths, self.traj_ids, self.next_traj_id
        )
        if self.return_discount is None:
            return None
        g, self.discounted = discounted_returns(
            views[REWARD_KEY][..., 0],
            views[DONE_KEY][..., 0],
            self.discounted,
            self.return_discount,
        )
        return g

    def state_dict(self) -> dict[str, Any]:
        """Tensors and plain values: the next free id, and per env its episode in progress."""
        state: dict[str, Any] = {
            "next_traj_id": self.next_traj_id,
            "traj_ids": torch.from_numpy(self.traj_ids.copy()),
            "episode_return": torch.from_numpy(self.returns.copy()),
            "episode_length": torch.from_numpy(self.lengths.copy()),
        }
        if self.return_discount is not None:
            state["discounted_return"] = torch.from_numpy(self.discounted.copy())
        return state

    def load_state_dict(self, state: dict[str, Any], *, episodes: bool = True) -> None:
        """Restore :meth:`state_dict`; ``episodes=False``: only the next free id (the envs
        were not saved, so their episodes start afresh)."""
        self.next_traj_id = int(state["next_traj_id"])
        if not episodes:
            return
        self.traj_ids = state["traj_ids"].numpy().copy()
        self.returns = state["episode_return"].numpy().copy()
        self.lengths = state["episode_length"].numpy().copy()
        if "discounted_return" in state:  # saved where the collector scales rewards
            self.discounted = state["discounted_return"].numpy().copy()


def episode_columns(
    views: dict[NestedKey, np.ndarray],
    ep_return: np.ndarray,
    ep_length: np.ndarray,
    traj_ids: np.ndarray,
    next_traj_id: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Fill ``("next", "done")``, ``("next", "episode_return")``, ``("next",
    "episode_length")`` and ``("collector", "traj_ids")`` of a batch in place.

    Args:
        views: numpy views of the batch's buffers, ``[N, steps, ...]``, with
            ``("next", "reward" | "terminated" | "truncated")`` written.
        ep_return, ep_length, traj_ids: per env, the episode in progress at the
            batch start (it continues its return, length and trajectory id).
        next_traj_id: the first free trajectory id.

    Returns:
        The same four after the batch, for the next one.
    """
    term = views[TERMINATED_KEY][..., 0]
    done = views[DONE_KEY][..., 0]
    np.logical_or(term, views[TRUNCATED_KEY][..., 0], out=done)
    n, steps = done.shape
    reward = views[REWARD_KEY][..., 0].astype(np.float64)
    tpos = np.arange(steps)
    # index of the last episode end strictly before t (-1: none in this batch)
    ends = np.where(done, tpos, -1)
    prev_end = np.empty_like(ends)
    prev_end[:, 0] = -1
    np.maximum.accumulate(ends[:, :-1], axis=1, out=prev_end[:, 1:])
    started_here = prev_end >= 0
    rows = np.arange(n)[:, None]
    csum = np.cumsum(reward, axis=1)
    base = np.where(started_here, csum[rows, np.maximum(prev_end, 0)], -ep_return[:, None])
    running = csum - base
    views[EPISODE_RETURN_KEY][..., 0] = running
    views[EPISODE_LENGTH_KEY][..., 0] = np.where(
        started_here, tpos - prev_end, tpos + 1 + ep_length[:, None]
    )
    # trajectory ids: segment k >= 1 of row i gets next_id + (segments in rows < i) + k - 1
    segment = np.cumsum(done, axis=1) - done
    ends_per_row = done.sum(axis=1)
    offset = np.concatenate([[0], np.cumsum(ends_per_row)[:-1]]) + next_traj_id
    views[TRAJ_IDS_KEY][:] = np.where(
        segment == 0, traj_ids[:, None], offset[:, None] + segment - 1
    )
    # carry the episodes in progress into the next batch
    last_done = done[:, -1]
    return (
        np.where(last_done, 0.0, running[:, -1]),
        np.where(last_done, 0, views[EPISODE_LENGTH_KEY][:, -1, 0]),
        np.where(ends_per_row > 0, offset + ends_per_row - 1, traj_ids),
        next_traj_id + int(ends_per_row.sum()),
    )


def discounted_returns(
    reward: np.ndarray, done: np.ndarray, carry: np.ndarray, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """Each env's running discounted return ``G_t = gamma * G_{t-1} * (1 - done_{t-1}) + r_t``.

    What reward scaling (:mod:`fleetrl.networks.normalization`) takes the variance of.

    Args:
        reward, done: ``[N, steps]`` of one batch.
        carry: ``G`` of each env after the previous batch (zeros where an episode
            ended there or none ran yet).
        gamma: the discount.

    Returns:
        ``G`` at every step, ``[N, steps]`` float64, and the carry for the next batch.
        One vectorized update per step, after the rollout: about 3 us a step, paid only
        where reward scaling is on.

    Examples:
        >>> g, carry = discounted_returns(
        ...     np.ones((1, 3)), np.array([[False, True, False]]), np.zeros(1), 0.5)
        >>> g.tolist(), carry.tolist()
        ([[1.0, 1.5, 1.0]], [1.0])
    """
    out = np.empty(reward.shape, dtype=np.float64)
    g = carry.astype(np.float64, copy=True)
    for t in range(reward.shape[1]):
        g = g * gamma + reward[:, t]
        out[:, t] = g
        g = np.where(done[:, t], 0.0, g)
    return out, g

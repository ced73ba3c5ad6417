"""Seeding, saving and restoring a :class:`~fleetrl.collectors.SyncDataCollector`.

The collector's ``set_seed``, ``state_dict`` and ``load_state_dict`` call
these functions; they read and write the collector's episode bookkeeping
(trajectory ids, running returns and lengths, the observation and recurrent
state the policy sees next) and its envs' own state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from fleetrl.envs.base import NestedKey

if TYPE_CHECKING:
    from fleetrl.collectors.sync import SyncDataCollector

__all__ = ["collector_state", "load_collector_state", "seed_collector"]


def seed_collector(c: SyncDataCollector, seed: int, static_seed: bool) -> int:
    """Seed the envs, the random-action sampler and torch; returns the next seed, as torchrl's.

    ``static_seed=False``: env i gets ``seed + i`` and the next free seed is
    ``seed + num_envs``. ``static_seed=True``: every env gets ``seed`` (torchrl:
    "the seed is not incremented"), and ``seed`` is returned.
    """
    torch.manual_seed(seed)
    c.env.seed_actions(seed)
    obs = c.env.reset_static(seed) if static_seed else c.env.reset(seed=seed)
    c._reset_episodes(obs)
    return seed if static_seed else seed + c.env.num_envs


def collector_state(c: SyncDataCollector) -> dict[str, Any]:
    """What :meth:`SyncDataCollector.state_dict` returns (tensors and plain values only)."""
    state: dict[str, Any] = {
        "frames": c._frames,
        "next_traj_id": c._next_traj_id,
        "policy_version": c.policy_version,
        "traj_ids": torch.from_numpy(c._traj_ids.copy()),
        "episode_return": torch.from_numpy(c._ep_return.copy()),
        "episode_length": torch.from_numpy(c._ep_length.copy()),
        "obs": [[key, torch.from_numpy(np.array(arr))] for key, arr in c._obs.items()],
        "step_state": [[key, c._step_td.get(key).clone()] for key in c._state_keys],
        "env": c.env.state_dict(),
    }
    if c.return_discount is not None:  # reward scaling's per-env state
        state["discounted_return"] = torch.from_numpy(c._discounted_return.copy())
    if isinstance(c.policy, nn.Module) and c.policy is not c._random_policy:
        state["policy_state_dict"] = c.policy.state_dict()
    return state


def load_collector_state(c: SyncDataCollector, state: dict[str, Any]) -> None:
    """Restore :func:`collector_state`'s counters and weights, and the envs when saved."""
    c._frames = int(state["frames"])
    c._next_traj_id = int(state["next_traj_id"])
    c.policy_version = int(state["policy_version"])
    if "policy_state_dict" in state:
        c.policy.load_state_dict(state["policy_state_dict"])
    if state.get("env") is None:
        return
    c.env.load_state_dict(state["env"])
    c._traj_ids = state["traj_ids"].numpy().copy()
    c._ep_return = state["episode_return"].numpy().copy()
    c._ep_length = state["episode_length"].numpy().copy()
    if "discounted_return" in state:  # saved where the collector scales rewards
        c._discounted_return = state["discounted_return"].numpy().copy()
    c._obs = {_as_key(key): value.numpy().copy() for key, value in state["obs"]}
    for key, arr in c._step_np.items():
        arr[:] = c._obs[key]
    for key, value in state["step_state"]:
        c._step_td.get(_as_key(key)).copy_(value)


def _as_key(key: Any) -> NestedKey:
    """A nested key as saved (a tuple may come back from a checkpoint as a list)."""
    return tuple(key) if isinstance(key, list) else key

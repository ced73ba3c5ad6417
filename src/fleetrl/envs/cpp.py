"""The C++ vector engines' episode boundaries: next-step autoreset, turned into same-step.

ale-py's ``AtariVectorEnv`` and envpool reset an env on the step *after* its
episode ended (next-step autoreset): that step ignores the action and returns
the reset observation, a transition spanning two episodes. :class:`NextStepEnv`
resets the finished envs right after the step that ended them (ALE's
``reset_mask``, envpool's ``reset(env_id)``), so the terminal transition keeps
the episode's last observation as its next observation, the policy's next
input is the reset observation, and no policy step is wasted. The same
reset-rows call serves the collector's own truncation (``max_frames_per_traj``).

The engines step asynchronously too: ``send(action)`` returns at once while
the engine's threads step, ``recv()`` finishes the step (``step`` is the two),
which the overlapped collector uses. :class:`EnvPoolEnv` is envpool's sync
mode (every env answers each call), shared by its Atari and MuJoCo tasks.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np
import torch

from fleetrl.envs.base import BatchedEnv, StepResult
from fleetrl.keys import NestedKey

__all__ = ["EnvPoolEnv", "NextStepEnv", "in_env_order"]


class NextStepEnv(BatchedEnv):
    """A C++ vector env with next-step autoreset, reset right after each episode end.

    Cost per step: the engine's step; when episodes ended, one copy of the batch
    of observations (the engine may reuse its output buffer) and one reset call
    for the finished envs. Subclasses set the spaces and implement the engine's
    three calls; discrete actions are sampled here (continuous engines override
    :meth:`random_action`).
    """

    num_actions: int | None
    _obs: np.ndarray | None = None  # the policy's current input, for reset_envs

    def __init__(
        self,
        num_envs: int,
        observation: tuple[tuple[int, ...], np.dtype],
        action_shape: tuple[int, ...],
        action_dtype: np.dtype,
        num_actions: int | None,
    ):
        self.num_envs = num_envs
        self.batch_shape = torch.Size([num_envs])
        self.observation_spec = {"observation": observation}
        self.action_shape, self.action_dtype = action_shape, action_dtype
        self.num_actions = num_actions
        self._rng = np.random.default_rng()
        self._obs = None

    @abc.abstractmethod
    def _send(self, action: np.ndarray) -> None:
        """Start stepping every env with ``action`` (returns at once; the engine's threads step)."""

    @abc.abstractmethod
    def _recv(self) -> tuple[np.ndarray, ...]:
        """Wait for the step :meth:`_send` started: obs, reward, terminated, truncated, in env order."""

    @abc.abstractmethod
    def _reset_rows(self, mask: np.ndarray) -> np.ndarray:
        """Reset the envs where ``mask`` is True; their observations, in env order."""

    def _actions(self, action: np.ndarray | torch.Tensor) -> np.ndarray:
        """The batch of actions as the engine takes them (discrete: int64 indices)."""
        if isinstance(action, torch.Tensor):
            action = action.numpy()
        return np.ascontiguousarray(action, dtype=np.int64).reshape(self.num_envs)

    def reset_envs(self, mask: np.ndarray) -> dict[NestedKey, np.ndarray]:
        assert self._obs is not None
        obs = self._obs.copy()
        obs[mask] = self._reset_rows(mask)
        self._obs = obs
        return {"observation": obs}

    def step(self, action: np.ndarray | torch.Tensor) -> StepResult:
        self.send(action)
        return self.recv()

    def send(self, action: np.ndarray | torch.Tensor) -> None:
        """Start a step of every env and return at once: the engine's threads step while
        the caller works (the overlapped collector runs the policy on the other half)."""
        self._send(self._actions(action))

    def recv(self) -> StepResult:
        """Finish the step :meth:`send` started, with the episode-boundary handling."""
        next_obs, reward, terminated, truncated = self._recv()
        done = terminated | truncated
        obs = next_obs
        if done.any():
            next_obs = (
                next_obs.copy()
            )  # the final observations, before the reset may reuse the buffer
            obs = next_obs.copy()
            obs[done] = self._reset_rows(done)
        self._obs = obs
        return StepResult(
            {"observation": next_obs},
            {"observation": obs},
            np.asarray(reward, dtype=np.float32),
            np.asarray(terminated, dtype=bool),
            np.asarray(truncated, dtype=bool),
        )

    def cancel(self) -> None:
        """Finish a step in flight and drop it (the engine must not be left mid-step)."""
        self.recv()

    def random_action(self) -> torch.Tensor:
        return torch.from_numpy(self._rng.integers(0, self.num_actions, size=self.num_envs))

    def seed_actions(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)


class EnvPoolEnv(NextStepEnv):
    """envpool in sync mode (every env stepped each call), reset right after each episode end.

    ``seed_offset``: env i is seeded as env ``seed_offset + i`` of a larger batch (the
    overlapped collector's second half), so a batch split in engines plays exactly the
    episodes of the unsplit one. Subclasses build the engine (:meth:`_make`) and set the
    spaces.
    """

    seed_offset: int
    env: Any

    @abc.abstractmethod
    def _make(self, seed: int) -> Any:
        """The envpool engine, env i seeded with ``seed + i``."""

    def _observation(self, obs: np.ndarray) -> np.ndarray:
        """Observations as handed on (MuJoCo: float32)."""
        return obs

    def reset(self, seed: int | None = None) -> dict[NestedKey, np.ndarray]:
        if seed is not None:  # envpool takes its seeds when built
            self.env.close()
            self.env = self._make(seed + self.seed_offset)
        obs, info = self.env.reset()
        self._obs = self._observation(in_env_order(obs, info["env_id"])).copy()
        return {"observation": self._obs}

    def _send(self, action: np.ndarray) -> None:
        self.env.send(action, None)  # None: every env, as the sync mode steps them

    def _recv(self) -> tuple[np.ndarray, ...]:
        obs, reward, terminated, truncated, info = self.env.recv(reset=False, return_info=True)
        ids = info["env_id"]
        obs, reward, terminated, truncated = (
            in_env_order(x, ids) for x in (obs, reward, terminated, truncated)
        )
        return self._observation(obs), reward, terminated, truncated

    def _reset_rows(self, mask: np.ndarray) -> np.ndarray:
        ids = np.flatnonzero(mask).astype(np.int32)
        obs, info = self.env.reset(ids)
        order = np.argsort(info["env_id"], kind="stable")  # rows in the order of ids
        return self._observation(obs[order])

    def close(self) -> None:
        self.env.close()


def in_env_order(x: np.ndarray, env_ids: np.ndarray) -> np.ndarray:
    """Sync mode answers every env; rows are in env order unless envpool says otherwise."""
    if np.array_equal(env_ids, np.arange(len(env_ids))):
        return x
    out = np.empty_like(x)
    out[env_ids] = x
    return out

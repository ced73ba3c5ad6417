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
from fleetrl.errors import EnvError
from fleetrl.keys import OBSERVATION_KEY, NestedKey

__all__ = ["BuiltEnvPool", "EnvPoolEnv", "NextStepEnv", "in_env_order", "is_envpool"]

ENVPOOL_API_MSG = (
    "create_env_fn={value!r} is invalid: fleetrl steps envpool's gymnasium API; build it with "
    "envpool.make(task, env_type='gymnasium', ...) (fleetrl resets its finished envs right "
    "after the step that ended them), or pass AtariEnv(id, engine='envpool') or "
    "MujocoEnv(id, engine='envpool')"
)
ENVPOOL_ASYNC_MSG = (
    "create_env_fn={value!r} is invalid: envpool's async mode (batch_size={batch} < "
    "num_envs={n}) answers only the first envs ready, and fleetrl steps every env each step; "
    "build it with batch_size={n} (or leave batch_size out)"
)
ENVPOOL_SEED_MSG = (
    "set_seed({seed}) cannot reseed an envpool env built by hand: envpool takes its seed when "
    "built (envpool.make(..., seed=S): env i gets S + i); build it with the seed, or pass "
    "AtariEnv(id, engine='envpool') or MujocoEnv(id, engine='envpool'), which fleetrl builds "
    "and seeds"
)


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
        self.observation_spec = {OBSERVATION_KEY: observation}
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
        return {OBSERVATION_KEY: obs}

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
            {OBSERVATION_KEY: next_obs},
            {OBSERVATION_KEY: obs},
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
    #: a Box action space's (low, high), the actions are clipped to (None: discrete)
    _bounds: tuple[np.ndarray, np.ndarray] | None = None
    _to_float32: bool = False

    def _init_spaces(self, num_envs: int) -> None:
        """Read the spaces of the engine in ``self.env``: ``float64`` observations are handed
        on as ``float32``; a Discrete action space gives int64 indices, a Box its bounds."""
        import gymnasium as gym

        obs_space, act_space = self.env.observation_space, self.env.action_space
        self._to_float32 = obs_space.dtype == np.float64
        obs_dtype = np.dtype(np.float32) if self._to_float32 else np.dtype(obs_space.dtype)
        if isinstance(act_space, gym.spaces.Discrete):
            shape, dtype, num_actions = (), np.dtype(np.int64), int(act_space.n)
        else:
            shape, dtype, num_actions = tuple(act_space.shape), np.dtype(act_space.dtype), None
            self._bounds = (act_space.low, act_space.high)
        super().__init__(num_envs, (tuple(obs_space.shape), obs_dtype), shape, dtype, num_actions)

    @abc.abstractmethod
    def _make(self, seed: int) -> Any:
        """The envpool engine, env i seeded with ``seed + i``."""

    @property
    def action_bounds(self) -> tuple[np.ndarray, np.ndarray] | None:
        if self._bounds is None:
            return None
        return self._bounds[0].astype(np.float32), self._bounds[1].astype(np.float32)

    def _observation(self, obs: np.ndarray) -> np.ndarray:
        """Observations as handed on (``float64`` ones as ``float32``)."""
        return obs.astype(np.float32) if self._to_float32 else obs

    def _actions(self, action: np.ndarray | torch.Tensor) -> np.ndarray:
        """Discrete: int64 indices; continuous: clipped to the bounds (the batch keeps the
        policy's sample). One small clip per step: ``[N, action_dim]``."""
        if self._bounds is None:
            return super()._actions(action)
        if isinstance(action, torch.Tensor):
            action = action.numpy()
        action = np.asarray(action, dtype=self.action_dtype)
        return np.clip(action.reshape(self.num_envs, *self.action_shape), *self._bounds)

    def random_action(self) -> torch.Tensor:
        if self._bounds is None:
            return super().random_action()
        low, high = self._bounds
        sample = self._rng.uniform(low, high, size=(self.num_envs, *self.action_shape))
        return torch.from_numpy(sample.astype(np.float32))

    def reset(self, seed: int | None = None) -> dict[NestedKey, np.ndarray]:
        if seed is not None:  # envpool takes its seeds when built
            self.env.close()
            self.env = self._make(seed + self.seed_offset)
        obs, info = self.env.reset()
        self._obs = self._observation(in_env_order(obs, info["env_id"])).copy()
        return {OBSERVATION_KEY: self._obs}

    def _send(self, action: np.ndarray) -> None:
        self.env.send(action, None)  # None: every env, as the sync mode steps them

    def _recv(self) -> tuple[np.ndarray, ...]:
        obs, reward, terminated, truncated, info = self.env.recv(reset=False, return_info=True)
        ids = info["env_id"]
        obs, reward, terminated, truncated = (
            in_env_order(x, ids) for x in (obs, reward, terminated, truncated)
        )
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool) & ~terminated  # never both
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


def is_envpool(obj: Any) -> bool:
    """Whether ``obj`` is an envpool env (any API), without importing envpool."""
    return any(c.__module__.split(".")[0] == "envpool" for c in type(obj).__mro__)


class BuiltEnvPool(EnvPoolEnv):
    """An envpool env a user built (``envpool.make(task, env_type="gymnasium")``) in sync
    mode: stepped as fleetrl's own envpool engines are, each finished env reset right after
    the step that ended them.

    Observations of ``float64`` become ``float32``; continuous actions are clipped to the
    action bounds (the batch keeps the policy's sample). It cannot be reseeded (envpool
    takes its seed when built): :meth:`reset` with a seed is refused with the fix.

    Raises:
        EnvError: another API than gymnasium's, or the async mode.
    """

    def __init__(self, env: Any):
        import gymnasium as gym

        if not isinstance(env, gym.Env):  # the dm_env API
            raise EnvError(ENVPOOL_API_MSG.format(value=env))
        n, batch = int(env.config["num_envs"]), int(env.config["batch_size"])
        if batch != n:
            raise EnvError(ENVPOOL_ASYNC_MSG.format(value=env, batch=batch, n=n))
        self.env, self.seed_offset = env, 0
        self._init_spaces(n)

    def _make(self, seed: int) -> Any:
        raise EnvError(ENVPOOL_SEED_MSG.format(seed=seed))

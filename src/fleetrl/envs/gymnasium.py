"""gymnasium vector envs with same-step autoreset: the fast path of :func:`fleetrl.envs.make_env`.

A finished env is reset inside the same ``step`` call and gymnasium hands back
its final observation in ``infos["final_obs"]``; :class:`GymVectorEnv` returns
that as the transition's next observation and the reset observation as what
the policy sees next. No transition ever spans two episodes.

``float64`` observations (MuJoCo's) become ``float32`` at the env boundary, the
dtype of the networks and half the bytes in batches and replay buffers;
continuous (Box) actions are clipped to the action space there, as CleanRL's
``ClipAction`` wrapper does: the policy's unclipped sample is what the batch
stores, so its log-probability stays exact.

Discrete actions are 0-based indices in every batch, whatever the space's
``start``: ``Discrete(3, start=-1)`` is stored as 0, 1, 2 (what a Categorical,
one-hot or Q-value policy writes, and what torchrl's specs say), and the env
receives ``index + start`` (-1, 0, 1). ``MultiDiscrete`` likewise, per
component. Random actions are stored the same way.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from fleetrl.envs.base import BatchedEnv, StepResult
from fleetrl.envs.state import load_vector_env_state, vector_env_state
from fleetrl.errors import EnvError
from fleetrl.keys import NestedKey

__all__ = ["GymVectorEnv", "action_start", "make_gym_vector_env", "space_spec"]

UNKNOWN_ID_MSG = (
    "create_env_fn={value!r} is not a registered gymnasium id ({err}); "
    "check the spelling or import the package that registers it"
)
NEXT_STEP_MSG = (
    "create_env_fn: the gymnasium VectorEnv {value!r} uses autoreset_mode=NEXT_STEP, which makes a "
    "bogus transition across every episode end; build it with "
    "vector_kwargs={{'autoreset_mode': gymnasium.vector.AutoresetMode.SAME_STEP}} (or DISABLED), "
    "or pass the env id and num_envs instead"
)
SPACE_MSG = (
    "create_env_fn: {which} space {space!r} is not supported on the gymnasium fast path "
    "(Box, Discrete, MultiDiscrete, MultiBinary are); wrap the env in torchrl's GymWrapper "
    "to use torchrl's spec conversion"
)


def space_spec(space: gym.Space, which: str) -> tuple[tuple[int, ...], np.dtype, int | None]:
    if isinstance(space, gym.spaces.Discrete):
        return (), np.dtype(np.int64), int(space.n)
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return tuple(space.shape), np.dtype(space.dtype), None
    raise EnvError(SPACE_MSG.format(which=which, space=space))


def action_start(space: gym.Space) -> np.ndarray | None:
    """The first value of a ``Discrete`` or ``MultiDiscrete`` space (per component), or None
    where it is 0 (or the space is not discrete).

    Examples:
        >>> action_start(gym.spaces.Discrete(3, start=-1))
        array(-1)
        >>> action_start(gym.spaces.MultiDiscrete([3, 2], start=[1, 0]))
        array([1, 0])
        >>> action_start(gym.spaces.Discrete(3)) is None
        True
    """
    if not isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return None
    start = np.asarray(space.start, dtype=np.int64)
    return start if start.any() else None


class GymVectorEnv(BatchedEnv):
    """A gymnasium vector env with same-step autoreset (the fast path).

    Cost per step: the env's own step plus one masked copy of the final
    observations when an episode ended; nothing is allocated otherwise.
    """

    def __init__(self, env: gym.vector.VectorEnv):
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if mode == AutoresetMode.NEXT_STEP:
            raise EnvError(NEXT_STEP_MSG.format(value=env))
        self.env = env
        self._manual_reset = mode == AutoresetMode.DISABLED
        self.num_envs = int(env.num_envs)
        self.batch_shape = torch.Size([self.num_envs])
        obs_shape, obs_dtype, _ = space_spec(env.single_observation_space, "observation")
        #: float64 observations (MuJoCo's) are handed on as float32
        self._to_float32 = obs_dtype == np.float64
        if self._to_float32:
            obs_dtype = np.dtype(np.float32)
        self.observation_spec = {"observation": (obs_shape, obs_dtype)}
        self.action_shape, self.action_dtype, self.num_actions = space_spec(
            env.single_action_space, "action"
        )
        space = env.single_action_space
        #: what a 0-based index is moved by on its way to the env (None: the space starts at 0)
        self._action_start = action_start(space)
        #: Box action bounds the actions are clipped to (None: discrete, or unbounded)
        self._action_bounds = None
        if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
            low, high = space.low, space.high
            if np.isfinite(low).any() or np.isfinite(high).any():
                self._action_bounds = (low.astype(space.dtype), high.astype(space.dtype))

    @property
    def action_bounds(self) -> tuple[np.ndarray, np.ndarray] | None:
        space = self.env.single_action_space
        if isinstance(space, gym.spaces.Box):
            return space.low, space.high
        return None

    def _obs(self, obs: np.ndarray) -> np.ndarray:
        return obs.astype(np.float32) if self._to_float32 else obs

    def reset(self, seed: int | None = None) -> dict[NestedKey, np.ndarray]:
        obs, _ = self.env.reset(seed=seed)
        return {"observation": self._obs(obs)}

    def reset_envs(self, mask: np.ndarray) -> dict[NestedKey, np.ndarray]:
        obs, _ = self.env.reset(options={"reset_mask": mask})
        return {"observation": self._obs(obs)}

    def reset_static(self, seed: int) -> dict[NestedKey, np.ndarray]:
        obs, _ = self.env.reset(seed=[seed] * self.num_envs)  # gymnasium: one seed per env
        return {"observation": self._obs(obs)}

    def step(self, action: np.ndarray | torch.Tensor) -> StepResult:
        if isinstance(action, torch.Tensor):
            action = action.numpy()
        if self._action_bounds is not None:  # one small clip per step: [N, action_dim]
            action = np.clip(action, *self._action_bounds)
        elif self._action_start is not None:  # 0-based indices -> the env's own values
            action = action + self._action_start
        obs, reward, terminated, truncated, infos = self.env.step(action)
        obs = self._obs(obs)
        next_obs = obs
        if self._manual_reset:
            done = terminated | truncated
            if done.any():
                obs = self.reset_envs(done)["observation"]
        elif "_final_obs" in infos:
            # gymnasium hands the final observations as an object array; copy only
            # the finished rows into a fresh array (obs holds the reset ones).
            next_obs = obs.copy()
            ended = np.flatnonzero(infos["_final_obs"])
            next_obs[ended] = np.stack(infos["final_obs"][ended])  # cast as it is written
        return StepResult(
            {"observation": next_obs}, {"observation": obs}, reward, terminated, truncated
        )

    def random_action(self) -> torch.Tensor:
        sample = self.env.action_space.sample()
        if self._action_start is not None:  # stored as the policy's would be: 0-based
            sample = sample - self._action_start
        return torch.as_tensor(sample)

    def seed_actions(self, seed: int) -> None:
        self.env.action_space.seed(seed)

    def state_dict(self) -> dict[str, Any] | None:
        # classic-control envs under gymnasium's default wrappers in a SyncVectorEnv
        return vector_env_state(self.env)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_vector_env_state(self.env, state)

    def close(self) -> None:
        self.env.close()


def make_gym_vector_env(env_id: str, num_envs: int, **kwargs: Any) -> gym.vector.VectorEnv:
    """Build a gymnasium sync vector env with same-step autoreset."""
    try:
        gym.spec(env_id)
    except gym.error.Error as err:
        raise EnvError(UNKNOWN_ID_MSG.format(value=env_id, err=err)) from None
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        **kwargs,
    )

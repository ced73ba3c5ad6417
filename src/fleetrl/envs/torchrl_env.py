"""torchrl envs (``EnvBase``: ``GymEnv``, ``TransformedEnv``, batched and parallel envs) as a :class:`BatchedEnv`.

Stepped with ``step_and_maybe_reset``, so torchrl's own partial-reset logic
applies. Slower than the gymnasium path (torchrl builds TensorDicts per step)
but runs everything torchrl runs.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch
import torchrl  # noqa: F401 - its process settings, as when is_torchrl_env imported torchrl.envs
from tensordict import TensorDict

from fleetrl.envs.base import BatchedEnv, StepResult
from fleetrl.keys import DONE_KEY, REWARD_KEY, TERMINATED_KEY, TRUNCATED_KEY, NestedKey

__all__ = ["TorchRLEnv", "is_torchrl_env"]


class TorchRLEnv(BatchedEnv):
    """Any torchrl ``EnvBase``, stepped with ``step_and_maybe_reset``.

    Slower than the gymnasium path (torchrl builds TensorDicts per step) but
    runs everything torchrl runs: transforms, batched and parallel envs.
    """

    def __init__(self, env: Any, *, unbatched_copies: bool = False):
        self.env = env
        self.batch_shape = torch.Size(env.batch_size)
        self.num_envs = max(1, self.batch_shape.numel())
        self.unbatched_copies = unbatched_copies or self.batch_shape == torch.Size([])
        self._obs_keys = [k for k in env.full_observation_spec.keys(True, True)]
        self.observation_spec = {}
        for key in self._obs_keys:
            spec = env.full_observation_spec[key]
            shape = tuple(spec.shape[len(self.batch_shape) :])
            self.observation_spec[key] = (shape, _np_dtype(spec.dtype))
        action_spec = env.full_action_spec[env.action_key]
        self.action_shape = tuple(action_spec.shape[len(self.batch_shape) :])
        self.action_dtype = _np_dtype(action_spec.dtype)
        n = getattr(action_spec, "n", None)  # Categorical and OneHot specs carry n
        self.num_actions = int(n) if n is not None else None
        self._action_key = env.action_key
        self._td: TensorDict | None = None
        self._rng: torch.Generator | None = None

    @property
    def action_bounds(self) -> tuple[np.ndarray, np.ndarray] | None:
        spec = self.env.full_action_spec[self._action_key]
        space = getattr(spec, "space", None)
        if self.num_actions is not None or not hasattr(space, "low"):
            return None
        n = len(self.batch_shape)
        low, high = space.low, space.high
        return low.reshape(-1, *low.shape[n:])[0].cpu().numpy(), high.reshape(-1, *high.shape[n:])[
            0
        ].cpu().numpy()

    def _obs(self, td: TensorDict) -> dict[NestedKey, np.ndarray]:
        return {
            k: td.get(k).reshape(self.num_envs, *self.observation_spec[k][0]).cpu().numpy()
            for k in self._obs_keys
        }

    def reset(self, seed: int | None = None) -> dict[NestedKey, np.ndarray]:
        if seed is not None:
            self.env.set_seed(seed)
        self._td = self.env.reset()
        return self._obs(self._td)

    def reset_static(self, seed: int) -> dict[NestedKey, np.ndarray]:
        self.env.set_seed(seed, static_seed=True)
        self._td = self.env.reset()
        return self._obs(self._td)

    def reset_envs(self, mask: np.ndarray) -> dict[NestedKey, np.ndarray]:
        assert self._td is not None
        reset = torch.as_tensor(mask, device=self.env.device).reshape((*self.batch_shape, 1))
        td = self._td.clone()
        td.set("_reset", reset)
        out = self.env.reset(td)
        # rows not reset keep their observation
        self._td = out
        return self._obs(out)

    def step(self, action: np.ndarray | torch.Tensor) -> StepResult:
        assert self._td is not None
        action = torch.as_tensor(action, device=self.env.device)
        td = self._td
        td.set(self._action_key, action.reshape(tuple(self.batch_shape) + tuple(action.shape[1:])))
        out, self._td = self.env.step_and_maybe_reset(td)
        nxt = out.get("next")
        n = self.num_envs
        done_like = out.get(TERMINATED_KEY, None)
        if done_like is None:
            done_like = out.get(DONE_KEY)
        truncated = out.get(TRUNCATED_KEY, None)
        if truncated is None:
            truncated = torch.zeros_like(done_like)
        terminated = done_like.reshape(n).cpu().numpy()
        return StepResult(
            next_obs=self._obs(nxt),
            obs=self._obs(self._td),
            reward=out.get(REWARD_KEY).reshape(n).cpu().numpy(),
            terminated=terminated,
            truncated=truncated.reshape(n).cpu().numpy() & ~terminated,  # never both
        )

    def random_action(self) -> torch.Tensor:
        a = self.env.full_action_spec[self._action_key].rand()
        return a.reshape((self.num_envs, *a.shape[len(self.batch_shape) :])).cpu()

    def seed_actions(self, seed: int) -> None:
        torch.manual_seed(seed)  # torchrl specs sample from torch's global generator

    def close(self) -> None:
        if not self.env.is_closed:
            self.env.close()


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty((), dtype=dtype).numpy().dtype


def is_torchrl_env(obj: Any) -> bool:
    """Whether ``obj`` is a torchrl ``EnvBase``.

    Asked without importing torchrl.envs, which loads all of torchrl.envs, .data and
    .modules (36 MB in each collector worker): an ``EnvBase`` exists only once it is loaded.
    """
    common = sys.modules.get("torchrl.envs.common")
    env_base = getattr(common, "EnvBase", None)
    return env_base is not None and isinstance(obj, env_base)

"""Small deterministic envs that make collector tests exact.

``CountingEnv``: the observation is the step count within the episode (reset
gives 0, step k gives k), the reward is ``1 + action``, and the episode ends
after ``length`` steps, by termination or by truncation. So the final
observation of an episode is ``length`` and the reset observation is 0: a
leaked reset observation is visible at once.
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np


class CountingEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(
        self,
        length: int = 5,
        truncate: bool = False,
        sleep: float = 0.0,
        fail_at_step: int | None = None,
    ):
        self.length, self.truncate, self.sleep = length, truncate, sleep
        self.fail_at_step = fail_at_step
        self.observation_space = gym.spaces.Box(0, 1e6, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0
        self.total_steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action):
        if self.sleep:
            time.sleep(self.sleep)
        self.t += 1
        self.total_steps += 1
        if self.fail_at_step is not None and self.total_steps >= self.fail_at_step:
            raise RuntimeError(f"CountingEnv exploded at step {self.total_steps}")
        end = self.t >= self.length
        terminated, truncated = (False, end) if self.truncate else (end, False)
        return (
            np.array([float(self.t)], dtype=np.float32),
            1.0 + float(action),
            terminated,
            truncated,
            {},
        )


def counting_vec(lengths: list[int], truncate: list[bool] | None = None) -> gym.vector.VectorEnv:
    truncate = truncate or [False] * len(lengths)
    fns = [lambda n=n, tr=tr: CountingEnv(n, tr) for n, tr in zip(lengths, truncate)]
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)

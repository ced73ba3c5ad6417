"""The Atari engines: episode boundaries, preprocessing parity, configs, Ray workers.

Real ALE games in each engine (gymnasium, ale-py's vector env, envpool), a few
envs and a few hundred agent steps each.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fleetrl import RayCollector, SyncDataCollector, make_env
from fleetrl.config import AtariConfig, EnvEngine
from fleetrl.envs.atari import (
    AtariEnv,
)

ENGINES = [e.value for e in EnvEngine]
try:
    import envpool  # noqa: F401  (no wheel outside Linux x86_64: pyproject's marker)

    HAVE_ENVPOOL = True
except ImportError:
    HAVE_ENVPOOL = False
needs_envpool = pytest.mark.skipif(not HAVE_ENVPOOL, reason="envpool is not installed here")


def _engines(*names: str) -> list:
    return [pytest.param(n, marks=needs_envpool) if n == "envpool" else n for n in names]


LIMIT = 180  # agent steps before truncation in the boundary test


def _collect(spec: AtariEnv, num_envs: int, steps: int, seed: int = 0):
    with SyncDataCollector(
        spec,
        None,  # uniformly random actions
        frames_per_batch=num_envs * steps,
        total_frames=num_envs * steps,
        num_envs=num_envs,
    ) as collector:
        collector.set_seed(seed)
        (batch,) = list(collector)
    return batch


def _is_reset_stack(stack: torch.Tensor) -> bool:
    """A new episode's stack repeats its first frame (every engine pads so)."""
    return bool((stack == stack[-1:]).all())


def _frames(engine: str, actions: np.ndarray):
    atari = AtariConfig(max_episode_frames=4 * 50, noop_max=0, repeat_action_probability=0.0)
    env = make_env(AtariEnv("ALE/Pong-v5", engine, atari, num_threads=1), num_envs=2)
    try:
        obs = [env.reset(seed=3)["observation"]]
        nxt, rewards, ends = [], [], []
        for action in actions:
            step = env.step(action)
            obs.append(step.obs["observation"])
            nxt.append(step.next_obs["observation"])
            rewards.append(step.reward)
            ends.append((step.terminated, step.truncated))
        return np.stack(obs), np.stack(nxt), np.stack(rewards), np.array(ends)
    finally:
        env.close()


@pytest.mark.parametrize("engine", _engines("ale_vector", "envpool"))
def test_ray_workers_build_the_engine(ray_session, engine):
    spec = AtariEnv("ALE/Pong-v5", engine, AtariConfig(max_episode_frames=4 * 10), num_threads=1)
    with RayCollector(
        spec,
        None,
        frames_per_batch=48,
        total_frames=48,
        num_collectors=1,
        num_workers_per_collector=2,
    ) as collector:
        (batch,) = list(collector)
    assert batch.numel() == 48
    assert batch["observation"].dtype == torch.uint8  # uint8 across Ray too
    assert batch["observation"].shape[-3:] == (4, 84, 84)
    truncated = batch["next", "truncated"][..., 0]
    assert int(truncated.sum()) == 4  # 2 envs x 24 steps: ends at steps 10 and 20

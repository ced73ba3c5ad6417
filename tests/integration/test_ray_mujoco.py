"""The MuJoCo engines: exact episode boundaries on Hopper, dtypes, action clipping, configs.

Hopper-v5 with the reset noise off starts every episode in the same state, so a
single gymnasium env driven by the same deterministic policy is the reference:
each engine's transitions must be its transitions, the terminal next
observation its real last state, and the next episode its reset state.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from fleetrl import MujocoEnv, RayCollector

HAVE_ENVPOOL = importlib.util.find_spec("envpool") is not None
needs_envpool = pytest.mark.skipif(not HAVE_ENVPOOL, reason="envpool is not installed here")


@needs_envpool
def test_ray_workers_build_envpool_mujoco(ray_session):
    spec = MujocoEnv("HalfCheetah-v5", "envpool", max_episode_steps=10, num_threads=1)
    with RayCollector(
        spec,
        None,
        frames_per_batch=48,
        total_frames=48,
        num_collectors=1,
        num_workers_per_collector=2,
    ) as collector:
        (batch,) = list(collector)
    assert batch.numel() == 48 and batch["observation"].dtype == torch.float32
    assert batch["action"].shape[-1] == 6
    assert int(batch["next", "truncated"].sum()) == 4  # 2 envs x 24 steps: ends at 10 and 20
    assert not batch["next", "terminated"].any()  # HalfCheetah never falls

"""The MuJoCo engines: exact episode boundaries on Hopper, dtypes, action clipping, configs.

Hopper-v5 with the reset noise off starts every episode in the same state, so a
single gymnasium env driven by the same deterministic policy is the reference:
each engine's transitions must be its transitions, the terminal next
observation its real last state, and the next episode its reset state.
"""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn

from fleetrl import MujocoEnv, RayCollector, SyncDataCollector

HAVE_ENVPOOL = importlib.util.find_spec("envpool") is not None
needs_envpool = pytest.mark.skipif(not HAVE_ENVPOOL, reason="envpool is not installed here")
ENGINES = ["gymnasium", pytest.param("envpool", marks=needs_envpool)]
NO_NOISE = {"reset_noise_scale": 0.0}
STEPS = 120  # per env in a boundary test


def _policy() -> nn.Module:
    """A fixed linear policy that makes Hopper fall within a few dozen steps."""
    torch.manual_seed(3)
    net = nn.Sequential(nn.Linear(11, 3), nn.Tanh())
    with torch.no_grad():
        net[0].weight.mul_(4.0)
    return net


def _reference(net: nn.Module, limit: int) -> tuple[list[np.ndarray], bool, np.ndarray]:
    """One gymnasium Hopper episode under ``net``: observations, terminated, the reset obs."""
    env = gym.make("Hopper-v5", max_episode_steps=limit, **NO_NOISE)
    obs, _ = env.reset(seed=0)
    first = obs.astype(np.float32)
    seen = [first]
    while True:
        with torch.no_grad():
            action = net(torch.as_tensor(seen[-1])).numpy()
        obs, _, terminated, truncated, _ = env.step(action)
        seen.append(obs.astype(np.float32))
        if terminated or truncated:
            env.close()
            return seen, bool(terminated), first


def _collect(spec: MujocoEnv, net: nn.Module):
    policy = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
    with SyncDataCollector(
        spec, policy, frames_per_batch=2 * STEPS, total_frames=2 * STEPS, num_envs=2
    ) as collector:
        collector.set_seed(0)
        (batch,) = list(collector)
    return batch


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

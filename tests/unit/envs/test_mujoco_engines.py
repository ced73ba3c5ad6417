"""The MuJoCo engines: exact episode boundaries on Hopper, dtypes, action clipping, configs.

Hopper-v5 with the reset noise off starts every episode in the same state, so a
single gymnasium env driven by the same deterministic policy is the reference:
each engine's transitions must be its transitions, the terminal next
observation its real last state, and the next episode its reset state.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn

from fleetrl import ConfigError, MujocoEnv, SyncDataCollector, make_env
from fleetrl.envs.atari import NOT_ENVPOOL_ID_MSG
from fleetrl.envs.gymnasium import GymVectorEnv
from fleetrl.envs.make import create_env_fn
from fleetrl.envs.mujoco import (
    ENVPOOL_MUJOCO_MSG,
    MUJOCO_ENGINE_MSG,
    NOT_MUJOCO_ID_MSG,
    EnvPoolMujocoEnv,
)
from fleetrl.envs.probe import env_spec
from fleetrl.setup.load import config_from_dict

try:
    import envpool

    HAVE_ENVPOOL = True
except ImportError:
    HAVE_ENVPOOL = False
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


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("ending", ["terminated", "truncated"])
def test_hopper_episode_boundaries_exact(engine, ending):
    net = _policy()
    fall, fell, reset_obs = _reference(net, 1000)
    assert fell and len(fall) - 1 < STEPS // 2  # the robot falls: two episodes per row
    # truncation: a time limit a few steps before the fall
    limit = 1000 if ending == "terminated" else len(fall) - 1 - 5
    ref, terminated_ref, _ = _reference(net, limit)
    assert terminated_ref == (ending == "terminated")
    length = len(ref) - 1
    batch = _collect(MujocoEnv("Hopper-v5", engine, limit, env_kwargs=NO_NOISE), net)

    obs, nxt = batch["observation"], batch["next", "observation"]
    assert obs.dtype == nxt.dtype == torch.float32 and obs.shape == (2, STEPS, 11)
    terminated = batch["next", "terminated"][..., 0]
    truncated = batch["next", "truncated"][..., 0]
    ends = terminated if ending == "terminated" else truncated
    expected = torch.zeros(STEPS, dtype=torch.bool)
    expected[length - 1 :: length] = True  # every episode is the reference episode
    for row in range(2):
        assert torch.equal(ends[row], expected)
        assert not (terminated[row] & truncated[row]).any()
        assert not (terminated if ending == "truncated" else truncated)[row].any()
        for t in range(STEPS):
            k = t % length  # step within the episode
            torch.testing.assert_close(obs[row, t], torch.from_numpy(ref[k]), atol=1e-5, rtol=0)
            # the terminal next observation is the real last state, not the reset one
            torch.testing.assert_close(nxt[row, t], torch.from_numpy(ref[k + 1]), atol=1e-5, rtol=0)
    # the next episode starts in the reset state
    torch.testing.assert_close(obs[0, length], torch.from_numpy(reset_obs), atol=0, rtol=0)


@pytest.mark.parametrize("engine", ENGINES)
def test_actions_are_clipped_at_the_env_and_stored_unclipped(engine):
    """A policy asking for 5x the bounds: the env gets the bound (its reward says so), the
    batch keeps what the policy wrote, so its log-probability stays exact."""

    class Big(nn.Module):
        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return torch.full((*obs.shape[:-1], 3), 5.0)

    policy = TensorDictModule(Big(), in_keys=["observation"], out_keys=["action"])
    spec = MujocoEnv("Hopper-v5", engine, env_kwargs=NO_NOISE)
    with SyncDataCollector(spec, policy, frames_per_batch=2, total_frames=2) as collector:
        collector.set_seed(0)
        (batch,) = list(collector)
    assert torch.equal(batch["action"], torch.full((1, 2, 3), 5.0))
    env = gym.make("Hopper-v5", **NO_NOISE)
    env.reset(seed=0)
    _, r1, *_ = env.step(np.ones(3, dtype=np.float32))  # the clipped action
    _, r2, *_ = env.step(np.ones(3, dtype=np.float32))
    torch.testing.assert_close(
        batch["next", "reward"][0, :, 0], torch.tensor([r1, r2], dtype=torch.float32)
    )


def test_spaces_and_kwargs():
    gym_env = make_env("Hopper-v5", 2)
    assert isinstance(gym_env, GymVectorEnv)
    assert gym_env.observation_spec == {"observation": ((11,), np.dtype(np.float32))}
    assert gym_env.reset(seed=0)["observation"].dtype == np.float32
    gym_env.close()
    info = env_spec("HalfCheetah-v5")
    assert (info.obs_dim, info.action_dim, info.discrete) == (17, 6, False)
    assert torch.equal(info.action_low, -torch.ones(6))
    if HAVE_ENVPOOL:
        env = make_env("HalfCheetah-v5", 3, {"engine": "envpool", "num_threads": 1})
        assert isinstance(env, EnvPoolMujocoEnv)
        assert env.observation_spec == {"observation": ((17,), np.dtype(np.float32))}
        assert (env.action_shape, env.num_actions) == ((6,), None)
        assert env.reset(seed=1)["observation"].shape == (3, 17)
        action = env.random_action()
        assert action.shape == (3, 6) and action.dtype == torch.float32
        assert bool((action.abs() <= 1).all())
        env.close()
        pool_info = env_spec(MujocoEnv("HalfCheetah-v5", "envpool"))
        assert (pool_info.obs_shape, pool_info.action_dim) == ((17,), 6)


def test_config_engine_for_mujoco_ids():
    cfg = config_from_dict({"algorithm": "ppo", "env": {"id": "Hopper-v5"}})
    assert create_env_fn(cfg.env) == "Hopper-v5"  # the gymnasium engine: the id, as any env
    bad = [
        ({"id": "Hopper-v5", "engine": "ale_vector"}, MUJOCO_ENGINE_MSG),
        ({"id": "Pendulum-v1", "engine": "envpool"}, NOT_ENVPOOL_ID_MSG),
    ]
    for env, msg in bad:
        with pytest.raises(ConfigError) as err:
            config_from_dict({"algorithm": "ppo", "env": env})
        expected = msg.format(
            prefix="env.",
            engine=env["engine"],
            id_key="env.id",
            env_id=env["id"],
            allowed="'gymnasium' or 'envpool'",
        )
        assert expected in str(err.value)
    with pytest.raises(ConfigError, match="env_id='CartPole-v1' is invalid: MujocoEnv takes"):
        MujocoEnv("CartPole-v1")
    assert NOT_MUJOCO_ID_MSG.startswith("env_id={value!r} is invalid")


@needs_envpool
def test_config_envpool_mujoco(monkeypatch):
    cfg = config_from_dict(
        {"algorithm": "sac", "env": {"id": "Walker2d-v5", "engine": "envpool"}},
        ["env.max_episode_steps=50"],
    )
    assert create_env_fn(cfg.env) == MujocoEnv("Walker2d-v5", "envpool", 50)
    # an id envpool lacks is refused naming the key, the value and the tasks it has
    monkeypatch.setattr(envpool, "list_all_envs", lambda: ["Hopper-v5", "Ant-v5"])
    with pytest.raises(ConfigError) as err:
        config_from_dict({"algorithm": "ppo", "env": {"id": "Walker2d-v5", "engine": "envpool"}})
    assert ENVPOOL_MUJOCO_MSG.format(
        prefix="env.",
        id_key="env.id",
        env_id="Walker2d-v5",
        version=envpool.__version__,
        tasks="Hopper-v5, Ant-v5",
    ) in str(err.value)

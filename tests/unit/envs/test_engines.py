"""The Atari engines: episode boundaries, preprocessing parity, configs, Ray workers.

Real ALE games in each engine (gymnasium, ale-py's vector env, envpool), a few
envs and a few hundred agent steps each.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from collecting import engines, needs_envpool
from fleetrl import ConfigError, EnvError, SyncDataCollector, make_env
from fleetrl.collectors.local.overlap import HalvedEnv, available_cores, pays_off
from fleetrl.config import AtariConfig, EnvEngine
from fleetrl.envs.atari import (
    ATARI_KWARGS_MSG,
    ATARI_RANGE_MSG,
    LIFE_LOSS_MSG,
    NOT_ALE_ID_MSG,
    NOT_ATARI_MSG,
    AleVectorEnv,
    AtariEnv,
)
from fleetrl.envs.base import ENGINE_MSG
from fleetrl.envs.cpp import EnvPoolEnv
from fleetrl.envs.gymnasium import GymVectorEnv
from fleetrl.envs.make import create_env_fn
from fleetrl.envs.probe import env_spec
from fleetrl.run.evaluate import evaluate
from fleetrl.setup.build import make_collector
from fleetrl.setup.load import config_from_dict
from fleetrl.setup.resume import FROZEN_MSG, check_resume_overrides

ENGINES = [e.value for e in EnvEngine]


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


@pytest.mark.parametrize("engine", engines(*ENGINES))
def test_episode_boundaries_exact(engine):
    # Breakout under random actions loses its 5 lives in fewer than LIMIT steps in
    # some episodes (terminated) and not in others (truncated at exactly LIMIT).
    atari = AtariConfig(max_episode_frames=4 * LIMIT)
    batch = _collect(AtariEnv("ALE/Breakout-v5", engine, atari, num_threads=1), 2, 400)
    assert batch.batch_size == torch.Size([2, 400])
    obs, nxt = batch["observation"], batch["next", "observation"]
    assert obs.dtype == nxt.dtype == torch.uint8  # pixels stay uint8 in the buffers
    assert obs.shape == (2, 400, 4, 84, 84)
    terminated = batch["next", "terminated"][..., 0]
    truncated = batch["next", "truncated"][..., 0]
    done = batch["next", "done"][..., 0]
    assert torch.equal(done, terminated | truncated)
    assert not (terminated & truncated).any()
    assert terminated.any() and truncated.any()  # both kinds of end, kept apart
    for row in range(2):
        start = 0
        for t in range(400):
            # every next observation continues its own episode: the stack shifts by one
            # (so no reset stack ever stands as a next observation: it would not shift)
            assert torch.equal(nxt[row, t, :-1], obs[row, t, 1:])
            if t + 1 == 400:
                break
            if done[row, t]:
                length = t + 1 - start
                if truncated[row, t]:
                    assert length == LIMIT
                else:
                    assert length < LIMIT
                assert _is_reset_stack(obs[row, t + 1])  # the next episode starts fresh
                # the terminal next observation is the episode's last frame, not the reset one
                assert not torch.equal(nxt[row, t, -1], obs[row, t + 1, -1])
                start = t + 1
            else:
                assert torch.equal(nxt[row, t], obs[row, t + 1])  # no transition spans two


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


@needs_envpool
def test_engines_preprocess_alike():
    """Deterministic Pong (no no-ops, no sticky actions), the same actions in each engine."""
    actions = np.random.default_rng(0).integers(0, 6, size=(70, 2))
    gym_obs, gym_next, gym_rewards, gym_ends = _frames("gymnasium", actions)
    assert gym_ends[49, 1].all() and gym_ends.sum() == 2  # truncated together at step 50
    ale = _frames("ale_vector", actions)
    for mine, theirs in zip(ale, (gym_obs, gym_next, gym_rewards, gym_ends)):
        np.testing.assert_array_equal(mine, theirs)  # bit-identical
    pool_obs, pool_next, pool_rewards, pool_ends = _frames("envpool", actions)
    np.testing.assert_array_equal(pool_rewards, gym_rewards)
    np.testing.assert_array_equal(pool_ends, gym_ends)
    # envpool resizes with its own code: a few pixels on the edges of objects differ
    assert (pool_obs != gym_obs).mean() < 0.01
    assert (pool_next != gym_next).mean() < 0.01


@pytest.mark.parametrize("engine", engines("ale_vector", "envpool"))
def test_seeded_engines_repeat(engine):
    spec = AtariEnv("ALE/Pong-v5", engine, num_threads=1)
    runs = []
    for _ in range(2):
        env = make_env(spec, num_envs=2)
        env.seed_actions(1)
        frames = [env.reset(seed=7)["observation"]]
        frames += [env.step(env.random_action()).obs["observation"] for _ in range(20)]
        env.close()
        runs.append(np.stack(frames))
    np.testing.assert_array_equal(runs[0], runs[1])


@needs_envpool
def test_ale_id_uses_the_gymnasium_engine_by_default():
    with SyncDataCollector(
        "ALE/Pong-v5", None, frames_per_batch=16, total_frames=16, num_envs=8
    ) as collector:
        assert isinstance(collector.env, GymVectorEnv)
        (batch,) = list(collector)
    assert batch["observation"].shape == (8, 2, 4, 84, 84)
    assert batch["next", "observation"].dtype == torch.uint8
    env = make_env("ALE/Pong-v5", 2, {"engine": "envpool", "frame_stack": 2})
    assert isinstance(env, EnvPoolEnv)
    assert env.observation_spec["observation"] == ((2, 84, 84), np.dtype(np.uint8))
    env.close()


def test_config_engine_reaches_env_spec_and_collector():
    cfg = config_from_dict(
        {
            "algorithm": "ppo",
            "env": {"id": "ALE/Pong-v5", "engine": "ale_vector", "atari": {"frame_stack": 2}},
        }
    )
    spec = create_env_fn(cfg.env)
    assert spec == AtariEnv("ALE/Pong-v5", EnvEngine.ALE_VECTOR, AtariConfig(frame_stack=2))
    info = env_spec(spec)
    assert (info.obs_shape, info.obs_dtype, info.obs_dim) == ((2, 84, 84), torch.uint8, 2 * 84 * 84)
    assert info.num_actions == 6
    env = make_env(spec, num_envs=2)
    assert isinstance(env, AleVectorEnv)
    env.close()
    assert create_env_fn(config_from_dict({"algorithm": "ppo"}).env) == "CartPole-v1"


@needs_envpool
def test_config_refuses_what_an_engine_cannot_honour():
    with pytest.raises(ConfigError) as err:
        config_from_dict(
            {
                "algorithm": "ppo",
                "env": {
                    "id": "ALE/Pong-v5",
                    "engine": "envpool",
                    "atari": {"terminal_on_life_loss": True, "frame_stack": 0},
                },
            }
        )
    assert err.value.problems == [
        ATARI_RANGE_MSG.format(prefix="env.", key="frame_stack", value=0, allowed="must be >= 1"),
        LIFE_LOSS_MSG.format(prefix="env.", engine="envpool"),
    ]
    with pytest.raises(ConfigError) as err:
        config_from_dict({"algorithm": "ppo", "env": {"engine": "ale"}})
    assert err.value.problems == [
        ENGINE_MSG.format(prefix="env.", value="ale", allowed=ENGINES),
    ]
    with pytest.raises(ConfigError) as err:
        config_from_dict({"algorithm": "ppo", "env": {"engine": "ale_vector"}})
    assert err.value.problems == [
        NOT_ATARI_MSG.format(
            prefix="env.", engine="ale_vector", id_key="env.id", env_id="CartPole-v1"
        )
    ]
    with pytest.raises(ConfigError, match=r"terminal_on_life_loss=True is invalid with engine"):
        AtariEnv("ALE/Breakout-v5", "ale_vector", AtariConfig(terminal_on_life_loss=True))
    with pytest.raises(ConfigError) as err:
        AtariEnv("CartPole-v1")
    assert err.value.problems == [NOT_ALE_ID_MSG.format(value="CartPole-v1")]
    kwargs = {"engine": "envpool", "frame_stak": 2}
    names = [f.name for f in dataclasses.fields(AtariConfig)]
    with pytest.raises(EnvError) as err:
        make_env("ALE/Pong-v5", 2, kwargs)
    assert str(err.value) == ATARI_KWARGS_MSG.format(
        value={"frame_stak": 2}, env_id="ALE/Pong-v5", fields=names
    )
    # the gymnasium engine honours it
    spec = AtariEnv("ALE/Breakout-v5", "gymnasium", AtariConfig(terminal_on_life_loss=True))
    assert spec.atari.terminal_on_life_loss


@needs_envpool
def test_make_collector_and_evaluate_use_the_configured_engine():
    cfg = config_from_dict(
        {
            "algorithm": "ppo",
            "env": {"id": "ALE/Pong-v5", "num_envs": 2, "engine": "envpool"},
            "collector": {"num_collectors": 0, "frames_per_batch": 8},
            "trainer": {"total_frames": 8},
        }
    )
    collector = make_collector(cfg, None, total_frames=8, seed=0)
    try:
        # the configured engine steps the envs, in two halves where overlapped collection (the
        # default) pays off: with a core for the engine besides the policy's
        assert collector.overlap is pays_off(1, available_cores())
        halves = collector.env.halves if collector.overlap else (collector.env,)
        assert all(isinstance(env, EnvPoolEnv) for env in halves)
        assert isinstance(collector.env, HalvedEnv) is collector.overlap
        (batch,) = list(collector)
        assert batch["observation"].shape == (2, 4, 4, 84, 84)
    finally:
        collector.shutdown()
    spec = AtariEnv("ALE/Pong-v5", "ale_vector", AtariConfig(max_episode_frames=4 * 30))
    returns = evaluate(None, spec, 2)
    assert returns.shape == (2,)
    assert returns.dtype == torch.float32


def test_resume_keeps_the_frame_stack():
    saved = {"algorithm": "ppo", "env": {"id": "ALE/Pong-v5"}}
    with pytest.raises(ConfigError) as err:
        check_resume_overrides(saved, ["env.atari.frame_stack=2"], "runs/x")
    assert err.value.problems == [
        FROZEN_MSG.format(
            key="env.atari.frame_stack",
            value=2,
            before=4,
            run_dir="runs/x",
            what="networks sized for that many stacked frames",
        )
    ]
    # the engine may change: the same preprocessing, the same networks
    cfg = check_resume_overrides(saved, ["env.engine=ale_vector"], "runs/x")
    assert cfg.env.engine == "ale_vector"

"""``env.kwargs``: the env's own arguments reach every env a run builds (training,
evaluation, videos), for gymnasium, POMDP, MuJoCo and PettingZoo ids; an ALE id and
arguments the env does not take are refused by key before anything starts."""

from __future__ import annotations

import pytest
import torch

from fleetrl import ConfigError, SyncDataCollector
from fleetrl.cli import main
from fleetrl.collectors.video import video_env
from fleetrl.envs import GymId, PartialEnv, create_env_fn, make_env
from fleetrl.setup.load import load_config
from runs import rows

#: CartPole's Sutton & Barto reward: 0 per step, -1 when the pole falls (episode returns
#: of 0 or -1, where the default reward gives at least 8)
SUTTON_BARTO = {"sutton_barto_reward": True}
LOCAL = ["collector.num_collectors=0", "logging.progress_bar=false", "logging.tensorboard=false"]


def test_a_gymnasium_id_with_kwargs_builds_them_in_every_env():
    config = load_config(
        "configs/ppo_cartpole.yaml", [*LOCAL, "env.kwargs.sutton_barto_reward=true"]
    )
    built_by = create_env_fn(config.env)
    assert built_by == GymId("CartPole-v1", SUTTON_BARTO)
    with SyncDataCollector(built_by, None, frames_per_batch=400, num_envs=4) as c:
        c.set_seed(0)
        batch = c.next()
    reward = batch["next", "reward"]
    assert set(reward.unique().tolist()) == {-1.0, 0.0}  # random actions end episodes
    assert torch.equal(reward == -1, batch["next", "terminated"])
    env, _ = video_env(built_by)  # the video env too
    assert env.unwrapped._sutton_barto_reward
    env.close()


def test_a_run_trains_and_evaluates_the_env_built_with_its_kwargs(tmp_path):
    run = tmp_path / "run"
    args = [
        "configs/ppo_cartpole.yaml",
        *LOCAL,
        "env.kwargs={sutton_barto_reward: true}",
        "env.num_envs=4",
        "collector.frames_per_batch=256",
        "trainer.total_frames=512",
        "trainer.target_return=null",
        "trainer.test_every=1",
        "trainer.num_test_episodes=2",
        "ppo.num_mini_batch=2",
        "ppo.num_epochs=1",
    ]
    assert main(["train", *args, "--run-dir", str(run)]) == 0
    last = rows(run)[-1]
    assert -1.0 <= float(last["train/episode_return"]) <= 0.0  # default rewards: >= 8
    assert -1.0 <= float(last["eval/return_mean"]) <= 0.0  # evaluation's env has them too
    saved = load_config(run / "config.yaml")
    assert saved.env.kwargs == SUTTON_BARTO


def test_kwargs_reach_a_pomdp_and_the_mujoco_envs_of_both_engines():
    config = load_config(
        "configs/ppo_cartpole.yaml",
        [*LOCAL, "env.kwargs.sutton_barto_reward=true", "env.observation_indices=[0, 2]"],
    )
    partial = create_env_fn(config.env)
    assert partial == PartialEnv("CartPole-v1", (0, 2), SUTTON_BARTO)
    env = make_env(partial, num_envs=2)
    try:
        assert env.observation_spec["observation"][0] == (2,)
        assert env.env.envs[0].unwrapped._sutton_barto_reward
    finally:
        env.close()
    weight = ["env.kwargs.forward_reward_weight=2.0"]
    mujoco = load_config("configs/ppo_mujoco.yaml", [*LOCAL, *weight])
    assert create_env_fn(mujoco.env) == GymId("HalfCheetah-v5", {"forward_reward_weight": 2.0})
    envpool = load_config("configs/ppo_mujoco.yaml", [*LOCAL, *weight, "env.engine=envpool"])
    assert create_env_fn(envpool.env).env_kwargs == {"forward_reward_weight": 2.0}


def test_a_pettingzoo_id_takes_its_kwargs_continuous_actions_included():
    pytest.importorskip("mpe2")
    config = load_config(
        "configs/mappo_simple_spread.yaml",
        [*LOCAL, "env.kwargs={continuous_actions: true, N: 2}", "env.num_envs=2"],
    )
    built_by = create_env_fn(config.env)
    assert built_by.kwargs == {"continuous_actions": True, "N": 2}
    with SyncDataCollector(built_by, None, frames_per_batch=20, num_envs=2) as c:
        batch = c.next()
    action = batch["agents", "action"]
    assert action.shape == (2, 10, 2, 5) and action.dtype == torch.float32  # 2 agents, 5 forces


REFUSED = [
    (
        "configs/ppo_atari.yaml",
        ["env.kwargs.frameskip=2"],
        "env.kwargs",
        "env.kwargs={'frameskip': 2} is invalid with env.id='ALE/Pong-v5': an ALE game is "
        "built with the Atari preprocessing of env.atari (frame_skip, repeat_action_probability, "
        "full_action_space, ...): set those keys there, and remove env.kwargs",
    ),
    (
        "configs/ppo_cartpole.yaml",
        ["env.kwargs.nope=1"],
        "env.kwargs",
        "env.kwargs={'nope': 1} is invalid with env.id='CartPole-v1': building the env with "
        "them failed (TypeError: CartPoleEnv.__init__() got an unexpected keyword argument "
        "'nope'",
    ),
    ("configs/ppo_cartpole.yaml", ["env.kwargs=[1]"], "env.kwargs", "env.kwargs=[1] is invalid"),
]


@pytest.mark.parametrize(("config", "overrides", "key", "text"), REFUSED, ids=lambda v: str(v)[:25])
def test_kwargs_that_cannot_build_the_env_are_refused_by_key(config, overrides, key, text):
    with pytest.raises(ConfigError) as err:
        load_config(config, [*LOCAL, *overrides])
    [problem] = err.value.details
    assert problem.key == key and str(problem).startswith(text)

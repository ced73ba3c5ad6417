"""torchrl 0.14's collector features in both collectors: policy_factory, trajs_per_batch,
compile_policy / cudagraph_policy, update_policy_weights_(policy=, worker_ids=),
set_truncated and set_seed(static_seed=)."""

from __future__ import annotations

import re

import pytest
import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from collecting import whole_trajectories
from fakes import counting_vec
from fleetrl import ConfigError, SyncDataCollector
from fleetrl.collectors.arguments import (
    BOTH_POLICIES_MSG,
    COMPILE_MSG,
    POLICY_FACTORY_MSG,
    TRAJS_PER_BATCH_MSG,
    WORKER_IDS_MSG,
)
from policies import LockedLinear, categorical_actor, compiled_flag, locked_policy

CUDAGRAPH_ON_CPU = "cudagraph_policy=True is invalid: CUDA graphs only run on a CUDA device"


# ------------------------------------------------------------------ policy_factory


def test_policy_factory_builds_the_policy_where_the_collector_runs():
    calls = []

    def factory():
        calls.append(1)
        return locked_policy(obs_dim=1)

    with SyncDataCollector(
        counting_vec([3, 5]), policy_factory=factory, frames_per_batch=8, total_frames=16
    ) as c:
        assert calls == [1]
        assert isinstance(c.policy.module, LockedLinear)
        batches = list(c)
    assert [b["action"].tolist() for b in batches] == [[[1] * 4] * 2] * 2


def test_policy_factory_and_policy_are_refused_together_or_when_not_callable():
    with pytest.raises(ConfigError, match=re.escape(BOTH_POLICIES_MSG)):
        SyncDataCollector(
            "CartPole-v1", locked_policy(), policy_factory=locked_policy, frames_per_batch=8
        )
    with pytest.raises(ConfigError, match=re.escape(POLICY_FACTORY_MSG)):
        SyncDataCollector("CartPole-v1", policy_factory=3, frames_per_batch=8)


# ------------------------------------------------------------------ trajs_per_batch


def test_trajs_per_batch_yields_whole_trajectories_padded_with_a_mask():
    # env 0: episodes of 3 steps, env 1: of 5 (each spans two 4-step polls); 20 steps each
    with SyncDataCollector(
        counting_vec([3, 5]), None, frames_per_batch=8, total_frames=40, trajs_per_batch=2
    ) as c:
        batches = list(c)
        assert c.frames == 40  # total_frames bounds the frames collected
    assert [tuple(b.shape) for b in batches] == [(2, 5), (2, 3), (2, 5), (2, 5), (2, 5)]
    assert all(b.names == [None, "time"] for b in batches)
    rows = [row for b in batches for row in whole_trajectories(b)]
    # 6 episodes of env 0 and 4 of env 1, in the order they ended; env 0's 7th is cut by the budget
    assert sorted(map(len, rows)) == [3] * 6 + [5] * 4
    assert all(row == list(range(len(row))) for row in rows)
    assert sum(int(b["collector", "mask"].sum()) for b in batches) == 38
    ids = [int(b["collector", "traj_ids"][i, 0]) for b in batches for i in range(2)]
    assert len(set(ids)) == 10


def test_trajs_per_batch_with_reset_at_each_iter_drops_the_episodes_cut_by_the_reset():
    # 4 steps per batch: env 0 ends one 3-step episode per batch, env 1 (5 steps) never ends one
    with SyncDataCollector(
        counting_vec([3, 5]),
        None,
        frames_per_batch=8,
        total_frames=24,
        trajs_per_batch=1,
        reset_at_each_iter=True,
    ) as c:
        batches = list(c)
        assert c.frames == 24
    assert [whole_trajectories(b) for b in batches] == [[[0.0, 1.0, 2.0]]] * 3


def test_trajs_per_batch_bad_values_are_refused():
    with pytest.raises(ConfigError, match=re.escape(TRAJS_PER_BATCH_MSG)):
        SyncDataCollector("CartPole-v1", None, frames_per_batch=8, trajs_per_batch=0)
    with pytest.raises(ConfigError, match=r"split_trajs=True is invalid: trajs_per_batch"):
        SyncDataCollector(
            "CartPole-v1", None, frames_per_batch=8, trajs_per_batch=2, split_trajs=True
        )


# ------------------------------------------------------------- compile / cudagraph


def test_compile_policy_acts_with_the_compiled_graph_and_takes_options():
    kwargs = {"frames_per_batch": 8, "total_frames": 8, "num_envs": 2}
    with SyncDataCollector("CartPole-v1", compiled_flag(), **kwargs) as eager:
        assert (eager.next()["action"] == 0).all()
    with SyncDataCollector(
        "CartPole-v1", compiled_flag(), compile_policy={"backend": "eager"}, **kwargs
    ) as c:
        assert (c.next()["action"] == 1).all()


def test_compile_policy_true_gives_the_eager_actions_and_follows_weight_updates():
    actor, other = categorical_actor(), categorical_actor()
    kwargs = {"frames_per_batch": 64, "num_envs": 4, "exploration_type": "deterministic"}
    eager = SyncDataCollector("CartPole-v1", actor, **kwargs)
    fast = SyncDataCollector("CartPole-v1", actor, compile_policy=True, **kwargs)
    try:
        for c in (eager, fast):
            c.set_seed(0)
        a, b = eager.next(), fast.next()
        assert torch.equal(a["action"], b["action"])
        assert torch.equal(a["observation"], b["observation"])
        for c in (eager, fast):
            c.update_policy_weights_(policy=other)
        a, b = eager.next(), fast.next()
        assert torch.equal(a["action"], b["action"])
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            want = other(TensorDict({"observation": b["observation"][:, 0]}, [4]))["action"]
        assert torch.equal(b["action"][:, 0], want)
    finally:
        eager.shutdown()
        fast.shutdown()


def test_compile_and_cudagraph_bad_values_are_refused():
    with pytest.raises(ConfigError, match=re.escape(COMPILE_MSG)):
        SyncDataCollector("CartPole-v1", None, frames_per_batch=8, compile_policy="fast")
    with pytest.raises(ConfigError, match=CUDAGRAPH_ON_CPU):
        SyncDataCollector(
            "CartPole-v1", categorical_actor(), frames_per_batch=8, cudagraph_policy=True
        )


# ------------------------------------------------------ weights, truncation, seeds


def test_sync_update_policy_weights_takes_torchrls_arguments():
    actor, other = categorical_actor(), categorical_actor()
    with SyncDataCollector("CartPole-v1", actor, frames_per_batch=8, worker_id=3) as c:
        c.update_policy_weights_(policy=other, worker_ids=3)
        assert torch.equal(actor.module[0].module[0].weight, other.module[0].module[0].weight)
        c.update_policy_weights_(weights=TensorDict.from_module(other), worker_ids=[3])
        assert c.policy_version == 2
        with pytest.raises(ConfigError, match=re.escape(WORKER_IDS_MSG.format(ids="[3]"))):
            c.update_policy_weights_(other, worker_ids=[0])
        with pytest.raises(ConfigError, match="pass the weights once"):
            c.update_policy_weights_(other, policy=other)
        with pytest.raises(ConfigError, match="model_id='critic' is invalid: SyncDataCollector"):
            c.update_policy_weights_(other, model_id="critic")
        assert c.policy_version == 2


def test_set_truncated_marks_the_last_step_and_the_episode_goes_on():
    with SyncDataCollector(
        counting_vec([3, 5]), None, frames_per_batch=8, total_frames=16, set_truncated=True
    ) as c:
        first, second = list(c)
    assert first["next", "truncated"][..., 0].tolist() == [[False, False, False, True]] * 2
    assert first["next", "done"][..., 0].tolist() == [
        [False, False, True, True],
        [False, False, False, True],
    ]
    assert not first["next", "terminated"][:, -1].any()
    # the envs were not reset: env 1's episode continues, with its trajectory id
    assert second["observation"][1, :, 0].tolist() == [4.0, 0.0, 1.0, 2.0]
    assert second["collector", "traj_ids"][1, 0] == first["collector", "traj_ids"][1, -1]
    assert second["next", "episode_length"][1, 0, 0] == 5


def test_static_seed_seeds_every_env_alike_and_is_not_incremented():
    with SyncDataCollector("CartPole-v1", None, frames_per_batch=9, num_envs=3) as c:
        assert c.set_seed(7, static_seed=True) == 7
        obs = c.next()["observation"]
        assert torch.equal(obs[0, 0], obs[1, 0]) and torch.equal(obs[1, 0], obs[2, 0])
        assert c.set_seed(7) == 10
        obs = c.next()["observation"][:, 0]
        assert not torch.equal(obs[0], obs[1]) and not torch.equal(obs[1], obs[2])


def test_static_seed_on_torchrl_env_copies():
    from torchrl.envs import GymEnv

    with SyncDataCollector(
        lambda: GymEnv("Pendulum-v1"), None, frames_per_batch=4, num_envs=2
    ) as c:
        assert c.set_seed(3, static_seed=True) == 3
        obs = c.next()["observation"][:, 0]
        assert torch.equal(obs[0], obs[1])
        c.set_seed(3)
        obs = c.next()["observation"][:, 0]
        assert not torch.equal(obs[0], obs[1])


def test_static_seed_on_a_hand_built_ale_vector_env():
    """ale-py's AtariVectorEnv takes one seed per env as an array, not a list (issue 35.11):
    with a static seed both envs start from the same frame (their noop starts alike)."""
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv("breakout", num_envs=2, noop_max=30)
    with SyncDataCollector(env, None, frames_per_batch=8) as c:
        assert c.set_seed(11, static_seed=True) == 11
        first = c.next()["observation"][:, 0]
        assert torch.equal(first[0], first[1])
        assert c.set_seed(11) == 13
        first = c.next()["observation"][:, 0]
        assert not torch.equal(first[0], first[1])

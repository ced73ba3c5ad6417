from __future__ import annotations

import math
import time

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from fakes import CountingEnv, counting_vec
from fleetrl import (
    CollectorClosedError,
    ConfigError,
    EnvError,
    PolicyError,
    SyncDataCollector,
    episode_stats,
)
from fleetrl.collectors.local.acting_setup import NO_ACTION_MSG
from fleetrl.envs.gymnasium import NEXT_STEP_MSG
from policies import categorical_actor, constant_policy, mlp

# ------------------------------------------------------------------ layout


def test_cartpole_batch_keys_shapes_and_names():
    actor = categorical_actor()
    with SyncDataCollector(
        "CartPole-v1", actor, frames_per_batch=64, total_frames=128, num_envs=4
    ) as c:
        batches = list(c)
    assert len(batches) == 2
    b = batches[0]
    assert b.batch_size == torch.Size([4, 16])
    assert b.names == [None, "time"]
    assert b["observation"].shape == (4, 16, 4)
    assert b["next", "observation"].shape == (4, 16, 4)
    assert b["action"].shape == (4, 16) and b["action"].dtype == torch.int64
    assert b["action_log_prob"].shape == (4, 16)
    assert b["logits"].shape == (4, 16, 2)
    for key in ("reward", "episode_return"):
        assert b["next", key].shape == (4, 16, 1)
    for key in ("done", "terminated", "truncated"):
        assert b["next", key].dtype == torch.bool and b["next", key].shape == (4, 16, 1)
    assert b["collector", "traj_ids"].shape == (4, 16)
    assert (b["collector", "policy_version"] == 0).all()
    assert (b["collector", "worker_id"] == 0).all()
    assert c.frames == 128


def test_ppo_loss_and_gae_run_on_a_batch_unchanged():
    from torchrl.modules import ValueOperator
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    actor = categorical_actor()
    critic = ValueOperator(mlp(4, 1), in_keys=["observation"])
    loss = ClipPPOLoss(actor, critic)
    gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    with SyncDataCollector("CartPole-v1", actor, frames_per_batch=128, num_envs=4) as c:
        batch = c.next()
    with torch.no_grad():
        gae(batch)
    assert batch["advantage"].shape == (4, 32, 1)
    losses = loss(batch.reshape(-1))
    total = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
    total.backward()
    grads = [p.grad for p in actor.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


# ------------------------------------------------------- episode boundaries


def test_final_observation_is_never_the_reset_observation():
    env = counting_vec([3, 5])
    with SyncDataCollector(env, constant_policy(0), frames_per_batch=2 * 12) as c:
        b = c.next()
    obs, nxt = b["observation"][..., 0], b["next", "observation"][..., 0]
    done = b["next", "done"][..., 0]
    for i, length in enumerate([3, 5]):
        # next obs at an episode end is the final count; obs right after is the reset 0
        assert (nxt[i][done[i]] == length).all()
        ends = done[i].nonzero().squeeze(-1)
        assert ends.tolist() == list(range(length - 1, 12, length))
        for t in ends.tolist():
            if t + 1 < 12:
                assert obs[i, t + 1] == 0
        # no transition spans two episodes: outside ends, obs[t+1] == next_obs[t]
        inside = ~done[i, :-1]
        assert torch.equal(obs[i, 1:][inside], nxt[i, :-1][inside])
        assert torch.equal(nxt[i] - obs[i], torch.ones(12))


def test_terminated_and_truncated_stay_distinct():
    env = counting_vec([4, 4], truncate=[False, True])
    with SyncDataCollector(env, constant_policy(0), frames_per_batch=2 * 8) as c:
        b = c.next()
    term, trunc, done = (b["next", k][..., 0] for k in ("terminated", "truncated", "done"))
    assert term[0].sum() == 2 and trunc[0].sum() == 0
    assert term[1].sum() == 0 and trunc[1].sum() == 2
    assert torch.equal(done, term | trunc)


def test_traj_ids_unique_and_constant_within_episodes_across_batches():
    env = counting_vec([3, 4, 7])
    seen: dict[int, tuple[int, int]] = {}
    with SyncDataCollector(
        env, constant_policy(0), frames_per_batch=3 * 5, total_frames=3 * 40
    ) as c:
        for batch_index, b in enumerate(c):
            traj, obs = b["collector", "traj_ids"], b["observation"][..., 0]
            for i in range(3):
                for t in range(5):
                    tid = int(traj[i, t])
                    # a trajectory lives in one env and its step count only grows
                    key = (i, batch_index * 5 + t - int(obs[i, t]))  # (env, episode start)
                    assert seen.setdefault(tid, key) == key
    starts = list(seen.values())
    assert len(starts) == len(set(starts))  # one id per episode, never reused


def test_episode_returns_match_rewards_of_episodes_inside_the_batch():
    actor = categorical_actor()
    with SyncDataCollector("CartPole-v1", actor, frames_per_batch=8 * 100, num_envs=8) as c:
        c.set_seed(3)
        c.next()
        b = c.next()
    stats = episode_stats(b)
    assert stats.count > 0
    traj, reward, done = (
        b["collector", "traj_ids"],
        b["next", "reward"][..., 0],
        b["next", "done"][..., 0],
    )
    checked = 0
    for i in range(8):
        ends = done[i].nonzero().squeeze(-1).tolist()
        starts = [0] + [e + 1 for e in ends[:-1]]
        for s, e in zip(starts, ends):
            if s == 0 and int(b["next", "episode_length"][i, 0, 0]) != 1:
                continue  # started in the previous batch
            assert (traj[i, s : e + 1] == traj[i, s]).all()
            assert float(b["next", "episode_return"][i, e, 0]) == pytest.approx(
                float(reward[i, s : e + 1].sum())
            )
            assert int(b["next", "episode_length"][i, e, 0]) == e - s + 1
            checked += 1
    assert checked > 0
    assert stats.count == int(done.sum())


def test_episode_return_continues_across_batches():
    env = counting_vec([7])
    with SyncDataCollector(env, constant_policy(1), frames_per_batch=3) as c:
        c.next()
        b = c.next()  # steps 4..6 of a 7-step episode, reward 2 each
        b2 = c.next()  # step 7 ends it
    assert b["next", "episode_return"][0, :, 0].tolist() == [8.0, 10.0, 12.0]
    assert b2["next", "done"][0, 0, 0]
    assert episode_stats(b2).returns.tolist() == [14.0]
    assert episode_stats(b2).lengths.tolist() == [7]


# ------------------------------------------------------------- seeds, frames


def _collect(seed: int, n_batches: int = 2) -> list[TensorDict]:
    torch.manual_seed(123)  # same initial weights in every call
    actor = categorical_actor()
    with SyncDataCollector("CartPole-v1", actor, frames_per_batch=4 * 50, num_envs=4) as c:
        c.set_seed(seed)
        return [c.next() for _ in range(n_batches)]


def test_same_seed_same_batches_different_seed_different():
    a, b, other = _collect(7), _collect(7), _collect(8)
    for x, y in zip(a, b):
        assert (x == y).all()
    assert not torch.equal(a[0]["observation"], other[0]["observation"])


@pytest.mark.parametrize(
    ("total", "fpb", "sizes"), [(120, 40, [40, 40, 40]), (100, 40, [40, 40, 20]), (8, 40, [8])]
)
def test_total_frames_exact_with_short_last_batch(total, fpb, sizes):
    with SyncDataCollector(
        "CartPole-v1", None, frames_per_batch=fpb, total_frames=total, num_envs=4
    ) as c:
        got = [b.numel() for b in c]
        assert got == sizes
        assert len(got) == math.ceil(total / fpb)
        assert c.frames == total
        assert list(c) == []  # budget spent: a new loop yields nothing


def test_iteration_resumes_after_break():
    with SyncDataCollector(
        "CartPole-v1", None, frames_per_batch=8, total_frames=40, num_envs=2
    ) as c:
        for i, _ in enumerate(c):
            if i == 1:
                break
        assert c.frames == 16
        assert len(list(c)) == 3
        assert c.frames == 40


def test_endless_collection():
    with SyncDataCollector("CartPole-v1", None, frames_per_batch=8, num_envs=2) as c:
        for i, _ in enumerate(c):
            if i == 20:
                break
        assert c.frames == 168


# ------------------------------------------------------------- bad input


def test_unknown_env_id_is_named():
    with pytest.raises(
        EnvError, match=r"create_env_fn='NoSuchEnv-v9' is not a registered gymnasium id"
    ):
        SyncDataCollector("NoSuchEnv-v9", None, frames_per_batch=8)


def test_policy_without_action():
    policy = TensorDictModule(mlp(), in_keys=["observation"], out_keys=["logits"])
    with pytest.raises(PolicyError, match=r"did not write 'action' \(it wrote \['logits'\]\)"):
        SyncDataCollector("CartPole-v1", policy, frames_per_batch=8)
    assert NO_ACTION_MSG.startswith("policy=")


def test_wrong_action_shape():
    # a plain nn.Module writes its logits as "action": shape (N, 2) floats is neither int nor one-hot ints
    policy = TensorDictModule(
        lambda obs: obs[..., :3], in_keys=["observation"], out_keys=["action"]
    )
    with pytest.raises(
        PolicyError, match=r"wrote an 'action' of shape \(2, 3\).*integer actions of shape \(2,\)"
    ):
        SyncDataCollector("CartPole-v1", policy, frames_per_batch=8, num_envs=2)


def test_one_hot_actions_are_accepted():
    policy = TensorDictModule(
        lambda obs: torch.nn.functional.one_hot((obs[..., 0] > 0).long(), 2),
        in_keys=["observation"],
        out_keys=["action"],
    )
    with SyncDataCollector("CartPole-v1", policy, frames_per_batch=8, num_envs=2) as c:
        assert c.next()["action"].shape == (2, 4, 2)


def test_negative_sizes_reported_together():
    with pytest.raises(ConfigError) as info:
        SyncDataCollector("CartPole-v1", None, frames_per_batch=-8, total_frames=0, num_envs=-1)
    msg = str(info.value)
    assert "3 problems" in msg
    assert "frames_per_batch=-8 is invalid: must be an int > 0" in msg
    assert "total_frames=0 is invalid: must be an int > 0 or -1 (no limit)" in msg
    assert "num_envs=-1 is invalid" in msg


def test_frames_not_divisible_by_envs():
    with pytest.raises(
        ConfigError,
        match=r"frames_per_batch=10 is invalid: must be a multiple of the number of envs \(4\).*use 8 or 12",
    ):
        SyncDataCollector("CartPole-v1", None, frames_per_batch=10, num_envs=4)
    with pytest.raises(ConfigError, match=r"total_frames=30 is invalid: must be a multiple"):
        SyncDataCollector("CartPole-v1", None, frames_per_batch=8, total_frames=30, num_envs=4)


def test_next_step_autoreset_is_handled_where_fleetrl_can_reset_and_refused_elsewhere():
    """gymnasium's NEXT_STEP vector envs are reset right after an episode end (their
    contract: tests/unit/envs/test_episode_boundaries.py); a class fleetrl cannot reset
    partially is refused, the message naming the modes that work."""
    from fakes import PlainVectorEnv

    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    with SyncDataCollector(env, None, frames_per_batch=8, total_frames=8) as collector:
        assert next(iter(collector)).numel() == 8
    with pytest.raises(EnvError, match="autoreset_mode=NEXT_STEP"):
        SyncDataCollector(
            PlainVectorEnv(gym.vector.AutoresetMode.NEXT_STEP), None, frames_per_batch=6
        )
    assert "SAME_STEP" in NEXT_STEP_MSG and "DISABLED" in NEXT_STEP_MSG


def test_bad_policy_type_and_exploration_type():
    with pytest.raises(ConfigError) as info:
        SyncDataCollector("CartPole-v1", 42, frames_per_batch=8, exploration_type="greedy")
    assert "policy=42 is invalid" in str(info.value)
    assert "exploration_type='greedy' is invalid" in str(info.value)


# ------------------------------------------------------------- options


def test_max_frames_per_traj_truncates_and_resets():
    env = counting_vec([100, 100])
    with SyncDataCollector(
        env, constant_policy(0), frames_per_batch=2 * 10, max_frames_per_traj=4
    ) as c:
        b = c.next()
    trunc, term = b["next", "truncated"][..., 0], b["next", "terminated"][..., 0]
    assert trunc[0].nonzero().squeeze(-1).tolist() == [3, 7]
    assert not term.any()
    assert b["observation"][0, 4, 0] == 0  # reset after the forced truncation
    assert b["next", "observation"][0, 3, 0] == 4


def test_reset_at_each_iter_starts_fresh_episodes():
    env = counting_vec([100])
    with SyncDataCollector(
        env, constant_policy(0), frames_per_batch=5, reset_at_each_iter=True
    ) as c:
        b1, b2 = c.next(), c.next()
    assert b1["observation"][0, 0, 0] == 0 and b2["observation"][0, 0, 0] == 0
    assert b1["collector", "traj_ids"][0, 0] != b2["collector", "traj_ids"][0, 0]


def test_init_random_frames_uses_random_policy_for_whole_batches():
    with SyncDataCollector(
        "CartPole-v1",
        categorical_actor(),
        frames_per_batch=16,
        total_frames=64,
        num_envs=2,
        init_random_frames=20,
    ) as c:
        batches = list(c)
    assert ["action_log_prob" in b for b in batches] == [False, False, True, True]


def test_split_trajs_and_postproc():
    env = counting_vec([3, 5])
    seen = []

    def postproc(td):
        seen.append(td.batch_size)
        return td.set("marker", torch.ones(td.batch_size))

    with SyncDataCollector(
        env, constant_policy(0), frames_per_batch=2 * 10, split_trajs=True, postproc=postproc
    ) as c:
        b = c.next()
    assert "marker" in b
    mask = b["collector", "mask"]
    assert int(mask.sum()) == 20
    lengths = sorted(mask.sum(-1).tolist())
    assert lengths == sorted([3, 3, 3, 1, 5, 5])


def test_update_policy_weights_changes_actions_and_version():
    policy = constant_policy(0)
    with SyncDataCollector(counting_vec([50]), policy, frames_per_batch=4) as c:
        assert (c.next()["action"] == 0).all()
        weights = TensorDict.from_module(policy).clone()
        weights["module", "value"] = torch.tensor(1.0)
        c.update_policy_weights_(weights)
        b = c.next()
        assert (b["action"] == 1).all()
        assert (b["collector", "policy_version"] == 1).all()
        c.update_policy_weights_(version=7)
        assert (c.next()["collector", "policy_version"] == 7).all()
        c.update_policy_weights_(version=7)  # the same version again: weights republished
        with pytest.raises(
            ConfigError,
            match=r"version=6 is invalid: .* >= the newest published version, 7: versions never go back",
        ):
            c.update_policy_weights_(version=6)
        assert c.policy_version == 7


def test_state_dict_round_trip():
    with SyncDataCollector("CartPole-v1", categorical_actor(), frames_per_batch=8, num_envs=2) as c:
        c.next()
        c.update_policy_weights_()
        state = c.state_dict()
    with SyncDataCollector(
        "CartPole-v1", categorical_actor(), frames_per_batch=8, num_envs=2
    ) as c2:
        c2.load_state_dict(state)
        assert c2.frames == 8 and c2.policy_version == 1
        b = c2.next()
        assert b["collector", "traj_ids"].min() >= state["next_traj_id"] - 2
        for k, v in state["policy_state_dict"].items():
            assert torch.equal(c2.policy.state_dict()[k], v)


def test_shutdown_idempotent_and_closed_error():
    c = SyncDataCollector("CartPole-v1", None, frames_per_batch=8, num_envs=2)
    c.shutdown()
    c.shutdown()
    with pytest.raises(CollectorClosedError, match="SyncDataCollector was shut down"):
        c.next()


def test_plain_nn_module_is_wrapped():
    class Greedy(torch.nn.Module):
        def forward(self, obs):
            return (obs[..., 2] > 0).long()

    with SyncDataCollector("CartPole-v1", Greedy(), frames_per_batch=8, num_envs=2) as c:
        assert c.next()["action"].dtype == torch.int64


def test_gym_env_instance_and_factory():
    with SyncDataCollector(CountingEnv(3), constant_policy(0), frames_per_batch=6) as c:
        assert c.next().batch_size == (1, 6)
    with SyncDataCollector(
        lambda: CountingEnv(3), constant_policy(0), frames_per_batch=6, num_envs=3
    ) as c:
        assert c.next().batch_size == (3, 2)


# ------------------------------------------------------------- torchrl envs


def test_torchrl_gym_env_and_transformed_env():
    from torchrl.envs import GymEnv, StepCounter, TransformedEnv

    env = TransformedEnv(GymEnv("CartPole-v1", categorical_action_encoding=True), StepCounter())
    with SyncDataCollector(env, categorical_actor(), frames_per_batch=50, total_frames=100) as c:
        batches = list(c)
    b = batches[-1]
    assert b.batch_size == (50,) and b.names == ["time"]
    assert b["step_count"].shape == (50, 1)
    done = b["next", "done"][..., 0]
    # the step counter restarts after each episode end: no transition spans two episodes
    if done[:-1].any():
        t = int(done[:-1].nonzero()[0])
        assert b["step_count"][t + 1, 0] == 0
    assert episode_stats(b).count == int(done.sum())


def test_torchrl_batched_env_with_one_hot_actions():
    from torchrl.envs import GymEnv

    env = GymEnv("CartPole-v1", num_envs=2)  # one-hot action spec
    policy = TensorDictModule(
        lambda obs: torch.nn.functional.one_hot((obs[..., 2] > 0).long(), 2),
        in_keys=["observation"],
        out_keys=["action"],
    )
    with SyncDataCollector(env, policy, frames_per_batch=20) as c:
        b = c.next()
    assert b.batch_size == (2, 10)
    assert b["action"].shape == (2, 10, 2)


def test_recurrent_policy_state_is_carried_and_reset():
    from torchrl.modules import LSTMModule

    lstm = LSTMModule(input_size=1, hidden_size=8, in_key="observation", out_key="features")
    head = TensorDictModule(
        lambda f: (f[..., 0] > 10).long(), in_keys=["features"], out_keys=["action"]
    )
    from tensordict.nn import TensorDictSequential

    policy = TensorDictSequential(lstm, head)
    env = counting_vec([3, 4])
    with SyncDataCollector(env, policy, frames_per_batch=2 * 8) as c:
        b = c.next()
    h, h_next = b["recurrent_state_h"], b["next", "recurrent_state_h"]
    is_init = b["is_init"][..., 0]
    assert h.shape == (2, 8, 1, 8)
    assert is_init[0].nonzero().squeeze(-1).tolist() == [0, 3, 6]
    # within an episode the state fed in is the state produced at the step before
    for t in (1, 2, 4, 5, 7):
        assert torch.equal(h[0, t], h_next[0, t - 1])
    # at an episode start the fed state is zero
    assert (h[0, 3] == 0).all() and (h[0, 6] == 0).all()


def test_policy_device_copy_leaves_original():
    policy = categorical_actor()
    with SyncDataCollector(
        "CartPole-v1",
        policy,
        frames_per_batch=8,
        num_envs=2,
        policy_device="cpu",
        storing_device="cpu",
    ) as c:
        assert c.policy is policy
        assert c.next()["action"].device.type == "cpu"


def test_create_env_kwargs_reach_the_factory():
    with SyncDataCollector(
        CountingEnv,
        constant_policy(0),
        frames_per_batch=2 * 6,
        num_envs=2,
        create_env_kwargs={"length": 3, "truncate": True},
    ) as c:
        b = c.next()
    assert b["next", "truncated"][..., 0].sum() == 4
    assert (episode_stats(b).lengths == 3).all()


# ------------------------------------------------------------------ where the time goes

STEP_S = 0.002  # each env step sleeps this long: a floor for env_s, never a ceiling


def sleeping_policy(seconds: float) -> TensorDictModule:
    """Action 1 for every env, after sleeping ``seconds`` per call (a floor for policy_s)."""

    def act(obs: torch.Tensor) -> torch.Tensor:
        time.sleep(seconds)
        return torch.ones(obs.shape[:-1], dtype=torch.int64)

    return TensorDictModule(act, in_keys=["observation"], out_keys=["action"])


def test_collection_parts_are_measured_where_they_happen_and_fit_the_call():
    steps = 10
    with SyncDataCollector(
        lambda: CountingEnv(5, sleep=STEP_S),
        sleeping_policy(STEP_S),
        frames_per_batch=2 * steps,
        num_envs=2,
    ) as c:
        assert c.take_times().batches == 0  # nothing collected yet: all NaN
        start = time.perf_counter()
        batch = c.collect(2 * steps)
        wall = time.perf_counter() - start
        times = c.take_times()
        stats = c.stats()["time"]
        again = c.take_times()
    assert batch.numel() == 2 * steps
    assert (times.frames, times.batches) == (2 * steps, 1)
    parts = times.seconds()
    local = {k: parts[k] for k in ("env_s", "policy_s", "pack_s")}
    assert all(s >= 0 for s in local.values())
    # each env sleeps at each of its steps; the policy at each of its calls
    assert local["policy_s"] >= steps * STEP_S
    assert local["env_s"] + local["policy_s"] >= steps * 2 * STEP_S
    assert sum(local.values()) <= wall  # measured inside the call
    assert all(math.isnan(parts[k]) for k in ("weights_s", "transfer_s", "unpack_s"))
    # the collector's stats hold the same totals, since it was built; a take resets
    assert {k: stats[k] for k in local} == local
    assert (stats["frames"], stats["batches"]) == (2 * steps, 1)
    assert stats["per_batch"] == local
    assert (again.batches, again.frames) == (0, 0) and math.isnan(again.env_s)


def test_collection_parts_add_up_over_batches_and_iteration():
    with SyncDataCollector(counting_vec([3, 5]), None, frames_per_batch=8, total_frames=32) as c:
        assert sum(b.numel() for b in c) == 32
        stats = c.stats()
        taken = c.take_times()
    assert stats["frames"] == 32 == stats["time"]["frames"] == taken.frames
    assert stats["time"]["batches"] == 4 == taken.batches
    assert stats["time"]["env_s"] == pytest.approx(taken.env_s)
    assert stats["time"]["per_batch"]["env_s"] == pytest.approx(taken.env_s / 4)

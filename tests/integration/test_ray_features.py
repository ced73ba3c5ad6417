"""torchrl 0.14's collector features through Ray workers: policy_factory with an unpicklable
policy, trajs_per_batch, compile_policy, set_truncated and static seeds (in one process:
tests/unit/collectors/test_features.py)."""

from __future__ import annotations

import pickle
import re
from collections import Counter

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from collecting import whole_trajectories
from fakes import counting_vec
from fleetrl import ConfigError, PolicyError, RayCollector
from fleetrl.collectors.remote.checks import POLICY_PICKLE_MSG
from policies import categorical_actor, compiled_flag, locked_policy

CUDAGRAPH_ON_CPU = "cudagraph_policy=True is invalid: CUDA graphs only run on a CUDA device"


# ------------------------------------------------------------------ policy_factory


@pytest.mark.usefixtures("ray_session")
def test_ray_policy_factory_carries_an_unpicklable_policy_and_weights_reach_named_workers():
    with pytest.raises(TypeError):
        pickle.dumps(locked_policy())
    with pytest.raises(PolicyError, match=re.escape("cannot be pickled to reach the Ray workers")):
        RayCollector("CartPole-v1", locked_policy(), frames_per_batch=8, num_collectors=2)
    assert POLICY_PICKLE_MSG.endswith("so that each worker builds its own")
    with RayCollector(
        "CartPole-v1",
        policy_factory=locked_policy,
        frames_per_batch=16,
        total_frames=48,
        num_collectors=2,
        num_workers_per_collector=2,
        sync=True,
        prefetch=0,
    ) as c:
        it = iter(c)
        first = next(it)  # [2 workers, 2 envs, 4 steps]
        assert (first["action"] == 1).all()
        assert (first["collector", "policy_version"] == 0).all()
        to_zero = locked_policy()
        with torch.no_grad():
            to_zero.module.linear.bias.copy_(torch.tensor([1.0, 0.0]))
        weights = TensorDict.from_module(to_zero)
        assert c.update_policy_weights_(policy=None, weights=weights, worker_ids=[1]) == 1
        second = next(it)
        assert (second["action"][0] == 1).all() and (second["action"][1] == 0).all()
        assert second["collector", "policy_version"][0].unique().tolist() == [0]
        assert second["collector", "policy_version"][1].unique().tolist() == [1]
        assert c.update_policy_weights_() == 2  # no policy here: only the version moves
        third = next(it)
        assert third["action"][0].unique().tolist() == [1]
        assert third["action"][1].unique().tolist() == [0]
        assert (third["collector", "policy_version"] == 2).all()
        assert c.frames == 48


# ------------------------------------------------------------------ trajs_per_batch


@pytest.mark.usefixtures("ray_session")
#: the first-ready variant runs with make test-all (marker e2e): make test stays in budget
@pytest.mark.parametrize("sync", [True, pytest.param(False, marks=pytest.mark.e2e)])
def test_ray_trajs_per_batch_counts_exactly(sync):
    with RayCollector(
        lambda: counting_vec([3, 5]),
        None,
        frames_per_batch=16 if sync else 8,
        total_frames=80,
        num_collectors=2,
        sync=sync,
        trajs_per_batch=4,
    ) as c:
        batches = list(c)
        assert c.frames == 80
        per_worker = c.stats()["frames_per_worker"]
    # sync: each worker collects 40 frames (20 steps per env); async: first ready, so the
    # split depends on speed, and the complete episodes follow it
    if sync:
        assert per_worker == {0: 40, 1: 40}
    expected = {w: [3] * (f // 2 // 3) + [5] * (f // 2 // 5) for w, f in per_worker.items()}
    total = sum(len(v) for v in expected.values())
    assert len(batches) == total // 4 and all(b.shape[0] == 4 for b in batches)
    rows = [row for b in batches for row in whole_trajectories(b)]
    assert all(row == list(range(len(row))) for row in rows)
    workers = [int(b["collector", "worker_id"][i, 0]) for b in batches for i in range(4)]
    lengths = [n for v in expected.values() for n in v]
    assert not Counter(map(len, rows)) - Counter(lengths)  # served: complete ones only
    if total % 4 == 0:  # every complete trajectory was served
        assert sorted(map(len, rows)) == sorted(lengths)
        assert sorted(workers) == sorted(w for w, v in expected.items() for _ in v)
    if sync:
        assert sorted(map(len, rows)) == [3] * 12 + [5] * 8


# ------------------------------------------------------------- compile / cudagraph


@pytest.mark.usefixtures("ray_session")
def test_ray_compile_policy_reaches_the_workers_and_cudagraph_is_refused_before_actors():
    with RayCollector(
        "CartPole-v1",
        compiled_flag(),
        frames_per_batch=8,
        total_frames=16,
        num_collectors=2,
        sync=False,
        compile_policy={"backend": "eager"},
    ) as c:
        assert all((b["action"] == 1).all() for b in c)
    with pytest.raises(ConfigError, match=CUDAGRAPH_ON_CPU):
        RayCollector("CartPole-v1", categorical_actor(), frames_per_batch=8, cudagraph_policy=True)


# ------------------------------------------------------ weights, truncation, seeds


@pytest.mark.usefixtures("ray_session")
def test_ray_set_truncated_and_static_seed():
    with RayCollector(
        "CartPole-v1",
        None,
        frames_per_batch=16,
        total_frames=32,
        num_collectors=2,
        num_workers_per_collector=2,
        sync=True,
        prefetch=0,  # nothing collected ahead: the batch after set_seed starts from its reset
        set_truncated=True,
    ) as c:
        assert c.set_seed(5, static_seed=True) == 5
        batch = c.next()  # [2 workers, 2 envs, 4 steps]
        # same seed everywhere: every env starts alike, and both workers' random actions
        # are seeded alike, so their rollouts are the same
        first = batch["observation"][:, :, 0].reshape(4, 4)
        assert all(torch.equal(first[0], first[i]) for i in range(1, 4))
        assert torch.equal(batch["observation"][0], batch["observation"][1])
        assert batch["next", "truncated"][..., -1, 0].all()
        assert batch["next", "done"][..., -1, 0].all()
        assert c.set_seed(5) == 9
        obs = c.next()["observation"][:, :, 0].reshape(4, 4)
        assert len({tuple(np.round(o.numpy(), 6)) for o in obs}) == 4


# ------------------------------------------------------------- where the time goes


@pytest.mark.usefixtures("ray_session")
def test_ray_stats_break_each_workers_collection_time_into_parts():
    parts = ("env_s", "policy_s", "pack_s", "weights_s", "transfer_s", "unpack_s")
    with RayCollector(
        "CartPole-v1",
        categorical_actor(),
        frames_per_batch=64,
        total_frames=256,
        num_collectors=2,
        num_workers_per_collector=2,
        sync=True,
    ) as c:
        for _ in c:
            c.update_policy_weights_()
        stats = c.stats()
        taken = c.take_times()
    per_worker = stats["time_per_worker"]
    assert set(per_worker) == {0, 1}
    for w, t in per_worker.items():
        assert t["frames"] == stats["frames_per_worker"][w] == 128
        assert t["batches"] == 4
        assert all(t[p] >= 0 for p in parts)  # all measured: NaN is not >= 0
        assert t["weights_s"] + t["env_s"] + t["policy_s"] <= t["collect_s"]
    # the learner's view: each round once, the mean of its two workers
    assert (taken.frames, taken.batches) == (256, 4)
    mean_env = sum(t["env_s"] for t in per_worker.values()) / 2
    assert taken.env_s == pytest.approx(mean_env)

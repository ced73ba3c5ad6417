"""RayCollector on a real local Ray instance (one per test session, see conftest): one test
per mechanism. The accounting on the in-process backend: tests/unit/collectors/test_ray_accounting.py."""

from __future__ import annotations

import functools
import logging
import math
import os

import pytest
import ray
import torch
from tensordict import TensorDict

from collecting import assert_keep_dying_gives_up
from fakes import (
    CountingEnv,
    GatedEnv,
    counting,
    invert_next_observation,
    kill_worker,
    pixel_vec,
)
from fleetrl import (
    ConfigError,
    RayCollector,
    SyncDataCollector,
    WorkerError,
    episode_stats,
)
from fleetrl.collectors import frames_in
from fleetrl.distributed import warm
from policies import categorical_actor, constant_policy

pytestmark = pytest.mark.usefixtures("ray_session")


# ------------------------------------------------------------ both modes


def test_sync_batches_are_stacked_and_counted_exactly():
    with RayCollector(
        "CartPole-v1",
        categorical_actor(),
        frames_per_batch=400,
        total_frames=1000,
        num_collectors=2,
        num_workers_per_collector=4,
        sync=True,
    ) as c:
        batches = list(c)
        stats = c.stats()
    assert len(batches) == math.ceil(1000 / 400)
    assert [b.batch_size for b in batches] == [torch.Size([2, 4, 50])] * 2 + [
        torch.Size([2, 4, 25])
    ]
    assert [frames_in(b) for b in batches] == [400, 400, 200]
    for b in batches:
        assert b.names == [None, None, "time"]
        assert b["collector", "worker_id"][0].unique().tolist() == [0]
        assert b["collector", "worker_id"][1].unique().tolist() == [1]
        assert b["collector", "mask"].all()
        assert "action_log_prob" in b
    assert stats["frames"] == 1000
    assert stats["frames_per_worker"] == {0: 500, 1: 500}
    # trajectory ids are unique across workers
    ids0 = set(torch.cat([b["collector", "traj_ids"][0].flatten() for b in batches]).tolist())
    ids1 = set(torch.cat([b["collector", "traj_ids"][1].flatten() for b in batches]).tolist())
    assert not ids0 & ids1


def test_async_first_ready_exact_frames():
    with RayCollector(
        counting(7),
        constant_policy(1),
        frames_per_batch=60,
        total_frames=250,
        num_collectors=2,
        num_workers_per_collector=2,
        sync=False,
    ) as c:
        batches = list(c)
        stats = c.stats()
    assert len(batches) == math.ceil(250 / 60)
    assert sorted(b.numel() for b in batches) == [10, 60, 60, 60, 60]
    assert sum(b.numel() for b in batches) == 250
    for b in batches:
        assert b["collector", "worker_id"].unique().numel() == 1
        assert b.batch_size[0] == 2
    assert sum(stats["frames_per_worker"].values()) == 250
    # counting env: every finished episode has length 7 and return 2 * 7
    returns = torch.cat([episode_stats(b).returns for b in batches])
    assert returns.numel() > 0 and (returns == 14).all()


# ------------------------------------------------------------ weights


def test_weights_versions_reach_workers():
    policy = constant_policy(0)
    with RayCollector(
        counting(50),
        policy,
        frames_per_batch=10,
        total_frames=80,
        num_collectors=2,
        sync=True,
        prefetch=0,
    ) as c:
        it = iter(c)
        first = next(it)
        assert (first["action"] == 0).all() and (first["collector", "policy_version"] == 0).all()
        policy.module.value.data.fill_(1.0)
        assert c.update_policy_weights_() == 1
        second = next(it)
        assert (second["action"] == 1).all()
        assert (second["collector", "policy_version"] == 1).all()
        weights = TensorDict.from_module(policy).clone()
        weights["module", "value"] = torch.tensor(0.0)
        assert c.update_policy_weights_(weights) == 2
        third = next(it)
        assert (third["action"] == 0).all() and (third["collector", "policy_version"] == 2).all()
        assert c.stats()["policy_lag"]["max"] == 0


#: slow (about 8 s): runs with make test-all (marker e2e), so make test stays within 6 min
@pytest.mark.e2e
def test_max_weight_update_interval_bounds_staleness_of_queued_tasks():
    def lags(interval: int) -> list[int]:
        with RayCollector(
            counting(100, sleep=0.003),
            constant_policy(1),
            frames_per_batch=20,
            total_frames=240,
            num_collectors=1,
            prefetch=3,
            update_after_each_batch=True,
            max_weight_update_interval=interval,
        ) as c:
            list(c)
            return c.stats()["policy_lag"]

    unbounded, bounded = lags(-1), lags(1)
    assert unbounded["max"] >= 2
    assert bounded["max"] <= 1


@pytest.mark.parametrize(
    ("prefetch", "bound"), [pytest.param(0, None, marks=pytest.mark.e2e), (0, 0), (1, 1)]
)
def test_async_slow_worker_lag_is_unbounded_unless_max_served_lag(prefetch, bound, tmp_path):
    gate = tmp_path / "gate"  # worker 1 cannot step until the test opens it
    with RayCollector(
        [counting(5), lambda: GatedEnv(str(gate), 5)],
        constant_policy(1),
        frames_per_batch=20,
        total_frames=400,
        sync=False,
        prefetch=prefetch,
        update_after_each_batch=True,
        max_served_lag=bound,
    ) as c:
        lags, workers = [], []
        for i, b in enumerate(c):
            lags.append(c.policy_version - int(b["collector", "policy_version"].min()))
            workers.append(int(b["collector", "worker_id"][0, 0]))
            if i == 5:
                gate.write_text("open")
        stats = c.stats()
    assert len(lags) == 20 and stats["frames"] == 400
    assert sum(stats["frames_per_worker"].values()) == 400  # stale frames are never counted
    assert workers[:6] == [0] * 6 and 1 in workers
    assert stats["policy_lag"]["max"] == max(lags) and stats["policy_lag"]["count"] == 20
    assert stats["policy_lag"]["bound"] == bound
    if bound is None:
        # worker 1's first batch was collected with version 0 and served after >= 6 publishes
        assert max(lags) >= 6
        assert stats["stale_batches"] == stats["stale_frames"] == 0
    else:
        assert max(lags) <= bound
        assert stats["stale_batches"] >= 1  # at least worker 1's first batch
        assert stats["stale_frames"] == 20 * stats["stale_batches"]
    assert stats["pending"] == {"tasks": 0, "frames": 0}


# ------------------------------------------------------------ faults


#: both variants (about 11 s each) run with make test-all (marker e2e), so make test stays
#: within 6 min; test_replaced_worker_gets_current_weights kills a worker in make test
@pytest.mark.e2e
@pytest.mark.parametrize("sync", [True, False])
def test_killed_workers_are_replaced_and_frames_stay_exact(sync):
    policy = constant_policy(1)
    with RayCollector(
        counting(5, sleep=0.001),
        policy,
        frames_per_batch=40,
        total_frames=400,
        num_collectors=2,
        sync=sync,
        prefetch=1,
    ) as c:
        seen, count = 0, 0
        for i, b in enumerate(c):
            seen += frames_in(b)
            count += 1
            if i == 1:
                c.update_policy_weights_()
                kill_worker(c, 0)
            if i == 4:
                kill_worker(c, 1)
            if i > 2:
                # a replaced worker runs the current weights
                assert int(b["collector", "policy_version"].min()) >= 0
        stats = c.stats()
    assert seen == 400 and count == 10
    assert stats["frames"] == 400
    assert stats["restarts"] == {0: 1, 1: 1}
    assert sum(stats["frames_per_worker"].values()) == 400


@pytest.mark.e2e  # the same accounting in-process: tests/unit/collectors/test_ray_accounting.py
@pytest.mark.parametrize("sync", [True, False])
def test_replacements_that_keep_dying_raise_and_accounting_stays_exact(sync, tmp_path):
    assert_keep_dying_gives_up(RayCollector, sync, str(tmp_path / "deaths"), "actor died")


def test_replaced_worker_gets_current_weights():
    policy = constant_policy(0)
    with RayCollector(
        counting(50), policy, frames_per_batch=10, total_frames=-1, num_collectors=1, prefetch=0
    ) as c:
        it = iter(c)
        next(it)
        policy.module.value.data.fill_(1.0)
        c.update_policy_weights_()
        kill_worker(c, 0)
        b = next(it)
        assert (b["action"] == 1).all()
        assert (b["collector", "policy_version"] == 1).all()
        assert c.stats()["restarts"] == {0: 1}


def test_env_error_carries_worker_id_and_traceback():
    fns = [counting(5), counting(5, fail_at_step=30)]
    with RayCollector(fns, None, frames_per_batch=10, total_frames=1000, sync=False) as c:
        with pytest.raises(
            WorkerError, match=r"collector worker 1 raised:(.|\n)*CountingEnv exploded at step 30"
        ) as info:
            list(c)
        assert info.value.worker_id == 1
        cause = info.value.cause
        assert cause.startswith("Traceback")
        assert "fakes.py" in cause and "in step" in cause  # the env's own frames
        assert "\x1b[" not in cause


def test_shutdown_does_not_hang_with_dead_workers_and_tasks_in_flight():
    c = RayCollector(
        counting(5, sleep=0.01),
        None,
        frames_per_batch=50,
        total_frames=-1,
        num_collectors=2,
        prefetch=2,
    )
    it = iter(c)
    next(it)
    kill_worker(c, 0)
    c.shutdown()
    c.shutdown()
    assert ray.is_initialized()  # the session's Ray instance is not ours to stop


# ------------------------------------------------------------ bad input


def test_unsatisfiable_resources_refused_before_any_actor(tmp_path):
    marker = tmp_path / "env-built"  # a line per build: the pid that built it

    def env_fn():
        with marker.open("a") as f:
            f.write(f"{os.getpid()}\n")
        return CountingEnv()

    with pytest.raises(ConfigError, match=r"ask for 2000 CPU in all but the Ray cluster has 4"):
        RayCollector(
            env_fn, None, frames_per_batch=10, num_collectors=2, remote_configs={"num_cpus": 1000}
        )
    with pytest.raises(
        ConfigError, match=r"collector 0 asks for 1 GPU but no Ray node has more than 0"
    ):
        RayCollector(
            env_fn, None, frames_per_batch=10, remote_configs={"num_cpus": 1, "num_gpus": 1}
        )
    # no worker built it: only this process did, once per collector, to check its spaces
    assert marker.read_text().split() == [str(os.getpid())] * 2


def test_a_collector_whose_cpus_other_actors_hold_says_it_will_wait(caplog):
    from fleetrl.collectors.remote.checks import WAIT_MSG, check_resources

    @ray.remote(num_cpus=2)
    class Holder:  # one actor holds 2 of the session's 4 CPUs
        def ready(self) -> bool:
            return True

    holder = Holder.remote()
    ray.get(holder.ready.remote())
    try:
        # idle warm workers' CPUs count as free: a start ends them (tests/conftest.py)
        free = ray.available_resources().get("CPU", 0) + warm.idle_held().get("CPU", 0)
        assert free <= 2
        with caplog.at_level(logging.WARNING, logger="fleetrl.collectors.remote.checks"):
            check_resources([{"num_cpus": 1}, {"num_cpus": 2}])  # 3 <= the cluster's 4
        assert WAIT_MSG.format(collectors="2 collectors", asked=3, name="CPU", free=free) in (
            caplog.text
        )
    finally:
        ray.kill(holder)


# ------------------------------------------------------------ preemption


def test_straggler_is_preempted_and_round_is_masked():
    fast, slow = counting(1000), counting(1000, sleep=0.02)
    with RayCollector(
        [fast, slow],
        None,
        frames_per_batch=400,
        total_frames=800,
        sync=True,
        fraction_workers=0.5,
        fraction_samples=0.1,
        prefetch=0,
    ) as c:
        batches = list(c)
        stats = c.stats()
    delivered = sum(frames_in(b) for b in batches)
    assert delivered == 800  # rounds continue until the budget is delivered
    first = batches[0]
    mask = first["collector", "mask"]
    assert first.batch_size == (2, 1, 200)
    assert mask[0].all()  # the fast worker finished its share of 200 steps
    slow_steps = int(mask[1].sum())
    assert 20 <= slow_steps < 200  # at least fraction_samples of its share, not all of it
    assert (first["next", "reward"][1][~mask[1]] == 0).all()  # padding
    for key in ("observation", ("next", "observation")):  # the compact wire's padding too
        assert (first[key][1][~mask[1]] == 0).all(), key
    # CountingEnv of 1000 steps: the next observation, rebuilt from the compact wire, is obs + 1
    obs, nxt = first["observation"][mask], first["next", "observation"][mask]
    assert torch.equal(nxt, obs + 1) and obs.shape == (200 + slow_steps, 1)
    assert stats["preempted_tasks"] >= 1
    assert len(batches) > math.ceil(800 / 400)


# ------------------------------------------------------------ compression, classes, seeds


@pytest.mark.parametrize("codec", ["lz4", pytest.param("zstd", marks=pytest.mark.e2e)])
def test_compression_is_lossless_and_reports_savings(codec):
    def run(compress):
        with RayCollector(
            counting(6),
            constant_policy(1),
            frames_per_batch=200,
            total_frames=400,
            num_collectors=1,
            compress=compress,
        ) as c:
            batches = list(c)
            return batches, c.stats()["compression"]

    plain, _ = run(None)
    packed, comp = run(codec)
    for a, b in zip(plain, packed):
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        for key in a.keys(True, True):
            if key != ("collector", "traj_ids"):
                assert torch.equal(a[key], b[key]), key
        assert b.names == a.names
    assert comp["codec"] == codec
    assert comp["bytes_saved"] > 0 and comp["bytes_raw"] == comp["bytes_saved"] + comp["bytes_sent"]


# episodes end at different steps in each env, inside each batch (a partial: workers get fakes')
_pixel_envs = functools.partial(pixel_vec, [3, 5, 7])
#: case -> (env, num_envs, policy or None, RayCollector compress, worker postproc)
BIT_FOR_BIT_CASES = {
    "cartpole": ("CartPole-v1", 3, categorical_actor, None, None),
    "pixel_compact": (_pixel_envs, None, None, None, None),
    "pixel_compact_lz4": (_pixel_envs, None, None, "lz4", None),
    "pixel_postproc_sent_in_full": (_pixel_envs, None, None, None, invert_next_observation),
}


@pytest.mark.parametrize("case", list(BIT_FOR_BIT_CASES))
@pytest.mark.parametrize("sync", [pytest.param(False, marks=pytest.mark.e2e), True])
def test_uncompressed_batches_match_local_collector_bit_for_bit_and_are_writable(sync, case):
    env, num_envs, make_policy, compress, postproc = BIT_FOR_BIT_CASES[case]
    torch.manual_seed(0)
    policy = None if make_policy is None else make_policy()
    local = SyncDataCollector(
        env, policy, frames_per_batch=120, total_frames=240, num_envs=num_envs, postproc=postproc
    )
    local.set_seed(5)
    expected = list(local)
    local.shutdown()
    with RayCollector(
        env,
        policy,
        frames_per_batch=120,
        total_frames=240,
        num_collectors=1,
        num_workers_per_collector=num_envs or 1,
        sync=sync,
        compress=compress,
        collector_kwargs=None if postproc is None else {"postproc": postproc},
    ) as c:
        c.set_seed(5)
        batches = list(c)
        wire = c.stats()["wire"]
    assert len(batches) == len(expected) == 2
    # what crossed Ray: compact unless a postproc ran on the worker; uncompressed, the next
    # observations cost the last step (3 envs) and the episode ends (t < T-1) with their positions
    full = sum(v.numel() * v.element_size() for b in expected for v in b.values(True, True))
    obs = expected[0]["observation"][0, 0]
    ends = sum(int(b["next", "done"][:, :-1].sum()) for b in expected)
    compact = full - (240 - 2 * 3 - ends) * obs.numel() * obs.element_size() + 8 * ends
    assert wire["bytes_full"] == full
    assert wire["compact_batches"] == (0 if postproc else 2)
    if compress is None:
        assert wire["bytes_sent"] == (full if postproc else compact)
    else:
        assert wire["bytes_sent"] < compact / 2  # lz4 on the compact leaves
    mask = ("collector", "mask")
    for got, want in zip(batches, expected):
        if sync:  # one worker: the round is its batch, stacked, with a mask of ones
            assert got.names == [None, None, "time"]
            assert got[mask].all() and got[mask].shape == (1, 3, 40)
            got = got.exclude(mask)[0]
        assert got.names == want.names == [None, "time"]
        assert got.batch_size == want.batch_size == (3, 40)
        assert set(got.keys(True, True)) == set(want.keys(True, True))
        for key in want.keys(True, True):
            assert got[key].dtype == want[key].dtype, key
            assert torch.equal(got[key], want[key]), key
        if case.startswith("pixel"):  # episodes ended inside the batch, in every env
            assert want["next", "done"][:, :-1].any(dim=1).all()
    for batch in batches:  # fresh memory, not Ray's read-only object store
        for key, value in batch.items(True, True):
            changed = ~value if value.dtype == torch.bool else value + 1
            value.copy_(changed)  # in place
            assert torch.equal(batch[key], changed), key


def test_torchrl_collector_class():
    from torchrl.collectors import Collector
    from torchrl.envs import GymEnv

    env_fn = lambda: GymEnv("CartPole-v1", categorical_action_encoding=True)  # noqa: E731
    with RayCollector(
        env_fn,
        categorical_actor(),
        frames_per_batch=100,
        total_frames=300,
        collector_class=Collector,
        num_collectors=2,
        sync=True,
    ) as c:
        batches = list(c)
    assert [frames_in(b) for b in batches] == [100, 100, 100]
    assert batches[0].batch_size == (2, 50)
    assert batches[0]["collector", "worker_id"][1].unique().tolist() == [1]


def test_add_collectors_really_adds_workers():
    with RayCollector(
        counting(), None, frames_per_batch=10, total_frames=200, num_collectors=1
    ) as c:
        it = iter(c)
        next(it)
        assert c.add_collectors(1) == [1]
        assert c.num_collectors == 2
        workers = {int(b["collector", "worker_id"][0, 0]) for b in it}
        assert workers == {0, 1}
        assert c.frames == 200

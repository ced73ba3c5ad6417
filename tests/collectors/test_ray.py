"""RayCollector on a real local Ray instance (one per test session, see conftest)."""

from __future__ import annotations

import functools
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import ray
import torch
from tensordict import TensorDict

from fakes import CountingEnv, ExitOnBuild, GatedEnv, invert_next_observation, pixel_vec
from fleetrl import (
    ConfigError,
    RayCollector,
    SyncDataCollector,
    WorkerError,
    WorkerLostError,
    episode_stats,
)
from fleetrl.collectors.arguments import VERSION_MSG
from fleetrl.collectors.ray_checks import MAX_RESTART_ATTEMPTS_ALLOWED, MAX_SERVED_LAG_ALLOWED
from fleetrl.errors import bad_value
from fleetrl.workers import GAVE_UP_MSG
from policies import categorical_actor, constant_policy

pytestmark = pytest.mark.usefixtures("ray_session")


def counting(length: int = 5, sleep: float = 0.0, fail_at_step: int | None = None):
    return lambda: CountingEnv(length, sleep=sleep, fail_at_step=fail_at_step)


def frames_of(batch) -> int:
    if ("collector", "mask") in batch.keys(include_nested=True):
        return int(batch["collector", "mask"].sum())
    return batch.numel()


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
    assert [frames_of(b) for b in batches] == [400, 400, 200]
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


def test_iteration_is_repeatable_and_endless_mode_yields():
    with RayCollector(
        counting(), None, frames_per_batch=20, total_frames=100, num_collectors=2
    ) as c:
        for i, _ in enumerate(c):
            if i == 1:
                break
        assert c.frames == 40
        assert sum(b.numel() for b in c) == 60
        assert c.frames == 100
    with RayCollector(
        counting(), None, frames_per_batch=20, total_frames=-1, num_collectors=1
    ) as c:
        got = [b.numel() for _, b in zip(range(5), c)]
    assert got == [20] * 5


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


def test_update_policy_weights_with_a_version_tags_the_batches_after_it():
    """A learner publishes its optimizer-step count: batches carry it, lag counts it."""
    policy = constant_policy(0)
    with RayCollector(
        counting(50),
        policy,
        frames_per_batch=10,
        total_frames=-1,
        num_collectors=2,
        sync=True,
        prefetch=0,
    ) as c:
        it = iter(c)
        assert (next(it)["collector", "policy_version"] == 0).all()
        policy.module.value.data.fill_(1.0)
        assert c.update_policy_weights_(version=16) == 16 == c.policy_version
        second = next(it)
        assert (second["action"] == 1).all()  # the weights came with the version
        assert (second["collector", "policy_version"] == 16).all()
        assert c.update_policy_weights_() == 17  # default: the newest + 1, as SyncDataCollector
        assert (next(it)["collector", "policy_version"] == 17).all()
        # a targeted publish moves the version for the named workers only
        assert c.update_policy_weights_(worker_ids=[1], version=20) == 20
        third = next(it)
        tags = third["collector", "policy_version"]
        assert [tags[w].unique().tolist() for w in (0, 1)] == [[17], [20]]
        for bad in (19, 3, 21.0, True):  # versions never go back, and are ints
            with pytest.raises(
                ConfigError,
                match=re.escape(bad_value("version", bad, VERSION_MSG.format(current=20))),
            ):
                c.update_policy_weights_(version=bad)
        assert c.policy_version == 20
        # the same version again: weights changed without an optimizer step (DQN's epsilon)
        policy.module.value.data.fill_(0.0)
        assert c.update_policy_weights_(version=20) == 20
        fourth = next(it)
        assert (fourth["action"] == 0).all()  # every worker loaded them
        assert (fourth["collector", "policy_version"] == 20).all()


def test_max_served_lag_counts_the_published_versions():
    """With a learner's versions (optimizer steps), the bound is in optimizer steps."""
    with RayCollector(
        counting(50),
        constant_policy(0),
        frames_per_batch=10,
        total_frames=-1,
        num_collectors=1,
        sync=True,
        prefetch=1,
        max_served_lag=4,
    ) as c:
        it = iter(c)
        tags = [int(next(it)["collector", "policy_version"].min())]  # the next round starts
        c.update_policy_weights_(version=4)
        tags.append(int(next(it)["collector", "policy_version"].min()))  # 4 behind: served
        c.update_policy_weights_(version=9)
        tags.append(int(next(it)["collector", "policy_version"].min()))  # 5 behind: again
        stats = c.stats()
    assert tags == [0, 0, 9]
    assert stats["stale_batches"] == 1 and stats["policy_lag"]["max"] == 4


@pytest.mark.parametrize(("prefetch", "max_lag"), [(0, 0), (1, 1)])
def test_update_after_each_batch_and_prefetch_lag(prefetch, max_lag):
    with RayCollector(
        counting(9),
        constant_policy(1),
        frames_per_batch=20,
        total_frames=200,
        num_collectors=2,
        sync=True,
        update_after_each_batch=True,
        prefetch=prefetch,
    ) as c:
        versions = [int(b["collector", "policy_version"].max()) for b in c]
        stats = c.stats()
    assert stats["policy_version"] == 9  # published before each of batches 2..10
    assert stats["policy_lag"]["max"] == max_lag
    assert versions[-1] == 9 - max_lag


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


@pytest.mark.parametrize(("prefetch", "bound"), [(0, None), (0, 0), (1, 1)])
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


@pytest.mark.parametrize("bound", [None, 1])
def test_sync_lag_bound_with_a_slow_worker_and_extra_publishes(bound):
    with RayCollector(
        [counting(5), counting(5, sleep=0.002)],
        constant_policy(1),
        frames_per_batch=20,
        total_frames=200,
        sync=True,
        prefetch=1,
        max_served_lag=bound,
    ) as c:
        lags = []
        for b in c:
            lags.append(c.policy_version - int(b["collector", "policy_version"].min()))
            for _ in range(3):  # three versions while the next round is in flight
                c.update_policy_weights_()
        stats = c.stats()
    assert stats["frames"] == 200 and stats["batches"] == 10
    if bound is None:
        assert lags == [0] + [3] * 9  # the prefetched round ran on the weights 3 versions back
        assert stats["stale_batches"] == 0
    else:
        assert lags == [0] * 10  # each stale round was collected again on the current weights
        assert stats["stale_batches"] == 9 * 2  # both workers' shares of rounds 2..10
        assert stats["stale_frames"] == 9 * 20
    assert stats["policy_lag"]["max"] == max(lags)
    assert stats["policy_lag"]["mean"] == pytest.approx(sum(lags) / 10)
    assert sum(stats["frames_per_worker"].values()) == 200


# ------------------------------------------------------------ faults


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
            seen += frames_of(b)
            count += 1
            if i == 1:
                c.update_policy_weights_()
                ray.kill(c.worker_handles()[0])
            if i == 4:
                ray.kill(c.worker_handles()[1])
            if i > 2:
                # a replaced worker runs the current weights
                assert int(b["collector", "policy_version"].min()) >= 0
        stats = c.stats()
    assert seen == 400 and count == 10
    assert stats["frames"] == 400
    assert stats["restarts"] == {0: 1, 1: 1}
    assert sum(stats["frames_per_worker"].values()) == 400


@pytest.mark.parametrize("sync", [True, False])
def test_replacements_dying_at_start_are_retried_and_frames_stay_exact(sync, tmp_path):
    factory = ExitOnBuild(str(tmp_path / "deaths"), length=5, sleep=0.001)
    with RayCollector(
        [factory, counting(5, sleep=0.001)],
        constant_policy(1),
        frames_per_batch=40,
        total_frames=400,
        sync=sync,
        prefetch=1,
    ) as c:
        seen = []
        for i, b in enumerate(c):
            seen.append(frames_of(b))
            if i == 1:
                factory.arm(2)  # the first two replacements die while building their env
                ray.kill(c.worker_handles()[0])
        stats = c.stats()
    assert factory.deaths_left() == 0
    assert sum(seen) == 400 and len(seen) == 10
    assert stats["frames"] == 400 == sum(stats["frames_per_worker"].values())
    assert stats["restarts"] == {0: 3, 1: 0}  # two died starting, the third runs
    assert stats["pending"] == {"tasks": 0, "frames": 0}


@pytest.mark.parametrize("sync", [True, False])
def test_replacements_that_keep_dying_raise_and_accounting_stays_exact(sync, tmp_path):
    factory = ExitOnBuild(str(tmp_path / "deaths"), length=5, sleep=0.001)
    gave_up = GAVE_UP_MSG.split("Last cause")[0].format(attempts=1, max_attempts=1)
    with RayCollector(
        [factory, counting(5, sleep=0.001)],
        constant_policy(1),
        frames_per_batch=40,
        total_frames=400,
        sync=sync,
        prefetch=1,
        max_restart_attempts=1,
    ) as c:
        seen = [frames_of(c.next()) for _ in range(2)]
        factory.arm(1)
        ray.kill(c.worker_handles()[0])
        with pytest.raises(
            WorkerLostError, match="collector worker 0 was lost: " + re.escape(gave_up)
        ) as info:
            for _ in range(10):
                seen.append(frames_of(c.next()))
        assert isinstance(info.value, WorkerError)
        assert info.value.worker_id == 0 and info.value.attempts == 1
        assert "actor died" in info.value.cause.lower()  # the last death's own cause
        # the books are exact: what was served, and what is still owed (the lost task too)
        assert c.frames == sum(seen) and c.remaining_frames == 400 - sum(seen)
        in_flight = 40 if sync else 2 * 40  # one round of two shares / one task per worker
        assert c.stats()["pending"]["frames"] == min(in_flight, 400 - sum(seen))
        # the caller goes on: a new series of attempts, and exactly the budget
        seen.extend(frames_of(b) for b in c)
        stats = c.stats()
    assert sum(seen) == 400 and len(seen) == 10
    assert stats["frames"] == 400 == sum(stats["frames_per_worker"].values())
    assert stats["restarts"] == {0: 2, 1: 0}
    assert stats["pending"] == {"tasks": 0, "frames": 0}


def test_replaced_worker_gets_current_weights():
    policy = constant_policy(0)
    with RayCollector(
        counting(50), policy, frames_per_batch=10, total_frames=-1, num_collectors=1, prefetch=0
    ) as c:
        it = iter(c)
        next(it)
        policy.module.value.data.fill_(1.0)
        c.update_policy_weights_()
        ray.kill(c.worker_handles()[0])
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
    ray.kill(c.worker_handles()[0])
    c.shutdown()
    c.shutdown()
    assert ray.is_initialized()  # the session's Ray instance is not ours to stop


# ------------------------------------------------------------ bad input


def test_bad_input_is_refused_before_any_actor_starts(tmp_path):
    marker = tmp_path / "env-built"

    def env_fn():
        marker.write_text("built")
        return CountingEnv()

    with pytest.raises(ConfigError) as info:
        RayCollector(
            [env_fn, env_fn],
            None,
            frames_per_batch=16,
            num_collectors=3,
            sync=True,
            collector_kwargs=[{}, {}],
            collector_class=dict,
            remote_configs={"num_cpus": 1000},
            fraction_workers=1.5,
        )
    msg = str(info.value)
    assert (
        "create_env_fn='<list of 2>' is invalid: a list must have one entry per collector (num_collectors=3)"
        in msg
    )
    assert "collector_kwargs='<list of 2>' is invalid" in msg
    assert "collector_class=<class 'dict'> is invalid: must be fleetrl.SyncDataCollector" in msg
    assert (
        "frames_per_batch=16 is invalid: sync=True splits each batch across the 3 collectors" in msg
    )
    assert "fraction_workers=1.5 is invalid: must be in (0, 1]" in msg
    assert not marker.exists()


def test_bad_fault_bounds_are_refused_with_the_others_before_any_actor(tmp_path):
    marker = tmp_path / "env-built"

    def env_fn():
        marker.write_text("built")
        return CountingEnv()

    with pytest.raises(ConfigError) as info:
        RayCollector(
            env_fn,
            None,
            frames_per_batch=16,
            prefetch=-1,
            max_served_lag=-1,
            max_restart_attempts=True,
        )
    assert info.value.problems == [
        "prefetch=-1 is invalid: must be an int >= 0",
        bad_value("max_served_lag", -1, MAX_SERVED_LAG_ALLOWED),
        bad_value("max_restart_attempts", True, MAX_RESTART_ATTEMPTS_ALLOWED),
    ]
    assert not marker.exists()


def test_config_keys_reach_the_collector_and_are_checked():
    from fleetrl.setup.build import make_collector
    from fleetrl.setup.load import config_from_dict

    sections = {"env": {"id": "CartPole-v1", "num_envs": 1}}
    collector = {"num_collectors": 1, "frames_per_batch": 16, "sync": False}
    config = config_from_dict(
        {**sections, "collector": {**collector, "max_served_lag": 2, "max_restart_attempts": 5}}
    )
    c = make_collector(config, None, total_frames=32, seed=0)
    try:
        assert (c.max_served_lag, c.max_restart_attempts) == (2, 5)
        assert sum(frames_of(b) for b in c) == 32
        assert c.stats()["policy_lag"]["bound"] == 2
    finally:
        c.shutdown()
    with pytest.raises(ConfigError) as info:
        config_from_dict(
            {**sections, "collector": {"max_served_lag": -1, "max_restart_attempts": -2}}
        )
    assert info.value.problems == [
        "collector.max_served_lag=-1 is invalid: must be null (no bound) or >= 0",
        "collector.max_restart_attempts=-2 is invalid: must be >= 0 (0: a collector worker's "
        "death ends the run)",
    ]


def test_bad_max_frames_per_traj_refused_before_any_actor(tmp_path):
    marker = tmp_path / "env-built"

    def env_fn():
        marker.write_text("built")
        return CountingEnv()

    with pytest.raises(
        ConfigError, match=r"max_frames_per_traj=0 is invalid: must be an int > 0 or -1"
    ):
        RayCollector(env_fn, None, frames_per_batch=10, max_frames_per_traj=0)
    assert not marker.exists()


def test_unsatisfiable_resources_refused_before_any_actor(tmp_path):
    marker = tmp_path / "env-built"

    def env_fn():
        marker.write_text("built")
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
    assert not marker.exists()


def test_preemption_settings_need_sync_mode():
    with pytest.raises(
        ConfigError,
        match=r"fraction_workers=0.5 is invalid: straggler preemption only applies to sync=True",
    ):
        RayCollector(counting(), None, frames_per_batch=10, sync=False, fraction_workers=0.5)


def test_sync_share_not_divisible_by_envs():
    with pytest.raises(
        ConfigError,
        match=r"frames_per_batch / num_collectors = 30 frames per collector must be a multiple of each collector's 4 envs; use frames_per_batch=56 or 64",
    ):
        RayCollector(
            counting(),
            None,
            frames_per_batch=60,
            num_collectors=2,
            sync=True,
            num_workers_per_collector=4,
        )


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
    delivered = sum(frames_of(b) for b in batches)
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


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
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
@pytest.mark.parametrize("sync", [False, True])
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


def test_unpack_batch_copies_uncompressed_leaves_unless_told_not_to():
    from fleetrl.wire import pack_batch, unpack_batch

    batch = TensorDict(
        {"observation": torch.arange(24, dtype=torch.uint8).reshape(2, 3, 4)},
        batch_size=(2, 3),
        names=[None, "time"],
    )
    batch["next", "reward"] = torch.randn(2, 3, 1)
    packed, raw, sent = pack_batch(batch, None)
    assert raw == sent == 24 + 2 * 3 * 4
    assert all(isinstance(v, np.ndarray) for v in packed["leaves"].values())
    for leaf in packed["leaves"].values():  # as Ray hands them over from its object store
        leaf.flags.writeable = False
    copied = unpack_batch(packed)
    mapped = unpack_batch(packed, copy=False)
    for key, leaf in packed["leaves"].items():
        assert torch.equal(copied[key], batch[key]) and torch.equal(mapped[key], batch[key])
        assert copied[key].dtype == batch[key].dtype
        assert not np.shares_memory(copied[key].numpy(), leaf), key
        assert np.shares_memory(mapped[key].numpy(), leaf), key
    assert copied.names == mapped.names == [None, "time"]


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
    assert [frames_of(b) for b in batches] == [100, 100, 100]
    assert batches[0].batch_size == (2, 50)
    assert batches[0]["collector", "worker_id"][1].unique().tolist() == [1]


def test_same_seed_same_batches():
    def run():
        torch.manual_seed(0)
        with RayCollector(
            "CartPole-v1",
            categorical_actor(),
            frames_per_batch=80,
            total_frames=160,
            num_collectors=2,
            num_workers_per_collector=2,
            sync=True,
        ) as c:
            c.set_seed(11)
            return list(c)

    a, b = run(), run()
    for x, y in zip(a, b):
        assert torch.equal(x["observation"], y["observation"])
        assert torch.equal(x["action"], y["action"])


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


def test_state_dict_round_trip():
    with RayCollector(
        counting(), constant_policy(1), frames_per_batch=10, total_frames=100, num_collectors=2
    ) as c:
        next(iter(c))
        c.update_policy_weights_()
        state = c.state_dict()
    assert state["frames"] == 10 and state["policy_version"] == 1
    with RayCollector(
        counting(), constant_policy(1), frames_per_batch=10, total_frames=100, num_collectors=2
    ) as c2:
        c2.load_state_dict(state)
        assert c2.frames == 10 and c2.policy_version == 1
        assert sum(b.numel() for b in c2) == 90


def test_collector_kwargs_per_collector_and_custom_sync_collector():
    class Tagged(SyncDataCollector):
        pass

    with RayCollector(
        [counting(3), counting(4)],
        None,
        frames_per_batch=12,
        total_frames=24,
        collector_class=Tagged,
        collector_kwargs=[{"num_envs": 2}, {"num_envs": 3}],
    ) as c:
        sizes = sorted(b.batch_size[0] for b in c)
    assert sizes == [2, 3]


# ------------------------------------------------------------ multi-node


def test_collectors_run_on_a_second_node_of_a_local_cluster():
    script = textwrap.dedent(
        """
        import json, sys
        import ray
        from ray import cloudpickle
        from ray.cluster_utils import Cluster
        sys.path.insert(0, {tests!r})
        import fakes
        from fakes import CountingEnv
        from fleetrl import RayCollector
        cloudpickle.register_pickle_by_value(fakes)

        cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 1}})
        worker_node = cluster.add_node(num_cpus=2, resources={{"second_node": 2}})
        cluster.wait_for_nodes()
        with RayCollector(lambda: CountingEnv(5), None, frames_per_batch=40, total_frames=120,
                          num_collectors=2, sync=True,
                          remote_configs={{"num_cpus": 1, "resources": {{"second_node": 1}}}},
                          ray_init_config={{"address": cluster.address}}) as c:
            frames = sum(int(b["collector", "mask"].sum()) for b in c)
            nodes = set(c.stats()["nodes"].values())
        print(json.dumps({{"frames": frames, "nodes": sorted(nodes), "worker_node": worker_node.node_id,
                          "ray_still_up": ray.is_initialized()}}))
        cluster.shutdown()
        """
    ).format(tests=str(Path(__file__).parent.parent))
    env = dict(os.environ, RAY_DEDUP_LOGS="0")
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=240, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["frames"] == 120
    assert result["nodes"] == [result["worker_node"]]
    assert (
        result["ray_still_up"] is False
    )  # the collector started (attached) Ray, so it disconnected

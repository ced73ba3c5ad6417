"""RayCollector's accounting on the in-process backend (fleetrl.distributed.backends): exact frames,
versions, lag bounds, restarts and argument checks, in milliseconds. The same class on real
Ray actors: tests/integration/test_ray_collector.py."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from collecting import assert_keep_dying_gives_up
from fakes import (
    CountingEnv,
    ExitOnBuild,
    counting,
    kill_worker,
)
from fleetrl import (
    ConfigError,
    RayCollector,
    SyncDataCollector,
)
from fleetrl.collectors import frames_in
from fleetrl.collectors.arguments import VERSION_MSG
from fleetrl.collectors.remote.checks import MAX_RESTART_ATTEMPTS_ALLOWED, MAX_SERVED_LAG_ALLOWED
from fleetrl.errors import bad_value
from policies import categorical_actor, constant_policy

#: every collector here runs its workers in this process
RayCollector = functools.partial(RayCollector, backend="inprocess")


# ------------------------------------------------------------ both modes


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
            seen.append(frames_in(b))
            if i == 1:
                factory.arm(2)  # the first two replacements die while building their env
                kill_worker(c, 0)
        stats = c.stats()
    assert factory.deaths_left() == 0
    assert sum(seen) == 400 and len(seen) == 10
    assert stats["frames"] == 400 == sum(stats["frames_per_worker"].values())
    assert stats["restarts"] == {0: 3, 1: 0}  # two died starting, the third runs
    assert stats["pending"] == {"tasks": 0, "frames": 0}


@pytest.mark.parametrize("sync", [True, False])
def test_replacements_that_keep_dying_raise_and_accounting_stays_exact(sync, tmp_path):
    """The give-up path in-process (the same with real Ray kills:
    tests/integration/test_ray_collector.py, with the end-to-end tests)."""
    assert_keep_dying_gives_up(RayCollector, sync, str(tmp_path / "deaths"), "exitonbuild")


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

    sections = {"env": {"id": "CartPole-v1", "num_envs": 1}, "trainer": {"backend": "inprocess"}}
    collector = {"num_collectors": 1, "frames_per_batch": 16, "sync": False}
    config = config_from_dict(
        {**sections, "collector": {**collector, "max_served_lag": 2, "max_restart_attempts": 5}}
    )
    c = make_collector(config, None, total_frames=32, seed=0)
    try:
        assert (c.max_served_lag, c.max_restart_attempts) == (2, 5)
        assert sum(frames_in(b) for b in c) == 32
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


# ------------------------------------------------------------ compression, classes, seeds


def test_unpack_batch_copies_uncompressed_leaves_unless_told_not_to():
    from fleetrl.distributed.wire import pack_batch, unpack_batch

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


# ------------------------------------------------------------ where the time goes

PARTS = ("env_s", "policy_s", "pack_s", "weights_s", "transfer_s", "unpack_s")


@pytest.mark.parametrize("sync", [True, False])
def test_the_parts_of_every_worker_count_its_served_tasks(sync):
    with RayCollector(
        counting(),
        constant_policy(1),
        frames_per_batch=20,
        total_frames=100,
        num_collectors=2,
        sync=sync,
    ) as c:
        frames = 0
        for b in c:
            frames += b.numel()
            c.update_policy_weights_()  # new weights for the workers to load
        stats = c.stats()
        taken = c.take_times()
    assert frames == 100
    per_worker = stats["time_per_worker"]
    assert set(per_worker) == {0, 1} == set(stats["frames_per_worker"])
    for w, t in per_worker.items():
        assert t["frames"] == stats["frames_per_worker"][w]
        assert all(t[p] >= 0 for p in PARTS)  # every part measured (NaN is not >= 0)
        assert t["per_batch"]["env_s"] == pytest.approx(t["env_s"] / t["batches"])
        # the task's collect_s holds the weights, the loop and building the batch; the wire
        # packing (pack_s) comes after it, so it is left out here
        assert t["weights_s"] + t["env_s"] + t["policy_s"] <= t["collect_s"]
    assert sum(t["batches"] for t in per_worker.values()) == (10 if sync else 5)
    # the learner's view: one entry per served batch, the frames of every task
    assert (taken.batches, taken.frames) == (5, 100)
    assert all(getattr(taken, p) >= 0 for p in PARTS)
    assert stats["worker_collect_s"] == pytest.approx(
        sum(t["collect_s"] for t in per_worker.values())
    )


def test_the_replacement_wait_is_checked_where_it_enters_and_reaches_the_collector(tmp_path):
    from fleetrl.setup.build import make_collector
    from fleetrl.setup.load import config_from_dict

    marker = tmp_path / "env-built"

    def env_fn():
        marker.write_text("built")
        return CountingEnv()

    for bad in (0, -1.5, True, "soon"):
        with pytest.raises(ConfigError) as info:
            RayCollector(env_fn, None, frames_per_batch=16, replacement_timeout_s=bad)
        assert info.value.problems == [
            f"replacement_timeout_s={bad!r} is invalid: must be a number > 0"
        ]
    assert not marker.exists()
    sections = {"env": {"id": "CartPole-v1", "num_envs": 1}, "trainer": {"backend": "inprocess"}}
    with pytest.raises(ConfigError) as info:
        config_from_dict({**sections, "collector": {"replacement_timeout_s": 0}})
    assert info.value.problems == ["collector.replacement_timeout_s=0.0 is invalid: must be > 0"]
    collector = {"num_collectors": 1, "frames_per_batch": 16, "replacement_timeout_s": 7.5}
    config = config_from_dict({**sections, "collector": collector})
    c = make_collector(config, None, total_frames=32, seed=0)
    try:
        assert c.replacement_timeout_s == 7.5
        assert sum(frames_in(b) for b in c) == 32
    finally:
        c.shutdown()

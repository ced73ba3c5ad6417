"""RayCollector(replay_buffer=...): workers write into a replay buffer actor (real Ray)."""

from __future__ import annotations

import pytest
import torch

from fakes import counting
from fleetrl import ConfigError, RayCollector
from fleetrl.collectors.remote.collector import POLL_MSG
from fleetrl.collectors.remote.replay import BAD_BUFFER_ALLOWED, TRANSITION_KEYS, RemoteReplayBuffer
from policies import constant_policy

pytestmark = pytest.mark.usefixtures("ray_session")


def test_workers_write_exact_frames_and_iteration_yields_progress():
    rb = RemoteReplayBuffer(1000, 16)
    try:
        with RayCollector(
            counting(7),
            constant_policy(1),
            frames_per_batch=60,
            total_frames=250,
            num_collectors=2,
            num_workers_per_collector=2,
            replay_buffer=rb,
        ) as c:
            progress = list(c)
            assert c.frames == 250
        # one record per task: 4 full tasks and the 10-frame remainder
        assert sorted(int(p["frames"]) for p in progress) == [10, 60, 60, 60, 60]
        assert sum(int(p["frames"]) for p in progress) == 250
        assert len(rb) == rb.write_count() == 250
        # the buffer's write count rises by each record's frames, in the order written
        written = sorted(int(p["written"]) for p in progress)
        assert written[-1] == 250
        for p in progress:
            assert p.batch_size == torch.Size([])
            assert int(p["collector", "worker_id"]) in (0, 1)
            assert int(p["collector", "policy_version"]) == 0
        # counting env: every finished episode has length 7 and return 2 * 7
        returns = torch.cat([p["episode_return"] for p in progress])
        lengths = torch.cat([p["episode_length"] for p in progress])
        assert returns.numel() > 0 and (returns == 14).all() and (lengths == 7).all()
        # the transitions: the off-policy keys and the version tag, nothing else
        sample = rb.sample(3)
        assert sample.batch_size == torch.Size([3, 16])
        keys = set(sample.exclude("index").keys(include_nested=True, leaves_only=True))
        assert keys == {*TRANSITION_KEYS, ("collector", "policy_version")}
        # a transition never spans two episodes: next observation = observation + 1, or 7 -> done
        obs, nxt = sample["observation"], sample["next", "observation"]
        assert (nxt == obs + 1).all()
        assert (sample["next", "done"].squeeze(-1) == (nxt.squeeze(-1) == 7)).all()
    finally:
        rb.shutdown()


def test_poll_serves_what_is_done_and_versions_tag_the_records():
    rb = RemoteReplayBuffer(1000, 8)
    try:
        with RayCollector(
            counting(5),
            constant_policy(0),
            frames_per_batch=20,
            total_frames=200,
            num_collectors=2,
            replay_buffer=rb,
        ) as c:
            records = c.poll(timeout=None)  # waits for the first task
            assert records and all(int(r["collector", "policy_version"]) == 0 for r in records)
            c.update_policy_weights_(version=3)
            while c.remaining_frames or c.stats()["pending"]["tasks"]:
                more = c.poll(timeout=None)
                if not more:
                    break
                records += more
            assert c.poll() == []  # the budget is spent
            assert c.frames == 200
        assert sum(int(r["frames"]) for r in records) == 200 == rb.write_count()
        # tasks issued after the publish carry version 3
        assert int(records[-1]["collector", "policy_version"]) == 3
    finally:
        rb.shutdown()


def test_poll_without_issuing_lets_the_workers_run_dry():
    rb = RemoteReplayBuffer(1000, 8)
    try:
        with RayCollector(
            counting(5), None, frames_per_batch=20, total_frames=-1, replay_buffer=rb
        ) as c:
            first = c.poll(timeout=None)  # one task issued, then served
            assert sum(int(r["frames"]) for r in first) == 20
            # one more task was issued after serving; without issuing, it is the last
            records = []
            while c.stats()["pending"]["tasks"]:
                records += c.poll(timeout=None, issue=False)
            assert sum(int(r["frames"]) for r in records) == 20
            assert c.poll(timeout=0.05, issue=False) == []
            assert c.frames == rb.write_count() == 40
    finally:
        rb.shutdown()


def test_replay_buffer_conflicts_are_refused_before_any_actor():
    with pytest.raises(ConfigError) as err:
        RayCollector(
            counting(5),
            None,
            frames_per_batch=20,
            total_frames=40,
            sync=True,
            max_served_lag=2,
            replay_buffer=object(),
        )
    msg = str(err.value)
    assert f"replay_buffer='object' is invalid: {BAD_BUFFER_ALLOWED}" in msg
    assert "sync=True is invalid: use sync=False" in msg
    assert "max_served_lag=2 is invalid: a stale batch is discarded" in msg


def test_poll_needs_first_ready_mode():
    c = RayCollector(counting(5), None, frames_per_batch=20, total_frames=40, sync=True)
    try:
        with pytest.raises(ConfigError) as err:
            c.poll()
    finally:
        c.shutdown()
    assert err.value.problems == [POLL_MSG.format(sync=True, trajs=None)]


#: about 6 s: runs with make test-all (marker e2e), so make test stays within 6 min
@pytest.mark.e2e
def test_workers_write_into_torchrls_ray_owned_replay_buffer():
    # torchrl 0.14.1's documented construction of its Ray-owned replay service
    from functools import partial

    from torchrl.data import LazyTensorStorage, ReplayBuffer

    buffer = ReplayBuffer(
        storage=partial(LazyTensorStorage, 1000),
        batch_size=4,
        service_backend="ray",
        service_backend_options={"remote_config": {"num_cpus": 0}},
        transport="auto",
    )
    try:
        with RayCollector(
            counting(7),
            constant_policy(1),
            frames_per_batch=60,
            total_frames=250,
            num_collectors=2,
            replay_buffer=buffer,
        ) as c:
            progress = list(c)
        assert sum(int(p["frames"]) for p in progress) == 250
        assert len(buffer) == 250  # every transition, once
        assert max(int(p["written"]) for p in progress) == 250
        sample = buffer.sample()
        assert sample.batch_size == torch.Size([4])
        assert set(TRANSITION_KEYS) <= set(sample.keys(include_nested=True))
    finally:
        buffer.shutdown()


def test_the_buffer_lives_on_the_drivers_node_unless_told_otherwise():
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from fleetrl.distributed.backends import RayBackend

    class Recording(RayBackend):  # Ray's backend, keeping the options each start was given
        def start(self, cls, *args, options=None, **kwargs):
            self.options = dict(options or {})
            return super().start(cls, *args, options=options, **kwargs)

    driver = ray.get_runtime_context().get_node_id()
    placed = Recording()
    rb = RemoteReplayBuffer(100, 4, backend=placed)
    try:
        strategy = placed.options["scheduling_strategy"]
        assert isinstance(strategy, NodeAffinitySchedulingStrategy)
        assert (strategy.node_id, strategy.soft) == (driver, False)
        assert rb.actor.ask("node") == driver
    finally:
        rb.shutdown()
    free = Recording()
    rb = RemoteReplayBuffer(100, 4, backend=free, on_driver_node=False)
    try:
        assert "scheduling_strategy" not in free.options
        assert rb.actor.ask("node") == driver  # one node here: Ray's choice is this one
    finally:
        rb.shutdown()

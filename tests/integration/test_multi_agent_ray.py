"""RayCollector on a multi-agent torchrl env: each worker's SyncDataCollector batches in
torchrl's grouped layout, stacked in front in sync mode or served first ready (compressed or
not), through torchrl's front door too, counted exactly when a worker dies."""

from __future__ import annotations

import functools

import pytest
import torch
from torchrl.testing.mocking_classes import (
    MultiAgentCountingEnv,
    MultiKeyCountingEnv,
    NestedCountingEnv,
)

from fleetrl import RayCollector, SyncDataCollector, episode_stats
from fleetrl.collectors import frames_in
from fleetrl.keys import POLICY_VERSION_KEY, TRAJ_IDS_KEY, WORKER_ID_KEY

pytestmark = pytest.mark.usefixtures("ray_session")


#: a torchrl class and its arguments: workers import it, they do not import tests/
_nested_env = functools.partial(NestedCountingEnv, batch_size=(2,))


def _layout(batch, lead: int):
    """Leaf key -> (shape without the first ``lead`` dims, dtype)."""
    return {
        key: (tuple(batch.get(key).shape[lead:]), batch.get(key).dtype)
        for key in batch.keys(include_nested=True, leaves_only=True)
    }


def _local_layout(make_env=_nested_env):
    """The layout of one 12-frame batch from a local collector (the nested env: 2 envs x 6
    steps)."""
    with SyncDataCollector(make_env, None, frames_per_batch=12, total_frames=12) as local:
        return _layout(local.next(), 0)


def _on_ray(make_env, frames_per_batch: int, sync: bool, total_frames: int = 48):
    """Every batch of a 2-worker RayCollector, and the frames it counted."""
    with RayCollector(
        make_env,
        None,
        frames_per_batch=frames_per_batch,
        total_frames=total_frames,
        num_collectors=2,
        sync=sync,
    ) as collector:
        return list(collector), collector.stats()["frames"]


def test_sync_mode_carries_grouped_batches_exactly():
    want = _local_layout()
    batches, frames = _on_ray(_nested_env, 24, sync=True)
    assert frames == 48
    assert [b.batch_size for b in batches] == [torch.Size([2, 2, 6])] * 2
    for batch in batches:
        got = _layout(batch, 1)
        # what the local collector yields, plus the sync round's mask
        assert {k: v for k, v in got.items() if k != ("collector", "mask")} == want
        assert batch.get(("next", "data", "states")).shape == (2, 2, 6, 3, 1)
        assert batch.get(WORKER_ID_KEY)[0].unique().tolist() == [0]
        assert batch.get(WORKER_ID_KEY)[1].unique().tolist() == [1]
        assert batch.get(POLICY_VERSION_KEY).shape == (2, 2, 6)
        assert bool((episode_stats(batch).lengths > 0).all())
    ids = [
        set(torch.cat([b.get(TRAJ_IDS_KEY)[w].flatten() for b in batches]).tolist()) for w in (0, 1)
    ]
    assert not ids[0] & ids[1]


@pytest.mark.parametrize("compress", [None, "lz4"])
def test_first_ready_serves_each_workers_grouped_batch_exactly(compress):
    want = _local_layout()
    with RayCollector(
        _nested_env,
        None,
        frames_per_batch=12,
        total_frames=60,
        num_collectors=2,
        sync=False,
        compress=compress,
    ) as collector:
        batches = list(collector)
        stats = collector.stats()
    assert stats["frames"] == 60 and sum(b.numel() for b in batches) == 60
    assert [b.batch_size for b in batches] == [torch.Size([2, 6])] * 5
    workers = set()
    for batch in batches:
        assert _layout(batch, 0) == want  # one worker's batch, as a local collector yields it
        (worker,) = batch.get(WORKER_ID_KEY).unique().tolist()
        workers.add(worker)
    assert workers == {0, 1}


#: torchrl's other mock team envs, beside the nested one: three agents in one group, and
#: two groups beside root keys (torchrl classes: workers import them, not tests/)
_TEAMS = {
    "three_agents": functools.partial(MultiAgentCountingEnv, n_agents=3),
    "two_groups": functools.partial(MultiKeyCountingEnv, batch_size=(2,)),
}


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "first-ready"])
@pytest.mark.parametrize("name", sorted(_TEAMS))
def test_torchrls_other_team_envs_keep_the_local_layout_on_ray(name, sync):
    """A worker's batch holds the local collector's leaf keys, shapes and dtypes, which are
    torchrl's Collector's (tests/unit/collectors/test_multi_agent.py), stacked in front in
    sync mode; frames exact."""
    want = _local_layout(_TEAMS[name])
    batches, frames = _on_ray(_TEAMS[name], 24 if sync else 12, sync=sync)
    assert frames == 48 and sum(frames_in(b) for b in batches) == 48
    assert len(batches) == (2 if sync else 4)
    workers = set()
    for batch in batches:
        got = _layout(batch, 1 if sync else 0)
        assert {k: v for k, v in got.items() if k != ("collector", "mask")} == want
        workers |= set(batch.get(WORKER_ID_KEY).unique().tolist())
    assert workers == {0, 1}


def test_the_front_door_collects_a_multi_agent_env_on_ray():
    from fleetrl import Collector

    collector = Collector(
        _nested_env,
        None,
        backend="ray",
        num_collectors=2,
        sync=True,
        frames_per_batch=24,
        total_frames=48,
    )
    try:
        assert type(collector).__name__ == "RayCollector"
        batches = list(collector)
    finally:
        collector.shutdown()
    assert [b.batch_size for b in batches] == [torch.Size([2, 2, 6])] * 2
    assert batches[0].get(("next", "data", "states")).shape == (2, 2, 6, 3, 1)


@pytest.mark.e2e  # a worker's death and replacement: about 10 s
def test_a_killed_worker_of_a_multi_agent_env_is_replaced_and_frames_stay_exact():
    from fakes import kill_worker

    with RayCollector(
        _nested_env,
        None,
        frames_per_batch=12,
        total_frames=120,
        num_collectors=2,
        sync=False,
    ) as collector:
        seen = 0
        for i, batch in enumerate(collector):
            seen += batch.numel()
            if i == 1:
                kill_worker(collector, 0)
        stats = collector.stats()
    assert seen == 120 and stats["frames"] == 120
    assert stats["restarts"] == {0: 1, 1: 0}
    assert sum(stats["frames_per_worker"].values()) == 120


def test_workers_write_a_multi_agent_envs_transitions_whole_into_a_replay_buffer():
    from fleetrl.collectors.remote.replay import RemoteReplayBuffer

    env = _nested_env()
    want = {
        *env.observation_keys,
        *env.action_keys,
        *(("next", *((k,) if isinstance(k, str) else k)) for k in env.observation_keys),
        *(("next", *((k,) if isinstance(k, str) else k)) for k in env.reward_keys),
        *(("next", *((k,) if isinstance(k, str) else k)) for k in env.done_keys),
        POLICY_VERSION_KEY,
    }
    env.close()
    rb = RemoteReplayBuffer(1000, 5)
    try:
        with RayCollector(
            _nested_env, None, frames_per_batch=12, total_frames=48, replay_buffer=rb
        ) as collector:
            progress = list(collector)
            assert collector.frames == 48
        assert sum(int(p["frames"]) for p in progress) == 48
        assert len(rb) == rb.write_count() == 48
        sample = rb.sample(1)[0]  # one minibatch of 5 transitions
        assert set(sample.exclude("index").keys(include_nested=True, leaves_only=True)) == want
        assert sample["data", "states"].shape == (5, 3, 1)  # every agent of the group
        assert sample["next", "data", "reward"].shape == (5, 3, 1)
    finally:
        rb.shutdown()


def test_a_multi_agent_straggler_is_preempted_and_its_round_masked():
    from fakes import slow_nested_counting

    with RayCollector(
        [slow_nested_counting(0.0), slow_nested_counting(0.02)],
        None,
        frames_per_batch=80,  # a share of 40 frames: 2 envs x 20 steps a worker
        total_frames=160,
        sync=True,
        fraction_workers=0.5,
        fraction_samples=0.1,
        prefetch=0,
    ) as collector:
        batches = list(collector)
        stats = collector.stats()
    assert sum(frames_in(b) for b in batches) == 160  # rounds go on until the budget is met
    assert stats["preempted_tasks"] >= 1
    first = batches[0]
    assert first.batch_size == (2, 2, 20)
    mask = first["collector", "mask"]
    assert mask[0].all()  # the fast worker collected its whole share
    slow = int(mask[1].sum())
    assert 4 <= slow < 40  # at least fraction_samples of its share, not all of it
    # the straggler's padding is zeros in every group's keys, its steps the env's own
    for key in (("data", "states"), ("next", "data", "states"), ("next", "data", "reward")):
        assert (first[key][1][~mask[1]] == 0).all(), key
    assert first["data", "states"][1][mask[1]].shape == (slow, 3, 1)


def test_a_server_acts_for_every_agent_of_every_worker_over_shared_memory():
    """Central inference on a multi-agent env: each worker's step (every agent of its envs)
    is one request, answered over shared memory; frames and version tags stay exact."""
    from tensordict.nn import TensorDictModule, TensorDictSequential
    from torchrl.modules import MultiAgentMLP, ProbabilisticActor

    to_float = TensorDictModule(
        lambda states: states.float(), in_keys=[("data", "states")], out_keys=[("data", "x")]
    )
    net = MultiAgentMLP(
        n_agent_inputs=1, n_agent_outputs=1, n_agents=3, centralised=False, share_params=True
    )
    actor = ProbabilisticActor(
        TensorDictSequential(
            to_float, TensorDictModule(net, in_keys=[("data", "x")], out_keys=[("data", "logits")])
        ),
        in_keys={"logits": ("data", "logits")},
        out_keys=[("data", "action")],
        distribution_class=torch.distributions.Bernoulli,
        return_log_prob=True,
    )
    with RayCollector(
        _nested_env, actor, frames_per_batch=24, total_frames=72, num_collectors=2,
        inference="server", sync=False,
    ) as collector:  # fmt: skip
        frames = 0
        for batch in collector:
            frames += frames_in(batch)
            assert batch.get(("data", "action")).shape[-2:] == (3, 1)
            # a Bernoulli's log-probability per entry, as the local actor writes it
            assert (
                batch.get(("data", "action_log_prob")).shape == batch.get(("data", "action")).shape
            )
            collector.update_policy_weights_()
        server = collector.stats()["inference"]["servers"][0]
        version = collector.policy_version
    assert frames == 72 == server["observations"]  # one row per env step: its 3 agents in it
    assert server["shm_requests"] > 0
    assert 1 <= version <= 3

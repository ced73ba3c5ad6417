"""Central batched inference on real Ray: env workers step envs, an inference server actor
runs the policy. Frames stay exact, every step is tagged with the weights that produced it
(even when they change in the middle of a batch), a SIGKILLed server comes back with the
current weights and its requests are answered once, a killed env worker is replaced as
without servers, and the replay-buffer and compressed modes keep their contracts."""

from __future__ import annotations

import os
import signal
import tempfile

import pytest
import ray
import torch
from torchrl.envs.utils import ExplorationType

from fakes import counting, kill_worker
from fleetrl import RayCollector
from fleetrl.collectors.inference import InferenceOptions, InferenceServers
from fleetrl.collectors.remote.replay import RemoteReplayBuffer
from fleetrl.distributed import warm
from fleetrl.distributed.backends import make_backend
from fleetrl.distributed.warm import idle_held
from policies import weight_echo

pytestmark = pytest.mark.usefixtures("ray_session")


def served(env="CartPole-v1", policy=None, **kwargs):
    args = dict(
        frames_per_batch=400,
        total_frames=4000,
        num_collectors=2,
        num_workers_per_collector=4,
        inference="server",
    )
    args.update(kwargs)
    return RayCollector(env, policy if policy is not None else weight_echo(), **args)


def frames_in(batch):
    mask = batch.get(("collector", "mask"), None)
    return int(mask.sum()) if mask is not None else batch.numel()


def publish(c, policy, version):
    with torch.no_grad():
        policy.module.w.fill_(float(version))
    c.update_policy_weights_(version=version)


@pytest.mark.e2e  # about 8 s; make test covers the same rules in process (unit/collectors)
def test_every_step_is_tagged_with_the_weights_that_produced_it():
    """First ready, a publish after every batch: versions change while workers collect, so
    batches mix versions; each step's tag is the weight that acted (``w``)."""
    policy = weight_echo()
    with served(
        policy=policy, sync=False, prefetch=2, frames_per_batch=160, total_frames=1600
    ) as c:
        frames, versions, mixed = 0, set(), 0
        for i, batch in enumerate(c):
            frames += batch.numel()
            tags = batch["collector", "policy_version"]
            assert torch.equal(batch["w"], tags.float())
            versions |= set(tags.unique().tolist())
            mixed += len(tags.unique()) > 1
            publish(c, policy, i + 1)
        stats = c.stats()
    assert frames == stats["frames"] == 1600
    assert len(versions) >= 5 and mixed >= 1  # tags moved within batches, truthfully
    inference = stats["inference"]
    # the last publish may still be on its way to the server (nothing waits for it)
    assert inference["observations"] == 1600
    assert max(versions) <= inference["servers"][0]["version"] <= 10
    assert inference["latency"]["count"] == inference["requests"]
    assert inference["latency"]["p95_ms"] >= inference["latency"]["median_ms"] > 0
    assert stats["workers_alive"] == 2


@pytest.mark.e2e
@pytest.mark.parametrize("sync", [True, False])
def test_a_killed_server_comes_back_with_the_current_weights(sync):
    policy = weight_echo()
    with served(policy=policy, sync=sync, inference_remote_config={"num_cpus": 0}) as c:
        frames, oldest = 0, []
        for i, batch in enumerate(c):
            frames += frames_in(batch)
            tags = batch["collector", "policy_version"]
            assert torch.equal(batch["w"], tags.float())
            # every action answers its own step's observation (never a stale answer)
            assert torch.equal(batch["action"], (batch["observation"][..., 0] > 0).long())
            # within each env's row, versions only move forward
            assert (tags.diff(dim=-1) >= 0).all()
            oldest.append(int(tags.min()))
            if i == 2:
                publish(c, policy, 3)
                server = c.server_handles()[0]
                os.kill(ray.get(server.pid.remote()), signal.SIGKILL)
        stats = c.stats()
    assert frames == stats["frames"] == 4000 and len(oldest) == 10
    # the batches collected after the restart: the weights published before the death
    assert oldest[:3] == [0, 0, 0] and oldest[-3:] == [3, 3, 3]
    assert stats["inference"]["servers"][0]["restarted"] is True
    assert stats["inference"]["servers"][0]["version"] == 3  # the board's, loaded at restart
    assert stats["restarts"] == {0: 0, 1: 0}  # no env worker was lost


@pytest.mark.e2e
def test_a_killed_env_worker_is_replaced_as_without_servers():
    with served(env=counting(5, sleep=0.001), sync=False, total_frames=2000) as c:
        frames = 0
        for i, batch in enumerate(c):
            frames += batch.numel()
            if i == 1:
                kill_worker(c, 0)
        stats = c.stats()
    assert frames == stats["frames"] == 2000
    assert stats["restarts"][0] == 1
    assert stats["inference"]["observations"] >= 2000


@pytest.mark.e2e
def test_replay_buffer_and_compression_keep_their_contracts():
    rb = RemoteReplayBuffer(10_000, 16)
    try:
        with served(
            env=counting(7), sync=False, total_frames=1000, frames_per_batch=100, replay_buffer=rb
        ) as c:
            progress = list(c)
        assert sum(int(p["frames"]) for p in progress) == 1000 == rb.write_count()
        sample = rb.sample(4)
        assert (sample["next", "observation"] == sample["observation"] + 1).all()
    finally:
        rb.shutdown()
    with served(compress="lz4", sync=True, total_frames=800) as c:
        batches = list(c)
        assert c.stats()["compression"]["bytes_sent"] > 0
    assert sum(frames_in(b) for b in batches) == 800
    assert batches[0].batch_size == (2, 4, 50) and "w" in batches[0]


@pytest.mark.e2e
def test_shared_memory_and_ray_calls_give_the_same_batches():
    """On one node "auto" goes through shared memory; the batches equal Ray calls' bit for
    bit (a policy acting on each env's row alone, the same seeds)."""
    got = {}
    for transport in ("auto", "ray"):
        with served(
            num_collectors=1, sync=True, total_frames=1200, inference_transport=transport
        ) as c:
            c.set_seed(5)
            got[transport] = list(c)
            got[transport + "_stats"] = c.stats()["inference"]["servers"][0]
    for a, b in zip(got["auto"], got["ray"], strict=True):
        for key in b.keys(True, True):
            assert torch.equal(a[key], b[key]), key
    auto, ray_calls = got["auto_stats"], got["ray_stats"]
    assert ray_calls["shm_requests"] == 0
    # the first request of each env group goes by Ray (it learns the answer's layout)
    assert auto["shm_requests"] >= auto["requests"] - 2 * 3


def fifo_dirs(handles):
    """The directories of the servers' request FIFOs (each opened here if it was not)."""
    dirs = [os.path.dirname(ray.get(h.endpoint.remote())["path"]) for h in handles]
    for d in dirs:
        assert os.path.dirname(d) == tempfile.gettempdir()
        assert os.path.basename(d).startswith("fleetrl-inference-") and os.path.isdir(d)
    return dirs


def free_or_kept_cpus() -> float:
    """The CPUs a new worker can have: Ray's free ones and those idle kept processes hold
    (warm workers are on in this session; a start takes a kept process, or ends it for
    room). Read after ``idle_held``, which first ends kept processes that died."""
    kept = idle_held().get("CPU", 0.0)
    return ray.available_resources().get("CPU", 0.0) + kept


def test_a_shut_down_collector_leaves_no_request_fifo_behind_and_its_cpus_free():
    """issue 35.8: the request FIFOs go, and shutdown() returns once the env workers' and
    the servers' CPUs are back (a collector started next found them held): the env worker's
    process is kept for the next worker, holding its CPU; the server's (never kept: Ray
    restarts servers) is back among Ray's free CPUs."""
    free = free_or_kept_cpus()
    with served(num_collectors=1, total_frames=800) as c:
        frames = sum(b.numel() for b in c)
        dirs = fifo_dirs(c.server_handles())
        assert c.stats()["inference"]["servers"][0]["shm_requests"] > 0  # the FIFO served
        assert free_or_kept_cpus() < free
        assert warm.POOL.live  # the env worker runs in a process that is kept after it
    assert free_or_kept_cpus() >= free
    assert frames == 800
    assert [d for d in dirs if os.path.exists(d)] == []


def test_servers_shut_down_free_their_fifos_and_cpus_before_returning():
    """shutdown() closes each server (its request FIFO goes) before ray.kill, and returns
    once the cluster has their CPUs back. Servers are never kept (Ray restarts them), so
    this holds with warm workers on: what idle kept processes hold is not in ``free``, and
    any of them ended for the servers' room only adds to it."""
    free = ray.available_resources().get("CPU", 0.0)
    backend = make_backend("ray")
    servers = InferenceServers(
        backend,
        backend.put(weight_echo()),
        count=2,
        device=None,
        max_batch=None,
        max_wait_ms=0.0,
        exploration_type=ExplorationType.RANDOM,
        num_threads=1,
        clients=1,
    )
    handles = [s.handle for s in servers.servers]
    dirs = fifo_dirs(handles)
    servers.shutdown()
    assert ray.available_resources().get("CPU", 0.0) >= free
    assert [d for d in dirs if os.path.exists(d)] == []


def test_an_options_object_reaches_the_servers_on_ray():
    """issue 36.3: ``inference=InferenceOptions(...)`` on Ray: its transport and Ray options
    reach the servers (no CPU reserved: they share the collectors'), frames stay exact."""
    options = InferenceOptions("server", remote_config={"num_cpus": 0}, transport="ray")
    with served(num_collectors=1, total_frames=800, inference=options) as c:
        frames = sum(b.numel() for b in c)
        server = c.stats()["inference"]["servers"][0]
        # what each was started holding, as Ray was asked: the env worker's CPU alone
        assert [s.held for s in c._servers.servers] == [{}]
        assert [slot.actor.held for slot in c._slots] == [{"CPU": 1.0}]
        assert (c.inference, c.inference_options) == ("server", options)
    assert frames == server["observations"] == 800
    assert server["shm_requests"] == 0  # transport="ray": Ray calls only

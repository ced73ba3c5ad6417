"""``fleetrl.Collector``: torchrl 0.14's front door, its choices, its refusals, and what a
torchrl user reads of the result (``stats()``, ``pause()``).

The remote backend runs in process here (``backend="inprocess"``: fleetrl's second
implementation of the worker backend); ``backend="ray"`` runs torchrl's documented usage
in tests/integration/test_torchrl_parity.py.
"""

from __future__ import annotations

import pytest

from fleetrl import Collector, ConfigError, RayCollector, SyncDataCollector
from fleetrl.collectors.front import BACKEND_ALTERNATIVES
from fleetrl.collectors.remote.collector import PAUSED_MSG, CollectorPausedError

TORCHRL_KEYS = {"frames", "batches", "requested_frames_per_batch", "total_frames", "completed"}


def refused(*args, **kwargs) -> list[str]:
    with pytest.raises(ConfigError) as err:
        Collector(*args, **kwargs)
    return err.value.problems


def test_direct_is_the_default_and_counts_like_torchrl():
    c = Collector("CartPole-v1", None, frames_per_batch=64, total_frames=192)
    assert type(c) is SyncDataCollector
    assert [b.numel() for b in c] == [64, 64, 64]
    stats = c.stats()
    assert TORCHRL_KEYS | {"policy_version", "time"} <= set(stats)
    assert (stats["frames"], stats["batches"], stats["total_frames"]) == (192, 3, 192)
    assert stats["completed"] is True and stats["requested_frames_per_batch"] == 64
    c.shutdown()


def test_direct_unwraps_a_list_of_one_env_constructor():
    c = Collector(["CartPole-v1"], None, backend="direct", frames_per_batch=32, total_frames=32)
    assert type(c) is SyncDataCollector and sum(b.numel() for b in c) == 32
    c.shutdown()


@pytest.mark.parametrize("sync", [True, False])
def test_a_remote_backend_builds_a_ray_collector_with_num_collectors(sync):
    c = Collector(
        "CartPole-v1",
        None,
        backend="inprocess",
        num_collectors=2,
        sync=sync,
        frames_per_batch=64,
        total_frames=256,
        backend_options={"prefetch": 0},
    )
    assert type(c) is RayCollector and c.sync is sync and c.prefetch == 0
    assert sum(b.numel() for b in c) == 256
    stats = c.stats()
    assert TORCHRL_KEYS | {"policy_version", "workers", "workers_alive", "worker_frames"} <= set(
        stats
    )
    assert (stats["workers"], stats["workers_alive"], stats["worker_frames"]) == (2, 2, 256)
    assert stats["completed"] is True and stats["batches"] == 4
    per_worker = c.stats("per_worker")
    assert per_worker["worker_0/frames"] + per_worker["worker_1/frames"] == 256
    assert "worker_1/env_s" in per_worker and "worker_0/restarts" in per_worker
    with pytest.raises(ConfigError, match=r"workers='all' is invalid: must be one of"):
        c.stats("all")
    c.shutdown()


def test_a_remote_backend_defaults_to_first_ready_as_torchrl():
    c = Collector("CartPole-v1", None, backend="inprocess", frames_per_batch=32, total_frames=32)
    assert type(c) is RayCollector and c.sync is False and c.num_collectors == 1
    c.shutdown()


def test_backends_fleetrl_does_not_have_are_refused_with_what_to_use():
    assert refused("CartPole-v1", None, frames_per_batch=64, num_collectors=2) == [
        "backend='process' is invalid: the default once num_collectors is given; "
        + BACKEND_ALTERNATIVES["process"]
    ]
    for name in ("rpc", "distributed", "submitit", "process"):
        said = refused("CartPole-v1", None, backend=name, frames_per_batch=64)
        assert said == [f"backend={name!r} is invalid: {BACKEND_ALTERNATIVES[name]}"]
    assert refused("CartPole-v1", None, backend="mpi", frames_per_batch=64) == [
        "backend='mpi' is invalid: must be one of ['direct', 'ray', 'inprocess'] (torchrl's "
        "['direct', 'distributed', 'inprocess', 'process', 'ray', 'rpc', 'submitit'])"
    ]


def test_every_problem_of_the_selector_is_said_at_once_before_anything_starts():
    said = refused(
        ["CartPole-v1", "CartPole-v1"],
        None,
        backend="direct",
        num_collectors=2,
        sync=True,
        backend_options={"sync": True, "frames_per_batch": 8},
        frames_per_batch=64,
    )
    assert said == [
        "backend_options={'sync': True, 'frames_per_batch': 8} is invalid: are a remote "
        "backend's: pass them as arguments",
        "num_collectors=2 is invalid: backend='direct' runs one collector",
        "sync=True is invalid: is a remote backend's mode: leave it out for backend='direct'",
        "create_env_fn=['CartPole-v1', 'CartPole-v1'] is invalid: backend='direct' takes one "
        "env constructor",
    ]
    assert refused("CartPole-v1", None, backend="ray", backend_options={"sync": True}) == [
        "backend_options={'sync': True} is invalid: holds the selector's own keys ['sync']"
    ]
    assert refused("CartPole-v1", None, backend="ray", num_collectors=0) == [
        "num_collectors=0 is invalid: must be a positive int, or None"
    ]
    assert refused("CartPole-v1", None, backend="ray", num_collectors=True, sync="yes") == [
        "num_collectors=True is invalid: must be a positive int, or None",
        "sync='yes' is invalid: must be True, False or None",
    ]
    assert refused(
        "CartPole-v1",
        None,
        backend="ray",
        backend_options={"frames_per_batch": 8},
        frames_per_batch=64,
    ) == [
        "backend_options={'frames_per_batch': 8} is invalid: repeats arguments given "
        "directly: ['frames_per_batch']"
    ]


def test_pause_drains_the_tasks_in_flight_and_holds_collection_without_losing_frames():
    c = Collector(
        "CartPole-v1",
        None,
        backend="inprocess",
        num_collectors=2,
        frames_per_batch=64,
        total_frames=512,
        backend_options={"prefetch": 1},
    )
    frames = [c.next().numel()]  # tasks for the next batches are in flight now
    assert c.stats()["pending"]["tasks"] > 0
    with c.pause():
        assert c.paused
        with pytest.raises(CollectorPausedError, match=PAUSED_MSG.split(":")[0]):
            c.next()
    assert not c.paused
    with c.pause(resume=False):
        pass
    assert c.paused
    c.resume()
    frames += [b.numel() for b in c]
    assert sum(frames) == 512 and c.stats()["worker_frames"] == 512
    c.shutdown()

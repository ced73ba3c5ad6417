"""Warm workers (fleetrl.distributed.warm): an ended worker's process builds the next worker started
with the same Ray options, of any class, given back as a fresh process would be, and never
when it is not clean or killed. The session runs with warm workers on (tests/conftest.py);
other tests' idle processes may be around (of the same options too), so these tests count
what changes, and the process kept last is the one taken first."""

from __future__ import annotations

import pytest

from fakes import OtherProbe, ProcessProbe
from fleetrl.distributed import warm
from fleetrl.distributed.backends import RayBackend, WorkerDied, warm_workers
from fleetrl.distributed.runtime import resource_waits

ONE_CPU = {"num_cpus": 1}


def idle(options: dict) -> int:
    """How many idle processes started with ``options`` are kept (any class's)."""
    key = warm.WarmPool.key(
        ProcessProbe, None, {"max_restarts": 0, "max_task_retries": 0, **options}
    )
    return len(warm.POOL.idle.get(key, []))


@pytest.fixture
def backend(ray_session):
    assert warm_workers()  # the session's setting
    return RayBackend()


def test_an_ended_worker_process_builds_the_next_one_as_a_fresh_process_would(backend):
    fresh = backend.start(ProcessProbe, "first", options=ONE_CPU)
    before = fresh.ask("info")
    fresh.ask("dirty")
    backend.kill_all([fresh])
    assert idle(ONE_CPU) >= 1
    assert resource_waits([{"CPU": 4}]) == []  # the idle processes' CPUs count as free

    reused = warm.POOL.reused
    again = backend.start(ProcessProbe, "second", options=ONE_CPU)
    after = again.ask("info")
    assert after["pid"] == before["pid"] and warm.POOL.reused == reused + 1
    assert after["tag"] == "second"
    # given back: the env vars, torch's threads and its default generator's fixed seed
    assert (after["threads"], after["env"], after["draw"]) == (
        before["threads"],
        before["env"],
        before["draw"],
    )
    backend.kill_all([again])


def test_other_options_or_a_kill_get_a_new_process_and_idle_ones_make_room_when_needed(backend):
    one = backend.start(ProcessProbe, "a", options=ONE_CPU)
    pid = one.ask("info")["pid"]
    backend.kill_all([one])
    other = backend.start(ProcessProbe, "b", options={"num_cpus": 2})  # another kind
    assert other.ask("info")["pid"] != pid
    other_pid = other.ask("info")["pid"]
    backend.kill(other)  # a kill (a death) is never kept
    assert idle({"num_cpus": 2}) == 0
    big = backend.start(ProcessProbe, "c", options={"num_cpus": 4})  # every CPU: room made
    assert big.ask("info")["pid"] not in (pid, other_pid)
    assert warm.idle_held().get("CPU", 0) == 0 and idle(ONE_CPU) == 0
    backend.kill_all([big])


def test_a_process_left_with_a_thread_is_not_reused(backend):
    one = backend.start(ProcessProbe, "a", options=ONE_CPU)
    pid = one.ask("info")["pid"]
    one.ask("leave_a_thread")
    backend.kill_all([one])
    refused = warm.POOL.refused.get("left thread 'left'", 0)
    others = [backend.start(ProcessProbe, "b", options=ONE_CPU) for _ in range(idle(ONE_CPU))]
    assert pid not in [o.ask("info")["pid"] for o in others]
    assert warm.POOL.refused["left thread 'left'"] == refused + 1
    backend.kill_all(others)


def test_a_constructor_that_raises_is_a_dead_worker_as_without_warm_workers(backend):
    one = backend.start(ProcessProbe, "a", options=ONE_CPU)
    one.ask("info")
    backend.kill_all([one])
    failed = backend.start(ProcessProbe, "b", fail=True, options=ONE_CPU)
    with pytest.raises(WorkerDied, match="probe b refuses to start"):
        failed.ask("info")
    backend.kill_all([failed])


def test_turning_warm_workers_off_ends_the_idle_ones_and_frees_their_cpus(backend):
    import ray

    one = backend.start(ProcessProbe, "a", options=ONE_CPU)
    one.ask("info")
    backend.kill_all([one])
    assert idle(ONE_CPU) >= 1 and warm.idle_held()["CPU"] >= 1
    try:
        warm_workers(False)
        assert warm.idle_held() == {} and idle(ONE_CPU) == 0
        assert ray.available_resources().get("CPU", 0) == ray.cluster_resources()["CPU"]
    finally:
        warm_workers(True)


def test_a_kept_process_builds_a_worker_of_another_class_and_its_handle_calls_it(backend):
    import pickle

    import ray

    probe = backend.start(ProcessProbe, "a", options=ONE_CPU)
    pid = probe.ask("info")["pid"]
    backend.kill_all([probe])
    reused = warm.POOL.reused_by.get("OtherProbe", 0)
    other = backend.start(OtherProbe, "b", options=ONE_CPU)
    assert other.ask("pid") == ("b", pid)  # the process kept last, another class in it
    assert warm.POOL.reused_by["OtherProbe"] == reused + 1
    # its handle is called as the class's own Ray handle, also once it has travelled
    handle = pickle.loads(pickle.dumps(other.handle))
    assert ray.get(handle.pid.remote()) == ("b", pid)
    with pytest.raises(AttributeError):
        other.handle.no_such_method  # noqa: B018
    # a method in the control group answers while the default group is busy
    blocked = other.call("block", 30.0)
    assert other.ask("release") is True
    assert backend.get(blocked) == "released"
    backend.kill_all([other])


def test_a_worker_ray_restarts_is_never_kept(backend):
    assert warm.WarmPool.key(ProcessProbe, None, {**ONE_CPU, "max_restarts": -1}) is None
    started = warm.POOL.started
    one = backend.start(ProcessProbe, "a", options={**ONE_CPU, "max_restarts": 1})
    assert one.ask("info")["tag"] == "a"
    assert one.warm_key is None and warm.POOL.started == started
    backend.kill_all([one])
    assert warm.POOL.started == started

"""fleetrl.distributed.runtime: Ray started in the background, and a start nobody needs any more."""

from __future__ import annotations

import threading

import pytest
import ray

from fleetrl.cli import main
from fleetrl.distributed import runtime
from runs import ROOT


@pytest.fixture
def slow_ray_init(monkeypatch):
    """ray.init that blocks until the test releases it, then raises (no Ray starts); Ray
    reads as not started, even where the session's Ray is up (``make test-all`` runs the
    integration tests first, in the same process)."""
    release, entered = threading.Event(), threading.Event()

    def init(**kwargs):
        entered.set()
        release.wait(timeout=20)
        raise RuntimeError("this start failed too")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    yield entered, release
    release.set()


def test_an_abandoned_start_is_waited_for_by_nobody_and_its_error_is_dropped(slow_ray_init):
    entered, release = slow_ray_init
    start = runtime.RayStart({"address": None})
    assert entered.wait(timeout=60)
    start.abandon()
    assert start in runtime._IN_FLIGHT  # still starting: a new start would wait for it
    release.set()
    assert start.wait() is False  # nobody's: its error is not raised to a later caller
    start._thread.join(timeout=60)
    assert start not in runtime._IN_FLIGHT


def test_a_bad_config_is_reported_without_waiting_for_the_early_ray_start(
    slow_ray_init, tmp_path, capsys
):
    entered, release = slow_ray_init
    config = str(ROOT / "configs" / "ppo_cartpole.yaml")  # Ray collectors: Ray starts early
    assert main(["train", config, "env.id=Nope-v0", "--run-dir", str(tmp_path / "run")]) == 2
    # returned while Ray was still starting: the start's thread is still in ray.init
    assert entered.is_set() and [s._thread.is_alive() for s in runtime._IN_FLIGHT] == [True]
    err = capsys.readouterr().err
    assert "env.id='Nope-v0' is invalid" in err and "this start failed too" not in err
    release.set()
    for start in list(runtime._IN_FLIGHT):
        start._thread.join(timeout=60)
    assert not runtime._IN_FLIGHT

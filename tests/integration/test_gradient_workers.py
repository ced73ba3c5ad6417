"""Gradient workers on real Ray actors: the decentralized all-reduce, deaths while starting,
the resource check. The sync and async accounting in process: tests/unit/learners/test_update_worker.py."""

from __future__ import annotations

import re

import pytest
import ray

from fakes import ExitOnBuild
from fleetrl import ConfigError, WorkerLostError
from fleetrl.distributed.workers import GAVE_UP_MSG
from fleetrl.learners import UpdateWorker
from fleetrl.setup.build import make_algorithm
from schemes import (
    FPB,
    dying_critic,
    group_weights_moved,
    replay_config,
    scheme_config,
    states_equal,
    team_scheme_config,
    weights_equal,
)

pytestmark = pytest.mark.usefixtures("ray_session")


@pytest.mark.parametrize("mode", ["sync", pytest.param("async", marks=pytest.mark.e2e)])
def test_gradient_worker_replacements_dying_at_start_are_retried(update_worker, mode, tmp_path):
    budget = ExitOnBuild(str(tmp_path / "deaths"))
    config = scheme_config(update=mode, max_gradient_lag=100)
    uw = update_worker(config, modules=dying_critic(budget.budget_file))
    steps = uw.algorithm.steps_per_batch
    uw.run_iteration()
    budget.arm(2)  # the first two replacements die while they start
    uw.backend.kill(uw.workers[1])
    results = [uw.run_iteration()]
    # async: an iteration may end on worker 0's gradients alone, before worker 1's
    # replacement has started or died; wait for that, then let the next iteration see it
    while uw.restarts[1] < 3 and len(results) < 10:
        ray.wait([uw.workers[1].handle.get_version.remote()])
        results.append(uw.run_iteration())
    assert budget.deaths_left() == 0
    assert uw.restarts == [0, 3]
    assert results[-1].metrics["train/grad_workers_restarted"] == 3.0
    if mode == "sync":
        assert results[0].frames == 2 * FPB  # the third replacement collected its own batch
    results.append(uw.run_iteration())
    assert uw.restarts == [0, 3]
    # every gradient asked for was received and applied, none lost with the dead workers
    per_iteration = steps * (1 if mode == "sync" else 2)
    assert uw.version == uw.applied_gradients == (1 + len(results)) * per_iteration
    assert uw.dropped_gradients == 0
    assert uw.workers[1].ask("get_version") >= 0  # the third replacement is live


def test_gradient_worker_replacements_that_keep_dying_raise(update_worker, tmp_path):
    budget = ExitOnBuild(str(tmp_path / "deaths"))
    config = scheme_config(max_restart_attempts=1)
    uw = update_worker(config, modules=dying_critic(budget.budget_file))
    uw.run_iteration()
    budget.arm(1)
    uw.backend.kill(uw.workers[0])
    gave_up = GAVE_UP_MSG.split("Last cause")[0].format(attempts=1, max_attempts=1)
    with pytest.raises(
        WorkerLostError, match="gradient worker 0 was lost: " + re.escape(gave_up)
    ) as err:
        uw.run_iteration()
    assert err.value.worker_id == 0 and err.value.attempts == 1
    assert uw.restarts == [1, 0]
    assert budget.deaths_left() == 0


def test_decentralized_replicas_stay_identical(update_worker):
    config = scheme_config(update="decentralized")
    uw = update_worker(config)
    initial = uw.algorithm.get_weights()
    uw.update_algorithm_parameter("lr", 5e-3)
    for _ in range(3):
        result = uw.run_iteration()
        assert result.frames == 2 * FPB
    assert uw.version == 3 * uw.algorithm.steps_per_batch
    replicas = uw.replica_weights()
    assert weights_equal(replicas[0], replicas[1])  # bit for bit, without any broadcast
    assert weights_equal(replicas[0], uw.algorithm.get_weights())  # the master mirrors rank 0
    assert not weights_equal(replicas[0], initial)
    assert uw.replica_parameters("lr") == pytest.approx([5e-3, 5e-3])
    state = uw.state_dict()  # rank 0's, with its optimizer state
    assert state["num_updates"] == uw.version
    assert state["optimizer"]["state"]


@pytest.mark.e2e  # two more gradient workers with MPE: about 10 s
def test_decentralized_team_replicas_stay_identical(update_worker):
    """MAPPO on simple_tag (two groups, each with its own networks and clipping): the
    all-reduced replicas stay bit-identical and both teams learn."""
    pytest.importorskip("mpe2")
    uw = update_worker(team_scheme_config(update="decentralized"))
    initial = uw.algorithm.get_weights()
    for _ in range(2):
        assert uw.run_iteration().frames == 2 * FPB
    assert uw.version == 2 * uw.algorithm.steps_per_batch
    replicas = uw.replica_weights()
    assert weights_equal(replicas[0], replicas[1])
    assert weights_equal(replicas[0], uw.algorithm.get_weights())
    assert group_weights_moved(initial, replicas[0]) == {"adversary", "agent"}


def test_too_many_gradient_workers_refused_before_any_actor_starts():
    config = scheme_config()
    config.scheme.num_grad_workers = 64
    config.scheme.grad_worker_resources = {"tpu_slot": 1}
    before = actors_ever_created()
    with pytest.raises(ConfigError) as err:
        UpdateWorker(config, make_algorithm(config, 0))
    assert actors_ever_created() == before
    assert "scheme.num_grad_workers=64 is invalid: 64 gradient workers x 1 CPUs" in str(err.value)
    assert "64 gradient workers x 1 'tpu_slot' need 64; the Ray cluster has 0" in str(err.value)


def actors_ever_created() -> int:
    from ray._private import state  # the GCS's actor table, dead ones included (no dashboard)

    return len(state.actors())


def test_decentralized_member_death_stops_with_a_clear_error(update_worker):
    from fleetrl import WorkerError

    config = scheme_config(update="decentralized", collective_timeout_s=60.0)
    uw = update_worker(config)
    uw.run_iteration()
    uw.backend.kill(uw.workers[1])
    with pytest.raises(WorkerError, match="cannot continue without one of its members") as err:
        uw.run_iteration()  # raised on the dead member, not after rank 0's all-reduce times out
    assert err.value.worker_id == 1


#: slow (about 8 s): runs with make test-all (marker e2e), so make test stays within 6 min
@pytest.mark.e2e
def test_sac_decentralized_replicas_identical_and_buffers_resume(update_worker):
    config = replay_config("sac", "Pendulum-v1", update="decentralized")
    uw = update_worker(config)
    for _ in range(3):
        uw.run_iteration()
    replicas = [w.ask("state_dict") for w in uw.workers]
    assert states_equal(replicas[0]["loss_module"], replicas[1]["loss_module"])  # targets too
    assert replicas[0]["version"] == uw.version == 3 * 2  # learning from the first batch on
    state = uw.state_dict()  # rank 0's state, with every replica's buffer
    assert [r["frames_seen"] for r in state["replicas"]] == [96, 96]
    uw.shutdown()
    master = make_algorithm(config, 0)
    master.load_state_dict(state)
    resumed = UpdateWorker(config, master, seed=11, replica_states=state["replicas"])
    try:
        resumed.run_iteration()
        after = resumed.state_dict()
        assert [r["frames_seen"] for r in after["replicas"]] == [128, 128]  # buffers kept
        assert resumed.version == uw.version + 2
        assert states_equal(
            after["replicas"][0]["loss_module"], after["replicas"][1]["loss_module"]
        )
    finally:
        resumed.shutdown()
    with pytest.raises(ConfigError, match="holds 2 gradient workers' replay buffers"):
        config.scheme.num_grad_workers = 3
        UpdateWorker(config, master, replica_states=state["replicas"])

"""The update worker and its gradient workers on the in-process backend: the sync and async
modes' steps, versions, restarts and drops, in one process. The decentralized all-reduce and
deaths during start-up on real Ray: tests/integration/test_gradient_workers.py."""

from __future__ import annotations

import re

import pytest
import torch

from fleetrl import ConfigError, SyncDataCollector
from fleetrl.distributed.backends import SimulatedDeath
from fleetrl.learners import GradWorker
from fleetrl.setup.build import make_algorithm
from fleetrl.setup.load import config_from_dict
from schemes import (
    FPB,
    replay_config,
    scheme_config,
    states_equal,
    trainable_numel,
    weights_equal,
)


def test_sync_mean_gradient_step_equals_central_step_on_concatenated_data(update_worker):
    config = scheme_config("inprocess")
    config.algo.normalize_advantage = False  # per-minibatch normalisation would differ by design
    master = make_algorithm(config, 0)
    central = make_algorithm(config, 0)  # same seed: the same initial weights (deepcopy would
    # break torchrl's functional parameters in the loss module)
    assert weights_equal(master.get_weights(), central.get_weights())
    with SyncDataCollector(
        "CartPole-v1", master.policy, frames_per_batch=128, num_envs=4, total_frames=128
    ) as collector:
        collector.set_seed(0)
        data = master.prepare(collector.next())  # GAE with the master's critic, flat
    halves = [data[:64], data[64:]]
    uw = update_worker(config, master)  # the replicas start from the master's state
    flat = [w.ask("gradients_for", h) for w, h in zip(uw.workers, halves)]
    uw.apply_mean_gradients(flat)
    grads, _ = central.compute_gradients(data)
    central.apply_gradients(grads)
    got, want = master.get_weights(), central.get_weights()
    for key in want.keys(True, True):
        torch.testing.assert_close(got.get(key), want.get(key), rtol=1e-5, atol=1e-6)
    assert not weights_equal(got, make_algorithm(config, 0).get_weights())  # it really stepped
    assert uw.version == 1


def test_sync_mode_iterations_versions_replicas_and_parameters(update_worker):
    config = scheme_config("inprocess")
    uw = update_worker(config)
    steps = uw.algorithm.steps_per_batch
    first = uw.run_iteration()
    second = uw.run_iteration()
    assert first.frames == second.frames == 2 * FPB  # one batch per gradient worker
    assert uw.version == 2 * steps
    m = second.metrics
    assert m["train/grad_asynchrony_max"] == 0.0  # every gradient on the current weights
    assert m["train/policy_lag"] == (steps - 1) / 2  # 0..steps-1 updates since collection
    assert m["train/policy_version"] == 2 * steps
    for key in ("time/collect_s", "time/grad_s", "time/update_s", "time/broadcast_s"):
        assert m[key] >= 0
    assert {"loss/objective", "loss/critic", "grad_norm"} <= set(second.info)
    # the replicas hold the master's weights once they load the last broadcast
    uw.run_iteration()
    replicas = uw.replica_weights()
    assert weights_equal(replicas[0], replicas[1])
    uw.update_algorithm_parameter("clip_epsilon", 0.05)
    uw.update_algorithm_parameter("lr", 1e-4)
    assert uw.replica_parameters("clip_epsilon") == pytest.approx([0.05, 0.05])
    assert uw.replica_parameters("lr") == pytest.approx([1e-4, 1e-4])
    assert uw.algorithm.clip_epsilon == pytest.approx(0.05)


def test_dead_gradient_worker_is_replaced_and_rejoins_with_current_weights(update_worker):
    config = scheme_config("inprocess")
    uw = update_worker(config)
    uw.update_algorithm_parameter("clip_epsilon", 0.1)
    uw.run_iteration()
    uw.backend.kill(uw.workers[1])
    result = uw.run_iteration()
    assert uw.restarts == [0, 1]
    assert result.metrics["train/grad_workers_restarted"] == 1.0
    assert result.frames == 2 * FPB  # the new worker collected its own batch
    assert uw.version == 2 * uw.algorithm.steps_per_batch
    # the replacement started from the master's state: weights and parameters
    assert uw.replica_parameters("clip_epsilon") == pytest.approx([0.1, 0.1])
    versions = [w.ask("get_version") for w in uw.workers]
    assert versions[1] >= uw.version - 1
    uw.run_iteration()
    replicas = uw.replica_weights()
    assert weights_equal(replicas[0], replicas[1])


def test_a_batch_lost_with_its_gradient_worker_mid_way_is_counted_once(update_worker):
    uw = update_worker(scheme_config("inprocess"))
    assert uw.algorithm.steps_per_batch >= 2
    uw.run_iteration()
    worker, calls = uw.workers[1].handle.obj, []
    step = worker.step

    def dies_at_its_second_step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # its batch's frames reported with the first: lost with it
            raise SimulatedDeath("its node is gone")
        return step(*args, **kwargs)

    worker.step = dies_at_its_second_step
    results = [uw.run_iteration() for _ in range(3)]
    assert uw.restarts == [0, 1]
    # the lost batch is not counted; the one its replacement collects in its place is
    assert [r.frames for r in results] == [2 * FPB] * 3
    assert uw.version == 4 * uw.algorithm.steps_per_batch


def test_async_drops_stale_gradients_and_counts_them(update_worker):
    strict = update_worker(scheme_config("inprocess", update="async", max_gradient_lag=0))
    steps = strict.algorithm.steps_per_batch
    results = [strict.run_iteration() for _ in range(3)]
    dropped = sum(r.metrics["train/dropped_gradients"] for r in results)
    assert dropped == strict.dropped_gradients > 0
    assert strict.applied_gradients == strict.version == 3 * 2 * steps - dropped
    assert all(r.metrics["train/grad_asynchrony_max"] == 0 for r in results)
    # every frame the workers collected is reported once, except batches that steps still in
    # flight have collected (at most one per worker): an iteration's frames vary, none are lost
    stats = [w.ask("collector_stats") for w in strict.workers]
    unreported = sum(st["frames"] for st in stats) - sum(r.frames for r in results)
    assert unreported in (0, FPB, 2 * FPB)
    lenient = update_worker(scheme_config("inprocess", update="async", max_gradient_lag=100))
    results = [lenient.run_iteration() for _ in range(3)]
    assert lenient.dropped_gradients == 0
    assert lenient.version == 3 * 2 * steps  # every gradient applied, first ready
    assert max(r.metrics["train/grad_asynchrony_max"] for r in results) >= 1
    lenient.update_algorithm_parameter("entropy_coef", 0.02)
    assert lenient.replica_parameters("entropy_coef") == pytest.approx([0.02, 0.02])
    # a worker killed with a step in flight is replaced; its step is issued again
    lenient.backend.kill(lenient.workers[0])
    lenient.run_iteration()
    assert lenient.restarts == [1, 0]
    assert lenient.version == 4 * 2 * steps and lenient.dropped_gradients == 0
    assert lenient.replica_parameters("entropy_coef") == pytest.approx([0.02, 0.02])


@pytest.mark.parametrize("col_sync", [True, False])
def test_collection_modes_preemption_and_compression_pass_through(update_worker, col_sync):
    config = scheme_config("inprocess")
    config.collector.num_collectors = 2
    config.collector.num_cpus_per_collector = 0.5
    config.collector.sync = col_sync
    config.collector.compress = "lz4"
    config.collector.frames_per_batch = 2 * FPB if col_sync else FPB
    if col_sync:
        config.collector.fraction_workers = 0.5
    config.scheme.num_cpus_per_grad_worker = 0.5
    uw = update_worker(config)
    uw.run_iteration()
    stats = [w.ask("collector_stats") for w in uw.workers]
    for st in stats:
        assert st["compression"]["codec"] == "lz4"
        assert st["compression"]["bytes_sent"] > 0
        assert len(st["frames_per_worker"]) == 2
        assert "preempted_tasks" in st
        assert st["frames"] > 0


def test_scheme_config_problems_are_listed_at_once():
    with pytest.raises(ConfigError) as err:
        config_from_dict(
            {
                "algorithm": "dqn",
                "scheme": {
                    "num_grad_workers": 2,
                    "update": "async",
                    "max_gradient_lag": -1,
                },
            }
        )
    text = str(err.value)
    assert "scheme.update='async' is invalid: 'async' runs the on-policy" in text
    assert "scheme.max_gradient_lag=-1 is invalid: must be >= 0" in text
    with pytest.raises(ConfigError, match=re.escape("'async' needs scheme.num_grad_workers >= 2")):
        config_from_dict({"scheme": {"update": "async"}})
    with pytest.raises(ConfigError, match=re.escape("scheme.update='both' is invalid")):
        config_from_dict({"scheme": {"num_grad_workers": 2, "update": "both"}})


def test_bad_restart_attempts_refused_with_the_other_scheme_problems():
    with pytest.raises(ConfigError) as err:
        config_from_dict({"scheme": {"max_restart_attempts": -1, "max_gradient_lag": -1}})
    assert err.value.problems == [
        "scheme.max_gradient_lag=-1 is invalid: must be >= 0",
        "scheme.max_restart_attempts=-1 is invalid: must be >= 0 (0: a gradient worker's "
        "death ends the run)",
    ]


def test_param_codec_round_trip():
    config = scheme_config("inprocess")
    algorithm = make_algorithm(config, 0)
    codec = algorithm.codec  # the algorithm's own: nothing else builds one over its parameters
    weights = algorithm.get_weights()
    flat = codec.pack(weights)
    assert flat.shape == (trainable_numel(algorithm),)
    assert weights_equal(codec.unpack(flat), weights)


def test_local_grad_worker_steps_through_its_batches():
    """A gradient worker also runs in the driver (debugging): same API, no Ray."""
    config = scheme_config("inprocess")
    worker = GradWorker(config, 0, seed=1)
    steps = worker.algorithm.steps_per_batch
    reports = [worker.step() for _ in range(steps + 1)]
    assert [r.collected.frames for r in reports] == [FPB] + [0] * (steps - 1) + [FPB]
    assert [r.batch_done for r in reports] == [False] * (steps - 1) + [True, False]
    grads = reports[0].grads  # a TensorDict keyed like the trainable parameters
    assert set(grads.keys(True, True)) == {
        tuple(n.split("."))
        for n, p in worker.algorithm.loss_module.named_parameters()
        if p.requires_grad
    }
    assert reports[0].version == 0 and reports[0].collection_version == 0
    packed = worker.step(packed=True).grads  # the wire form the update worker asks for
    assert packed.shape == (trainable_numel(worker.algorithm),)
    new = worker.algorithm.get_weights().apply(lambda t: t + 1)
    worker.step(
        worker.algorithm.codec.pack(new), version=7
    )  # flat weights, as the update worker sends
    assert worker.version == 7
    assert weights_equal(worker.get_weights(), new)
    worker.shutdown()


def test_dqn_replicas_follow_the_master_target_network_in_sync_mode(update_worker):
    uw = update_worker(replay_config("dqn", "CartPole-v1", "inprocess"))
    results = [uw.run_iteration() for _ in range(4)]
    # each worker's buffer reaches learning_starts (64 frames of the whole run) after one batch
    assert [r.frames for r in results] == [64, 64, 64, 64]
    assert uw.version == 4 * 2  # updates_per_batch steps per iteration
    assert results[-1].info["train/epsilon"] < 1.0  # annealed by the run's frames
    # hand the replicas the last weights: online and target networks then equal the master's
    [w.ask("set_weights", uw._current_weights(), uw.version) for w in uw.workers]
    master = uw.algorithm.state_dict()
    for replica in [w.ask("state_dict") for w in uw.workers]:
        assert states_equal(replica["loss_module"], master["loss_module"])
        assert replica["target_update_counter"] == master["target_update_counter"]
        assert replica["frames_seen"] == 4 * 32 and replica["version"] == 8

"""The distributed scheme: every mode really runs on real Ray actors with real PPO losses."""

from __future__ import annotations

import re

import pytest
import ray
import torch
from tensordict import TensorDict
from torchrl.modules import ValueOperator

from fakes import ExitOnBuild, ExitOnUnpickle
from fleetrl import ConfigError, SyncDataCollector, WorkerLostError
from fleetrl.learners import GradWorker, UpdateWorker
from fleetrl.setup.build import make_algorithm
from fleetrl.setup.load import config_from_dict
from fleetrl.workers import GAVE_UP_MSG
from policies import mlp

pytestmark = pytest.mark.usefixtures("ray_session")

FPB = 64  # per gradient worker: 4 envs x 16 steps


def scheme_config(**scheme):
    return config_from_dict(
        {
            "algorithm": "ppo",
            "env": {"id": "CartPole-v1", "num_envs": 4},
            "collector": {"num_collectors": 0, "frames_per_batch": FPB},
            "scheme": {"num_grad_workers": 2, **scheme},
            "trainer": {"total_frames": 4096, "seed": 3},
            "ppo": {"num_epochs": 2, "num_mini_batch": 2, "hidden_sizes": [16]},
        }
    )


def weights_equal(a: TensorDict, b: TensorDict) -> bool:
    return all(torch.equal(a.get(k), b.get(k)) for k in a.keys(True, True))


@pytest.fixture
def update_worker(request):
    workers = []

    def make(config, algorithm=None, modules=None):
        algorithm = algorithm or make_algorithm(config, config.trainer.seed, **(modules or {}))
        uw = UpdateWorker(config, algorithm, seed=config.trainer.seed, modules=modules)
        workers.append(uw)
        return uw

    yield make
    for uw in workers:
        uw.shutdown()


def test_sync_mean_gradient_step_equals_central_step_on_concatenated_data(update_worker):
    config = scheme_config()
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
    flat = ray.get([w.handle.gradients_for.remote(h) for w, h in zip(uw.workers, halves)])
    uw.apply_mean_gradients(flat)
    grads, _ = central.compute_gradients(data)
    central.apply_gradients(grads)
    got, want = master.get_weights(), central.get_weights()
    for key in want.keys(True, True):
        torch.testing.assert_close(got.get(key), want.get(key), rtol=1e-5, atol=1e-6)
    assert not weights_equal(got, make_algorithm(config, 0).get_weights())  # it really stepped
    assert uw.version == 1


def test_sync_mode_iterations_versions_replicas_and_parameters(update_worker):
    config = scheme_config()
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
    config = scheme_config()
    uw = update_worker(config)
    uw.update_algorithm_parameter("clip_epsilon", 0.1)
    uw.run_iteration()
    ray.kill(uw.workers[1].handle)
    result = uw.run_iteration()
    assert uw.restarts == [0, 1]
    assert result.metrics["train/grad_workers_restarted"] == 1.0
    assert result.frames == 2 * FPB  # the new worker collected its own batch
    assert uw.version == 2 * uw.algorithm.steps_per_batch
    # the replacement started from the master's state: weights and parameters
    assert uw.replica_parameters("clip_epsilon") == pytest.approx([0.1, 0.1])
    versions = ray.get([w.handle.get_version.remote() for w in uw.workers])
    assert versions[1] >= uw.version - 1
    uw.run_iteration()
    replicas = uw.replica_weights()
    assert weights_equal(replicas[0], replicas[1])


def dying_critic(budget_file) -> dict:
    """A custom critic whose unpickling kills a new gradient worker while the budget lasts."""
    return {
        "critic": ValueOperator(
            ExitOnUnpickle(mlp(4, 1, 16), str(budget_file)), in_keys=["observation"]
        )
    }


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_gradient_worker_replacements_dying_at_start_are_retried(update_worker, mode, tmp_path):
    budget = ExitOnBuild(str(tmp_path / "deaths"))
    config = scheme_config(update=mode, max_gradient_lag=100)
    uw = update_worker(config, modules=dying_critic(budget.budget_file))
    steps = uw.algorithm.steps_per_batch
    uw.run_iteration()
    budget.arm(2)  # the first two replacements die while they start
    ray.kill(uw.workers[1].handle)
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
    assert ray.get(uw.workers[1].handle.get_version.remote()) >= 0  # the third replacement is live


def test_gradient_worker_replacements_that_keep_dying_raise(update_worker, tmp_path):
    budget = ExitOnBuild(str(tmp_path / "deaths"))
    config = scheme_config(max_restart_attempts=1)
    uw = update_worker(config, modules=dying_critic(budget.budget_file))
    uw.run_iteration()
    budget.arm(1)
    ray.kill(uw.workers[0].handle)
    gave_up = GAVE_UP_MSG.split("Last cause")[0].format(attempts=1, max_attempts=1)
    with pytest.raises(
        WorkerLostError, match="gradient worker 0 was lost: " + re.escape(gave_up)
    ) as err:
        uw.run_iteration()
    assert err.value.worker_id == 0 and err.value.attempts == 1
    assert uw.restarts == [1, 0]
    assert budget.deaths_left() == 0


def test_async_drops_stale_gradients_and_counts_them(update_worker):
    strict = update_worker(scheme_config(update="async", max_gradient_lag=0))
    steps = strict.algorithm.steps_per_batch
    results = [strict.run_iteration() for _ in range(3)]
    dropped = sum(r.metrics["train/dropped_gradients"] for r in results)
    assert dropped == strict.dropped_gradients > 0
    assert strict.applied_gradients == strict.version == 3 * 2 * steps - dropped
    assert all(r.metrics["train/grad_asynchrony_max"] == 0 for r in results)
    # every frame the workers collected is reported once, except batches that steps still in
    # flight have collected (at most one per worker): an iteration's frames vary, none are lost
    stats = ray.get([w.handle.collector_stats.remote() for w in strict.workers])
    unreported = sum(st["frames"] for st in stats) - sum(r.frames for r in results)
    assert unreported in (0, FPB, 2 * FPB)
    lenient = update_worker(scheme_config(update="async", max_gradient_lag=100))
    results = [lenient.run_iteration() for _ in range(3)]
    assert lenient.dropped_gradients == 0
    assert lenient.version == 3 * 2 * steps  # every gradient applied, first ready
    assert max(r.metrics["train/grad_asynchrony_max"] for r in results) >= 1
    lenient.update_algorithm_parameter("entropy_coef", 0.02)
    assert lenient.replica_parameters("entropy_coef") == pytest.approx([0.02, 0.02])
    # a worker killed with a step in flight is replaced; its step is issued again
    ray.kill(lenient.workers[0].handle)
    lenient.run_iteration()
    assert lenient.restarts == [1, 0]
    assert lenient.version == 4 * 2 * steps and lenient.dropped_gradients == 0
    assert lenient.replica_parameters("entropy_coef") == pytest.approx([0.02, 0.02])


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


@pytest.mark.parametrize("col_sync", [True, False])
def test_collection_modes_preemption_and_compression_pass_through(update_worker, col_sync):
    config = scheme_config()
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
    stats = ray.get([w.handle.collector_stats.remote() for w in uw.workers])
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


def trainable_numel(algorithm) -> int:
    return sum(p.numel() for p in algorithm.loss_module.parameters() if p.requires_grad)


def test_param_codec_round_trip():
    config = scheme_config()
    algorithm = make_algorithm(config, 0)
    codec = algorithm.codec  # the algorithm's own: nothing else builds one over its parameters
    weights = algorithm.get_weights()
    flat = codec.pack(weights)
    assert flat.shape == (trainable_numel(algorithm),)
    assert weights_equal(codec.unpack(flat), weights)


def test_local_grad_worker_steps_through_its_batches():
    """A gradient worker also runs in the driver (debugging): same API, no Ray."""
    config = scheme_config()
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


def test_decentralized_member_death_stops_with_a_clear_error(update_worker):
    from fleetrl import WorkerError

    config = scheme_config(update="decentralized", collective_timeout_s=60.0)
    uw = update_worker(config)
    uw.run_iteration()
    ray.kill(uw.workers[1].handle)
    with pytest.raises(WorkerError, match="cannot continue without one of its members") as err:
        uw.run_iteration()  # raised on the dead member, not after rank 0's all-reduce times out
    assert err.value.worker_id == 1


def replay_config(algorithm, env, **scheme):
    sections = {
        "dqn": {"learning_starts": 64, "target_update_interval": 3, "eps_anneal_frames": 512},
        "sac": {"learning_starts": 64},
    }
    return config_from_dict(
        {
            "algorithm": algorithm,
            "env": {"id": env, "num_envs": 4},
            "collector": {"num_collectors": 0, "frames_per_batch": 32},
            "scheme": {"num_grad_workers": 2, **scheme},
            "trainer": {"total_frames": 4096, "seed": 5},
            algorithm: {
                "updates_per_batch": 2,
                "batch_size": 16,
                "hidden_sizes": [16],
                **sections[algorithm],
            },
        }
    )


def states_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_dqn_replicas_follow_the_master_target_network_in_sync_mode(update_worker):
    uw = update_worker(replay_config("dqn", "CartPole-v1"))
    results = [uw.run_iteration() for _ in range(4)]
    # each worker's buffer reaches learning_starts (64 frames of the whole run) after one batch
    assert [r.frames for r in results] == [64, 64, 64, 64]
    assert uw.version == 4 * 2  # updates_per_batch steps per iteration
    assert results[-1].info["train/epsilon"] < 1.0  # annealed by the run's frames
    # hand the replicas the last weights: online and target networks then equal the master's
    ray.get([w.handle.set_weights.remote(uw._current_weights(), uw.version) for w in uw.workers])
    master = uw.algorithm.state_dict()
    for replica in ray.get([w.handle.state_dict.remote() for w in uw.workers]):
        assert states_equal(replica["loss_module"], master["loss_module"])
        assert replica["target_update_counter"] == master["target_update_counter"]
        assert replica["frames_seen"] == 4 * 32 and replica["version"] == 8


def test_sac_decentralized_replicas_identical_and_buffers_resume(update_worker):
    config = replay_config("sac", "Pendulum-v1", update="decentralized")
    uw = update_worker(config)
    for _ in range(3):
        uw.run_iteration()
    replicas = ray.get([w.handle.state_dict.remote() for w in uw.workers])
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

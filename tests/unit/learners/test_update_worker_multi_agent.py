"""Gradient workers train teams of agents: MAPPO on MPE's simple_tag (two groups, one set of
networks and one loss each) in the sync and async modes, on the in-process backend. The
decentralized all-reduce on real Ray: tests/integration/test_gradient_workers.py."""

from __future__ import annotations

import pytest
import torch

from fleetrl import SyncDataCollector
from fleetrl.envs import create_env_fn
from fleetrl.setup.build import make_algorithm
from schemes import FPB, group_weights_moved, team_scheme_config, weights_equal

pytest.importorskip("mpe2")

GROUPS = {"adversary", "agent"}


def test_the_mean_of_two_workers_team_gradients_is_the_central_step(update_worker):
    """Each gradient worker's gradient of the two groups' summed loss on half the env steps,
    averaged and applied with each group's own clipping, is the central learner's step on
    all of them."""
    config = team_scheme_config("inprocess", update="sync")
    config.algo.normalize_advantage = False  # per-minibatch statistics would differ by design
    config.algo.max_grad_norm = 0.05  # small: each group's clipping acts
    master, central = make_algorithm(config, 0), make_algorithm(config, 0)
    before = master.get_weights()
    assert weights_equal(before, central.get_weights())
    with SyncDataCollector(
        create_env_fn(config.env), master.policy, frames_per_batch=128, num_envs=4
    ) as collector:
        collector.set_seed(0)
        data = master.prepare(collector.next())
    halves = [data[:64], data[64:]]
    uw = update_worker(config, master)
    flat = [w.ask("gradients_for", h) for w, h in zip(uw.workers, halves)]
    uw.apply_mean_gradients(flat)
    grads, _ = central.compute_gradients(data)
    central.apply_gradients(grads)
    got, want = master.get_weights(), central.get_weights()
    for key in want.keys(True, True):
        torch.testing.assert_close(got.get(key), want.get(key), rtol=1e-5, atol=1e-6)
    assert group_weights_moved(before, got) == GROUPS  # both teams stepped
    assert uw.version == 1


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_gradient_workers_train_both_teams_with_exact_frames(update_worker, mode):
    config = team_scheme_config("inprocess", update=mode, max_gradient_lag=100)
    uw = update_worker(config)
    steps = uw.algorithm.steps_per_batch
    before = uw.algorithm.get_weights()
    results = [uw.run_iteration() for _ in range(2)]
    per_iteration = steps * (1 if mode == "sync" else 2)
    assert uw.version == uw.applied_gradients == 2 * per_iteration
    assert uw.dropped_gradients == 0
    for result in results:
        assert result.frames == 2 * FPB  # each gradient worker's batch, counted once
        assert {"loss/objective", "loss/critic", "grad_norm"} <= set(result.info)
    m = results[-1].metrics
    assert m["train/policy_version"] == uw.version
    assert group_weights_moved(before, uw.algorithm.get_weights()) == GROUPS
    uw.run_iteration()
    replicas = uw.replica_weights()
    if mode == "sync":  # every replica loads the master's weights at each broadcast
        assert weights_equal(replicas[0], replicas[1])
    uw.update_algorithm_parameter("clip_epsilon", 0.05)
    assert uw.replica_parameters("clip_epsilon") == pytest.approx([0.05, 0.05])

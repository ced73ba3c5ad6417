"""One version, one lag: the same PPO schedule in every scheme logs the same unit.

The schedule: 4 CartPole envs, 64 frames per batch (per gradient worker), 2
epochs x 2 minibatches, so every batch is learned from in S = 4 optimizer
steps. The version is the learner's optimizer-step count, and a step's lag is
the learner's version when it takes the step minus the batch's tag. An
on-policy batch (tagged with the version it is learned from) therefore logs a
mean lag of (0 + 1 + 2 + 3) / 4 = 1.5 and a max of 3, in every scheme; a batch
one publish (4 steps) behind logs 5.5 and 7. The old code logged 0 for the
central learner (and a hard-coded 0 with local collection) and counted
publishes for remote collectors.
"""

from __future__ import annotations

from schemes import ON_POLICY, lag_config, lag_of, run_learner


def test_decentralized_lag():
    metrics = run_learner(lag_config(backend="ray", num_grad_workers=2, update="decentralized"))
    assert [lag_of(m) for m in metrics] == [ON_POLICY] * 3
    assert [m["train/policy_version"] for m in metrics] == [4.0, 8.0, 12.0]

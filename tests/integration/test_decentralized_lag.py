"""One version, one lag, in the decentralized mode on Ray: the same unit as every other scheme
(the schedule and the figures: tests/unit/learners/test_versions.py)."""

from __future__ import annotations

from schemes import ON_POLICY, lag_config, lag_of, run_learner


def test_decentralized_lag():
    metrics = run_learner(lag_config(backend="ray", num_grad_workers=2, update="decentralized"))
    assert [lag_of(m) for m in metrics] == [ON_POLICY] * 3
    assert [m["train/policy_version"] for m in metrics] == [4.0, 8.0, 12.0]

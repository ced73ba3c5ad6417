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

import math
import re

import pytest

from fleetrl.collectors.timing import PARTS as COLLECT_PARTS
from fleetrl.errors import FleetError
from fleetrl.learners import make_learner
from fleetrl.learners.report import METRIC_COLUMNS, UNKNOWN_COLUMNS_MSG, metrics_row
from fleetrl.learners.versions import PolicyLag
from fleetrl.setup.build import make_algorithm
from schemes import ON_POLICY, ONE_PUBLISH_BEHIND, STEPS, lag_config, lag_of, run_learner


def test_policy_lag_counts_optimizer_steps():
    lag = PolicyLag()
    assert all(math.isnan(v) for v in lag.metrics().values())  # no step: no lag
    lag.add(first_version=8, steps=4, batch_version=4)
    lag.add(first_version=12, steps=0, batch_version=0)  # a replay algorithm still warming up
    assert lag.metrics() == ONE_PUBLISH_BEHIND
    lag.add(first_version=12, steps=2, batch_version=12)
    assert lag.metrics() == {"train/policy_lag": (22 + 1) / 6, "train/policy_lag_max": 7.0}


def test_metrics_row_is_the_schema():
    row = metrics_row({"train/policy_version": 4, "time/collect_s": 0.5})
    assert list(row) == list(METRIC_COLUMNS)
    assert row["train/policy_version"] == 4.0 and row["time/collect_s"] == 0.5
    assert all(
        math.isnan(v) for k, v in row.items() if k not in ("train/policy_version", "time/collect_s")
    )
    with pytest.raises(FleetError, match=re.escape(UNKNOWN_COLUMNS_MSG.format(names=["time/x"]))):
        metrics_row({"time/x": 1.0})
    # the collectors' parts are columns of the schema, in their order
    collection = [c for c in METRIC_COLUMNS if c.removeprefix("time/") in COLLECT_PARTS]
    assert collection == [f"time/{part}" for part in COLLECT_PARTS]


@pytest.mark.parametrize(
    ("collector", "tags", "lags"),
    [
        pytest.param({}, [0, 4, 8], [ON_POLICY] * 3, id="local"),
        pytest.param(
            {"num_collectors": 1, "prefetch": 0}, [0, 4, 8], [ON_POLICY] * 3, id="ray-prefetch0"
        ),
        # the second batch was collected (prefetched) while the first was learned from
        pytest.param(
            {"num_collectors": 1, "prefetch": 1},
            [0, 0, 4],
            [ON_POLICY, ONE_PUBLISH_BEHIND, ONE_PUBLISH_BEHIND],
            id="ray-prefetch1",
        ),
    ],
)
def test_central_learner_tags_and_lag(collector, tags, lags):
    seen = []
    metrics = run_learner(lag_config(collector), tags=seen)
    assert seen == tags
    assert [lag_of(m) for m in metrics] == lags
    assert [m["train/policy_version"] for m in metrics] == [4.0, 8.0, 12.0]


def test_central_learner_resumed_past_version_zero_publishes_its_version():
    cfg = lag_config({"num_collectors": 1, "prefetch": 0})
    algorithm = make_algorithm(cfg, 0)
    algorithm.num_updates = 40  # as loaded from a checkpoint
    scheme = make_learner(cfg, algorithm, seed=0)
    try:
        assert scheme.collection.published == 40
        assert lag_of(scheme.run_iteration().metrics) == ON_POLICY
    finally:
        scheme.shutdown()


@pytest.mark.parametrize(
    "collector",
    [pytest.param({}, id="local"), pytest.param({"num_collectors": 1, "prefetch": 0}, id="ray")],
)
def test_sync_grad_workers_lag(collector):
    metrics = run_learner(lag_config(collector, num_grad_workers=2))
    assert [lag_of(m) for m in metrics] == [ON_POLICY] * 3
    assert [m["train/policy_version"] for m in metrics] == [4.0, 8.0, 12.0]


def test_async_lag_unit_and_bounds():
    """First ready: the values depend on timing, the unit does not.

    Every gradient is applied (no drops below the bound), so the version moves by
    one per gradient. A worker's k-th gradient on a batch is applied after its
    k earlier ones, each after the weights its batch was collected with: its
    lag is at least k. In the first iteration (8 gradients) one worker
    returns at least 4, all on its first batch: a max of at least 3, a sum of
    at least 0 + 1 + 2 + 3.
    """
    metrics = run_learner(lag_config(num_grad_workers=2, update="async", max_gradient_lag=100))
    assert [m["train/policy_version"] for m in metrics] == [8.0, 16.0, 24.0]
    assert all(m["train/dropped_gradients"] == 0 for m in metrics)
    first = metrics[0]
    assert first["train/policy_lag_max"] >= STEPS - 1
    assert first["train/policy_lag"] * 2 * STEPS >= 0 + 1 + 2 + 3
    for m in metrics:
        assert m["train/policy_lag_max"] == int(m["train/policy_lag_max"])
        assert 0 <= m["train/policy_lag"] <= m["train/policy_lag_max"]

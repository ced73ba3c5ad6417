"""The rule by which a learner drops a batch older than ``max_learn_lag`` (IMPALA/APPO); the
rule on a real async Ray collector, worked through by hand: tests/integration/test_stale_batches.py."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from fleetrl.keys import POLICY_VERSION_KEY
from fleetrl.learners.versions import StaleBatchFilter, too_stale


def test_the_drop_rule_counts_batches_past_the_bound_only():
    stale = StaleBatchFilter(max_learn_lag=3)
    tags = TensorDict({POLICY_VERSION_KEY: torch.tensor([[4, 5], [5, 5]])}, [2, 2])
    assert [stale.admit(v, tags) for v in (4, 7, 8, 9)] == [True, True, False, False]
    assert stale.dropped == 2  # the oldest tag (4) counts
    masked = tags.clone()
    masked.set(("collector", "mask"), torch.tensor([[False, True], [True, True]]))
    assert stale.admit(8, masked) and stale.dropped == 2  # a padded step's tag is not looked at
    unbounded = StaleBatchFilter(max_learn_lag=None)
    assert unbounded.admit(10**6, tags) and unbounded.dropped == 0
    assert (too_stale(5, 5, 0), too_stale(6, 5, 0), too_stale(99, 0, None)) == (False, True, False)

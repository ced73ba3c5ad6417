"""The learner's lag bound on arriving batches (IMPALA/APPO's ``max_learn_lag``).

The deterministic setup: one async Ray collector with ``prefetch=2`` (two tasks
in flight, each issued with the weights published when it is issued), IMPALA
taking one optimizer step per batch and publishing after each, and
``max_learn_lag=1``. Task k+2 is issued when batch k is served, before the
learner steps on batch k, so it carries the version from before that step. By
hand (``tN(v)``: task N issued at version v; lag = learner's version - v):

====  =========================  ======  ==================  ========
iter  served (lag)               learns  issued meanwhile    version
====  =========================  ======  ==================  ========
1     t1(0): 0                   t1      t3(0)               1
2     t2(0): 1                   t2      t4(1)               2
3     t3(0): 2 dropped, t4(1): 1 t4      t5(2), t6(2)        3
4     t5(2): 1                   t5      t7(3)               4
5     t6(2): 2 dropped, t7(3): 1 t7      t8(4)               5
6     t8(4): 1                   t8      (budget spent)      6
====  =========================  ======  ==================  ========
"""

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

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

import pytest

from fleetrl.learners import make_learner
from fleetrl.setup.build import make_algorithm
from fleetrl.setup.load import config_from_dict

FPB = 32


@pytest.mark.usefixtures("ray_session")
def test_a_batch_older_than_max_learn_lag_is_dropped_and_counted():
    cfg = config_from_dict(
        {
            "algorithm": "impala",
            "env": {"id": "CartPole-v1", "num_envs": 2},
            "collector": {
                "num_collectors": 1,
                "frames_per_batch": FPB,
                "sync": False,
                "prefetch": 2,
                "num_cpus_per_collector": 0,
            },
            "trainer": {"total_frames": 8 * FPB, "seed": 1},
            "impala": {"max_learn_lag": 1, "hidden_sizes": [8]},
        }
    )
    algorithm = make_algorithm(cfg, cfg.trainer.seed)
    scheme = make_learner(cfg, algorithm, seed=cfg.trainer.seed)
    try:
        results = []
        while (result := scheme.run_iteration()) is not None:
            results.append(result)
    finally:
        scheme.shutdown()
    rows = [r.metrics for r in results]
    assert [r["train/dropped_batches"] for r in rows] == [0, 0, 1, 0, 1, 0]
    assert [r["train/policy_lag_max"] for r in rows] == [0, 1, 1, 1, 1, 1]
    assert [r["train/policy_version"] for r in rows] == [1, 2, 3, 4, 5, 6]
    # a dropped batch's frames were collected: they count, the budget is spent exactly
    assert [r.frames for r in results] == [FPB, FPB, 2 * FPB, FPB, 2 * FPB, FPB]
    assert scheme.stale.dropped == 2 and algorithm.num_updates == 6

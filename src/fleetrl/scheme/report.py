"""One metric schema: the columns of an iteration's metrics, the same in every scheme.

Every scheme (the central learner; sync, async and decentralized gradient
workers) reports the same columns, built here by :func:`metrics_row`, so
``metrics.csv`` has one shape whatever the config. A column a scheme has no
value for is NaN, never absent:

==============================  =====================================================
``train/policy_lag``, ``_max``  lag of the iteration's optimizer steps
                                (:mod:`fleetrl.scheme.versions`); NaN without a step
``train/policy_version``        the learner's optimizer-step count after the iteration
``train/grad_asynchrony``,      versions between the weights a gradient was computed
``_max``                        on and those it is applied to (central: 0)
``train/dropped_gradients``     async gradients dropped past ``scheme.max_policy_lag``
                                (0 elsewhere)
``train/grad_workers_restarted`` gradient workers replaced so far (central: NaN)
``time/collect_s``              waiting for the batch (distributed: mean per worker)
``time/learn_s``                the central learner's whole update (distributed: NaN)
``time/grad_s``                 computing gradients, mean per worker (central: NaN)
``time/update_s``               applying them (central: NaN)
``time/broadcast_s``            publishing weights (decentralized: the all-reduce)
``time/collect_to_process``     ``collect_s`` over the time spent processing
``time/iteration_s``            the whole iteration
==============================  =====================================================
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from fleetrl.errors import FleetError

__all__ = ["METRIC_COLUMNS", "metrics_row"]

METRIC_COLUMNS: tuple[str, ...] = (
    "train/policy_lag",
    "train/policy_lag_max",
    "train/policy_version",
    "train/grad_asynchrony",
    "train/grad_asynchrony_max",
    "train/dropped_gradients",
    "train/grad_workers_restarted",
    "time/collect_s",
    "time/learn_s",
    "time/grad_s",
    "time/update_s",
    "time/broadcast_s",
    "time/collect_to_process",
    "time/iteration_s",
)

UNKNOWN_COLUMNS_MSG = (
    "metrics {names} are not in the metric schema (fleetrl.scheme.report.METRIC_COLUMNS): "
    "add them there, so that every scheme reports them"
)


def metrics_row(values: Mapping[str, float]) -> dict[str, float]:
    """Every column of :data:`METRIC_COLUMNS`, in order: ``values``'s, NaN for the rest.

    Example:
        >>> row = metrics_row({"train/policy_version": 4})
        >>> row["train/policy_version"], math.isnan(row["time/grad_s"]), len(row)
        (4.0, True, 14)
    """
    unknown = sorted(set(values) - set(METRIC_COLUMNS))
    if unknown:  # a scheme's own column would give metrics.csv another shape in that scheme
        raise FleetError(UNKNOWN_COLUMNS_MSG.format(names=unknown))
    return {name: float(values.get(name, math.nan)) for name in METRIC_COLUMNS}

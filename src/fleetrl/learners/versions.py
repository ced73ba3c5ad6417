"""One version, one lag: the learner's optimizer-step count, and how far behind a batch is.

The **version** of a set of weights is the optimizer-step count of the learner
that produced them (:attr:`~fleetrl.algorithms.Algorithm.num_updates`), in
every scheme: the central learner, the update worker of sync and async
gradient workers, and each replica of the decentralized scheme. Learners
publish it with the weights (``update_policy_weights_(version=...)`` on a
:class:`~fleetrl.collectors.RayCollector`, or on a local
:class:`~fleetrl.collectors.SyncDataCollector`, which then only tags), so
every collected step carries the version it was acted with in
``("collector", "policy_version")``.

The **policy lag** of one optimizer step is the learner's version when it
takes the step minus the version of the batch the step learns from
(:func:`batch_version`). A batch learned from in ``S`` steps starting at
version ``v`` therefore contributes ``v - tag, v + 1 - tag, ..., v + S - 1 -
tag``: a perfectly on-policy PPO run with 4 steps per batch logs a mean lag of
1.5, whichever scheme runs it. :class:`PolicyLag` is the one place that turns
tags into ``train/policy_lag`` (the mean over the iteration's steps) and
``train/policy_lag_max``.

A learner that corrects for lag (IMPALA, APPO: ``max_learn_lag`` on the
algorithm) bounds it too: :class:`StaleBatchFilter` drops a batch that arrives
more than ``max_learn_lag`` optimizer steps behind the learner and counts it
(``train/dropped_batches``), as the update worker drops async gradients past
``scheme.max_gradient_lag``. The dropped batch's frames were collected and count
toward the budget; it is never learned from.

A collector's own ``stats()["policy_lag"]`` is a different measure: how many
versions its newest published version is ahead of a batch when the batch is
served (no learner involved).
"""

from __future__ import annotations

from tensordict import TensorDictBase

from fleetrl.keys import MASK_KEY, POLICY_VERSION_KEY

__all__ = ["PolicyLag", "StaleBatchFilter", "batch_version", "too_stale"]

#: where collectors tag each step with the version of the weights that acted


def batch_version(batch: TensorDictBase) -> int:
    """The version a batch was collected with: the oldest tag among its valid steps.

    Steps of a sync Ray round can come from workers holding different versions
    (a targeted publish, a worker that has not received the newest yet); the
    oldest one bounds how stale the batch is. Padded steps (``("collector",
    "mask")`` False) are not looked at.
    """
    tags = batch.get(POLICY_VERSION_KEY)
    if MASK_KEY in batch.keys(include_nested=True):
        tags = tags[batch.get(MASK_KEY)]
    return int(tags.min())


class PolicyLag:
    """The policy lag of one iteration's optimizer steps, as running aggregates.

    Examples:
        >>> lag = PolicyLag()
        >>> lag.add(first_version=8, steps=4, batch_version=4)  # steps at versions 8..11
        >>> lag.metrics()
        {'train/policy_lag': 5.5, 'train/policy_lag_max': 7.0}
    """

    def __init__(self) -> None:
        self.count = 0
        self.total = 0
        self.max: int | None = None

    def add(self, first_version: int, steps: int, batch_version: int) -> None:
        """Record ``steps`` optimizer steps taken at versions ``first_version``, ``+1``, ... on
        a batch collected with ``batch_version``."""
        if steps <= 0:
            return
        first = int(first_version) - int(batch_version)
        last = first + steps - 1
        self.count += steps
        self.total += (first + last) * steps // 2  # a sum of consecutive ints: exact
        self.max = last if self.max is None else max(self.max, last)

    def metrics(self) -> dict[str, float]:
        """``train/policy_lag`` (mean over the steps) and ``train/policy_lag_max``; NaN when
        no step learned (e.g. a replay algorithm still filling its buffer)."""
        if not self.count:
            return {"train/policy_lag": float("nan"), "train/policy_lag_max": float("nan")}
        return {
            "train/policy_lag": self.total / self.count,
            "train/policy_lag_max": float(self.max),
        }


def too_stale(version: int, batch_version: int, max_learn_lag: int | None) -> bool:
    """Whether a batch tagged ``batch_version`` is past the bound when the learner is at
    ``version`` (None: no bound).

    Examples:
        >>> too_stale(10, 7, 3), too_stale(10, 6, 3), too_stale(10, 0, None)
        (False, True, False)
    """
    return max_learn_lag is not None and version - batch_version > max_learn_lag


class StaleBatchFilter:
    """The learner's lag bound on arriving batches: admits or drops each one, counting drops.

    Args:
        max_learn_lag: the most optimizer steps a batch may be behind the learner when it
            arrives (None: every batch is admitted).

    Examples:
        >>> from tensordict import TensorDict
        >>> import torch
        >>> stale = StaleBatchFilter(max_learn_lag=2)
        >>> batch = TensorDict({POLICY_VERSION_KEY: torch.tensor([5, 5])}, [2])
        >>> stale.admit(7, batch), stale.admit(8, batch), stale.dropped
        (True, False, 1)
    """

    def __init__(self, max_learn_lag: int | None):
        self.max_learn_lag = max_learn_lag
        self.dropped = 0  # batches dropped so far

    def admit(self, version: int, batch: TensorDictBase) -> bool:
        """True if the learner at ``version`` may learn from ``batch``; else counts it."""
        if self.max_learn_lag is None:
            return True
        if too_stale(version, batch_version(batch), self.max_learn_lag):
            self.dropped += 1
            return False
        return True

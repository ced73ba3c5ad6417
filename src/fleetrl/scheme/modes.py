"""The learner modes a scheme runs in."""

from __future__ import annotations

import enum


class LearnerMode(str, enum.Enum):
    """Which learner a :class:`~fleetrl.scheme.Scheme` runs (a ``str`` Enum: compares to its value).

    Examples:
        >>> LearnerMode.ASYNC == "async", LearnerMode("decentralized").name
        (True, 'DECENTRALIZED')
    """

    CENTRAL = "central"  # one learner in the driver computes and applies the gradients
    SYNC = "sync"  # gradient workers; the update worker averages each step's gradients
    ASYNC = "async"  # gradient workers; the update worker applies gradients first ready
    DECENTRALIZED = "decentralized"  # gradient workers all-reduce and each applies the mean

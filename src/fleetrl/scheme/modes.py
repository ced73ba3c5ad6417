"""The learner modes a scheme runs in."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetrl.config import SchemeConfig

__all__ = ["LearnerMode", "learner_mode", "update_mode"]


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


def update_mode(scheme: SchemeConfig) -> LearnerMode:
    """How gradient workers update (sync, async or decentralized), from the ``scheme`` section."""
    if scheme.decentralized_update:
        return LearnerMode.DECENTRALIZED
    if scheme.grad_communication == "async":
        return LearnerMode.ASYNC
    return LearnerMode.SYNC


def learner_mode(scheme: SchemeConfig) -> LearnerMode:
    """Which learner the ``scheme`` section runs: central with one gradient worker, else
    :func:`update_mode`."""
    return LearnerMode.CENTRAL if scheme.num_grad_workers == 1 else update_mode(scheme)

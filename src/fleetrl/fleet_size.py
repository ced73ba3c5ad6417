"""FleetSize: how many collector workers a :class:`~fleetrl.collectors.RayCollector` keeps.

A fixed count (``num_collectors=4``), a range (``"2-8"``, or ``(2, 8)`` in Python), or
``"auto"``: from one to as many as the cluster's resources hold. A range starts with as
many workers as the cluster holds within it (at least its minimum, which must fit), grows
when nodes join and shrinks when nodes leave, never past its bounds
(:mod:`fleetrl.collectors.remote.elastic`). Torch-free: a config is screened with it before
torch is imported.

Examples:
    >>> FleetSize.parse(4), FleetSize.parse("2-8"), FleetSize.parse([2, 8])
    (FleetSize(min=4, max=4), FleetSize(min=2, max=8), FleetSize(min=2, max=8))
    >>> FleetSize.parse("auto"), FleetSize.parse("auto").elastic
    (FleetSize(min=1, max=None), True)
    >>> FleetSize.parse("8-2")
    Traceback (most recent call last):
    ...
    ValueError: must be an int >= 1, a range 'MIN-MAX' with 1 <= MIN <= MAX (e.g. '2-8'), or 'auto'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["AUTO", "FLEET_SIZE_ALLOWED", "FleetSize"]

#: the word for "as many as the cluster's resources hold"
AUTO = "auto"
FLEET_SIZE_ALLOWED = (
    "must be an int >= 1, a range 'MIN-MAX' with 1 <= MIN <= MAX (e.g. '2-8'), or 'auto'"
)


@dataclass(frozen=True)
class FleetSize:
    """The bounds of a fleet: ``min`` workers at least, ``max`` at most (None: no bound but the
    cluster's resources)."""

    min: int
    max: int | None

    @property
    def elastic(self) -> bool:
        """Whether the fleet grows and shrinks with the cluster (a range, or ``auto``)."""
        return self.max != self.min

    def __str__(self) -> str:
        if not self.elastic:
            return str(self.min)
        if self.max is None:
            return AUTO if self.min == 1 else f"{self.min}-{AUTO}"
        return f"{self.min}-{self.max}"

    def allows(self, count: int) -> bool:
        return count >= self.min and (self.max is None or count <= self.max)

    @classmethod
    def parse(cls, value: Any, *, zero: bool = False) -> FleetSize:
        """A fleet size from an int, ``"MIN-MAX"``, ``[MIN, MAX]``, ``"auto"`` or
        ``"MIN-auto"``; ``zero``: a fixed 0 is allowed (a config's local collection).

        Raises:
            ValueError: anything else (its text is :data:`FLEET_SIZE_ALLOWED`).
        """
        if isinstance(value, FleetSize):
            return value
        low: Any
        high: Any
        if isinstance(value, str):
            text = value.strip().lower()
            if text == AUTO:
                return cls(1, None)
            low, sep, high = text.partition("-")
            if not sep:
                low = high = text
        elif isinstance(value, (list, tuple)) and len(value) == 2:
            low, high = value
        else:
            low = high = value
        lo, hi = _count(low), None if high == AUTO else _count(high)
        bad_high = high != AUTO and (hi is None or (lo is not None and hi < lo))
        if lo is None or bad_high or (lo == 0 and not (zero and hi == 0)):
            raise ValueError(FLEET_SIZE_ALLOWED)
        return cls(lo, hi)


def _count(value: Any) -> int | None:
    """An int >= 0 from an int or its digits; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and value >= 0:
        return value
    return None

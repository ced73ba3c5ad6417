"""CollectTimes: where a collector's time goes, part by part, measured where it happens.

Each part is seconds of one worker's (or the local collector's) wall time:

==============  ==================================================================
``env_s``       the rollout loop outside the policy: stepping the envs (``send`` /
                ``recv``; with overlap, waiting for the other half's step) and
                writing each step into the batch's preallocated buffers
``policy_s``    the policy's calls in the rollout loop (under ``inference_mode``)
``pack_s``      building the batch around the loop (allocating its buffers, the
                episode bookkeeping, tags, ``split_trajs`` / ``postproc``) and, on
                a remote worker, packing it into its wire format
                (:mod:`fleetrl.distributed.wire`: compact layout, compression), or writing it
                into the replay buffer
``weights_s``   loading new weights on a worker: unpacking them and copying them
                into the policy, and asking the version board. Ray fetches the
                weights sent with a task before the task starts: that fetch is in
                no part
``transfer_s``  the driver's wall-clock time from the later of "the worker's
                result was ready" and "the driver began waiting for results" to
                the driver holding it: Ray's serialization, the object store and
                the fetch, not the time a result waited for a busy driver (wall
                clocks of two machines: clamped at 0)
``unpack_s``    unpacking the wire format into the batch on the driver
==============  ==================================================================

A part that does not apply is NaN (a local collector has no ``weights_s``,
``transfer_s`` or ``unpack_s``; a torchrl collector class on a worker does not
split ``env_s`` from ``policy_s``). :meth:`CollectTimes.add` treats NaN as
"not measured": NaN only when both sides are NaN.

The cost: a :func:`time.perf_counter` pair (about 100 ns) around each policy
call of the rollout loop, and a few per batch; no sync, no ``.item()``, nothing
per env.

Examples:
    >>> a = CollectTimes(env_s=1.0, policy_s=0.5, pack_s=0.25, frames=64, batches=1)
    >>> a.add(CollectTimes(env_s=3.0, policy_s=0.5, pack_s=0.25, transfer_s=0.1,
    ...                    frames=64, batches=1))
    >>> a.env_s, a.transfer_s, a.frames, a.batches
    (4.0, 0.1, 128, 2)
    >>> import math
    >>> math.isnan(a.weights_s), a.per_batch()["env_s"]
    (True, 2.0)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["PARTS", "CollectTimes"]

#: the parts, in the order they are shown (``time/<part>`` in the metric schema)
PARTS: tuple[str, ...] = ("env_s", "policy_s", "pack_s", "weights_s", "transfer_s", "unpack_s")

NAN = math.nan


def _plus(a: float, b: float) -> float:
    """``a + b`` where NaN means "not measured": NaN only when both are."""
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    return a + b


@dataclass
class CollectTimes:
    """Seconds per part of collection (see the module docstring), over ``batches`` batches
    (tasks, on a worker) that held ``frames`` frames. Plain floats: it travels through Ray
    with each task's result."""

    env_s: float = NAN
    policy_s: float = NAN
    pack_s: float = NAN
    weights_s: float = NAN
    transfer_s: float = NAN
    unpack_s: float = NAN
    frames: int = 0
    batches: int = 0

    def add(self, other: CollectTimes) -> None:
        """Add ``other``'s seconds, frames and batches (in place)."""
        for name in PARTS:
            setattr(self, name, _plus(getattr(self, name), getattr(other, name)))
        self.frames += other.frames
        self.batches += other.batches

    @classmethod
    def mean(cls, times: Iterable[CollectTimes]) -> CollectTimes:
        """One batch collected by several workers at once (a sync round): each part the mean
        over them, frames their sum, one batch.

        Examples:
            >>> m = CollectTimes.mean([CollectTimes(env_s=1.0, frames=8, batches=1),
            ...                        CollectTimes(env_s=3.0, frames=8, batches=1)])
            >>> m.env_s, m.frames, m.batches
            (2.0, 16, 1)
        """
        total, count = cls(), 0
        for t in times:
            total.add(t)
            count += 1
        for name in PARTS:
            setattr(total, name, getattr(total, name) / max(1, count))
        total.batches = min(1, count)
        return total

    def seconds(self) -> dict[str, float]:
        """The parts' seconds, by name (NaN: not measured)."""
        return {name: getattr(self, name) for name in PARTS}

    def per_batch(self) -> dict[str, float]:
        """Each part's seconds per batch (NaN before any batch)."""
        n = self.batches
        return {name: (s / n if n else NAN) for name, s in self.seconds().items()}

    def as_dict(self) -> dict[str, Any]:
        """Every field, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

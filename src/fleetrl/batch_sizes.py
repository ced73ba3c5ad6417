"""The batch-size rule, and the "no limit" sentinel, in one place.

Every env of a collector steps the same number of times per batch, so a batch
(``frames_per_batch``) and the frame budget (``total_frames``) are multiples of
the envs stepped together. A sync :class:`~fleetrl.collectors.RayCollector`
splits each batch evenly over its collectors first, so there the batch is a
multiple of ``num_collectors x envs per collector``. The config
(``collector.frames_per_batch``, ``trainer.total_frames``),
:class:`~fleetrl.collectors.SyncDataCollector` and
:class:`~fleetrl.collectors.RayCollector` all ask :func:`batch_size_problems`,
so the rule and its message are the same everywhere; only the names differ
(a config user reads config keys, a Python caller reads argument names).

"No limit" is ``None`` in configs (``null`` in YAML) and in what collectors
report (``remaining_frames``). The collectors' Python arguments keep torchrl's
``-1`` (``total_frames=-1``; ``max_frames_per_traj`` and ``init_random_frames``
take ``None`` too), for parity with torchrl's collectors; :func:`is_unlimited`
is the one test for both spellings.

Examples:
    >>> [str(p) for p in batch_size_problems(frames_per_batch=10, total_frames=None, num_envs=4)]
    ['frames_per_batch=10 is invalid: must be a multiple of the number of envs (4); use 8 or 12']
    >>> batch_size_problems(frames_per_batch=64, total_frames=-1, num_envs=4, split=2)
    []
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fleetrl.errors import Problem

__all__ = ["PYTHON_NAMES", "BatchSizeNames", "batch_size_problems", "is_unlimited"]

#: one message for every batch-size problem; ``split`` is empty unless a sync
#: collector splits the batch over several collectors first
BATCH_SIZE_MSG = "{split}must be a multiple of {unit}; use {fix}"
SPLIT_MSG = "{sync} splits each batch across the {m} collectors: "
SHARE_MSG = "{arg} / {num_collectors} = {share:g} frames per collector "


def is_unlimited(value: Any) -> bool:
    """Whether ``value`` means "no limit": ``None``, or torchrl's ``-1`` at the API edge."""
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value == -1)


@dataclass(frozen=True)
class BatchSizeNames:
    """How the caller spells the quantities in a message (Python arguments or config keys)."""

    frames_per_batch: str = "frames_per_batch"
    total_frames: str = "total_frames"
    num_collectors: str = "num_collectors"
    sync: str = "sync=True"


#: the collectors' argument names
PYTHON_NAMES = BatchSizeNames()


def batch_size_problems(
    *,
    frames_per_batch: int,
    total_frames: int | None,
    num_envs: int | Sequence[int | None] | None,
    split: int = 1,
    names: BatchSizeNames = PYTHON_NAMES,
) -> list[Problem]:
    """The batch-size problems of one collection setup (empty when there are none).

    Pure: it only does arithmetic, so a config, a local collector and a remote
    one can all ask it before anything starts. Sizes that are not positive ints
    are left to the caller's own type checks.

    Args:
        frames_per_batch: frames per batch (summed over the collectors that split it).
        total_frames: the frame budget; ``None`` or ``-1``: no limit.
        num_envs: envs stepped together per collector: one count, one per
            collector, or ``None`` while unknown (then only the split is checked).
        split: collectors that share each batch evenly (a sync RayCollector's
            ``num_collectors``); 1 where each collector gathers whole batches.
        names: how the message names the quantities.
    """
    counts = [num_envs] if isinstance(num_envs, int) or num_envs is None else list(num_envs)
    known = [n for n in counts if isinstance(n, int) and n > 0]
    n = math.lcm(*known) if known and len(known) == len(counts) else None
    problems = []
    if _positive_int(frames_per_batch):
        problems += _frames_problems(frames_per_batch, n, known, max(1, split), names)
    if _positive_int(total_frames) and n is not None and total_frames % n:
        lo = max(n, total_frames // n * n)
        allowed = BATCH_SIZE_MSG.format(
            split="", unit=_envs_unit(n, known), fix=f"{lo} or {lo + n}"
        )
        problems.append(Problem(names.total_frames, total_frames, allowed))
    return problems


def _frames_problems(
    value: int, n: int | None, known: list[int], m: int, names: BatchSizeNames
) -> list[Problem]:
    arg = names.frames_per_batch
    step = m * (n or 1)
    if value % step == 0:
        return []
    lo = max(step, value // step * step)
    if m == 1:
        # n is known here: with one collector and no count, every size is fine
        split, unit, fix = "", _envs_unit(step, known), f"{lo} or {lo + step}"
    else:
        split = SPLIT_MSG.format(sync=names.sync, m=m)
        if n is None:
            unit = f"{names.num_collectors} ({m})"
        else:
            split += SHARE_MSG.format(arg=arg, num_collectors=names.num_collectors, share=value / m)
            unit = f"each collector's {n} envs"
        fix = f"{arg}={lo} or {lo + step}"
    return [Problem(arg, value, BATCH_SIZE_MSG.format(split=split, unit=unit, fix=fix))]


def _envs_unit(n: int, known: list[int]) -> str:
    if len(set(known)) > 1:
        return f"every collector's number of envs (lcm of {known} = {n})"
    return f"the number of envs ({n})"


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0

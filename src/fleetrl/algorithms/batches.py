"""A collected batch on its way to a loss: its valid frames, its padded rows, the learner's device.

The batch helpers of :class:`~fleetrl.algorithms.base.Algorithm` (which re-exports the
public ones): :func:`flatten_valid` drops the padding of a masked batch,
:func:`end_padded_rows` ends each padded row where its steps end, and
:func:`to_learner_device` moves a batch to the learner's device in one copy.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from tensordict import TensorDictBase

from fleetrl.errors import ConfigError
from fleetrl.keys import DONE_KEY, MASK_KEY, TRUNCATED_KEY

__all__ = [
    "DEVICE_MSG",
    "as_device",
    "end_padded_rows",
    "flatten_valid",
    "on",
    "to_learner_device",
]

DEVICE_MSG = (
    "device={device!r} is invalid: {reason}; use 'cpu', or 'cuda' on a machine with a CUDA "
    "build of torch and a GPU"
)


def flatten_valid(batch: TensorDictBase, keys: Iterable[Any] | None = None) -> TensorDictBase:
    """All valid frames of a batch as one flat TensorDict (padded steps of a masked batch dropped).

    ``keys``: only these are kept (selected before the frames are gathered, so the
    other keys are never copied). A mask with every step valid (a sync round without
    preemption) costs a reshape, not a gather.
    """
    mask = batch.get(MASK_KEY) if MASK_KEY in batch.keys(include_nested=True) else None
    if keys is not None:
        batch = batch.select(*keys, strict=False)
    if mask is not None and not bool(mask.all()):
        return batch[mask]
    return batch.reshape(-1)


def end_padded_rows(batch: TensorDictBase) -> TensorDictBase:
    """Mark the last valid step of each padded row done (not terminated), for value estimators.

    A preempted sync round is padded after its last collected step; marking that
    step done-but-not-terminated makes GAE bootstrap from its next observation and
    stop there, instead of running into the padding.
    """
    if MASK_KEY not in batch.keys(include_nested=True):
        return batch
    mask = batch.get(MASK_KEY)
    if bool(mask.all()):  # nothing padded (a round without preemption)
        return batch
    last_valid = mask & ~torch.cat([mask[..., 1:], torch.zeros_like(mask[..., :1])], dim=-1)
    padded_after = last_valid & ~mask[..., -1:].expand_as(mask)
    if padded_after.any():
        for key in (DONE_KEY, TRUNCATED_KEY):
            value = batch.get(key).clone()
            value[padded_after] = True
            batch.set(key, value)
    return batch


def on(data: TensorDictBase, device: torch.device) -> bool:
    """Whether ``data``'s tensors are on ``device`` (a TensorDict built without a device
    says None: its first leaf tells)."""
    if data.device is not None:
        return data.device == device
    leaf = next(iter(data.values(include_nested=True, leaves_only=True)), None)
    return leaf is None or leaf.device == device


def to_learner_device(data: TensorDictBase, device: torch.device) -> TensorDictBase:
    """``data`` on the learner's ``device``, in one move: the same object where it is there
    already (a CPU learner's batch: no copy).

    From the CPU to CUDA the batch is pinned first, then copied without blocking: the
    copy runs while the host goes on, and the learner's stream orders it before the work
    that reads it.

    Examples:
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({"obs": torch.zeros(4, 2)}, [4])
        >>> to_learner_device(batch, torch.device("cpu")) is batch
        True
    """
    if on(data, device):
        return data
    if device.type == "cuda" and on(data, torch.device("cpu")):
        data = data.pin_memory(num_threads=0)  # in this thread: no pool per batch
    return data.to(device, non_blocking=True)


def as_device(device: Any) -> torch.device:
    """``device`` as a torch device this machine has (ConfigError otherwise); ``cuda`` is
    the current CUDA device by its index (``cuda:0``), as tensors and TensorDicts there
    say, so :func:`on` recognizes data already on it."""
    try:
        device = torch.device("cpu" if device is None else device)
    except (RuntimeError, TypeError) as err:
        raise ConfigError([DEVICE_MSG.format(device=device, reason=str(err))]) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError([DEVICE_MSG.format(device=str(device), reason="CUDA is not available")])
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device

"""A replay buffer in a Ray actor, written to by the collector workers themselves.

Decoupled off-policy collection (Ape-X's layout): each
:class:`~fleetrl.collectors.worker.CollectorWorker` of a
:class:`~fleetrl.collectors.RayCollector` built with ``replay_buffer=`` turns
its batch into transitions (:func:`transitions`: the valid steps, flattened,
with the keys an off-policy loss reads and the policy-version tag) and calls
:meth:`ReplayBufferActor.extend` itself; the batch never travels to the
driver. The driver receives a progress record instead (frames written, worker
id, policy version, the episodes that ended), and the learner samples from the
actor (:meth:`RemoteReplayBuffer.sample`, several minibatches per Ray call).

Why fleetrl's own thin actor rather than torchrl's ``RayReplayBuffer``: the
actor here answers ``extend`` with the number of frames written so far (the
worker's progress record carries it, so the learner's ratio control reads the
buffer's own count), and its :meth:`~ReplayBufferActor.state_dict` is the
torchrl buffer's, the same that :class:`~fleetrl.algorithms.replay.ReplayAlgorithm`
checkpoints, so a checkpoint holds one buffer format in both training modes.
Everything else is torchrl's ``TensorDictReplayBuffer`` over a
``LazyTensorStorage``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import ray
import torch
from tensordict import TensorDictBase
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

from fleetrl.errors import Problems
from fleetrl.keys import (
    MASK_KEY,
    POLICY_VERSION_KEY,
    TRANSITION_KEYS,
)

__all__ = ["RemoteReplayBuffer", "ReplayBufferActor", "transitions"]


def transitions(batch: TensorDictBase) -> TensorDictBase:
    """The valid steps of a collected batch, flat, with :data:`TRANSITION_KEYS` and the tag.

    Every step holds its own ``("next", ...)``, so a transition never spans two
    episodes; padded steps of a masked batch are dropped.
    """
    flat = batch[batch.get(MASK_KEY)] if MASK_KEY in batch.keys(True) else batch.reshape(-1)
    return flat.select(*TRANSITION_KEYS, POLICY_VERSION_KEY, strict=False)


class ReplayBufferActor:
    """A torchrl ``TensorDictReplayBuffer`` (``LazyTensorStorage``) behind a Ray actor.

    Args:
        capacity: transitions kept (the oldest are overwritten).
        batch_size: transitions per sampled minibatch.
    """

    def __init__(self, capacity: int, batch_size: int, num_threads: int | None = 1):
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        self.buffer = TensorDictReplayBuffer(
            storage=LazyTensorStorage(capacity), batch_size=batch_size
        )
        self.written = 0  # transitions written since the start (a resumed buffer's included)

    def extend(self, data: TensorDictBase) -> int:
        """Add transitions; returns the transitions written so far."""
        if data.numel():
            self.buffer.extend(data)
        self.written += data.numel()
        return self.written

    def sample(self, n: int = 1) -> TensorDictBase:
        """``n`` minibatches stacked along a leading dim, ``[n, batch_size]``."""
        return torch.stack([self.buffer.sample() for _ in range(n)])

    def size(self) -> int:
        """Transitions held now (at most the capacity)."""
        return len(self.buffer)

    def write_count(self) -> int:
        """Transitions written since the start."""
        return self.written

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": self.buffer.state_dict(), "written": self.written}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state["buffer"])
        self.written = int(state["written"])


class RemoteReplayBuffer:
    """The driver's handle on a :class:`ReplayBufferActor` (starts the actor; Ray must run).

    Args:
        capacity: transitions kept.
        batch_size: transitions per sampled minibatch.

    Keyword Args:
        num_cpus: Ray CPUs reserved for the actor (default 0: it mostly waits).

    Examples:
        >>> rb = RemoteReplayBuffer(10_000, 64)  # doctest: +SKIP
        >>> collector = RayCollector("CartPole-v1", None, frames_per_batch=256,
        ...                          total_frames=1024, replay_buffer=rb)  # doctest: +SKIP
        >>> sum(int(p["frames"]) for p in collector), len(rb)  # doctest: +SKIP
        (1024, 1024)
        >>> rb.sample(4).batch_size  # doctest: +SKIP
        torch.Size([4, 64])
    """

    def __init__(self, capacity: int, batch_size: int, *, num_cpus: float = 0):
        self.capacity = capacity
        self.batch_size = batch_size
        self.handle = (
            ray.remote(ReplayBufferActor).options(num_cpus=num_cpus).remote(capacity, batch_size)
        )

    def extend(self, data: TensorDictBase) -> int:
        """Add transitions from this process; returns the transitions written so far."""
        return ray.get(self.handle.extend.remote(data))

    def sample(self, n: int = 1) -> TensorDictBase:
        """``n`` minibatches, ``[n, batch_size]``, in one Ray call."""
        return ray.get(self.handle.sample.remote(n))

    def __len__(self) -> int:
        return ray.get(self.handle.size.remote())

    def write_count(self) -> int:
        """Transitions written since the start."""
        return ray.get(self.handle.write_count.remote())

    def state_dict(self) -> dict[str, Any]:
        """The actor's buffer (torchrl's ``state_dict``) and its write count."""
        return ray.get(self.handle.state_dict.remote())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ray.get(self.handle.load_state_dict.remote(state))

    def shutdown(self) -> None:
        """Kill the actor (its content is lost)."""
        with contextlib.suppress(Exception):  # already gone
            ray.kill(self.handle)


# ------------------------------------------------------ RayCollector's side
#: what RayCollector(replay_buffer=...) refuses: (argument, the value that works, why)
REPLAY_BUFFER_CONFLICTS = (
    ("sync", False, "use sync=False: each worker writes its own batches, first ready"),
    ("trajs_per_batch", None, "whole trajectories are assembled from batches in the driver"),
    ("split_trajs", False, "trajectories are split from batches in the driver"),
    ("postproc", None, "postproc runs on batches in the driver"),
    ("max_policy_lag", None, "a stale batch is discarded in the driver, after it was written"),
)
#: said after the reason of a conflict
REPLAY_BUFFER_WHY = (
    "; with replay_buffer= the workers write into the buffer and send no batch (leave it {fine})"
)
BAD_BUFFER_ALLOWED = (
    "must be a fleetrl.collectors.replay.RemoteReplayBuffer or the handle of a Ray actor with an "
    "extend(TensorDict) method (ReplayBufferActor)"
)


def buffer_handle(replay_buffer: Any) -> Any:
    """The actor handle the workers call, from a :class:`RemoteReplayBuffer` or a handle."""
    handle = getattr(replay_buffer, "handle", replay_buffer)
    return handle if isinstance(handle, ray.actor.ActorHandle) else None


def check_replay_buffer(problems: Problems, replay_buffer: Any, **arguments: Any) -> None:
    """Add a problem for a ``replay_buffer`` that is no actor and for every conflicting argument."""
    if replay_buffer is None:
        return
    if buffer_handle(replay_buffer) is None:
        problems.add("replay_buffer", type(replay_buffer).__name__, BAD_BUFFER_ALLOWED)
    for arg, fine, why in REPLAY_BUFFER_CONFLICTS:
        value = arguments[arg]
        if value is not fine and value != fine:
            problems.add(arg, value, why + REPLAY_BUFFER_WHY.format(fine=fine))


def progress_record(result: Any, worker: int) -> TensorDictBase:
    """What a :class:`~fleetrl.collectors.RayCollector` with a replay buffer yields per task.

    A TensorDict with batch size ``[]``: ``frames`` (transitions written by
    this task), ``written`` (the buffer's write count after it),
    ``("collector", "worker_id")``, ``("collector", "policy_version")`` and the
    episodes that ended in the task, ``episode_return`` (float) and
    ``episode_length`` (int64), each of shape ``[episodes]``.
    """
    from tensordict import TensorDict

    p = result.progress
    return TensorDict(
        {
            "frames": torch.tensor(result.frames),
            "written": torch.tensor(p["written"]),
            "collector": {
                "worker_id": torch.tensor(worker),
                "policy_version": torch.tensor(result.policy_version),
            },
            "episode_return": torch.tensor(p["returns"], dtype=torch.float32),
            "episode_length": torch.tensor(p["lengths"], dtype=torch.int64),
        },
        batch_size=[],
    )

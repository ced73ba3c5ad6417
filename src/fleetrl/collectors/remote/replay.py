"""A replay buffer in an actor (Ray's, or in this process), written to by the collector workers.

Decoupled off-policy collection (Ape-X's layout): each
:class:`~fleetrl.collectors.remote.worker.CollectorWorker` of a
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

A buffer's state (:func:`buffer_state`, :func:`load_buffer_state`) is torchrl's
``state_dict`` with only the filled rows of the storage: ``LazyTensorStorage``
allocates its whole capacity at the first write, and a checkpoint of 256 Atari
transitions in a 1M-transition buffer would otherwise hold 56 GB of zeros. The
restored buffer is the saved one bit for bit: the same rows, length, write
cursor and count, at the same capacity. Restored into a buffer of another
capacity (a resume with another ``buffer_size``), it keeps the newest rows that
fit, oldest first from the first slot, and writes on after them.

The learner counts the frames of a decoupled run from the progress records, which
come after the writes: at a checkpoint, tasks in flight may have written rows
that no record counted yet. :class:`CountedWrites` is the learner's account of
which writes it counted; the actor's :meth:`~ReplayBufferActor.state_dict`
leaves the others out, so a checkpoint's buffer holds the writes its frame count
includes, no more.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict, TensorDictBase

from fleetrl.distributed.backends import Actor, Backend, RayBackend, make_backend
from fleetrl.distributed.backends import on_driver_node as place_on_driver_node
from fleetrl.distributed.runtime import node_id, pin_threads
from fleetrl.distributed.wire import SamplesWire, pack_samples, unpack_samples
from fleetrl.errors import Problems
from fleetrl.keys import MASK_KEY, POLICY_VERSION_KEY, TRANSITION_KEYS, NestedKey

if TYPE_CHECKING:  # torchrl.data loads all of torchrl.envs and .modules: not in a worker
    from torchrl.data import TensorDictReplayBuffer

logger = logging.getLogger(__name__)

__all__ = [
    "CountedWrites",
    "RemoteReplayBuffer",
    "ReplayBufferActor",
    "buffer_state",
    "load_buffer_state",
    "transitions",
]

#: the key of a saved storage that holds only its filled rows: the capacity to restore
CAPACITY_KEY = "fleetrl_capacity"
RESIZED_MSG = (
    "replay buffer of %d transitions restored into one of %d: kept the newest %d of its %d rows"
)


def buffer_state(buffer: TensorDictReplayBuffer) -> dict[str, Any]:
    """torchrl's ``buffer.state_dict()`` with only the storage's filled rows.

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000))
        >>> _ = rb.extend(TensorDict({"obs": torch.zeros(3, 4, 84, 84, dtype=torch.uint8)}, [3]))
        >>> state = buffer_state(rb)
        >>> state["_storage"]["_storage"]["obs"].shape, state["_storage"][CAPACITY_KEY]
        (torch.Size([3, 4, 84, 84]), 1000)
        >>> again = TensorDictReplayBuffer(storage=LazyTensorStorage(1000))
        >>> load_buffer_state(again, state)
        >>> len(again), again.storage.max_size, again.sample(2)["obs"].shape
        (3, 1000, torch.Size([2, 4, 84, 84]))
    """
    state = buffer.state_dict()
    capacity, filled = int(buffer.storage.max_size), len(buffer.storage)
    if filled == 0 or filled >= capacity:  # empty, or full: the whole storage is data
        return state
    rows = buffer.storage[:filled].clone()  # a TensorDict of the filled rows
    storage = {**state["_storage"], "_storage": rows.state_dict(), CAPACITY_KEY: capacity}
    return {**state, "_storage": storage}


def load_buffer_state(buffer: TensorDictReplayBuffer, state: dict[str, Any]) -> None:
    """Restore what :func:`buffer_state` (or torchrl's ``state_dict``) returned into ``buffer``.

    At the saved capacity the filled rows go back into a storage of that capacity (zero
    rows after them, never read), so later writes land as they would have in the saved
    buffer. At another capacity the buffer takes the newest rows that fit, in the order
    they were written, into its first slots, and writes next after them: a bigger buffer
    keeps every row and has room left, a smaller one drops the oldest.

    Examples:
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4))
        >>> _ = rb.extend(TensorDict({"obs": torch.arange(6)}, [6]))  # 4, 5 overwrote 0, 1
        >>> small = TensorDictReplayBuffer(storage=LazyTensorStorage(3))
        >>> load_buffer_state(small, buffer_state(rb))
        >>> small.storage[:3]["obs"].tolist(), len(small)
        ([3, 4, 5], 3)
        >>> _ = small.extend(TensorDict({"obs": torch.tensor([6])}, [1]))  # over the oldest
        >>> small.storage[:3]["obs"].tolist()
        [6, 4, 5]
    """
    storage = state["_storage"]
    if not storage.get("initialized", False):  # never written: no rows to place
        buffer.load_state_dict(state)
        return
    capacity = int(buffer.storage.max_size)
    rows = TensorDict().load_state_dict(storage["_storage"], strict=False)
    saved = int(storage.get(CAPACITY_KEY, rows.shape[0]))
    if saved != capacity:
        ordered = _in_order(state)
        state = _placed(state, ordered[-capacity:], capacity)
        storage = state["_storage"]
        rows = TensorDict().load_state_dict(storage["_storage"], strict=False)
        logger.info(RESIZED_MSG, saved, capacity, rows.shape[0], ordered.shape[0])
    if rows.shape[0] < capacity:
        # built from the rows' own shapes: there may be none to copy (an emptied buffer)
        padding = rows.apply(
            lambda t: t.new_zeros((capacity - rows.shape[0], *t.shape[1:])),
            batch_size=[capacity - rows.shape[0]],
        )
        rows = torch.cat([rows, padding], 0)
    storage = {k: v for k, v in storage.items() if k != CAPACITY_KEY}
    buffer.load_state_dict({**state, "_storage": {**storage, "_storage": rows.state_dict()}})


def _in_order(state: dict[str, Any]) -> TensorDictBase:
    """A saved buffer's filled rows in the order they were written, oldest first (a full
    storage's oldest row is the one the write cursor points at: the next to be overwritten)."""
    storage = state["_storage"]
    rows = TensorDict().load_state_dict(storage["_storage"], strict=False)
    capacity = int(storage.get(CAPACITY_KEY, rows.shape[0]))
    length = int(storage["_len"])
    if length < capacity:  # never wrapped: written from slot 0 on
        return rows[:length]
    cursor = int(state["_writer"]["_cursor"])
    return torch.cat([rows[cursor:], rows[:cursor]], 0)


def _placed(state: dict[str, Any], rows: TensorDictBase, capacity: int) -> dict[str, Any]:
    """``state`` holding ``rows`` (oldest first) in the first slots of a buffer of
    ``capacity``, in :func:`buffer_state`'s form: its length, and the write cursor after them."""
    n = rows.shape[0]
    if "index" in rows:  # TensorDictReplayBuffer stores each row's slot with it
        rows = rows.clone(False)
        rows.set("index", torch.arange(n, dtype=rows.get("index").dtype))
    storage = {**state["_storage"], "_storage": rows.state_dict(), "_len": n}
    storage[CAPACITY_KEY] = capacity
    return {**state, "_storage": storage, "_writer": {**state["_writer"], "_cursor": n % capacity}}


class CountedWrites:
    """The writes to a replay buffer that a learner has counted, from its tasks' progress
    records (decoupled collection, :mod:`fleetrl.learners.decoupled`).

    Writes are numbered from 0, a resumed buffer's first. A record says where its task's
    write ended (``written``, the buffer's count after it) and how long it was
    (``frames``). Records come in any order, and a task whose worker died may have
    written rows no record will count; :meth:`counts` tells those rows from the counted
    ones. A range is remembered only while it may matter: past every counted write
    (:attr:`upto`), and while the buffer may still hold it (:meth:`forget_below`).

    Args:
        written: the writes counted before (a resumed run's): 0 to ``written - 1``.

    Examples:
        >>> counted = CountedWrites(100)
        >>> counted.add(228, 64)  # a later task's record first: writes 164 to 227
        >>> counted.total, counted.counts(98, 102).tolist(), counted.counts(162, 166).tolist()
        (164, [True, True, False, False], [False, False, True, True])
        >>> counted.add(164, 64)  # the earlier one's: every write up to 227 is counted
        >>> counted.upto, counted.total
        (228, 228)
    """

    def __init__(self, written: int = 0):
        #: every write before this one is counted (or out of the buffer)
        self.upto = written
        #: writes counted since the start (a resumed run's included)
        self.total = written
        self._ahead: list[tuple[int, int]] = []  # counted [start, stop) ranges past upto, sorted

    def add(self, written: int, frames: int) -> None:
        """Count a record's write: ``frames`` transitions, ending at write ``written``."""
        self.total += frames
        start = max(written - frames, self.upto)
        if start < written:
            bisect.insort(self._ahead, (start, written))
            self._merge()

    def forget_below(self, write: int) -> None:
        """The writes before ``write`` are out of the buffer (overwritten): whether they were
        counted no longer matters."""
        if write > self.upto:
            self.upto = write
            self._merge()

    def _merge(self) -> None:
        while self._ahead and self._ahead[0][0] <= self.upto:
            self.upto = max(self.upto, self._ahead.pop(0)[1])

    def counts(self, first: int, stop: int) -> torch.Tensor:
        """Whether each of the writes ``first`` to ``stop - 1`` is counted (a bool tensor)."""
        write = torch.arange(first, stop)
        counted = write < self.upto
        for start, end in self._ahead:  # few: the tasks in flight, a dead worker's writes
            counted |= (write >= start) & (write < end)
        return counted


def transitions(
    batch: TensorDictBase, keys: Sequence[NestedKey] = TRANSITION_KEYS
) -> TensorDictBase:
    """The valid steps of a collected batch, flat, with ``keys`` (:data:`TRANSITION_KEYS`
    for a single-agent env; a multi-agent env's own:
    :meth:`~fleetrl.envs.GroupedEnv.transition_keys`) and the policy-version tag.

    Every step holds its own ``("next", ...)``, so a transition never spans two
    episodes; padded steps of a masked batch are dropped.

    Raises:
        KeyError: a key the batch does not have (nothing is dropped silently).
    """
    flat = batch[batch.get(MASK_KEY)] if MASK_KEY in batch.keys(True) else batch.reshape(-1)
    present = set(flat.keys(include_nested=True, leaves_only=True))
    missing = [k for k in keys if k not in present]
    if missing:
        raise KeyError(
            f"the batch has no {missing}, which a replay buffer's transitions keep (its "
            f"leaves: {sorted(map(str, present))})"
        )
    return flat.select(*keys, POLICY_VERSION_KEY)


class ReplayBufferActor:
    """A torchrl ``TensorDictReplayBuffer`` (``LazyTensorStorage``) behind a Ray actor.

    Args:
        capacity: transitions kept (the oldest are overwritten).
        batch_size: transitions per sampled minibatch.
    """

    def __init__(self, capacity: int, batch_size: int, num_threads: int | None = 1):
        from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

        pin_threads(num_threads)
        self.batch_size = batch_size
        # no batch size of its own: each sample call says how many transitions it draws
        self.buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity))
        self.written = 0  # transitions written since the start (a resumed buffer's included)

    def extend(self, data: TensorDictBase) -> int:
        """Add transitions; returns the transitions written so far."""
        if data.numel():
            self.buffer.extend(data)
        self.written += data.numel()
        return self.written

    def sample(self, n: int = 1) -> TensorDictBase:
        """``n`` minibatches stacked along a leading dim, ``[n, batch_size]``: one uniform
        draw (with replacement) of ``n * batch_size`` transitions, as ``n`` draws would be."""
        return self.buffer.sample(n * self.batch_size).reshape(n, self.batch_size)

    def sample_wire(self, n: int = 1) -> SamplesWire:
        """:meth:`sample` as it crosses Ray (:func:`fleetrl.distributed.wire.pack_samples`)."""
        return pack_samples(self.sample(n))

    def node(self) -> str:
        """The Ray node this buffer lives on ("local" outside Ray)."""
        return node_id()

    def size(self) -> int:
        """Transitions held now (at most the capacity)."""
        return len(self.buffer)

    def write_count(self) -> int:
        """Transitions written since the start."""
        return self.written

    def state_dict(self, counted: CountedWrites | None = None) -> dict[str, Any]:
        """The buffer (:func:`buffer_state`) and its write count; with ``counted``, as the
        learner counted them: without the rows of the writes it has not counted (of tasks
        still in flight), the count its own."""
        state = buffer_state(self.buffer)
        if counted is None:
            return {"buffer": state, "written": self.written}
        held = len(self.buffer)  # the newest writes: written - held to written - 1
        keep = counted.counts(self.written - held, self.written)
        if not bool(keep.all()):
            capacity = int(self.buffer.storage.max_size)
            state = _placed(state, _in_order(state)[keep], capacity)
        # torchrl's count too: the checkpoint's buffer was written as many times as it counts
        state["_writer"] = {**state["_writer"], "_write_count": counted.total}
        return {"buffer": state, "written": counted.total}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_buffer_state(self.buffer, state["buffer"])
        self.written = int(state["written"])


class RemoteReplayBuffer:
    """The driver's handle on a :class:`ReplayBufferActor`, which it starts.

    Args:
        capacity: transitions kept.
        batch_size: transitions per sampled minibatch.

    Keyword Args:
        num_cpus: Ray CPUs reserved for the actor (default 0: it mostly waits).
        backend: where the actor runs, ``"ray"`` (Ray must run) or ``"inprocess"``
            (:mod:`fleetrl.distributed.backends`); the collector that writes into it must use the same.
        on_driver_node: on Ray, place the actor on this process's node (default), where a
            lost node cannot take it: a node lost under a collector costs the buffer only
            that collector's batch in flight, collected again; losing the driver's node ends
            the run, which resumes from its last checkpoint (the buffer's rows included).
            False: wherever Ray's scheduler puts it.

    Examples:
        >>> rb = RemoteReplayBuffer(10_000, 64)  # doctest: +SKIP
        >>> collector = RayCollector("CartPole-v1", None, frames_per_batch=256,
        ...                          total_frames=1024, replay_buffer=rb)  # doctest: +SKIP
        >>> sum(int(p["frames"]) for p in collector), len(rb)  # doctest: +SKIP
        (1024, 1024)
        >>> rb.sample(4).batch_size  # doctest: +SKIP
        torch.Size([4, 64])
    """

    def __init__(
        self,
        capacity: int,
        batch_size: int,
        *,
        num_cpus: float = 0,
        backend: str | Backend = "ray",
        on_driver_node: bool = True,
    ):
        self.capacity = capacity
        self.batch_size = batch_size
        self.backend = make_backend(backend)
        options: dict[str, Any] = {"num_cpus": num_cpus}
        if on_driver_node:
            options = place_on_driver_node(self.backend, options)
        #: the actor the collector workers extend
        self.actor: Actor = self.backend.start(
            ReplayBufferActor, capacity, batch_size, options=options
        )

    def extend(self, data: TensorDictBase) -> int:
        """Add transitions from this process; returns the transitions written so far."""
        return self.actor.ask("extend", data)

    def sample(self, n: int = 1) -> TensorDictBase:
        """``n`` minibatches, ``[n, batch_size]``, in one call."""
        return self.receive(self.request(n))

    def request(self, n: int = 1) -> Any:
        """Issue a :meth:`sample` call and return at once: the actor samples while the caller
        goes on; :meth:`receive` reads the answer."""
        return self.actor.call("sample_wire", n)

    def receive(self, ref: Any) -> TensorDictBase:
        """The minibatches of a :meth:`request` (waits for them)."""
        return unpack_samples(self.backend.get(ref))

    def __len__(self) -> int:
        return self.actor.ask("size")

    def write_count(self) -> int:
        """Transitions written since the start."""
        return self.actor.ask("write_count")

    def state_dict(self, counted: CountedWrites | None = None) -> dict[str, Any]:
        """The actor's buffer (:func:`buffer_state`) and its write count; with ``counted``,
        only the writes counted there (:meth:`ReplayBufferActor.state_dict`)."""
        return self.actor.ask("state_dict", counted)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor.ask("load_state_dict", state)

    def shutdown(self) -> None:
        """End the actor (its content is lost)."""
        self.backend.kill_all([self.actor])


# ------------------------------------------------------ RayCollector's side
#: what RayCollector(replay_buffer=...) refuses: (argument, the value that works, why)
REPLAY_BUFFER_CONFLICTS = (
    ("sync", False, "use sync=False: each worker writes its own batches, first ready"),
    ("trajs_per_batch", None, "whole trajectories are assembled from batches in the driver"),
    ("split_trajs", False, "trajectories are split from batches in the driver"),
    ("postproc", None, "postproc runs on batches in the driver"),
    ("max_served_lag", None, "a stale batch is discarded in the driver, after it was written"),
)
#: said after the reason of a conflict
REPLAY_BUFFER_WHY = (
    "; with replay_buffer= the workers write into the buffer and send no batch (leave it {fine})"
)
BAD_BUFFER_ALLOWED = (
    "must be a fleetrl.collectors.remote.replay.RemoteReplayBuffer, torchrl's Ray-owned replay buffer "
    "(torchrl.data.ReplayBuffer(..., service_backend='ray')), or the handle of a Ray actor with "
    "an extend(TensorDict) method (ReplayBufferActor)"
)

BUFFER_BACKEND_MSG = (
    "runs on backend {buffer!r} and the workers on backend={workers!r}: build the "
    "RemoteReplayBuffer with backend={workers!r}"
)


class TorchRLBufferWriter:
    """How the workers write into torchrl's Ray-owned replay buffer
    (``torchrl.data.ReplayBuffer(..., service_backend="ray")``, torchrl 0.14): through one
    of its picklable clients, with the call the workers make of a fleetrl buffer actor
    (``ask("extend", data)`` -> the buffer's write count after the write).

    The write count is asked after the write (a second call to the buffer's actor): with
    several workers writing it may include their writes too; it only grows.
    """

    backend = RayBackend()

    def __init__(self, client: Any):
        self.client = client

    def ask(self, method: str, *args: Any) -> Any:
        if method != "extend":
            raise AttributeError(f"{method!r}: the workers only extend a torchrl replay buffer")
        self.client.extend(*args)
        return int(self.client.write_count)


def buffer_actor(replay_buffer: Any) -> Actor | TorchRLBufferWriter | None:
    """What the workers call: a :class:`RemoteReplayBuffer`'s actor, a Ray actor handle's, or
    a writer through a client of torchrl's Ray-owned replay buffer (None for anything else)."""
    if isinstance(replay_buffer, RemoteReplayBuffer):
        return replay_buffer.actor
    if isinstance(replay_buffer, Actor):
        return replay_buffer
    if getattr(replay_buffer, "service_backend", None) == "ray" and callable(
        getattr(replay_buffer, "client", None)
    ):
        return TorchRLBufferWriter(replay_buffer.client())
    try:
        from ray.actor import ActorHandle
    except ImportError:  # pragma: no cover - ray is a dependency
        return None
    from fleetrl.distributed.warm import Hosted

    if isinstance(replay_buffer, ActorHandle | Hosted):  # Hosted: a kept process's worker
        return Actor(RayBackend(), replay_buffer)
    return None


def check_replay_buffer(problems: Problems, replay_buffer: Any, **arguments: Any) -> None:
    """Add a problem for a ``replay_buffer`` that is no actor and for every conflicting argument."""
    if replay_buffer is None:
        return
    actor = buffer_actor(replay_buffer)
    if actor is None:
        problems.add("replay_buffer", type(replay_buffer).__name__, BAD_BUFFER_ALLOWED)
    backend = arguments.pop("backend", "ray")
    name = backend.name if isinstance(backend, Backend) else backend
    if actor is not None and actor.backend.name != name:
        problems.add(
            "replay_buffer",
            type(replay_buffer).__name__,
            BUFFER_BACKEND_MSG.format(buffer=actor.backend.name, workers=name),
        )
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

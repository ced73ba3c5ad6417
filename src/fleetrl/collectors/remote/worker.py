r"""CollectorWorker: the Ray actor that runs one collector and serves batches.

One task = one batch: ``collect(frames, ...)`` carries the frame count, the
weights when the worker lacks the newest version, and the sync round it
belongs to. On Ray the actor has two concurrency groups: collection runs one
task at a time, while ``preempt`` (group ``control``) can stop a running
rollout. The worker runs on any backend (:mod:`fleetrl.distributed.backends`): the version
board and the replay buffer it is given are :class:`~fleetrl.distributed.backends.Actor`\ s
of its own backend.

Batches cross Ray in the wire format of :mod:`fleetrl.distributed.wire`:
numpy leaves (or compressed ones), and for a fleetrl collector's batches the
compact layout, which sends each observation once instead of twice. A worker
given a replay buffer (:mod:`fleetrl.collectors.remote.replay`) sends no batch: it
extends the buffer with the batch's transitions itself and returns only a
progress record (:attr:`TaskResult.progress`).

Each result says where the task's time went (:attr:`TaskResult.times`,
:mod:`fleetrl.collectors.timing`): the collector's ``env_s``, ``policy_s`` and
``pack_s`` (the wire packing, or the replay-buffer write, added to it), the
``weights_s`` of loading new weights, and the wall-clock time it was ready
(:attr:`TaskResult.ready_at`), from which the driver measures the transfer.
None of it goes into the batch.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDictBase

from fleetrl.collectors.base import episode_stats
from fleetrl.collectors.local.sync import SyncDataCollector
from fleetrl.collectors.remote.replay import transitions
from fleetrl.collectors.timing import CollectTimes
from fleetrl.distributed.runtime import node_id, pin_threads
from fleetrl.distributed.wire import pack_batch, unpack_weights
from fleetrl.envs.grouped import GroupedEnv
from fleetrl.keys import POLICY_VERSION_KEY, WORKER_ID_KEY

__all__ = ["CollectorWorker", "TaskResult"]


def _control(method: Any) -> Any:
    """Run ``method`` in the actor's ``control`` concurrency group on Ray (beside a rollout)."""
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is a dependency; in process it needs none
        return method
    return ray.method(concurrency_group="control")(method)


#: each worker incarnation owns 2**32 trajectory ids; workers own 2**40
TRAJ_IDS_PER_INCARNATION = 1 << 32
TRAJ_IDS_PER_WORKER = 1 << 40


@dataclass
class TaskResult:
    """What a worker returns for one task."""

    batch: Any  # a dict packed by pack_batch
    frames: int
    policy_version: int
    collect_s: float
    bytes_raw: int = 0  # the batch's leaves in the full layout
    bytes_sent: int = 0  # what the wire holds (compact and/or compressed)
    compact: bool = False  # sent in the compact layout
    preempted: bool = False
    #: with a replay buffer (``batch`` is then None): ``written``, the buffer's write count
    #: after this batch, and the ``returns`` and ``lengths`` of the episodes that ended in it
    progress: dict[str, Any] | None = None
    #: where the task's time went, part by part (the driver adds transfer_s and unpack_s)
    times: CollectTimes = field(default_factory=CollectTimes)
    #: wall-clock time (``time.time()``) the result was ready to return
    ready_at: float = 0.0
    #: central inference: the seconds each of the task's requests took (ask to answer)
    latencies: list[float] | None = None


class CollectorWorker:
    """Runs one collector (fleetrl's SyncDataCollector or a torchrl collector class).

    Args:
        worker_id: the worker's index, written to every batch.
        incarnation: how many times this worker id was replaced (keeps trajectory ids unique).
        collector_class: the collector to build.
        collector_kwargs: its keyword arguments (``create_env_fn`` included).
        policy: the acting policy (sent once through Ray's object store).
        frames_per_batch: the usual task size (torchrl classes are built with it).
        compress: None, ``"lz4"`` or ``"zstd"``.
        board: a VersionBoard handle to pull newer weights from, or None.
        max_weight_update_interval: pull from the board at least every this many tasks.
        num_threads: torch intra-op threads in this process (None: leave torch's
            default). One by default: a second thread made CNN inference several
            times slower on a machine whose cores the other workers already use.
        replay_buffer: a :class:`~fleetrl.collectors.remote.replay.ReplayBufferActor`
            handle to extend with each batch's transitions, or None (send the batch).
    """

    def __init__(
        self,
        worker_id: int,
        incarnation: int,
        collector_class: type,
        collector_kwargs: dict[str, Any],
        policy: Any,
        frames_per_batch: int,
        compress: str | None = None,
        board: Any = None,
        max_weight_update_interval: int = -1,
        num_threads: int | None = 1,
        replay_buffer: Any = None,
    ):
        self.replay_buffer = replay_buffer
        pin_threads(num_threads)
        self.worker_id = worker_id
        self.compress = compress
        self.board = board
        self.interval = max_weight_update_interval
        self.version = 0
        self._since_pull = 0
        self._stop_round = -1
        self._args = (
            worker_id,
            incarnation,
            collector_class,
            dict(collector_kwargs),
            policy,
            frames_per_batch,
        )
        self.native = isinstance(collector_class, type) and issubclass(
            collector_class, SyncDataCollector
        )
        self.collector: Any = None
        self._iter: Any = None
        #: central inference: the collector's policy runs on an inference server, which
        #: holds the weights and answers each step with its version
        self.served = False

    def setup(self) -> dict[str, Any]:
        """Build the collector and say where it runs and how many envs it steps per call.

        Done in a method rather than the constructor so that an error (a bad env
        id, a policy that does not fit) reaches the driver as itself, not as an
        opaque actor death.
        """
        worker_id, incarnation, collector_class, kwargs, policy, frames_per_batch = self._args
        kwargs["policy"] = policy
        if self.native:
            kwargs.setdefault("worker_id", worker_id)
            kwargs.setdefault(
                "traj_id_start",
                worker_id * TRAJ_IDS_PER_WORKER + incarnation * TRAJ_IDS_PER_INCARNATION,
            )
            # a RayCollector's worker: its share of the fleet's sizes, which the driver checked
            if "rollout" not in kwargs:
                kwargs["frames_per_batch"] = frames_per_batch
            self.collector = collector_class(**kwargs)
            self.served = getattr(self.collector, "server", None) is not None
            # a task's size was checked against this worker's envs before the worker started:
            # it is not checked again per task, unless a subclass collects its own way
            own = type(self.collector).collect is not SyncDataCollector.collect
            self._collect = self.collector.collect if own else self.collector.collect_planned
        else:
            env_fn = kwargs.pop("create_env_fn")
            policy = kwargs.pop("policy", None)
            self.collector = collector_class(
                env_fn, policy, frames_per_batch=frames_per_batch, total_frames=-1, **kwargs
            )
            self._iter = iter(self.collector)
        return {
            "worker_id": worker_id,
            "pid": os.getpid(),
            "node_id": node_id(),
            "num_envs": self.collector.num_envs if self.native else None,
        }

    @_control
    def ping(self) -> bool:
        """Answer a liveness probe (:mod:`fleetrl.distributed.workers`), beside a rollout: in milliseconds
        from a live process, never from one lost with its node."""
        return True

    @_control
    def preempt(self, round_id: int) -> None:
        """Ask the rollout of sync round ``round_id`` (and older) to stop once it has its minimum."""
        self._stop_round = max(self._stop_round, round_id)

    def _load_weights(self, wire: Any, version: int) -> None:
        weights = unpack_weights(wire)
        if self.native:
            self.collector.update_policy_weights_(weights, version=version)
        else:
            self.collector.update_policy_weights_(weights)
        self.version = version

    def _maybe_pull(self) -> None:
        if self.board is None or self.interval <= 0:
            return
        self._since_pull += 1
        if self._since_pull < self.interval:
            return
        self._since_pull = 0
        newer = self.board.ask("newer_than", self.version)
        if newer is not None:
            version, (ref,) = newer
            self._load_weights(self.board.backend.get(ref), version)

    def collect(
        self,
        frames: int,
        version: int,
        weights: Any,  # weights on the wire (wire.pack_weights) or None
        *,
        random: bool = False,
        round_id: int = -1,
        min_frames: int | None = None,
    ) -> TaskResult:
        start = time.perf_counter()
        # the driver sends weights only to a worker that lacks that publish; >=: a learner may
        # republish a version whose weights changed without an optimizer step (DQN's epsilon)
        if weights is not None and version >= self.version:
            self._load_weights(weights, version)
        elif weights is None and version > self.version and self.native and not self.served:
            # a version was published without weights (random policy): only the tag moves
            self.collector.update_policy_weights_(version=version)
            self.version = version
        self._maybe_pull()
        loaded = time.perf_counter()
        preempted = False
        if self.native:
            should_stop = None
            if min_frames is not None and min_frames < frames:
                should_stop = lambda: self._stop_round >= round_id  # noqa: E731
            batch = self._collect(
                frames, random=random, min_frames=min_frames, should_stop=should_stop
            )
            preempted = batch.numel() < frames
        else:
            batch = self._next_foreign(frames)
        collected = time.perf_counter()
        result = TaskResult(
            batch=batch,
            frames=batch.numel(),
            # served: the oldest version its server answered with in this batch
            policy_version=self.collector.batch_version if self.served else self.version,
            collect_s=collected - start,
            preempted=preempted,
        )
        if self.served:
            result.latencies = self.collector.server.take_latencies()
        # a torchrl collector class does not split its loop: its env and policy time are NaN
        times = self.collector.take_times() if self.native else CollectTimes(batches=1)
        times.weights_s = loaded - start
        if self.replay_buffer is not None:
            result = self._write(batch, result)
        else:
            # only a fleetrl collector vouches for the rollout layout the compact wire relies on
            compact_keys = self.collector.compact_keys if self.native else None
            packed, raw, sent = pack_batch(batch, self.compress, compact_keys)
            result.batch = packed
            result.bytes_raw, result.bytes_sent = raw, sent
            result.compact = packed["compact"] is not None
        done = time.perf_counter()
        times.pack_s = (0.0 if math.isnan(times.pack_s) else times.pack_s) + done - collected
        times.frames = result.frames  # the replay buffer's transitions, with one
        result.times = times
        result.ready_at = time.time()  # wall clock: the driver's clock on the same node
        return result

    def _write(self, batch: TensorDictBase, result: TaskResult) -> TaskResult:
        """Extend the replay buffer with the batch's transitions; the result carries progress.

        Waits for the buffer's answer, so the write is done when the driver
        learns of it (and a buffer slower than the workers holds them back).
        """
        stats = episode_stats(batch)
        env = getattr(self.collector, "env", None)
        if isinstance(env, GroupedEnv):  # a multi-agent env's transitions keep its own keys
            data = transitions(batch, env.transition_keys())
        else:
            data = transitions(batch)
        written = self.replay_buffer.ask("extend", data)
        result.batch = None
        result.frames = data.numel()
        result.progress = {
            "written": int(written),
            "returns": stats.returns.tolist(),
            "lengths": stats.lengths.tolist(),
        }
        return result

    def _next_foreign(self, frames: int) -> TensorDictBase:
        """A batch from a torchrl collector, tagged and cut to ``frames`` when asked for fewer."""
        batch = next(self._iter)
        if batch.numel() > frames:
            per_step = batch.numel() // batch.shape[-1]
            batch = batch[..., : frames // per_step]
        batch.set(WORKER_ID_KEY, torch.full(batch.shape, self.worker_id, dtype=torch.int64))
        batch.set(
            POLICY_VERSION_KEY,
            torch.full(batch.shape, self.version, dtype=torch.int64),
        )
        return batch

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        return self.collector.set_seed(seed, static_seed)

    def state_dict(self) -> dict[str, Any]:
        return {"collector": self.collector.state_dict(), "version": self.version}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """``None``: a worker the checkpoint did not hold (an elastic fleet grew since): it
        keeps its fresh state."""
        if state is None:
            return
        self.collector.load_state_dict(state["collector"])
        self.version = state["version"]

    def shutdown(self) -> None:
        if self.collector is not None:  # None: setup() never ran, or raised
            self.collector.shutdown()

"""WorkerPool: the remote collector actors of a :class:`~fleetrl.collectors.RayCollector`.

One slot per worker id: its actor, the arguments it was made with and the
tasks it has in flight. The pool starts the actors (checking env counts before
any actor starts, from the arguments, and again from what the workers report),
submits tasks with the weights each worker lacks, gets their results with typed
worker errors, and replaces dead workers.

Frame accounting: :attr:`WorkerPool.issued` counts the frames of tasks issued
and not yet delivered. A first-ready task (``round_id < 0``) leaves the books
when its result is got; a round's frames stay issued until the round is served
whole (:mod:`fleetrl.collectors.rounds`).

Fault tolerance: a worker whose actor dies (killed, crashed, node lost) is
replaced by a new actor with the same worker id; it receives the current
weights with its first task and the tasks lost with the old actor are issued
to it again. A replacement that dies too is replaced again after a doubling
wait, up to ``max_restart_attempts`` in a row (see
:mod:`fleetrl.collectors.restarts`); then :class:`~fleetrl.errors.WorkerLostError`.
The lost tasks stay on the books meanwhile (``Slot.lost``, their frames still
counted as issued), so a caller that catches the error and iterates again
still gets exact frames. An exception raised inside a worker is not a death:
it surfaces through :func:`~fleetrl.collectors.ray_checks.worker_failure`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from fleetrl.collectors.overlap import available_cores, worker_overlap
from fleetrl.collectors.ray_checks import (
    check_env_counts,
    remote_traceback,
    takes_env_list,
    worker_failure,
)
from fleetrl.collectors.restarts import RestartPolicy
from fleetrl.collectors.weights import WeightStore
from fleetrl.collectors.worker import CollectorWorker, TaskResult
from fleetrl.errors import WorkerError, WorkerLostError

__all__ = ["Slot", "Task", "WorkerPool"]

logger = logging.getLogger(__name__)


@dataclass
class Task:
    """One task for one worker: collect ``frames`` (a round's share when ``round_id >= 0``)."""

    worker: int
    frames: int
    random: bool
    round_id: int = -1
    min_frames: int | None = None


@dataclass
class Slot:
    """One worker: its actor, its creation arguments, what it has in flight."""

    worker_id: int
    env_fn: Any
    kwargs: dict[str, Any]
    remote_config: dict[str, Any]
    handle: Any = None
    incarnation: int = 0
    publish: int = 0  # the newest publish of weights sent to it (WeightStore.publishes)
    num_envs: int | None = None
    node_id: str | None = None
    inflight: list[Any] = field(default_factory=list)
    lost: list[Task] = field(default_factory=list)  # tasks of a dead actor, still owed
    deaths: int = 0  # in a row, since its last completed task
    frames: int = 0
    restarts: int = 0
    seed: int | None = None


class StartDied(WorkerError):
    """A worker's actor died while starting (the driver may start another)."""


class WorkerPool:
    """The collector actors, one slot per worker id, and the tasks they have in flight.

    Args:
        weights: the collector's weight store; each task carries the weights its
            worker lacks.
        policy_ref: the policy module, put once in Ray's object store.

    Keyword Args:
        collector_class, native, num_workers_per_collector, sync,
            frames_per_batch, total_frames, compress, max_weight_update_interval,
            num_threads, init_random_frames: as :class:`~fleetrl.collectors.RayCollector`
            was given them (checked there).
        devices: the device arguments, one list per name (one value per collector).
        common: the collector arguments every worker gets.
        max_restart_attempts: replacements of a dead worker tried in a row.
        replay_buffer: a replay buffer actor's handle the workers extend with
            their batches (they then return progress records), or None.
    """

    def __init__(
        self,
        weights: WeightStore,
        policy_ref: Any,
        *,
        collector_class: Any,
        native: bool,
        num_workers_per_collector: int,
        sync: bool,
        frames_per_batch: int,
        total_frames: int,
        compress: str | None,
        max_weight_update_interval: int,
        num_threads: int | None,
        init_random_frames: int,
        devices: dict[str, list[Any]],
        common: dict[str, Any],
        max_restart_attempts: int,
        replay_buffer: Any = None,
    ):
        self.replay_buffer = replay_buffer  # an actor handle the workers extend, or None
        self.weights = weights
        self.policy_ref = policy_ref
        self.collector_class = collector_class
        self.native = native
        self.num_workers_per_collector = num_workers_per_collector
        self.sync = sync
        self.frames_per_batch = frames_per_batch
        self.total_frames = total_frames
        self.compress = compress
        self.max_weight_update_interval = max_weight_update_interval
        self.num_threads = num_threads
        self.init_random_frames = init_random_frames
        self.devices = devices
        self.common = common
        self.restart_policy = RestartPolicy(max_attempts=max_restart_attempts)
        self.slots: list[Slot] = []
        self.pending: dict[Any, Task] = {}  # ref -> its task, for every task in flight
        self.issued = 0  # frames in tasks issued and not yet delivered
        # called with (task, new ref) when a task is issued again (its round tracks the ref)
        self.on_resubmit: Callable[[Task, Any], None] | None = None

    # ------------------------------------------------------------- actors
    def worker_kwargs(self, slot: Slot) -> dict[str, Any]:
        """The collector arguments of one worker."""
        i = slot.worker_id % max(1, len(self.devices["device"]))
        kwargs = {"create_env_fn": slot.env_fn, **self.common}
        for name, values in self.devices.items():
            if values[i] is not None:
                kwargs[name] = values[i]
        if self.native:
            if self.num_workers_per_collector > 1:
                kwargs["num_envs"] = self.num_workers_per_collector
        else:
            kwargs["split_trajs"] = False
            if self.init_random_frames:
                kwargs["init_random_frames"] = -1
            if self.num_workers_per_collector > 1 or takes_env_list(self.collector_class):
                # as torchrl does: one env factory per sub-collector
                kwargs["create_env_fn"] = [slot.env_fn] * self.num_workers_per_collector
            if kwargs.get("max_frames_per_traj") is None:
                kwargs["max_frames_per_traj"] = -1
        kwargs.update(slot.kwargs)
        if self.native:  # automatic overlap only where each worker leaves a core to its engine
            kwargs["overlap"] = worker_overlap(
                kwargs.get("overlap"), len(self.slots), available_cores()
            )
        return kwargs

    def _task_frames(self) -> int:
        return self.frames_per_batch // len(self.slots) if self.sync else self.frames_per_batch

    def _start_actor(self, slot: Slot) -> Any:
        options = {**slot.remote_config, "max_restarts": 0, "max_task_retries": 0}
        actor_cls = _remote_worker_class().options(**options)
        kwargs = self.worker_kwargs(slot)
        kwargs["policy"] = None  # travels separately, as one object in Ray's store
        return actor_cls.remote(
            slot.worker_id,
            slot.incarnation,
            self.collector_class,
            kwargs,
            self.policy_ref,
            self._task_frames() if self.sync else self.frames_per_batch,
            self.compress,
            self.weights.board if self.weights else None,
            self.max_weight_update_interval,
            num_threads=self.num_threads,
            replay_buffer=self.replay_buffer,
        )

    def _wait_ready(self, slots: list[Slot]) -> None:
        refs = [s.handle.setup.remote() for s in slots]
        for slot, ref in zip(slots, refs):
            try:
                info = ray.get(ref)
            except RayTaskError as err:
                raise worker_failure(slot.worker_id, err) from None
            except RayActorError as err:
                raise StartDied(slot.worker_id, remote_traceback(err)) from None
            slot.num_envs, slot.node_id = info["num_envs"], info["node_id"]

    def add_slots(
        self,
        env_fns: list[Any],
        kwargs_list: list[dict[str, Any]],
        remotes: list[dict[str, Any]],
        first_index: int,
    ) -> list[Slot]:
        """Start one worker per env factory, with ids from ``first_index``; returns their slots."""
        slots = [
            Slot(worker_id=first_index + i, env_fn=fn, kwargs=kw, remote_config=rc)
            for i, (fn, kw, rc) in enumerate(zip(env_fns, kwargs_list, remotes))
        ]
        for slot in slots:
            slot.num_envs = self._known_num_envs(slot)
        self._check_env_counts(self.slots + slots)  # what the arguments tell, before any actor
        self.slots.extend(slots)
        for slot in slots:
            slot.handle = self._start_actor(slot)
        self._wait_ready(slots)
        self._check_env_counts(self.slots)  # what the workers report
        return slots

    def _known_num_envs(self, slot: Slot) -> int | None:
        """Envs per call of a native collector, when the arguments alone tell."""
        if not self.native:
            return None
        kwargs = self.worker_kwargs(slot)
        if kwargs.get("num_envs") is not None:
            return kwargs["num_envs"]
        return 1 if isinstance(slot.env_fn, str) else None

    def _check_env_counts(self, slots: list[Slot]) -> None:
        if self.native:
            check_env_counts(
                [s.num_envs for s in slots],
                sync=self.sync,
                frames_per_batch=self.frames_per_batch,
                total_frames=self.total_frames,
            )

    # ------------------------------------------------------ dead workers
    def _replace(self, slot: Slot, cause: str) -> None:
        """Replace a dead worker: new actor, same id; its lost tasks are issued to it again.

        The lost tasks stay on the books (``slot.lost``, their frames still
        counted as issued) until a replacement runs them, so the frame count
        stays exact even when the replacements die too and the caller catches
        the :class:`WorkerLostError`.
        """
        slot.lost.extend(self.pending.pop(ref) for ref in slot.inflight if ref in self.pending)
        slot.inflight.clear()
        self._revive(slot, cause)

    def _revive(self, slot: Slot, cause: str) -> None:
        """Start replacements of a dead worker until one is up, within the restart policy."""
        policy = self.restart_policy
        while True:
            with contextlib.suppress(Exception):  # already gone
                ray.kill(slot.handle)
            slot.handle = None
            slot.deaths += 1
            if policy.gives_up(slot.deaths):
                deaths, slot.deaths = slot.deaths, 0  # iterating again starts a new series
                raise WorkerLostError(
                    slot.worker_id, policy.gave_up(deaths, cause), attempts=deaths - 1
                ) from None
            policy.wait(slot.deaths)
            slot.incarnation += 1
            slot.restarts += 1
            slot.publish = 0
            logger.warning(
                "collector worker %d died; starting incarnation %d (attempt %d of %d)",
                slot.worker_id,
                slot.incarnation,
                slot.deaths,
                policy.max_attempts,
            )
            slot.handle = self._start_actor(slot)
            try:
                self._wait_ready([slot])
                if slot.seed is not None:
                    ray.get(slot.handle.set_seed.remote(slot.seed + 1_000_003 * slot.incarnation))
            except StartDied as err:
                cause = err.cause
                continue
            except RayActorError as err:
                cause = remote_traceback(err)
                continue
            except BaseException:  # its setup raised: not a death, but this actor is no use
                with contextlib.suppress(Exception):
                    ray.kill(slot.handle)
                slot.handle = None  # the next call starts another, the lost tasks still owed
                slot.deaths = 0
                raise
            break
        lost, slot.lost = slot.lost, []
        for task in lost:
            self.resubmit(task)

    def revive_dead(self) -> None:
        """Start the workers left dead by a WorkerLostError the caller caught."""
        for slot in self.slots:
            if slot.handle is None:
                self._revive(slot, "(replacement after a WorkerLostError)")

    # -------------------------------------------------------------- tasks
    def submit(self, task: Task) -> Any:
        """Issue a task to its worker, with the weights it lacks; returns the result's ref."""
        slot = self.slots[task.worker]
        publish, version, weights_ref = self.weights.for_worker(slot.publish, slot.worker_id)
        ref = slot.handle.collect.remote(
            task.frames,
            version,
            weights_ref,
            random=task.random,
            round_id=task.round_id,
            min_frames=task.min_frames,
        )
        slot.publish = publish
        slot.inflight.append(ref)
        self.pending[ref] = task
        return ref

    def resubmit(self, task: Task) -> None:
        """Issue a task again (its worker was replaced, or its batch was stale)."""
        new_ref = self.submit(task)
        if self.on_resubmit is not None:
            self.on_resubmit(task, new_ref)

    def reissue_stale(self, task: Task) -> None:
        """Issue again a task whose batch was not served for breaking the lag bound.

        :meth:`get` already took it off the books: it goes back on first.
        """
        if task.round_id < 0:
            self.issued += task.frames
        self.resubmit(task)

    def get(self, ref: Any) -> TaskResult | None:
        """The result of a task, or None when its worker died (it is then replaced)."""
        task = self.pending[ref]
        slot = self.slots[task.worker]
        try:
            result = ray.get(ref)
        except RayTaskError as err:
            raise worker_failure(task.worker, err) from None
        except RayActorError as err:
            self._replace(slot, remote_traceback(err))
            return None
        del self.pending[ref]
        slot.inflight.remove(ref)
        slot.deaths = 0
        if task.round_id < 0:  # a round's frames stay issued until the round is served whole
            self.issued -= task.frames
        return result

    @property
    def owed_tasks(self) -> int:
        """Tasks issued and not yet returned, those lost with a dead worker included."""
        return len(self.pending) + sum(len(s.lost) for s in self.slots)

    def handles(self) -> list[Any]:
        """The live actor handles, by worker id."""
        return [s.handle for s in self.slots]

    def shutdown(self) -> None:
        """Kill every actor; the tasks in flight are dropped."""
        for slot in self.slots:
            if slot.handle is not None:
                with contextlib.suppress(Exception):  # already dead
                    ray.kill(slot.handle)
        self.pending = {}


_REMOTE_WORKER: Any = None


def _remote_worker_class() -> Any:
    """The Ray actor class, made once per process (Ray exports a class once per definition)."""
    global _REMOTE_WORKER
    if _REMOTE_WORKER is None:
        _REMOTE_WORKER = ray.remote(concurrency_groups={"control": 1})(CollectorWorker)
    return _REMOTE_WORKER

"""RayCollector: remote collector actors on Ray behind one iterable of TensorDict batches.

Two modes, chosen with ``sync``:

- ``sync=True``: each round, every worker collects its share of
  ``frames_per_batch`` (``frames_per_batch / num_collectors`` frames each); the
  batches are stacked along a leading collector dim, ``[num_collectors,
  *env_batch, time]``. A ``("collector", "mask")`` marks the steps collected:
  shares can end unequal when stragglers are preempted (``fraction_workers``,
  ``fraction_samples``), and padded steps are False. Frames are counted from
  the mask, i.e. from what was delivered.
- ``sync=False``: first ready, first served. Each task is one worker's batch of
  ``frames_per_batch`` frames.

Frame accounting is exact: a task is issued only for frames the budget still
holds, the last task asks for exactly the remainder, and a task lost with its
worker is issued again. So the iterator yields exactly ``ceil(total_frames /
frames_per_batch)`` batches (sync mode with preemption: rounds go on until the
frames delivered reach ``total_frames``, so there can be more), and every frame
delivered is counted once.

Pipelining (``prefetch``): with ``prefetch=1`` (the default) a worker starts
its next batch as soon as it has handed one over, while the learner works on
it. Policy lag here is how far the newest published version is ahead of the
version a batch was collected with when the batch is served (versions are
publishes, or the learner's optimizer steps when it passes ``version=``; the
lag a learner logs is measured at learning time, see
:mod:`fleetrl.scheme.versions`). In sync mode, with one publish per batch, a
batch is at most ``prefetch`` publishes behind (``prefetch=0``: strictly
on-policy), however slow a worker is: a round waits for all. In async mode
every worker always has ``max(1, prefetch)`` tasks in flight and batches are
served first ready, so the lag grows with the number of workers and tasks in
flight, even when they are equally fast, and is unbounded with a slow worker,
even with ``prefetch=0``. ``max_policy_lag=k``
enforces a bound in both modes: a batch more than k versions behind is not served;
it is counted in ``stats()["stale_batches"]``/``["stale_frames"]`` and its
task is issued again with the current weights, so frames stay exact (the
discarded frames are collected again, never counted). With k below
``prefetch`` most prefetched batches are discarded: choose ``k >= prefetch``.

Weights: :meth:`update_policy_weights_` (torchrl's arguments: a module, a
TensorDict, nothing, ``worker_ids=``; and ``version=``, the learner's
optimizer-step count, default the newest + 1) publishes a version with one
``ray.put``; each worker receives it with its next task, only if it lacks it.
``max_weight_update_interval=k`` also makes a worker check for a newer
version at the start of a task at least every k tasks, so a task queued
before a publish still starts with the newest weights.

Fault tolerance: a worker whose actor dies (killed, crashed, node lost) is
replaced by a new actor with the same worker id; it receives the current
weights with its first task and the tasks lost with the old actor are issued
to it again. A replacement that dies too (e.g. while building its envs) is
replaced again after a doubling wait, up to ``max_restart_attempts`` in a row
(default 3; see :mod:`fleetrl.collectors.restarts`); then
:class:`~fleetrl.errors.WorkerLostError` (a ``WorkerError``) names the worker,
the attempts and the last cause. The lost tasks stay on the books meanwhile:
``frames``, ``remaining_frames`` and ``stats()["pending"]`` stay exact, and a
caller that catches the error and iterates again starts a new series of
attempts and still gets exactly ``total_frames``. An exception raised inside a
worker (e.g. by the env) is not a death: a ``ConfigError``, ``EnvError`` or
``PolicyError`` is raised again as itself, naming the collector, cause first
and the remote traceback after; anything else surfaces as
:class:`~fleetrl.errors.WorkerError` with the worker id and the remote
traceback (:func:`~fleetrl.collectors.ray_checks.worker_failure`).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import ray
import torch
from ray.exceptions import RayActorError, RayTaskError
from tensordict import TensorDictBase
from torchrl.envs.utils import ExplorationType

from fleetrl.batch_sizes import batch_size_problems
from fleetrl.collectors.base import CollectorState, DataCollectorBase
from fleetrl.collectors.overlap import available_cores, worker_overlap
from fleetrl.collectors.ray_checks import (
    SET_BY_RAY,
    check_arguments,
    check_collector_kwargs,
    check_env_counts,
    check_resources,
    check_weight_update,
    per_collector_args,
    remote_traceback,
    takes_env_list,
    worker_failure,
)
from fleetrl.collectors.restarts import DEFAULT_MAX_RESTART_ATTEMPTS, RestartPolicy
from fleetrl.collectors.sync import SyncDataCollector
from fleetrl.collectors.weights import WeightStore
from fleetrl.collectors.wire import empty_round, unpack_batch
from fleetrl.collectors.worker import CollectorWorker, TaskResult
from fleetrl.errors import ConfigError, Problems, WorkerError, WorkerLostError
from fleetrl.policies import as_weights, policy_weights

__all__ = ["RayCollector"]

logger = logging.getLogger(__name__)

MAX_POLICY_LAG_ALLOWED = "must be None (no bound) or an int >= 0 (versions)"
MAX_RESTART_ATTEMPTS_ALLOWED = "must be an int >= 0 (0: a worker's death ends the run)"


@dataclass
class _Task:
    worker: int
    frames: int
    random: bool
    round_id: int = -1
    min_frames: int | None = None


@dataclass
class _Slot:
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
    lost: list[_Task] = field(default_factory=list)  # tasks of a dead actor, still owed
    deaths: int = 0  # in a row, since its last completed task
    frames: int = 0
    restarts: int = 0
    seed: int | None = None


@dataclass
class _Round:
    round_id: int
    refs: dict[int, Any]  # worker id -> ref of its task for this round
    shares: dict[int, int]
    preempt_sent: bool = False
    issued: int = 0  # frames it added to the issued count
    results: dict[int, TaskResult] = field(default_factory=dict)  # kept across a WorkerError


class _StartDied(WorkerError):
    """A worker's actor died while starting (the driver may start another)."""


class RayCollector(DataCollectorBase):
    """Distributed collection on Ray: remote collector actors behind one iterable.

    Accepts torchrl's ``RayCollector`` arguments with the same meaning (switch by
    changing the import), plus ``prefetch``, ``fraction_samples``,
    ``fraction_workers`` and ``compress``.

    Args:
        create_env_fn: an env (or factory) for every collector, or a list with
            one per collector. Anything :class:`SyncDataCollector` accepts.
        policy: a ``TensorDictModule``, a plain ``nn.Module``, or ``None``
            (random). Its weights are what :meth:`update_policy_weights_` publishes.

    Keyword Args:
        frames_per_batch: frames per yielded batch (sync: summed over collectors).
        total_frames: frame budget; -1 is endless.
        num_collectors: number of remote collectors (default: the length of
            ``create_env_fn`` when it is a list, else 1).
        collector_class: :class:`SyncDataCollector` (default) or a torchrl
            collector class.
        collector_kwargs: extra keyword arguments for each collector (a dict,
            or a list with one per collector), checked against the collector
            class's signature before any actor starts.
        num_workers_per_collector: copies of the env per collector (for
            fleetrl's collector: ``num_envs`` stepped as one batch, a
            ``SerialEnv`` for a factory of unbatched torchrl envs; for torchrl
            classes: a list of env factories, as torchrl does, which the
            Multi* classes always get).
        sync: stack all collectors' batches (True) or serve them first-ready (False).
        ray_init_config: ``ray.init`` arguments when Ray is not running yet
            (``{"address": ...}`` attaches to a cluster). The dashboard is off by default.
        remote_configs: Ray actor options per collector (dict or list), default
            ``{"num_cpus": 1}``.
        update_after_each_batch: publish the local policy's weights before
            collecting past each yielded batch.
        max_weight_update_interval: a worker checks for newer weights at least
            every this many tasks (-1: only the push with each task).
        prefetch: tasks each worker may run ahead of the consumer (default 1).
            Sync mode: the policy lag is at most ``prefetch`` with one publish
            per batch (0: strictly on-policy). Async mode: no bound (see the
            module docstring); use ``max_policy_lag``.
        fraction_samples: sync mode; a preempted straggler stops once it holds
            at least this fraction of its share.
        fraction_workers: sync mode; once this fraction of the collectors have
            finished a round, the others are preempted.
        compress: ``None``, ``"lz4"`` or ``"zstd"``: lossless compression of
            batches sent by workers; bytes saved are in :meth:`stats`. Either
            way, batches of fleetrl's collector cross Ray in the compact
            layout of :mod:`fleetrl.collectors.wire` (each observation once)
            and arrive in the full one.
        max_policy_lag: ``None`` (no bound) or k >= 0: a batch collected with
            weights more than k versions older than the newest published is
            not served; its frames are collected again with the current
            weights (counted in ``stats()["stale_batches"]``).
        max_restart_attempts: replacements of a dead worker tried in a row
            (with a doubling wait between them) before :class:`WorkerLostError`.
        num_threads: torch threads in each worker process (default 1: workers
            share the cores, and two threads made CNN inference several times
            slower there); ``None`` leaves torch's default.
        device, storing_device, env_device, policy_device: as in
            :class:`SyncDataCollector`; a single value or a list per collector.
        max_frames_per_traj, init_random_frames, reset_at_each_iter,
            split_trajs, postproc, exploration_type: as in
            :class:`SyncDataCollector`. ``split_trajs`` and ``postproc`` run in
            this process on each yielded batch; ``init_random_frames`` counts
            frames over all collectors.

    Examples:
        >>> collector = RayCollector("CartPole-v1", None, frames_per_batch=400,
        ...                          total_frames=1200, num_collectors=2,
        ...                          num_workers_per_collector=4, sync=True)  # doctest: +SKIP
        >>> [b.batch_size for b in collector]  # doctest: +SKIP
        [torch.Size([2, 4, 50]), torch.Size([2, 4, 50]), torch.Size([2, 4, 50])]
        >>> collector.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        create_env_fn: Any,
        policy: Any = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        device: Any = None,
        storing_device: Any = None,
        env_device: Any = None,
        policy_device: Any = None,
        max_frames_per_traj: int | None = -1,
        init_random_frames: int | None = -1,
        reset_at_each_iter: bool = False,
        postproc: Any = None,
        split_trajs: bool = False,
        exploration_type: ExplorationType | str = ExplorationType.RANDOM,
        collector_class: Any = SyncDataCollector,
        collector_kwargs: dict[str, Any] | list[dict[str, Any]] | None = None,
        num_workers_per_collector: int = 1,
        sync: bool = False,
        ray_init_config: dict[str, Any] | None = None,
        remote_configs: dict[str, Any] | list[dict[str, Any]] | None = None,
        num_collectors: int | None = None,
        update_after_each_batch: bool = False,
        max_weight_update_interval: int = -1,
        prefetch: int = 1,
        fraction_samples: float = 1.0,
        fraction_workers: float = 1.0,
        compress: str | None = None,
        max_policy_lag: int | None = None,
        max_restart_attempts: int = DEFAULT_MAX_RESTART_ATTEMPTS,
        num_threads: int | None = 1,
    ):
        super().__init__()
        self.state = CollectorState.CLOSED  # READY once every actor is up
        self._slots: list[_Slot] = []
        self._started_ray = False
        self._weights: WeightStore | None = None
        p = Problems()
        _check_bounds(p, max_policy_lag, max_restart_attempts)
        args = _all_problems(
            p,
            check_arguments,
            create_env_fn=create_env_fn,
            policy=policy,
            frames_per_batch=frames_per_batch,
            total_frames=total_frames,
            collector_class=collector_class,
            collector_kwargs=collector_kwargs,
            num_workers_per_collector=num_workers_per_collector,
            sync=sync,
            remote_configs=remote_configs,
            num_collectors=num_collectors,
            max_weight_update_interval=max_weight_update_interval,
            prefetch=prefetch,
            fraction_samples=fraction_samples,
            fraction_workers=fraction_workers,
            compress=compress,
            init_random_frames=init_random_frames,
            exploration_type=exploration_type,
            postproc=postproc,
            max_frames_per_traj=max_frames_per_traj,
            devices={
                "device": device,
                "storing_device": storing_device,
                "env_device": env_device,
                "policy_device": policy_device,
            },
        )
        self.policy = args.policy
        self.native = args.native
        env_fns, kwargs_list, remotes = args.env_fns, args.kwargs_list, args.remotes
        devices, exploration = args.devices, args.exploration_type

        self.frames_per_batch = frames_per_batch
        self.total_frames = total_frames
        self.sync = sync
        self.collector_class = collector_class
        self.num_workers_per_collector = num_workers_per_collector
        self.update_after_each_batch = update_after_each_batch
        self.max_weight_update_interval = max_weight_update_interval
        self.prefetch = prefetch
        self.max_policy_lag = max_policy_lag
        self.max_restart_attempts = max_restart_attempts
        self.num_threads = num_threads
        self._restart_policy = RestartPolicy(max_attempts=max_restart_attempts)
        self.fraction_samples = float(fraction_samples)
        self.fraction_workers = float(fraction_workers)
        self.compress = compress
        self.split_trajs = split_trajs
        self.postproc = postproc
        self.init_random_frames = args.init_random_frames
        self._common = {
            "max_frames_per_traj": max_frames_per_traj,
            "reset_at_each_iter": reset_at_each_iter,
            "exploration_type": exploration,
        }
        self._devices = devices

        # bookkeeping
        self._pending: dict[Any, _Task] = {}
        self._rounds: deque[_Round] = deque()
        self._round_counter = 0
        self._issued = 0  # frames in tasks issued and not yet delivered
        self._yielded = False
        self._stats = {
            "batches": 0,
            # policy lag of served batches, as running aggregates (constant memory)
            "lag_count": 0,
            "lag_sum": 0,
            "lag_max": 0,
            "lag_last": 0,
            "stale_batches": 0,
            "stale_frames": 0,
            "bytes_raw": 0,  # compressed traffic only
            "bytes_sent": 0,
            "wire_full": 0,  # all traffic
            "wire_sent": 0,
            "compact_batches": 0,
            "preempted_tasks": 0,
            "collect_s": 0.0,
        }
        try:
            self._init_ray(ray_init_config)
            check_resources(remotes)
            self._weights = WeightStore(with_board=max_weight_update_interval > 0)
            self._policy_ref = ray.put(self.policy)
            self._add_slots(env_fns, kwargs_list, remotes, first_index=0)
        except BaseException:
            self._shutdown()  # release what started; the collector never becomes READY
            raise
        self.state = CollectorState.READY

    # --------------------------------------------------------------- checks
    def _init_ray(self, ray_init_config: dict[str, Any] | None) -> None:
        config = dict(ray_init_config or {})
        if ray.is_initialized():
            if config:
                logger.warning(
                    "Ray is already initialized; ray_init_config=%r is not applied", config
                )
            return
        if "address" not in config:
            config.setdefault("include_dashboard", False)
        ray.init(**config)
        self._started_ray = True

    # -------------------------------------------------------------- workers
    def _worker_kwargs(self, slot: _Slot) -> dict[str, Any]:
        i = slot.worker_id % max(1, len(self._devices["device"]))
        kwargs = {"create_env_fn": slot.env_fn, **self._common}
        for name, values in self._devices.items():
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
                kwargs.get("overlap"), len(self._slots), available_cores()
            )
        return kwargs

    def _task_frames(self) -> int:
        return self.frames_per_batch // len(self._slots) if self.sync else self.frames_per_batch

    def _start_actor(self, slot: _Slot) -> Any:
        options = {**slot.remote_config, "max_restarts": 0, "max_task_retries": 0}
        actor_cls = _remote_worker_class().options(**options)
        kwargs = self._worker_kwargs(slot)
        kwargs["policy"] = None  # travels separately, as one object in Ray's store
        return actor_cls.remote(
            slot.worker_id,
            slot.incarnation,
            self.collector_class,
            kwargs,
            self._policy_ref,
            self._task_frames() if self.sync else self.frames_per_batch,
            self.compress,
            self._weights.board if self._weights else None,
            self.max_weight_update_interval,
            num_threads=self.num_threads,
        )

    def _wait_ready(self, slots: list[_Slot]) -> None:
        refs = [s.handle.setup.remote() for s in slots]
        for slot, ref in zip(slots, refs):
            try:
                info = ray.get(ref)
            except RayTaskError as err:
                raise worker_failure(slot.worker_id, err) from None
            except RayActorError as err:
                raise _StartDied(slot.worker_id, remote_traceback(err)) from None
            slot.num_envs, slot.node_id = info["num_envs"], info["node_id"]

    def _add_slots(
        self,
        env_fns: list[Any],
        kwargs_list: list[dict[str, Any]],
        remotes: list[dict[str, Any]],
        first_index: int,
    ) -> list[_Slot]:
        slots = [
            _Slot(worker_id=first_index + i, env_fn=fn, kwargs=kw, remote_config=rc)
            for i, (fn, kw, rc) in enumerate(zip(env_fns, kwargs_list, remotes))
        ]
        for slot in slots:
            slot.num_envs = self._known_num_envs(slot)
        self._check_env_counts(self._slots + slots)  # what the arguments tell, before any actor
        self._slots.extend(slots)
        for slot in slots:
            slot.handle = self._start_actor(slot)
        self._wait_ready(slots)
        self._check_env_counts(self._slots)  # what the workers report
        return slots

    def _known_num_envs(self, slot: _Slot) -> int | None:
        """Envs per call of a native collector, when the arguments alone tell."""
        if not self.native:
            return None
        kwargs = self._worker_kwargs(slot)
        if kwargs.get("num_envs") is not None:
            return kwargs["num_envs"]
        return 1 if isinstance(slot.env_fn, str) else None

    def _check_env_counts(self, slots: list[_Slot]) -> None:
        if self.native:
            check_env_counts(
                [s.num_envs for s in slots],
                sync=self.sync,
                frames_per_batch=self.frames_per_batch,
                total_frames=self.total_frames,
            )

    def _replace(self, slot: _Slot, cause: str) -> None:
        """Replace a dead worker: new actor, same id; its lost tasks are issued to it again.

        The lost tasks stay on the books (``slot.lost``, their frames still
        counted as issued) until a replacement runs them, so the frame count
        stays exact even when the replacements die too and the caller catches
        the :class:`WorkerLostError`.
        """
        slot.lost.extend(self._pending.pop(ref) for ref in slot.inflight if ref in self._pending)
        slot.inflight.clear()
        self._revive(slot, cause)

    def _revive(self, slot: _Slot, cause: str) -> None:
        """Start replacements of a dead worker until one is up, within the restart policy."""
        policy = self._restart_policy
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
            except _StartDied as err:
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
            self._resubmit(task)

    def _revive_dead(self) -> None:
        """Start the workers left dead by a WorkerLostError the caller caught."""
        for slot in self._slots:
            if slot.handle is None:
                self._revive(slot, "(replacement after a WorkerLostError)")

    def _resubmit(self, task: _Task) -> None:
        """Issue a task again (its worker was replaced, or its batch was stale)."""
        new_ref = self._submit(task)
        for rnd in self._rounds:
            if rnd.round_id == task.round_id and task.round_id >= 0:
                rnd.refs[task.worker] = new_ref
                if rnd.preempt_sent:
                    self._slots[task.worker].handle.preempt.remote(rnd.round_id)

    def _submit(self, task: _Task) -> Any:
        slot = self._slots[task.worker]
        publish, version, weights_ref = self._weights.for_worker(slot.publish, slot.worker_id)
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
        self._pending[ref] = task
        return ref

    def _budget(self) -> int | None:
        if self.total_frames == -1:
            return None
        return self.total_frames - self._frames - self._issued

    def _random_next(self) -> bool:
        return self._frames + self._issued < self.init_random_frames

    def _get(self, ref: Any) -> TaskResult | None:
        """The result of a task, or None when its worker died (it is then replaced)."""
        task = self._pending[ref]
        slot = self._slots[task.worker]
        try:
            result = ray.get(ref)
        except RayTaskError as err:
            raise worker_failure(task.worker, err) from None
        except RayActorError as err:
            self._replace(slot, remote_traceback(err))
            return None
        del self._pending[ref]
        slot.inflight.remove(ref)
        slot.deaths = 0
        if task.round_id < 0:  # a round's frames stay issued until the round is served whole
            self._issued -= task.frames
        return result

    def _stale(self, result: TaskResult, task: _Task) -> bool:
        """Whether a batch breaks ``max_policy_lag``; such a batch is counted, not served.

        Its task was already taken off the books by :meth:`_get`: put it back,
        the caller issues it again with the current weights.
        """
        if self.max_policy_lag is None or task.random:  # random actions: no policy to lag
            return False
        if self._weights.version - result.policy_version <= self.max_policy_lag:
            return False
        self._stats["stale_batches"] += 1
        self._stats["stale_frames"] += result.frames
        if task.round_id < 0:
            self._issued += task.frames
        return True

    def _receive(self, result: TaskResult, worker: int) -> TensorDictBase:
        self._account(result, worker)
        return unpack_batch(result.batch)  # one copy per leaf, into fresh writable memory

    def _account(self, result: TaskResult, worker: int) -> None:
        """Count a served batch: frames per worker, policy lag, bytes, preemption, time."""
        slot = self._slots[worker]
        slot.frames += result.frames
        st = self._stats
        lag = self._weights.version - result.policy_version
        st["lag_count"] += 1
        st["lag_sum"] += lag
        st["lag_max"] = max(st["lag_max"], lag)
        st["lag_last"] = lag
        if self.compress is not None:  # stats()["compression"] counts compressed traffic only
            st["bytes_raw"] += result.bytes_raw
            st["bytes_sent"] += result.bytes_sent
        st["wire_full"] += result.bytes_raw
        st["wire_sent"] += result.bytes_sent
        st["compact_batches"] += int(result.compact)
        st["preempted_tasks"] += int(result.preempted)
        st["collect_s"] += result.collect_s

    # ------------------------------------------------------------ iteration
    def _next_batch(self) -> TensorDictBase | None:
        self._revive_dead()
        left = self.remaining_frames
        if self.update_after_each_batch and self._yielded and (left is None or left > 0):
            self.update_policy_weights_()
        batch = self._next_sync() if self.sync else self._next_async()
        if batch is None:
            return None
        self._yielded = True
        self._stats["batches"] += 1
        if self.split_trajs:
            from torchrl.collectors.utils import split_trajectories

            batch = split_trajectories(batch)
        if self.postproc is not None:
            batch = self.postproc(batch)
        return batch

    def _top_up_async(self, limit: int) -> None:
        for slot in self._slots:
            while len(slot.inflight) < limit:
                budget = self._budget()
                if budget is not None and budget <= 0:
                    return
                frames = (
                    self.frames_per_batch if budget is None else min(self.frames_per_batch, budget)
                )
                self._submit(_Task(slot.worker_id, frames, self._random_next()))
                self._issued += frames

    def _next_async(self) -> TensorDictBase | None:
        self._top_up_async(max(1, self.prefetch))
        while self._pending:
            ready, _ = ray.wait(list(self._pending), num_returns=1)
            task = self._pending[ready[0]]
            worker = task.worker
            result = self._get(ready[0])
            if result is None:
                continue
            if self._stale(result, task):
                self._resubmit(task)
                continue
            batch = self._receive(result, worker)
            self._frames += result.frames
            if self.prefetch:
                self._top_up_async(self.prefetch)
            return batch
        return None

    def _start_round(self) -> bool:
        budget = self._budget()
        frames = self.frames_per_batch if budget is None else min(self.frames_per_batch, budget)
        if frames <= 0:
            return False
        shares = _split_frames(frames, [s.num_envs or 1 for s in self._slots])
        preempt = self.fraction_workers < 1.0 or self.fraction_samples < 1.0
        rnd = _Round(round_id=self._round_counter, refs={}, shares=shares, issued=frames)
        self._round_counter += 1
        random = self._random_next()
        for slot in self._slots:
            share = shares[slot.worker_id]
            if share == 0:
                continue
            n = slot.num_envs or 1
            min_frames = None
            if preempt:
                min_frames = min(share, max(n, math.ceil(self.fraction_samples * share / n) * n))
            rnd.refs[slot.worker_id] = self._submit(
                _Task(slot.worker_id, share, random, round_id=rnd.round_id, min_frames=min_frames)
            )
        self._issued += frames
        self._rounds.append(rnd)
        return True

    def _next_sync(self) -> TensorDictBase | None:
        while len(self._rounds) < max(1, self.prefetch) and self._start_round():
            pass
        if not self._rounds:
            return None
        rnd = self._rounds[0]
        results = self._gather_round(rnd)
        self._rounds.popleft()
        batch, frames = self._stack(rnd, results)
        self._issued -= rnd.issued
        self._frames += frames
        if self.prefetch:
            while len(self._rounds) < self.prefetch and self._start_round():
                pass
        return batch

    def _gather_round(self, rnd: _Round) -> dict[int, TaskResult]:
        results = rnd.results
        need = len(rnd.refs)
        if self.fraction_workers < 1.0 or self.fraction_samples < 1.0:
            need = max(1, math.ceil(self.fraction_workers * len(rnd.refs)))
        while len(results) < len(rnd.refs):
            waiting = {ref: w for w, ref in rnd.refs.items() if w not in results}
            if len(results) >= need and not rnd.preempt_sent:
                rnd.preempt_sent = True
                for w in waiting.values():
                    self._slots[w].handle.preempt.remote(rnd.round_id)
            ready, _ = ray.wait(list(waiting), num_returns=1)
            worker = waiting[ready[0]]
            task = self._pending[ready[0]]
            result = self._get(ready[0])
            if result is None:  # worker replaced, its task re-issued into rnd.refs
                continue
            if self._stale(result, task):  # collected again, into rnd.refs
                self._resubmit(task)
                continue
            results[worker] = result
            if result.preempted:
                logger.debug(
                    "worker %d preempted with %d of %d frames", worker, result.frames, task.frames
                )
        return results

    def _stack(self, rnd: _Round, results: dict[int, TaskResult]) -> tuple[TensorDictBase, int]:
        for w, r in results.items():
            self._account(r, w)
        metas = {w: r.batch for w, r in results.items()}
        steps = max(m["batch_size"][-1] for m in metas.values())
        frames = sum(r.frames for r in results.values())
        # each batch is unpacked straight into its slice of the round: one copy per leaf from
        # Ray's memory (an unpack, a pad and a stack would copy a rebuilt next observation twice)
        out = empty_round(next(iter(metas.values())), len(self._slots), steps)
        mask = torch.zeros(out.shape, dtype=torch.bool)
        for slot in self._slots:
            i, meta = slot.worker_id, metas.get(slot.worker_id)
            t = 0 if meta is None else meta["batch_size"][-1]  # None: no share this round
            if meta is not None:
                unpack_batch(meta, out=out[i][..., :t])
                mask[i, ..., :t] = True
            if t < steps:  # padded steps (a preempted straggler, no share) are zeros, as pad() does
                out[i][..., t:].zero_()
        out.set(("collector", "mask"), mask)
        out.names = [None] * (out.batch_dims - 1) + ["time"]
        return out, frames

    # ------------------------------------------------------------ public API
    @property
    def num_collectors(self) -> int:
        return len(self._slots)

    @property
    def policy_version(self) -> int:
        return self._weights.version if self._weights else 0

    def update_policy_weights_(
        self,
        policy_or_weights: Any = None,
        *,
        weights: Any = None,
        policy: Any = None,
        worker_ids: int | list[int] | None = None,
        model_id: str | None = None,
        version: int | None = None,
    ) -> int:
        """Publish a new version of the policy weights; returns its number.

        Takes what torchrl's ``update_policy_weights_`` takes: nothing (the
        weights of the policy this collector was built with), a policy module
        (``nn.Module`` / ``TensorDictModule``: its weights are taken), a
        TensorDict of weights or a ``state_dict``, positionally or as
        ``policy=`` / ``weights=``.

        ``version``, as :meth:`SyncDataCollector.update_policy_weights_
        <fleetrl.collectors.SyncDataCollector.update_policy_weights_>` takes it:
        the number of this version, which batches collected with these weights
        carry in ``("collector", "policy_version")``. A learner passes its
        optimizer-step count (:mod:`fleetrl.scheme.versions`), so tags, lag and
        ``max_policy_lag`` count optimizer steps. Default: the newest published
        version + 1 (the count of publishes, when no caller gives versions).
        Versions never go back: a ``version`` below :attr:`policy_version` is
        a :class:`~fleetrl.errors.ConfigError`. The same version again
        republishes weights that changed without an optimizer step (DQN's
        epsilon is a buffer of the acting policy): every worker loads them with
        its next task, and its batches keep the tag.

        One ``ray.put``; does not wait for any worker. Each worker receives the
        new version with its next task. With ``worker_ids``, the version moves
        forward but only those workers get the new version (and its weights);
        the others keep the version they had until a later publish includes
        them, and their batches show it in ``("collector", "policy_version")``.

        Examples:
            >>> collector.update_policy_weights_(policy)  # doctest: +SKIP
            >>> collector.update_policy_weights_(policy, version=learner.num_updates)  # doctest: +SKIP
            >>> collector.update_policy_weights_(TensorDict.from_module(policy), worker_ids=[0])  # doctest: +SKIP
        """
        self._check_open()
        value = check_weight_update(
            policy_or_weights,
            weights=weights,
            policy=policy,
            worker_ids=worker_ids,
            model_id=model_id,
            num_workers=len(self._slots),
            version=version,
            current_version=self.policy_version,
        )
        ids = [worker_ids] if isinstance(worker_ids, int) else worker_ids
        if value is None:
            source = policy_weights(self.policy)
            source = None if source is None else source.detach().cpu()
        else:
            source = as_weights(value)
        return self._weights.publish(source, None if ids is None else list(ids), version)

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seed each worker in turn (worker i starts where worker i-1's seeds end); returns the next seed."""
        self._check_open()
        self._revive_dead()
        for slot in self._slots:
            slot.seed = seed
            seed = ray.get(slot.handle.set_seed.remote(seed))
        return seed

    def state_dict(self) -> dict[str, Any]:
        self._check_open()
        self._revive_dead()
        return {
            "frames": self._frames,
            "policy_version": self.policy_version,
            "workers": ray.get([s.handle.state_dict.remote() for s in self._slots]),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_open()
        self._revive_dead()
        self._frames = int(state["frames"])
        self._weights.version = max(self._weights.version, int(state["policy_version"]))
        ray.get([s.handle.load_state_dict.remote(w) for s, w in zip(self._slots, state["workers"])])

    def add_collectors(
        self,
        num_collectors: int = 1,
        *,
        create_env_fn: Any = None,
        collector_kwargs: dict[str, Any] | list[dict[str, Any]] | None = None,
        remote_configs: dict[str, Any] | list[dict[str, Any]] | None = None,
    ) -> list[int]:
        """Start more workers on the live collector; returns their worker ids.

        By default a new worker copies the first worker's env and arguments. In
        sync mode, ``frames_per_batch`` must still split evenly; new workers take
        part from the next round on.
        """
        self._check_open()
        p = Problems()
        env_fn = self._slots[0].env_fn if create_env_fn is None else create_env_fn
        kwargs = self._slots[0].kwargs if collector_kwargs is None else collector_kwargs
        remote = self._slots[0].remote_config if remote_configs is None else remote_configs
        env_fns, kwargs_list, remotes, count = per_collector_args(
            p, env_fn, kwargs, remote, num_collectors
        )
        total = len(self._slots) + count
        if self.sync:
            p.items += batch_size_problems(
                frames_per_batch=self.frames_per_batch,
                total_frames=None,
                num_envs=None,
                split=total,
            )
        check_collector_kwargs(p, self.collector_class, kwargs_list, SET_BY_RAY)
        p.raise_if_any()
        check_resources([s.remote_config for s in self._slots] + remotes)
        slots = self._add_slots(env_fns, kwargs_list, remotes, first_index=len(self._slots))
        return [s.worker_id for s in slots]

    def stats(self) -> dict[str, Any]:
        """Frames, policy lag, stale and pending work, per-worker frames and restarts, compression
        and preemption counts.

        ``policy_lag`` holds running aggregates over served batches (``last``, ``mean``,
        ``max``, ``count``) and the ``bound`` (``max_policy_lag``); ``stale_batches`` /
        ``stale_frames`` count batches discarded for breaking it; ``pending`` counts tasks
        issued and not yet returned (those lost with a dead worker included) and the frames
        issued and not yet served. ``wire`` counts every batch served: its bytes in the full
        layout, the bytes that crossed Ray (compact and/or compressed, see
        :mod:`fleetrl.collectors.wire`) and how many batches came compact.
        """
        st = self._stats
        count = st["lag_count"]
        raw, sent = st["bytes_raw"], st["bytes_sent"]
        return {
            "frames": self._frames,
            "batches": st["batches"],
            "policy_version": self.policy_version,
            "policy_lag": {
                "last": st["lag_last"],
                "mean": st["lag_sum"] / count if count else 0.0,
                "max": st["lag_max"],
                "count": count,
                "bound": self.max_policy_lag,
            },
            "stale_batches": st["stale_batches"],
            "stale_frames": st["stale_frames"],
            "pending": {
                "tasks": len(self._pending) + sum(len(s.lost) for s in self._slots),
                "frames": self._issued,
            },
            "frames_per_worker": {s.worker_id: s.frames for s in self._slots},
            "restarts": {s.worker_id: s.restarts for s in self._slots},
            "nodes": {s.worker_id: s.node_id for s in self._slots},
            "preempted_tasks": st["preempted_tasks"],
            "worker_collect_s": st["collect_s"],
            "compression": {
                "codec": self.compress,
                "bytes_raw": raw,
                "bytes_sent": sent,
                "bytes_saved": raw - sent,
                "ratio": raw / sent if sent else None,
            },
            "wire": {
                "bytes_full": st["wire_full"],
                "bytes_sent": st["wire_sent"],
                "compact_batches": st["compact_batches"],
            },
        }

    def worker_handles(self) -> list[Any]:
        """The live actor handles, by worker id (for inspection and fault-injection tests)."""
        return [s.handle for s in self._slots]

    def _shutdown(self) -> None:
        if not ray.is_initialized():  # Ray already gone (interpreter exit): nothing to release
            return
        for slot in self._slots:
            if slot.handle is not None:
                with contextlib.suppress(Exception):  # already dead
                    ray.kill(slot.handle)
        self._pending = {}
        self._rounds = deque()
        if self._weights is not None:
            with contextlib.suppress(Exception):
                self._weights.close()
        if self._started_ray and ray.is_initialized():
            ray.shutdown()


_REMOTE_WORKER: Any = None


def _remote_worker_class() -> Any:
    """The Ray actor class, made once per process (Ray exports a class once per definition)."""
    global _REMOTE_WORKER
    if _REMOTE_WORKER is None:
        _REMOTE_WORKER = ray.remote(concurrency_groups={"control": 1})(CollectorWorker)
    return _REMOTE_WORKER


def _all_problems(p: Problems, check: Any, **arguments: Any) -> Any:
    """``check(**arguments)``, raising its problems and those already in ``p`` at once."""
    try:
        result = check(**arguments)
    except ConfigError as err:
        raise ConfigError(err.problems + p.items) from None
    p.raise_if_any()
    return result


def _check_bounds(p: Problems, max_policy_lag: Any, max_restart_attempts: Any) -> None:
    """Check the policy-lag bound and the restart attempts (before any actor starts)."""

    def whole(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    p.check(
        max_policy_lag is None or whole(max_policy_lag),
        "max_policy_lag",
        max_policy_lag,
        MAX_POLICY_LAG_ALLOWED,
    )
    p.check(
        whole(max_restart_attempts),
        "max_restart_attempts",
        max_restart_attempts,
        MAX_RESTART_ATTEMPTS_ALLOWED,
    )


def _split_frames(frames: int, num_envs: list[int]) -> dict[int, int]:
    """Split ``frames`` over workers as evenly as whole env steps allow (all envs equal in sync mode)."""
    n = num_envs[0]
    steps = frames // n
    base, extra = divmod(steps, len(num_envs))
    return {i: (base + (1 if i < extra else 0)) * n for i in range(len(num_envs))}

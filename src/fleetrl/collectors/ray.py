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
:mod:`fleetrl.learners.versions`). In sync mode, with one publish per batch, a
batch is at most ``prefetch`` publishes behind (``prefetch=0``: strictly
on-policy), however slow a worker is: a round waits for all. In async mode
every worker always has ``max(1, prefetch)`` tasks in flight and batches are
served first ready, so the lag grows with the number of workers and tasks in
flight, even when they are equally fast, and is unbounded with a slow worker,
even with ``prefetch=0``. ``max_served_lag=k``
enforces a bound in both modes: a batch more than k versions behind is not served;
it is counted in ``stats()["stale_batches"]``/``["stale_frames"]`` and its
task is issued again with the current weights, so frames stay exact (the
discarded frames are collected again, never counted). With k below
``prefetch`` most prefetched batches are discarded: choose ``k >= prefetch``.

Replay buffer (``replay_buffer=``, decoupled off-policy collection as in
Ape-X): each worker extends a replay buffer actor
(:mod:`fleetrl.collectors.replay`) with its batch's transitions itself, and
the iterator (and :meth:`RayCollector.poll`) yields one progress record per
task instead of the batch: frames written, the buffer's write count, worker
id, policy version and the episodes that ended. Frames stay exact: the
records' ``frames`` sum to ``total_frames``, and so do the buffer's writes.
First-ready only (``sync=False``).

Weights: see :meth:`RayCollector.update_policy_weights_`. torchrl 0.14's newer
arguments have torchrl's meaning (:mod:`fleetrl.collectors.arguments`).

Backends (``backend=``): the workers are Ray actors (``"ray"``, the default),
or objects in this process that run one task at a time (``"inprocess"``, for
debugging and fast tests of the accounting; :mod:`fleetrl.backends`). Every
rule above and below holds on both.

Fault tolerance: a worker whose actor dies (killed, crashed, node lost) is
replaced by a new actor with the same worker id; it receives the current
weights with its first task and the tasks lost with the old actor are issued
to it again. A replacement that dies too (e.g. while building its envs) is
replaced again after a doubling wait, up to ``max_restart_attempts`` in a row
(default 3; :class:`~fleetrl.workers.WorkerGroup`); then
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
import time
from collections.abc import Iterator
from typing import Any

from tensordict import TensorDictBase
from torchrl.envs.utils import ExplorationType

from fleetrl.backends import BACKENDS, Backend, make_backend
from fleetrl.collectors.arguments import check_feature_arguments
from fleetrl.collectors.base import CollectorState, DataCollectorBase
from fleetrl.collectors.inference import (
    WEIGHTS_TARGET_MSG,
    InferenceServers,
    check_inference,
    check_server_resources,
    latency_summary,
    probe_batched,
    server_options,
)
from fleetrl.collectors.pool import CollectorSlot, Task, WorkerPool
from fleetrl.collectors.ray_checks import (
    all_problems,
    check_added_collectors,
    check_arguments,
    check_bounds,
    check_resources,
    check_weight_update,
    probe_envs,
    put_policy,
)
from fleetrl.collectors.replay import buffer_actor, check_replay_buffer, progress_record
from fleetrl.collectors.rounds import SyncRounds
from fleetrl.collectors.served import ServedStats
from fleetrl.collectors.sync import SyncDataCollector
from fleetrl.collectors.timing import CollectTimes
from fleetrl.collectors.trajectories import TrajectoryBatcher
from fleetrl.collectors.weights import WeightStore
from fleetrl.collectors.worker import TaskResult
from fleetrl.errors import ConfigError, FleetError, Problem, Problems
from fleetrl.policies import as_weights, policy_weights
from fleetrl.runtime import ray_running, start_ray
from fleetrl.wire import unpack_batch
from fleetrl.workers import DEFAULT_MAX_RESTART_ATTEMPTS

__all__ = [
    "PAUSED_MSG",
    "PAUSE_TIMEOUT_MSG",
    "POLL_MSG",
    "CollectorPausedError",
    "RayCollector",
]

logger = logging.getLogger(__name__)

POLL_MSG = (
    "RayCollector.poll serves first-ready tasks one by one: it needs sync=False and "
    "trajs_per_batch=None (here sync={sync}, trajs_per_batch={trajs}); iterate instead"
)


#: torchrl's ``stats(workers=...)`` views
STATS_VIEWS = ("aggregate", "per_worker", "both")
PAUSED_MSG = (
    "RayCollector is paused: iterate after the pause() context (or after resume() where it "
    "was paused with resume=False)"
)
PAUSE_TIMEOUT_MSG = (
    "pause(timeout={timeout}) is invalid here: {left} of the {count} tasks in flight did not "
    "end in time; pass a longer timeout (a task collects frames_per_batch frames)"
)


class CollectorPausedError(FleetError, RuntimeError):
    """Iterating a :class:`RayCollector` inside :meth:`RayCollector.pause`."""


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
            module docstring); use ``max_served_lag``.
        fraction_samples: sync mode; a preempted straggler stops once it holds
            at least this fraction of its share.
        fraction_workers: sync mode; once this fraction of the collectors have
            finished a round, the others are preempted.
        compress: ``None``, ``"lz4"`` or ``"zstd"``: lossless compression of
            batches sent by workers; bytes saved are in :meth:`stats`. Either
            way, batches of fleetrl's collector cross Ray in the compact
            layout of :mod:`fleetrl.wire` (each observation once)
            and arrive in the full one.
        max_served_lag: ``None`` (no bound) or k >= 0: a batch collected with
            weights more than k versions older than the newest published is
            not served; its frames are collected again with the current
            weights (counted in ``stats()["stale_batches"]``).
        max_restart_attempts: replacements of a dead worker tried in a row
            (with a doubling wait between them) before :class:`WorkerLostError`.
        num_threads: torch threads in each worker process (default 1: workers
            share the cores, and two threads made CNN inference several times
            slower there); ``None`` leaves torch's default.
        device: as in :class:`SyncDataCollector`; a single value or a list per
            collector. So are ``storing_device``, ``env_device`` and ``policy_device``.
        max_frames_per_traj: as in :class:`SyncDataCollector`, and so are
            ``init_random_frames``, ``reset_at_each_iter``, ``split_trajs``,
            ``postproc`` and ``exploration_type``. ``split_trajs`` and ``postproc``
            run in this process on each yielded batch; ``init_random_frames``
            counts frames over all collectors.
        policy_factory: as in :class:`SyncDataCollector`, called on each worker;
            ``compile_policy``, ``cudagraph_policy`` and ``set_truncated`` likewise
            act on each worker.
        trajs_per_batch: batches of this many whole trajectories, assembled in
            this process from every worker's batches (``postproc`` runs first).
        replay_buffer: a :class:`~fleetrl.collectors.replay.RemoteReplayBuffer`
            (or a replay buffer actor's handle) that the workers extend with
            their batches' valid transitions; the iterator then yields progress
            records (see the module docstring). Needs ``sync=False`` and no
            ``trajs_per_batch``, ``split_trajs``, ``postproc`` or
            ``max_served_lag``. The buffer is the caller's: shutdown leaves it.
        inference: ``"local"`` (default: each worker runs its copy of the policy) or
            ``"server"``: central batched inference (:mod:`fleetrl.collectors.inference`):
            inference servers run the policy on batched requests from the workers, which
            only step envs (double-buffered); weights go to the servers only, and every
            step is tagged with the version its server answered with.
        num_inference_servers: servers with ``inference="server"`` (default 1, at most
            ``num_collectors``); worker i uses server ``i % num_inference_servers``.
        inference_device: where the servers run the policy (None: the CPU; ``"cuda"``
            needs a GPU in the Ray cluster, shared by the servers).
        inference_max_batch: observations per server batch at most (None: no bound).
        inference_max_wait_ms: how long a server waits for a batch to fill once its first
            request is in (default 0: requests that came while the policy ran form the
            next batch).
        inference_remote_config: Ray actor options of each server (default
            ``{"num_cpus": 1}``, plus an equal share of one GPU on CUDA); checked with the
            collectors' against the cluster before any actor starts.
        inference_transport: how workers reach their server: ``"auto"`` (default): shared
            memory where both run on one node (:mod:`fleetrl.collectors.shm`; tens of
            microseconds a request against about a millisecond), Ray calls across nodes;
            ``"ray"``: Ray calls only.
        backend: where the workers run: ``"ray"`` (Ray actors, the default) or
            ``"inprocess"`` (objects in this process, one task at a time: for
            debugging and tests; see :mod:`fleetrl.backends`), or a
            :class:`~fleetrl.backends.Backend`.

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
        max_served_lag: int | None = None,
        max_restart_attempts: int = DEFAULT_MAX_RESTART_ATTEMPTS,
        num_threads: int | None = 1,
        policy_factory: Any = None,
        trajs_per_batch: int | None = None,
        compile_policy: bool | dict[str, Any] | None = None,
        cudagraph_policy: bool | dict[str, Any] | None = None,
        set_truncated: bool = False,
        replay_buffer: Any = None,
        backend: str | Backend = "ray",
        inference: str = "local",
        num_inference_servers: int = 1,
        inference_device: Any = None,
        inference_max_batch: int | None = None,
        inference_max_wait_ms: float = 0.0,
        inference_remote_config: dict[str, Any] | None = None,
        inference_transport: str = "auto",
    ):
        super().__init__()
        self.state = CollectorState.CLOSED  # READY once every actor is up
        self._started_ray = False
        self._weights: WeightStore | None = None
        self._pool: WorkerPool | None = None  # the actors, once Ray is up
        self._rounds: SyncRounds | None = None  # sync mode's rounds in flight
        self._servers: InferenceServers | None = None  # inference="server"'s servers
        p = Problems()
        if not isinstance(backend, Backend) and backend not in BACKENDS:
            p.add("backend", backend, f"must be one of {list(BACKENDS)} or a fleetrl Backend")
        check_bounds(p, max_served_lag, max_restart_attempts)
        check_replay_buffer(
            p,
            replay_buffer,
            sync=sync,
            trajs_per_batch=trajs_per_batch,
            split_trajs=split_trajs,
            postproc=postproc,
            max_served_lag=max_served_lag,
            backend=backend,
        )
        #: the buffer the workers extend (their tasks then yield progress records), or None
        self.replay_buffer = replay_buffer
        features = {
            "policy_factory": policy_factory,
            "compile_policy": compile_policy,
            "cudagraph_policy": cudagraph_policy,
            "set_truncated": set_truncated,
        }
        check_feature_arguments(
            p,
            policy=policy,
            trajs_per_batch=trajs_per_batch,
            split_trajs=split_trajs,
            policy_devices=policy_device if policy_device is not None else device,
            **features,
        )
        env_list = create_env_fn if isinstance(create_env_fn, list) else [create_env_fn]
        check_inference(
            p,
            inference=inference,
            num_inference_servers=num_inference_servers,
            inference_device=inference_device,
            max_batch=inference_max_batch,
            max_wait_ms=inference_max_wait_ms,
            num_collectors=num_collectors if num_collectors is not None else len(env_list),
            policy=policy,
            policy_factory=policy_factory,
            collector_class=collector_class,
            native=isinstance(collector_class, type)
            and issubclass(collector_class, SyncDataCollector),
            devices={"device": device, "policy_device": policy_device},
            compile_policy=compile_policy,
            cudagraph_policy=cudagraph_policy,
            max_weight_update_interval=max_weight_update_interval,
            remote_config=inference_remote_config,
            transport=inference_transport,
        )
        #: ``"local"`` or ``"server"`` (central inference)
        self.inference = inference
        args = all_problems(
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
        #: where the workers run (:mod:`fleetrl.backends`)
        self.backend = make_backend(backend)
        # what a worker would refuse in its envs, or could not be sent it: refused here
        probe_envs(env_fns, kwargs_list, build=self.native)
        if inference == "server":  # a policy a server cannot feed batches: refused here
            probe_batched(
                self.policy,
                env_fns[0],
                kwargs_list[0].get("num_envs", num_workers_per_collector),
                kwargs_list[0].get("create_env_kwargs"),
                args.exploration_type,
            )

        self.frames_per_batch = frames_per_batch
        self.total_frames = total_frames
        self.sync = sync
        self.collector_class = collector_class
        self.num_workers_per_collector = num_workers_per_collector
        self.update_after_each_batch = update_after_each_batch
        self.max_weight_update_interval = max_weight_update_interval
        self.prefetch = prefetch
        self.max_served_lag = max_served_lag
        self.max_restart_attempts = max_restart_attempts
        self.num_threads = num_threads
        self.fraction_samples = float(fraction_samples)
        self.fraction_workers = float(fraction_workers)
        self.compress = compress
        self.split_trajs = split_trajs
        self.postproc = postproc
        self.init_random_frames = args.init_random_frames
        common = {
            "max_frames_per_traj": max_frames_per_traj,
            "reset_at_each_iter": reset_at_each_iter,
            "exploration_type": exploration,
        }
        # torchrl 0.14's arguments reach the workers only when set (any collector class takes them)
        common.update({k: v for k, v in features.items() if v is not None and v is not False})
        self.trajs_per_batch = trajs_per_batch
        self._trajs = (
            None
            if trajs_per_batch is None
            else TrajectoryBatcher(trajs_per_batch, drop_partial=reset_at_each_iter)
        )
        self._yielded = False
        self._paused = False  # pause(): no task is issued, iterating is refused
        self._served = ServedStats(max_served_lag, compress)
        served = inference == "server"
        try:
            if self.backend.name == "ray":
                self._started_ray = start_ray(ray_init_config)
                check_resources(remotes)
                if served:
                    check_server_resources(
                        inference_device,
                        num_inference_servers,
                        server_options(
                            inference_device, num_inference_servers, inference_remote_config
                        ),
                        remotes,
                    )
            self._weights = WeightStore(self.backend, with_board=max_weight_update_interval > 0)
            policy_ref = put_policy(self.backend, self.policy)
            if served:
                self._servers = InferenceServers(
                    self.backend,
                    policy_ref,
                    count=num_inference_servers,
                    device=inference_device,
                    max_batch=inference_max_batch,
                    max_wait_ms=float(inference_max_wait_ms),
                    exploration_type=exploration,
                    num_threads=num_threads,
                    clients=-(-len(env_fns) // num_inference_servers),
                    remote_config=inference_remote_config,
                    transport=inference_transport,
                )
            self._pool = WorkerPool(
                self.backend,
                self._weights,
                policy_ref,
                collector_class=collector_class,
                native=self.native,
                num_workers_per_collector=num_workers_per_collector,
                sync=sync,
                frames_per_batch=frames_per_batch,
                total_frames=total_frames,
                compress=compress,
                max_weight_update_interval=max_weight_update_interval,
                num_threads=num_threads,
                init_random_frames=self.init_random_frames,
                devices=devices,
                common=common,
                max_restart_attempts=max_restart_attempts,
                replay_buffer=None if replay_buffer is None else buffer_actor(replay_buffer),
                servers=self._servers,
            )
            self._rounds = SyncRounds(
                self._pool,
                self._served,
                fraction_workers=self.fraction_workers,
                fraction_samples=self.fraction_samples,
            )
            self._pool.add_slots(env_fns, kwargs_list, remotes, first_index=0)
        except BaseException:
            self._shutdown()  # release what started; the collector never becomes READY
            raise
        self.state = CollectorState.READY

    # ----------------------------------------------------------- budget
    @property
    def _slots(self) -> list[CollectorSlot]:
        return self._pool.slots if self._pool is not None else []

    def _budget(self) -> int | None:
        if self.total_frames == -1:
            return None
        return self.total_frames - self._frames - self._pool.issued

    def _random_next(self) -> bool:
        return self._frames + self._pool.issued < self.init_random_frames

    def _receive(self, result: TaskResult, worker: int) -> TensorDictBase:
        self._pool.slots[worker].frames += result.frames
        start = time.perf_counter()
        if result.progress is not None:  # the worker wrote the batch into the replay buffer
            batch = progress_record(result, worker)
        else:
            batch = unpack_batch(result.batch)  # one copy per leaf, into fresh writable memory
        result.times.unpack_s = time.perf_counter() - start
        self._served.account(result, self._weights.version, worker)
        self._served.add_batch(result.times)
        return batch

    # ------------------------------------------------------------ iteration
    def _next_batch(self) -> TensorDictBase | None:
        if self._trajs is None:
            return self._next_frames()
        # whole trajectories, from whichever workers ended them
        return self._trajs.next_batch(self._next_frames)

    def _next_frames(self) -> TensorDictBase | None:
        if self._paused:
            raise CollectorPausedError(PAUSED_MSG)
        self._pool.revive_dead()
        left = self.remaining_frames
        if self.update_after_each_batch and self._yielded and (left is None or left > 0):
            self.update_policy_weights_()
        batch = self._next_sync() if self.sync else self._next_async()
        if batch is None:
            return None
        return self._served_batch(batch)

    def _served_batch(self, batch: TensorDictBase) -> TensorDictBase:
        self._yielded = True
        self._served.counts["batches"] += 1
        if self.split_trajs:
            from torchrl.collectors.utils import split_trajectories

            batch = split_trajectories(batch)
        if self.postproc is not None:
            batch = self.postproc(batch)
        return batch

    def _top_up_async(self, limit: int) -> None:
        pool = self._pool
        for slot in pool.slots:
            while pool.in_flight(slot) < limit:
                budget = self._budget()
                if budget is not None and budget <= 0:
                    return
                frames = (
                    self.frames_per_batch if budget is None else min(self.frames_per_batch, budget)
                )
                pool.submit(Task(slot.worker_id, frames, self._random_next()))
                pool.issued += frames

    def _next_async(self) -> TensorDictBase | None:
        pool = self._pool
        self._top_up_async(max(1, self.prefetch))
        while pool.pending:
            [pending] = pool.wait(pool.pending, num_returns=1)
            result = pool.get(pending)
            if result is None:  # its worker died: replaced, the task issued again
                continue
            if self._served.stale(result, pending.task, self._weights.version):
                pool.reissue_stale(pending)
                continue
            batch = self._receive(result, pending.task.worker)
            self._frames += result.frames
            if self.prefetch:
                self._top_up_async(self.prefetch)
            return batch
        return None

    def poll(self, timeout: float | None = 0.0, *, issue: bool = True) -> list[TensorDictBase]:
        """The batches (progress records, with a replay buffer) of every task done now.

        First-ready mode only: the non-blocking twin of iterating, for a learner
        that collects while it learns. Tasks are topped up to ``max(1, prefetch)``
        per worker first, as iteration does, unless ``issue=False`` (a learner
        that holds collection back lets the workers run dry). ``timeout``: how
        long to wait for the first task to finish (0: not at all, None: until
        one does); an empty list when none did or the budget is spent.
        ``update_after_each_batch`` is not applied here: the caller publishes.

        Examples:
            >>> progress = collector.poll()  # doctest: +SKIP
            >>> frames = sum(int(p["frames"]) for p in progress)  # doctest: +SKIP
        """
        self._check_open()
        if self.sync or self._trajs is not None:
            raise ConfigError([POLL_MSG.format(sync=self.sync, trajs=self.trajs_per_batch)])
        pool = self._pool
        pool.revive_dead()
        if issue:
            self._top_up_async(max(1, self.prefetch))
        pendings = pool.pending
        if not pendings:
            return []
        ready = pool.wait(pendings, num_returns=1, timeout=timeout)
        if ready:  # and every other task that is done by now
            ready = pool.wait(pendings, num_returns=len(pendings), timeout=0)
        served = []
        for pending, ref in [(p, p.ref) for p in ready]:
            if pending.ref is not ref:  # issued again meanwhile (its worker died): not done
                continue
            result = pool.get(pending)
            if result is None:  # its worker died: replaced, its tasks issued again
                continue
            if self._served.stale(result, pending.task, self._weights.version):
                pool.reissue_stale(pending)
                continue
            batch = self._receive(result, pending.task.worker)
            self._frames += result.frames
            served.append(self._served_batch(batch))
        if issue:
            self._top_up_async(max(1, self.prefetch))
        return served

    def _start_round(self) -> bool:
        budget = self._budget()
        frames = self.frames_per_batch if budget is None else min(self.frames_per_batch, budget)
        if frames <= 0:
            return False
        self._rounds.start(frames, self._random_next())
        return True

    def _next_sync(self) -> TensorDictBase | None:
        while len(self._rounds) < max(1, self.prefetch) and self._start_round():
            pass
        if not len(self._rounds):
            return None
        batch, frames = self._rounds.serve()
        self._frames += frames
        if self.prefetch:
            while len(self._rounds) < self.prefetch and self._start_round():
                pass
        return batch

    # ------------------------------------------------------------ public API
    @property
    def num_collectors(self) -> int:
        return len(self._slots)

    @property
    def frames_in_flight(self) -> int:
        """Frames of the tasks issued and not yet served (those owed by a dead worker included)."""
        return self._pool.issued if self._pool is not None else 0

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
        optimizer-step count (:mod:`fleetrl.learners.versions`), so tags, lag and
        ``max_served_lag`` count optimizer steps. Default: the newest published
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
            worker_range=range(len(self._slots)),
            version=version,
            current_version=self.policy_version,
        )
        ids = [worker_ids] if isinstance(worker_ids, int) else worker_ids
        if self._servers is not None and ids is not None:
            raise ConfigError([Problem("worker_ids", worker_ids, WEIGHTS_TARGET_MSG)])
        if value is None:
            source = policy_weights(self.policy)
            source = None if source is None else source.detach().cpu()
        else:
            source = as_weights(value)
        published = self._weights.publish(source, None if ids is None else list(ids), version)
        if self._servers is not None and source is not None:
            self._servers.publish(self._weights.ref, published)
        return published

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seed each worker in turn (worker i starts where worker i-1's seeds end); returns the next seed.

        ``static_seed=True``: the seed is not incremented (torchrl's meaning), so every
        env of every worker gets ``seed``, and ``seed`` is returned.
        """
        self._check_open()
        self._pool.revive_dead()
        for slot in self._slots:
            slot.seed = seed
            seed = self._pool.ask(slot, "set_seed", seed, static_seed)
        return seed

    def state_dict(self) -> dict[str, Any]:
        self._check_open()
        self._pool.revive_dead()
        return {
            "frames": self._frames,
            "policy_version": self.policy_version,
            "workers": self._pool.ask_all("state_dict"),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_open()
        self._pool.revive_dead()
        self._frames = int(state["frames"])
        self._weights.version = max(self._weights.version, int(state["policy_version"]))
        self._pool.ask_all("load_state_dict", [(w,) for w in state["workers"]])

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
        env_fns, kwargs_list, remotes = check_added_collectors(
            self._slots,
            num_collectors,
            sync=self.sync,
            frames_per_batch=self.frames_per_batch,
            collector_class=self.collector_class,
            create_env_fn=create_env_fn,
            collector_kwargs=collector_kwargs,
            remote_configs=remote_configs,
        )
        if create_env_fn is not None:  # a new env: refused here, as at the start
            probe_envs(env_fns, kwargs_list, build=self.native, shipped=self.backend.name == "ray")
        slots = self._pool.add_slots(env_fns, kwargs_list, remotes, first_index=len(self._slots))
        return [s.worker_id for s in slots]

    @contextlib.contextmanager
    def pause(self, timeout: float = 30.0, *, resume: bool = True) -> Iterator[None]:
        """Hold collection while the context is active, as torchrl's ``RayCollector.pause``.

        The tasks in flight (``prefetch`` batches, a sync round) are waited for first; their
        batches are kept and served after the pause, in order, so no frame is lost or counted
        twice. Inside the context no task is issued and the workers are idle: a quiescent
        point to checkpoint or to change the policy. Iterating inside it raises
        :class:`CollectorPausedError`. With ``resume=False`` the collector stays paused after
        the context until :meth:`resume`.

        Raises:
            TimeoutError: the tasks in flight did not end within ``timeout`` seconds (the
                collector is then not paused).
        """
        self._check_open()
        pending = self._pool.pending
        if pending:
            done = self._pool.wait(pending, num_returns=len(pending), timeout=timeout)
            if len(done) < len(pending):
                raise TimeoutError(
                    PAUSE_TIMEOUT_MSG.format(
                        left=len(pending) - len(done), count=len(pending), timeout=timeout
                    )
                )
        self._paused = True
        try:
            yield
        finally:
            if resume:
                self._paused = False

    def resume(self) -> None:
        """Collect again after ``pause(resume=False)``."""
        self._paused = False

    @property
    def paused(self) -> bool:
        """Whether collection is held (:meth:`pause`)."""
        return self._paused

    def take_times(self) -> CollectTimes:
        """Where the served batches' collection time went since the last call (reset), part by
        part (:mod:`fleetrl.collectors.timing`): summed over the batches, each batch's parts
        the mean over the workers that collected it (one in first-ready mode, every worker
        with a share in a sync round), so they compare with one worker's time."""
        return self._served.take_times()

    def stats(self, workers: str = "aggregate", *, timeout: float | None = 10.0) -> dict[str, Any]:
        """Frames, policy lag, stale and pending work, per-worker frames and restarts, compression
        and preemption counts, and per worker where the collection time went; with the keys
        torchrl 0.14's ``RayCollector.stats()`` gives (``frames``, ``batches``,
        ``requested_frames_per_batch``, ``total_frames``, ``completed``, ``policy_version``,
        ``workers``, ``workers_alive``, ``worker_frames``). ``workers="per_worker"`` or
        ``"both"`` adds torchrl's per-worker keys, ``worker_<id>/frames``, ``.../restarts`` and
        each part of ``time_per_worker``. Everything is the driver's own books: no worker is
        asked, so ``timeout`` (torchrl's bound on asking them) is accepted and never waited.

        ``policy_lag`` holds running aggregates over served batches (``last``, ``mean``,
        ``max``, ``count``) and the ``bound`` (``max_served_lag``); ``stale_batches`` /
        ``stale_frames`` count batches discarded for breaking it; ``pending`` counts tasks
        issued and not yet returned (those lost with a dead worker included) and the frames
        issued and not yet served. ``wire`` counts every batch served: its bytes in the full
        layout, the bytes that crossed Ray (compact and/or compressed, see
        :mod:`fleetrl.wire`) and how many batches came compact. ``time_per_worker`` holds,
        per worker id, the seconds of each part of its served tasks since the start
        (``env_s``, ``policy_s``, ``pack_s``, ``weights_s``, ``transfer_s``, ``unpack_s``:
        :mod:`fleetrl.collectors.timing`), its tasks' ``collect_s``, the ``frames`` and
        ``batches`` (tasks) they held, and ``per_batch``, each part's seconds per task.

        Examples:
            >>> collector.stats()["time_per_worker"][0]  # doctest: +SKIP
            {'env_s': 0.41, 'policy_s': 0.23, 'pack_s': 0.02, 'weights_s': 0.001,
             'transfer_s': 0.004, 'unpack_s': 0.003, 'collect_s': 0.66, 'frames': 4000,
             'batches': 10, 'per_batch': {'env_s': 0.041, ...}}
        """
        if workers not in STATS_VIEWS:
            raise ConfigError([Problem("workers", workers, f"must be one of {list(STATS_VIEWS)}")])
        slots = self._pool.slots if self._pool is not None else []
        out = {
            **super().stats(),
            **self._served.report(self._frames, self.policy_version, self._pool),
            # torchrl's keys: the workers, those alive as far as the driver knows (a death is
            # seen when a task fails), and the frames they collected
            "workers": len(slots),
            "workers_alive": sum(s.actor is not None for s in slots),
            "worker_frames": sum(s.frames for s in slots),
        }
        if self._servers is not None:
            out["inference"] = self.inference_stats(timeout)
        if workers != "aggregate":  # torchrl's per-worker view: "worker_<id>/<metric>"
            for slot in slots:
                prefix = f"worker_{slot.worker_id}/"
                out[prefix + "frames"] = slot.frames
                out[prefix + "restarts"] = slot.restarts
                parts = out["time_per_worker"].get(slot.worker_id, {})
                out.update({prefix + k: v for k, v in parts.items() if k != "per_batch"})
        return out

    def inference_stats(self, timeout: float | None = 10.0) -> dict[str, Any]:
        """Central inference: per server its ``requests``, ``batches``, ``observations``,
        ``mean_batch`` (observations per policy call), ``compute_s``, ``version`` and
        ``device`` since it (last) started, asked with ``timeout``; the totals; and
        ``latency``: the median and 95th percentile, in milliseconds, of the latest
        requests' latencies as the workers saw them (from sending the observations to holding
        the answer). Empty with ``inference="local"``."""
        if self._servers is None:
            return {}
        servers = self._servers.stats(timeout)
        total = {
            k: sum(s.get(k, 0) for s in servers) for k in ("requests", "batches", "observations")
        }
        return {
            "mode": self.inference,
            "servers": servers,
            **total,
            "mean_batch": total["observations"] / total["batches"] if total["batches"] else 0.0,
            "latency": latency_summary(self._served.latencies),
        }

    def server_handles(self) -> list[Any]:
        """The backend's handles of the inference servers (empty with ``inference="local"``),
        for inspection and fault-injection tests."""
        return [] if self._servers is None else [s.handle for s in self._servers.servers]

    def worker_handles(self) -> list[Any]:
        """The backend's handles of the workers, by worker id (Ray actor handles; the worker
        objects in process; None for a dead one), for inspection and fault-injection tests."""
        return self._pool.handles()

    def _shutdown(self) -> None:
        if self.backend.name == "ray" and not ray_running():
            return  # Ray already gone (interpreter exit): nothing to release
        if self._pool is not None:
            self._pool.shutdown()
        if self._rounds is not None:
            self._rounds.clear()
        if self._weights is not None:
            self._weights.close()
        if self._servers is not None:
            self._servers.shutdown()
            self._servers = None
        if self._started_ray and ray_running():
            import ray

            ray.shutdown()

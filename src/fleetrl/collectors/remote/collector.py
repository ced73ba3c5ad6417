"""RayCollector: remote collector actors on Ray behind one iterable of TensorDict batches.

The guide is ``docs/guides/ray-collector.md``; the parts, each with its rules:

- ``sync=True``: each round, every worker collects its share of ``frames_per_batch``,
  stacked along a leading collector dim ``[num_collectors, *env_batch, time]`` with a
  ``("collector", "mask")`` of the steps collected; stragglers can be preempted
  (``fraction_workers``, ``fraction_samples``): :mod:`fleetrl.collectors.remote.rounds`.
  ``sync=False``: first ready, first served, a worker's batch of ``frames_per_batch``
  frames a task: :mod:`fleetrl.collectors.remote.first_ready`.
- Frames are exact: a task is issued only for frames the budget still holds, the last
  one for exactly the remainder, and one lost with its worker is issued again, so every
  frame delivered is counted once (sync mode with preemption counts what the mask marks).
- Pipelining: ``prefetch`` tasks per worker run ahead. A batch's policy lag (versions:
  :mod:`fleetrl.learners.versions`) is at most ``prefetch`` in sync mode with a publish per
  batch, unbounded first ready; ``max_served_lag=k`` bounds it in both (a staler batch is
  counted, not served, and collected again: :mod:`fleetrl.collectors.remote.served`).
- ``replay_buffer=`` (first ready): the workers extend a replay buffer actor themselves
  and the iterator yields a progress record per task: :mod:`fleetrl.collectors.remote.replay`.
- ``inference="server"``: the policy runs on inference servers, which get the weights:
  :mod:`fleetrl.collectors.inference`.
- Arguments are checked and the envs probed before anything starts:
  :mod:`fleetrl.collectors.remote.preflight`; torchrl 0.14's newer arguments have torchrl's
  meaning: :mod:`fleetrl.collectors.arguments`.
- ``backend=``: Ray actors (``"ray"``) or objects in this process, one task at a time
  (``"inprocess"``: debugging, fast tests): :mod:`fleetrl.distributed.backends`. Every rule holds on
  both.
- A dead worker (its process or node lost, or silent to a probe: :mod:`fleetrl.distributed.workers`)
  is replaced, with its worker id, the current weights and its lost tasks, up to
  ``max_restart_attempts`` times in a row: :mod:`fleetrl.collectors.remote.pool`. On Ray each
  worker's figures also go to Prometheus: :mod:`fleetrl.collectors.remote.fleet_metrics`. An
  exception raised in a worker is raised again (a ``ConfigError``, ``EnvError`` or
  ``PolicyError`` as itself, anything else as a ``WorkerError``), naming the collector,
  with the remote traceback: :func:`~fleetrl.collectors.remote.checks.worker_failure`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from tensordict import TensorDictBase
from torchrl.envs.utils import ExplorationType

from fleetrl.collectors.base import CollectorState
from fleetrl.collectors.inference.checks import check_server_resources
from fleetrl.collectors.inference.options import InferenceOptions
from fleetrl.collectors.inference.servers import InferenceServers
from fleetrl.collectors.local.sync import SyncDataCollector
from fleetrl.collectors.local.trajectories import TrajectoryBatcher
from fleetrl.collectors.remote.checks import (
    check_added_collectors,
    check_resources,
    check_weight_update,
    probe_envs,
    put_policy,
)
from fleetrl.collectors.remote.elastic import ElasticFleet
from fleetrl.collectors.remote.first_ready import FirstReady
from fleetrl.collectors.remote.fleet_metrics import FleetMetrics
from fleetrl.collectors.remote.fleet_options import FleetOptions
from fleetrl.collectors.remote.pool import CollectorSlot, WorkerPool
from fleetrl.collectors.remote.preflight import Preflight, preflight
from fleetrl.collectors.remote.rounds import StackedRounds
from fleetrl.collectors.remote.served import ServedStats
from fleetrl.collectors.remote.views import RayViews
from fleetrl.collectors.remote.weights import WeightStore
from fleetrl.collectors.remote.worker import TaskResult
from fleetrl.collectors.rollout_options import RolloutOptions
from fleetrl.distributed.backends import Backend
from fleetrl.distributed.runtime import ray_running, start_ray
from fleetrl.distributed.workers import DEFAULT_MAX_RESTART_ATTEMPTS
from fleetrl.errors import ConfigError, FleetError
from fleetrl.networks.policies import as_weights, policy_weights

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


class RayCollector(RayViews):
    """Distributed collection on Ray: remote collector actors behind one iterable.

    Accepts torchrl's ``RayCollector`` arguments with the same meaning (switch by changing
    the import), plus ``prefetch``, ``fraction_samples``, ``fraction_workers``, ``compress``.

    Args:
        create_env_fn: an env (or factory) for every collector, or a list with
            one per collector. Anything :class:`SyncDataCollector` accepts.
        policy: a ``TensorDictModule``, a plain ``nn.Module``, or ``None``
            (random). Its weights are what :meth:`update_policy_weights_` publishes.

    Keyword Args:
        frames_per_batch: frames per yielded batch (sync: summed over collectors).
        total_frames: frame budget; -1 is endless.
        num_collectors: number of remote collectors (default: the length of
            ``create_env_fn`` when it is a list, else 1); or a range, ``"2-8"`` or ``(2, 8)``,
            or ``"auto"``: a fleet that grows and shrinks with the cluster
            (:mod:`fleetrl.collectors.remote.elastic`).
        collector_class: :class:`SyncDataCollector` (default) or a torchrl collector class.
        collector_kwargs: extra keyword arguments for each collector (a dict, or a list with
            one per collector), checked against the class's signature before any actor starts.
        num_workers_per_collector: copies of the env per collector (for fleetrl's collector:
            ``num_envs`` stepped as one batch, a ``SerialEnv`` for a factory of unbatched
            torchrl envs; for torchrl classes: a list of env factories, as torchrl does, which
            the Multi* classes always get).
        sync: stack all collectors' batches (True) or serve them first-ready (False).
        ray_init_config: ``ray.init`` arguments when Ray is not running yet
            (``{"address": ...}`` attaches to a cluster). The dashboard is off by default.
        remote_configs: Ray actor options per collector (dict or list), default ``{"num_cpus": 1}``.
        update_after_each_batch: publish the local policy's weights before
            collecting past each yielded batch.
        max_weight_update_interval: a worker checks for newer weights at least
            every this many tasks (-1: only the push with each task).
        prefetch: tasks each worker may run ahead (default 1): the lag of a batch is at most
            this in sync mode with a publish per batch; ``max_served_lag`` bounds it in both.
        fraction_samples: sync mode; a preempted straggler stops once it holds
            at least this fraction of its share.
        fraction_workers: sync mode; once this fraction of the collectors have
            finished a round, the others are preempted.
        compress: ``None``, ``"lz4"`` or ``"zstd"``: lossless compression of batches sent
            by workers (bytes saved: :meth:`stats`), over :mod:`fleetrl.distributed.wire`'s compact layout.
        max_served_lag: ``None`` (no bound) or k >= 0: a batch more than k versions
            behind the newest published is not served but collected again
            (``stats()["stale_batches"]``).
        max_restart_attempts: replacements of a dead worker tried in a row
            (with a doubling wait between them) before :class:`WorkerLostError`.
        replacement_timeout_s: how long a replacement waits for a node that can host it
            (logged at once, naming the resources) before :class:`WorkerLostError`.
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
        replay_buffer: a :class:`~fleetrl.collectors.remote.replay.RemoteReplayBuffer` (or a replay
            buffer actor's handle) the workers extend with their batches' transitions; the
            iterator then yields progress records. Needs ``sync=False`` and no
            ``trajs_per_batch``, ``split_trajs``, ``postproc`` or ``max_served_lag``. The
            buffer is the caller's: shutdown leaves it.
        inference: ``"local"`` (default: each worker runs its copy of the policy),
            ``"server"`` (inference servers run it on batched requests from the workers,
            which only step envs: :mod:`fleetrl.collectors.inference`), or an
            :class:`~fleetrl.collectors.inference.InferenceOptions` holding every option.
        num_inference_servers: with ``inference_device``, ``inference_max_batch``,
            ``inference_max_wait_ms``, ``inference_remote_config`` and ``inference_transport``:
            :class:`~fleetrl.collectors.inference.InferenceOptions`' fields as keywords.
        fleet: a :class:`~fleetrl.collectors.remote.fleet_options.FleetOptions` holding
            ``sync``, ``prefetch``, ``max_served_lag``, ``max_restart_attempts``,
            ``replacement_timeout_s``, ``num_threads``, ``fraction_samples``,
            ``fraction_workers``, ``compress``, ``max_weight_update_interval`` and
            ``update_after_each_batch`` at once (a config's ``collector`` section builds
            one), instead of the separate keywords.
        rollout: a :class:`~fleetrl.collectors.rollout_options.RolloutOptions` holding
            ``frames_per_batch``, ``total_frames``, ``max_frames_per_traj`` and the envs per
            collector at once (a config builds one), instead of the separate keywords;
            ``frames_per_batch`` is then left out.
        backend: where the workers run: ``"ray"`` (Ray actors, the default),
            ``"inprocess"`` (objects in this process, one task at a time: debugging and
            tests) or a :class:`~fleetrl.distributed.backends.Backend` (:mod:`fleetrl.distributed.backends`).

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
        frames_per_batch: int | None = None,
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
        replacement_timeout_s: float = 120.0,
        num_threads: int | None = 1,
        policy_factory: Any = None,
        trajs_per_batch: int | None = None,
        compile_policy: bool | dict[str, Any] | None = None,
        cudagraph_policy: bool | dict[str, Any] | None = None,
        set_truncated: bool = False,
        replay_buffer: Any = None,
        backend: str | Backend = "ray",
        fleet: FleetOptions | None = None,
        inference: str | InferenceOptions = "local",
        num_inference_servers: int = 1,
        inference_device: Any = None,
        inference_max_batch: int | None = None,
        inference_max_wait_ms: float = 0.0,
        inference_remote_config: dict[str, Any] | None = None,
        inference_transport: str = "auto",
        rollout: RolloutOptions | None = None,
    ):
        super().__init__()
        given = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        self.state = CollectorState.CLOSED  # READY once every actor is up
        self._started_ray = False
        self._weights: WeightStore | None = None
        self._pool: WorkerPool | None = None  # the actors, once Ray is up
        self._rounds: StackedRounds | None = None  # sync mode's rounds in flight
        self._first_ready: FirstReady | None = None  # first-ready mode's tasks in flight
        self._servers: InferenceServers | None = None  # inference="server"'s servers
        self._fleet: ElasticFleet | None = None  # a range of collectors: the fleet's growth
        # every argument checked, every problem said at once, the envs (and for servers the
        # policy) probed: before anything starts (fleetrl.collectors.remote.preflight)
        checked = preflight(**given)
        self._keep(checked)
        try:
            self._start_backend(checked)
            self._weights = WeightStore(
                self.backend, with_board=self.max_weight_update_interval > 0
            )
            policy_ref = put_policy(self.backend, self.policy)
            if checked.inference.served:
                self._servers = InferenceServers.start(
                    self.backend, policy_ref, checked.inference, **checked.server_arguments()
                )
            self._start_pool(checked, policy_ref)
        except BaseException:
            self._shutdown()  # release what started; the collector never becomes READY
            raise
        self.state = CollectorState.READY

    def _keep(self, checked: Preflight) -> None:
        """The checked arguments, kept as attributes (torchrl's collector has most of them)."""
        g = checked.given
        #: the buffer the workers extend (their tasks then yield progress records), or None
        self.replay_buffer = g["replay_buffer"]
        #: ``"local"`` or ``"server"`` (central inference: :attr:`inference_options`)
        self.inference = checked.inference.mode.value
        #: central inference's options (:class:`~fleetrl.collectors.inference.InferenceOptions`)
        self.inference_options = checked.inference
        self.policy = checked.args.policy
        self.native = checked.args.native
        #: where the workers run (:mod:`fleetrl.distributed.backends`)
        self.backend = checked.backend
        #: the rollout's sizes (:class:`~fleetrl.collectors.rollout_options.RolloutOptions`)
        self.rollout_options = checked.args.rollout
        self.frames_per_batch = checked.args.rollout.frames_per_batch
        self.total_frames = checked.args.rollout.total_frames
        #: how the fleet collects and is kept (:class:`~fleetrl.collectors.remote.fleet_options.FleetOptions`)
        self.fleet_options = o = checked.options
        self.sync = o.sync
        self.collector_class = g["collector_class"]
        self.num_workers_per_collector = g["num_workers_per_collector"]
        self.update_after_each_batch = o.update_after_each_batch
        self.max_weight_update_interval = o.max_weight_update_interval
        self.prefetch = o.prefetch
        self.max_served_lag = o.max_served_lag
        self.max_restart_attempts = o.max_restart_attempts
        self.replacement_timeout_s = o.replacement_timeout_s
        self.num_threads = o.num_threads
        self.fraction_samples = float(o.fraction_samples)
        self.fraction_workers = float(o.fraction_workers)
        self.compress = o.compress
        self.split_trajs = g["split_trajs"]
        self.postproc = g["postproc"]
        self.init_random_frames = checked.args.init_random_frames
        self.trajs_per_batch = g["trajs_per_batch"]
        self._trajs = (
            None
            if self.trajs_per_batch is None
            else TrajectoryBatcher(self.trajs_per_batch, drop_partial=g["reset_at_each_iter"])
        )
        self._yielded = False
        self._paused = False  # pause(): no task is issued, iterating is refused
        self._served = ServedStats(self.max_served_lag, self.compress)
        #: on Ray, the workers' series in Ray's metrics (its ``tag``: this collector's id)
        self.fleet_metrics: FleetMetrics | None = None

    def _start_backend(self, checked: Preflight) -> None:
        """On Ray: Ray up (started or attached to), and the actors' requests checked against
        the cluster before any starts."""
        if self.backend.name != "ray":
            return
        self._started_ray = start_ray(checked.given["ray_init_config"])
        check_resources(checked.args.remotes)
        if checked.inference.served:
            check_server_resources(checked.inference, checked.args.remotes)

    def _start_pool(self, checked: Preflight, policy_ref: Any) -> None:
        """The workers, one per collector, and the rounds (sync) or tasks (first ready) that
        they collect."""
        pool = WorkerPool(
            self.backend,
            self._weights,
            policy_ref,
            servers=self._servers,
            **checked.pool_arguments(),
        )
        self._pool = pool
        if self.backend.remote:  # each worker's series in Ray's metrics (Prometheus)
            self._served.on_task = self.fleet_metrics = FleetMetrics(pool)
        budget = {
            "frames_per_batch": self.frames_per_batch,
            "budget": self._budget,
            "random_next": self._random_next,
        }
        self._rounds = StackedRounds(
            pool,
            self._served,
            fraction_workers=self.fraction_workers,
            fraction_samples=self.fraction_samples,
            **budget,
        )
        self._first_ready = FirstReady(pool, self._served, self._weights, **budget)
        args = checked.args
        if checked.fleet.elastic:  # set before the workers start: their checks know it
            self._fleet = ElasticFleet(pool, checked.fleet)
        pool.add_slots(args.env_fns, args.kwargs_list, args.remotes, first_index=0)
        if self._fleet is not None:
            self._fleet.request()
            self._fleet.tick(force=True)  # as many as the cluster holds, up to the maximum

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
        """A first-ready task's batch (or progress record), counted."""
        self._frames += result.frames
        self._pool.slots[worker].frames += result.frames
        return self._served.receive(result, worker, self._weights.version)

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
        if self._fleet is not None:
            self._fleet.tick()
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

    def _next_async(self) -> TensorDictBase | None:
        self._first_ready.top_up(max(1, self.prefetch))
        done = self._first_ready.next()
        if done is None:
            return None
        batch = self._receive(*done)
        if self.prefetch:
            self._first_ready.top_up(self.prefetch)
        return batch

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
        self._pool.revive_dead()
        if self._fleet is not None:
            self._fleet.tick()
        if issue:
            self._first_ready.top_up(max(1, self.prefetch))
        done = self._first_ready.done(timeout)
        served = [self._served_batch(self._receive(result, worker)) for result, worker in done]
        if issue:
            self._first_ready.top_up(max(1, self.prefetch))
        return served

    def _next_sync(self) -> TensorDictBase | None:
        self._rounds.top_up(max(1, self.prefetch))
        if not len(self._rounds):
            return None
        batch, frames = self._rounds.serve()
        self._frames += frames
        if self.prefetch:
            self._rounds.top_up(self.prefetch)
        return batch

    # ------------------------------------------------------------ public API
    @property
    def num_collectors(self) -> int:
        """The workers in the fleet now (an elastic fleet's change as nodes join and leave)."""
        return len(self._pool.active) if self._pool is not None else 0

    @property
    def fleet(self) -> dict[str, int]:
        """The fleet's counts: workers in it, and so far joined, left and replaced."""
        report = self._fleet.report() if self._fleet is not None else {"joined": 0, "left": 0}
        return {
            "collectors": self.num_collectors,
            "joined": report["joined"],
            "left": report["left"],
            "restarted": sum(s.restarts for s in self._slots),
        }

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
            served=self._servers is not None,
        )
        ids = [worker_ids] if isinstance(worker_ids, int) else worker_ids
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
        for slot in self._pool.active:
            slot.seed = seed
            seed = self._pool.ask(slot, "set_seed", seed, static_seed)
        if self._fleet is not None:  # a worker that joins later starts where these end
            self._fleet.next_seed = seed
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
        workers = list(state["workers"])  # an elastic fleet's may differ in size: by worker id
        workers += [None] * (len(self._slots) - len(workers))
        self._pool.ask_all("load_state_dict", [(w,) for w in workers[: len(self._slots)]])

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
            probe_envs(env_fns, kwargs_list, build=self.native)
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
        left, count = self._pool.drain(timeout)
        if left:
            raise TimeoutError(PAUSE_TIMEOUT_MSG.format(left=left, count=count, timeout=timeout))
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

    def _shutdown(self) -> None:
        if self.backend.name == "ray" and not ray_running():
            return  # Ray already gone (interpreter exit): nothing to release
        if self._fleet is not None:
            self._fleet.shutdown()
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

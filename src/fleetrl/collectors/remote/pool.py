"""WorkerPool: the remote collector actors of a :class:`~fleetrl.collectors.RayCollector`.

One slot per worker id: its actor, the arguments it was made with and the
tasks it has in flight. The pool starts the actors (checking env counts before
any actor starts, from the arguments, and again from what the workers report),
submits tasks with the weights each worker lacks, gets their results with typed
worker errors, and replaces dead workers. The workers run on a backend
(:mod:`fleetrl.distributed.backends`): Ray actors, or objects in this process.

Frame accounting: :attr:`WorkerPool.issued` counts the frames of tasks issued
and not yet delivered. A first-ready task (``round_id < 0``) leaves the books
when its result is got; a round's frames stay issued until the round is served
whole (:mod:`fleetrl.collectors.remote.rounds`).

Fault tolerance is the :class:`~fleetrl.distributed.workers.WorkerGroup`'s, shared with
the gradient workers: a worker whose actor dies (killed, crashed, node lost)
is replaced by a new one with the same worker id (seeded anew when the dead
one was seeded); it receives the current weights with its first task, and the
tasks lost with the old actor are issued to it again. A replacement that dies
too is replaced again after a doubling wait, up to ``max_restart_attempts`` in
a row; then :class:`~fleetrl.errors.WorkerLostError`. The lost tasks stay on
the books meanwhile (their frames still counted as issued), so a caller that
catches the error and iterates again still gets exact frames. An exception
raised inside a worker is not a death: it surfaces through
:func:`~fleetrl.collectors.remote.checks.worker_failure`.

The transfer of a result (``transfer_s`` of :mod:`fleetrl.collectors.timing`)
is measured here, on receipt: from the later of the worker's ``ready_at`` and
the start of the driver's last :meth:`WorkerPool.wait` to the result in hand,
so a result that waited for a busy driver does not count its wait.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fleetrl.collectors.inference.client import ServerClient
from fleetrl.collectors.inference.servers import InferenceServers
from fleetrl.collectors.local.overlap import available_cores, worker_overlap
from fleetrl.collectors.remote.checks import (
    check_env_counts,
    takes_env_list,
    told_num_envs,
    worker_failure,
)
from fleetrl.collectors.remote.fleet_options import FleetOptions
from fleetrl.collectors.remote.weights import WeightStore
from fleetrl.collectors.remote.worker import CollectorWorker, TaskResult
from fleetrl.collectors.rollout_options import RolloutOptions
from fleetrl.distributed.backends import Actor, Backend, WorkerDied, WorkerRaised
from fleetrl.distributed.workers import Pending, Retire, WorkerGroup, WorkerSlot
from fleetrl.errors import WorkerError, WorkerLostError

__all__ = ["CollectorSlot", "StartDied", "Task", "WorkerPool"]

logger = logging.getLogger(__name__)

#: a replacement of worker i gets seed + SEED_STRIDE * incarnation (its own streams)
SEED_STRIDE = 1_000_003
#: how long a node whose worker looked lost with it is kept out of a replacement's choice
#: (Ray's health checks declare a lost node dead within this; a node that answers again is
#: used again after it)
SUSPECT_NODE_S = 30.0
#: Ray's label of each node's id (a replacement is kept off suspect nodes by it)
NODE_ID_LABEL = "ray.io/node-id"
#: a replacement not up after this long is checked for a node that can host it
HOST_CHECK_S = 1.0

NO_HOST_MSG = (
    "collector worker {worker}'s replacement waits for a node with {demand}: no live node "
    "has them{excluded} (nodes lost: {lost}); waiting up to {timeout:g} s "
    "(collector.replacement_timeout_s) for one to join"
)
NO_HOST_LOST_MSG = (
    "no node could host its replacement within {timeout:g} s "
    "(collector.replacement_timeout_s): it needs {demand}{excluded}, and no live node has "
    "them (nodes lost: {lost}); add a node with these resources, or lower the worker's "
    "(collector.num_cpus_per_collector, remote_configs)"
)


@dataclass
class Task:
    """One task for one worker: collect ``frames`` (a round's share when ``round_id >= 0``)."""

    worker: int
    frames: int
    random: bool
    round_id: int = -1
    min_frames: int | None = None


@dataclass(eq=False)
class CollectorSlot(WorkerSlot):
    """One collector worker: its creation arguments and books besides the actor's."""

    env_fn: Any = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    remote_config: dict[str, Any] = field(default_factory=dict)
    publish: int = 0  # the newest publish of weights sent to it (WeightStore.publishes)
    num_envs: int | None = None
    node_id: str | None = None
    frames: int = 0
    seed: int | None = None

    @property
    def worker_id(self) -> int:
        return self.index


class StartDied(WorkerError):
    """A worker died while starting (the driver may start another)."""


class WorkerPool:
    """The collector workers, one slot per worker id, and the tasks they have in flight.

    Args:
        backend: where the workers run (:mod:`fleetrl.distributed.backends`).
        weights: the collector's weight store; each task carries the weights its
            worker lacks.
        policy_ref: the policy module, stored once with the backend.

    Keyword Args:
        collector_class, native, num_workers_per_collector, init_random_frames: as
            :class:`~fleetrl.collectors.RayCollector` was given them (checked there).
        rollout: the fleet's rollout sizes (valid: :class:`~fleetrl.collectors.rollout_options.RolloutOptions`);
            each native worker gets its share (:meth:`RolloutOptions.share`).
        env_counts: the collectors' env counts the sizes were checked with, where the
            arguments told every one (None: checked as the workers report them).
        options: the fleet's options (valid: :class:`~fleetrl.collectors.remote.fleet_options.FleetOptions`):
            stacked or first ready, compression, the workers' threads and weight checks,
            the replacements tried in a row and how long one waits for a node.
        devices: the device arguments, one list per name (one value per collector).
        common: the collector arguments every worker gets.
        replay_buffer: the replay buffer actor the workers extend with their
            batches (they then return progress records), or None.
        servers: central inference (:mod:`fleetrl.collectors.inference`): each worker
            gets its server, and its tasks never carry weights (the servers hold them).
    """

    def __init__(
        self,
        backend: Backend,
        weights: WeightStore,
        policy_ref: Any,
        *,
        collector_class: Any,
        native: bool,
        num_workers_per_collector: int,
        options: FleetOptions,
        rollout: RolloutOptions,
        env_counts: list[int] | None = None,
        init_random_frames: int,
        devices: dict[str, list[Any]],
        common: dict[str, Any],
        replay_buffer: Actor | None = None,
        servers: InferenceServers | None = None,
    ):
        self.backend = backend
        self.servers = servers
        self.replay_buffer = replay_buffer
        self.weights = weights
        self.policy_ref = policy_ref
        self.collector_class = collector_class
        self.native = native
        self.num_workers_per_collector = num_workers_per_collector
        self.sync = options.sync
        self.rollout = rollout
        self.frames_per_batch = rollout.frames_per_batch
        self.total_frames = rollout.total_frames
        #: the env counts the rollout's sizes were checked with (checked once each)
        self.checked_counts: set[tuple[int, ...]] = {tuple(env_counts)} if env_counts else set()
        self.compress = options.compress
        self.max_weight_update_interval = options.max_weight_update_interval
        self.num_threads = options.num_threads
        self.init_random_frames = init_random_frames
        self.devices = devices
        self.common = common
        self.group = WorkerGroup(
            backend,
            role="collector worker",
            start=self._start_actor,
            issue=self._issue,
            ready=self._wait_ready,
            max_attempts=options.max_restart_attempts,
            on_reissue=self._reissued,
            # Ray's own detector declares a lost node's workers dead only after its health
            # checks (about 13 s): a probe answered beside the rollout finds them in seconds
            probe=(lambda slot: slot.actor.call("ping")) if backend.remote else None,
            rehome=self._rehome,
            on_wait=self._waiting,
        )
        #: an elastic fleet's: whether a worker that no node can host may leave the fleet
        #: (:mod:`fleetrl.collectors.remote.elastic`); None: never, its replacement waits
        self.may_shrink: Callable[[CollectorSlot], bool] | None = None
        #: called while a wait for results lasts (an elastic fleet admits new workers)
        self.on_wait: Callable[[], None] | None = None
        self.replacement_timeout_s = options.replacement_timeout_s
        #: nodes whose workers looked lost with them: node id -> when (time.monotonic())
        self.suspect_nodes: dict[str, float] = {}
        self.issued = 0  # frames in tasks issued and not yet delivered
        self._asked_at = 0.0  # wall clock at the start of the last wait for results
        # told of every task issued again, with its new ref (its round follows it)
        self.on_resubmit: Callable[[Pending], None] | None = None

    @property
    def slots(self) -> list[CollectorSlot]:
        return self.group.slots  # type: ignore[return-value]

    @property
    def active(self) -> list[CollectorSlot]:
        """The workers in the fleet: every slot but those retired (a dead one awaiting its
        replacement included)."""
        return self.group.active  # type: ignore[return-value]

    @property
    def pending(self) -> list[Pending]:
        """The tasks in flight, in the order they were issued."""
        return list(self.group.pending.values())

    # ------------------------------------------------------------- actors
    def worker_kwargs(self, slot: CollectorSlot) -> dict[str, Any]:
        """The collector arguments of one worker."""
        i = slot.worker_id % max(1, len(self.devices["device"]))
        kwargs = {"create_env_fn": slot.env_fn, **self.common}
        for name, values in self.devices.items():
            if values[i] is not None:
                kwargs[name] = values[i]
        if not self.native:
            kwargs["split_trajs"] = False
            if self.init_random_frames:
                kwargs["init_random_frames"] = -1
            if self.num_workers_per_collector > 1 or takes_env_list(self.collector_class):
                # as torchrl does: one env factory per sub-collector
                kwargs["create_env_fn"] = [slot.env_fn] * self.num_workers_per_collector
            if kwargs.get("max_frames_per_traj") is None:
                kwargs["max_frames_per_traj"] = -1
        kwargs.update(slot.kwargs)
        if self.native:  # its share of the checked sizes, with its own envs per call
            kwargs.pop("num_envs", None)
            share = self.rollout.share(
                num_envs=self._known_num_envs(slot),
                frames=self._task_frames(),
                max_frames_per_traj=kwargs.pop("max_frames_per_traj", None),
            )
            kwargs["rollout"] = share
        if self.servers is not None:
            # the options' transport, checked by the driver: the worker does not check it
            kwargs["inference_server"] = ServerClient(
                self.servers.for_worker(slot.worker_id), self.servers.transport
            )
        if self.native:  # automatic overlap only where each worker leaves a core to its engine
            kwargs["overlap"] = worker_overlap(
                kwargs.get("overlap"), len(self.active), available_cores()
            )
        return kwargs

    def _task_frames(self) -> int:
        count = max(1, len(self.active))
        return self.frames_per_batch // count if self.sync else self.frames_per_batch

    def _placement(self, slot: CollectorSlot) -> dict[str, Any]:
        """The slot's Ray options, kept off nodes that look lost: until Ray's health checks
        declare a lost node dead, its scheduler may still place a replacement there."""
        options = {**slot.remote_config, "concurrency_groups": {"control": 1}}
        now = time.monotonic()
        if slot.node_lost and slot.node_id is not None:
            self.suspect_nodes[slot.node_id] = now
        self.suspect_nodes = {
            n: t for n, t in self.suspect_nodes.items() if now - t < SUSPECT_NODE_S
        }
        selector = dict(options.get("label_selector") or {})
        placed = "scheduling_strategy" in options or "placement_group" in options
        if (
            self.suspect_nodes
            and self.backend.remote
            and not placed
            and NODE_ID_LABEL not in selector
        ):
            selector[NODE_ID_LABEL] = f"!in({', '.join(sorted(self.suspect_nodes))})"
            options["label_selector"] = selector
        return options

    def _start_actor(self, slot: WorkerSlot) -> Actor:
        assert isinstance(slot, CollectorSlot)
        slot.publish = 0  # a new actor holds no weights yet
        kwargs = self.worker_kwargs(slot)
        kwargs["policy"] = None  # travels separately, stored once for every worker
        return self.backend.start(
            CollectorWorker,
            slot.worker_id,
            slot.incarnation,
            self.collector_class,
            kwargs,
            self.policy_ref,
            self._task_frames(),
            self.compress,
            self.weights.board,
            self.max_weight_update_interval,
            num_threads=self.num_threads,
            replay_buffer=self.replay_buffer,
            options=self._placement(slot),
        )

    def _wait_ready(self, slots: list[WorkerSlot]) -> None:
        """Wait for new workers to build their collectors; a replacement is seeded anew."""
        refs = [s.actor.call("setup") for s in slots]  # type: ignore[union-attr]
        for slot, ref in zip(slots, refs):
            assert isinstance(slot, CollectorSlot)
            if slot.incarnation > 0 and self.backend.remote:
                self._wait_for_a_host(slot, ref)
            try:
                info = self.backend.get(ref)
                if slot.seed is not None and slot.incarnation > 0:
                    seed = slot.seed + SEED_STRIDE * slot.incarnation
                    self.backend.get(slot.actor.call("set_seed", seed))  # type: ignore[union-attr]
            except WorkerRaised as err:
                raise worker_failure(slot.worker_id, err) from None
            except WorkerDied as err:
                err.index = slot.worker_id  # type: ignore[attr-defined]
                raise
            slot.num_envs, slot.node_id = info["num_envs"], info["node_id"]

    def _wait_for_a_host(self, slot: CollectorSlot, ref: Any) -> None:
        """Wait for a replacement to be placed and built. Say at once when no live node can
        host it (its resources, the nodes lost), and give up with
        :class:`~fleetrl.errors.WorkerLostError` when none has for ``replacement_timeout_s``;
        once a node can, it is waited for as any start is."""
        hostless_since, said = None, False
        while not self.backend.wait([ref], timeout=HOST_CHECK_S)[0]:
            demand, fit, lost = self.backend.hosts(slot.remote_config, list(self.suspect_nodes))
            if fit or self.backend.placed(slot.actor):  # placed, or about to be: starting
                hostless_since = None
                continue
            if self.may_shrink is not None and self.may_shrink(slot):
                raise Retire  # the fleet goes on without it
            now = time.monotonic()
            hostless_since = now if hostless_since is None else hostless_since
            words = {
                "worker": slot.worker_id,
                "demand": demand,
                "excluded": " off the nodes that look lost" if self.suspect_nodes else "",
                "lost": ", ".join(n[:8] for n in sorted({*lost, *self.suspect_nodes})) or "none",
                "timeout": self.replacement_timeout_s,
            }
            if now - hostless_since >= self.replacement_timeout_s:
                raise WorkerLostError(
                    slot.worker_id, NO_HOST_LOST_MSG.format(**words), attempts=slot.deaths
                )
            if not said:
                logger.warning(NO_HOST_MSG.format(**words))
                said = True

    def add_slots(
        self,
        env_fns: list[Any],
        kwargs_list: list[dict[str, Any]],
        remotes: list[dict[str, Any]],
        first_index: int,
    ) -> list[CollectorSlot]:
        """Start one worker per env factory, with ids from ``first_index``; returns their slots."""
        slots = [
            CollectorSlot(first_index + i, env_fn=fn, kwargs=kw, remote_config=rc)
            for i, (fn, kw, rc) in enumerate(zip(env_fns, kwargs_list, remotes))
        ]
        for slot in slots:
            slot.num_envs = self._known_num_envs(slot)
        self._check_env_counts(self.slots + slots)  # what the arguments tell, before any actor
        try:
            self.group.add(slots)
        except WorkerDied as err:
            raise StartDied(getattr(err, "index", -1), err.cause) from None
        self._check_env_counts(self.slots)  # what the workers report
        return slots

    def launch(self, slot: CollectorSlot) -> Any:
        """Start a worker that joins the fleet once it is up (:meth:`admit`); returns the
        reference to its setup's answer. Not waited for: it may wait for a node."""
        slot.num_envs = self._known_num_envs(slot)
        slot.actor = self._start_actor(slot)
        return slot.actor.call("setup")

    def admit(self, slot: CollectorSlot, ref: Any, seed: int | None) -> int | None:
        """A launched worker joins: its setup's answer read, seeded with ``seed`` (None: not
        seeded), and its slot in the fleet, a retired one's (same id) or a new one. Returns
        the seed after its envs' (None: not seeded).

        Raises:
            WorkerDied: it died starting (the caller drops it).
        """
        next_seed = None
        try:
            info = self.backend.get(ref)
            if seed is not None:
                next_seed = self.backend.get(slot.actor.call("set_seed", seed))  # type: ignore[union-attr]
        except WorkerRaised as err:
            raise worker_failure(slot.worker_id, err) from None
        slot.num_envs, slot.node_id, slot.seed = info["num_envs"], info["node_id"], seed
        while len(self.slots) <= slot.worker_id:  # ids below it still starting: held retired
            self.slots.append(CollectorSlot(len(self.slots), retired=True))
        self.slots[slot.worker_id] = slot
        self._check_env_counts(self.active)
        return next_seed

    def _rehome(self, pending: Pending) -> CollectorSlot:
        """The worker that takes over a task of a retired one: the live one with the fewest
        tasks in flight (a dead one's replacement, where none lives)."""
        live = [s for s in self.active if s.actor is not None] or self.active
        return min(live, key=self.in_flight)

    def _waiting(self) -> None:
        if self.on_wait is not None:
            self.on_wait()

    def _known_num_envs(self, slot: CollectorSlot) -> int | None:
        """Envs per call of a native collector, when the arguments alone tell
        (:func:`~fleetrl.collectors.remote.checks.told_num_envs`; the rollout's count is
        the envs per collector, as ``num_workers_per_collector`` is)."""
        if not self.native:
            return None
        per_collector = max(self.num_workers_per_collector, self.rollout.num_envs or 1)
        return told_num_envs(slot.env_fn, slot.kwargs, per_collector)

    def _check_env_counts(self, slots: list[CollectorSlot]) -> None:
        """The sizes against the workers' env counts, where these were not checked already
        (the counts the arguments told, or the same counts reported before)."""
        counts = [s.num_envs for s in slots]
        if not self.native or None in counts:
            return
        n = self.rollout.num_envs
        if (n is not None and set(counts) == {n}) or tuple(counts) in self.checked_counts:
            return
        check_env_counts(
            counts,
            sync=self.sync,
            frames_per_batch=self.frames_per_batch,
            total_frames=self.total_frames,
            elastic=self.may_shrink is not None,
        )
        self.checked_counts.add(tuple(counts))

    def revive_dead(self) -> None:
        """Start the workers left dead by a WorkerLostError the caller caught."""
        self.group.revive_dead()

    # -------------------------------------------------------------- tasks
    def _issue(self, slot: WorkerSlot, task: Task) -> Any:
        """Issue a task to its worker, with the weights it lacks."""
        assert isinstance(slot, CollectorSlot) and slot.actor is not None
        publish, version, weights_ref = self.weights.for_worker(slot.publish, slot.worker_id)
        if self.servers is not None:  # the servers hold the weights
            weights_ref = None
        ref = slot.actor.call(
            "collect",
            task.frames,
            version,
            weights_ref,
            random=task.random,
            round_id=task.round_id,
            min_frames=task.min_frames,
        )
        slot.publish = publish
        return ref

    def _reissued(self, pending: Pending) -> None:
        if self.on_resubmit is not None:
            self.on_resubmit(pending)

    def submit(self, task: Task) -> Pending:
        """Issue a task to its worker; returns it in flight."""
        return self.group.submit(self.slots[task.worker], task)

    def reissue_stale(self, pending: Pending) -> None:
        """Issue again a task whose batch was not served for breaking the lag bound.

        :meth:`get` already took it off the books: it goes back on first.
        """
        if pending.task.round_id < 0:
            self.issued += pending.task.frames
        self.group.submit_again(pending)
        self._reissued(pending)

    def wait(
        self, pendings: list[Pending], num_returns: int = 1, timeout: float | None = None
    ) -> list[Pending]:
        """The tasks among ``pendings`` that are done, first ready first."""
        self._asked_at = time.time()
        return self.group.wait(pendings, num_returns, timeout)

    def get(self, pending: Pending) -> TaskResult | None:
        """The result of a task, or None when its worker died (it is then replaced and the
        task issued again)."""
        try:
            result = self.group.get(pending)
        except WorkerRaised as err:
            raise worker_failure(pending.task.worker, err) from None
        if result is None:
            return None
        # wall clocks (the worker's may be another machine's): a negative skew counts as 0
        result.times.transfer_s = max(0.0, time.time() - max(result.ready_at, self._asked_at))
        if pending.task.round_id < 0:  # a round's frames stay issued until the round is served
            self.issued -= pending.task.frames
        return result

    def ask(self, slot: CollectorSlot, method: str, *args: Any) -> Any:
        """``method(*args)`` on one worker, waited for, with the worker errors of :meth:`get`."""
        return self._answers([slot], [slot.actor.call(method, *args)])[0]  # type: ignore[union-attr]

    def ask_all(self, method: str, args: list[tuple[Any, ...]] | None = None) -> list[Any]:
        """``method`` on every worker (each with its own ``args``), the answers by worker id."""
        args = args or [()] * len(self.slots)
        live = [(s, a) for s, a in zip(self.slots, args) if not s.retired]
        refs = [s.actor.call(method, *a) for s, a in live]  # type: ignore[union-attr]
        answers = dict(
            zip([s.worker_id for s, _ in live], self._answers([s for s, _ in live], refs))
        )
        return [answers.get(s.worker_id) for s in self.slots]

    def _answers(self, slots: list[CollectorSlot], refs: list[Any]) -> list[Any]:
        answers = []
        for slot, ref in zip(slots, refs):
            try:
                answers.append(self.backend.get(ref))
            except WorkerRaised as err:
                raise worker_failure(slot.worker_id, err) from None
            except WorkerDied as err:
                raise WorkerError(slot.worker_id, err.cause) from None
        return answers

    def drain(self, timeout: float | None) -> tuple[int, int]:
        """Wait up to ``timeout`` seconds for every task in flight to end (their results stay
        to be got); returns how many did not, and how many there were."""
        pending = self.pending
        if not pending:
            return 0, 0
        done = self.wait(pending, num_returns=len(pending), timeout=timeout)
        return len(pending) - len(done), len(pending)

    def in_flight(self, slot: CollectorSlot) -> int:
        """Tasks issued to ``slot``'s worker and not yet returned."""
        return sum(p.slot is slot for p in self.group.pending.values())

    @property
    def owed_tasks(self) -> int:
        """Tasks issued and not yet returned, those lost with a dead worker included."""
        return len(self.group.owed)

    def handles(self) -> list[Any]:
        """The backend's handles of the live workers, by worker id (None: dead)."""
        return [None if s.actor is None else s.actor.handle for s in self.slots]

    def shutdown(self) -> None:
        """End every worker; the tasks in flight are dropped."""
        self.group.shutdown()

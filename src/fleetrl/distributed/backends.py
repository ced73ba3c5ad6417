"""Where workers run: Ray actors, or plain objects in this process.

Collector workers (:class:`~fleetrl.collectors.RayCollector`) and gradient
workers (:class:`~fleetrl.learners.UpdateWorker`) are started and called
through one small interface, as Sample Factory's serial and parallel runners
and PufferLib's Serial and Ray backends are:

- :meth:`Backend.start` builds a worker and returns its :class:`Actor`;
- :meth:`Actor.call` issues a method call and returns a reference to its result
  (:meth:`Actor.fire` issues one whose result nobody reads; :meth:`Actor.ask`
  issues one and waits for it);
- :meth:`Backend.get` and :meth:`Backend.wait` read results, first ready first;
- :meth:`Backend.put` stores an object once for many calls (the weights);
- :meth:`Backend.kill` ends a worker.

With :func:`warm_workers` on, a Ray worker that ends normally leaves its process to the
next worker of its kind, which then starts in milliseconds instead of seconds.

A result that cannot come raises one of two errors, whatever the backend:
:class:`WorkerDied` (the worker is gone: killed, crashed, its node lost) or
:class:`WorkerRaised` (the method raised; the worker lives on).

:class:`RayBackend` runs each worker as a Ray actor. :class:`InProcessBackend`
runs it as an object in this process, serially: a call runs when its result
is first asked for (:meth:`~Backend.get`, :meth:`~Backend.wait`), after the
calls issued to the same worker before it, as a Ray actor runs its calls in
order; a :meth:`~Actor.fire` runs at once. Constructor arguments are copied,
as Ray's pickling copies them, so two workers never share a policy. A worker
dies in process by raising :class:`SimulatedDeath` (tests use it where a Ray
test would kill the actor's process). It is for debugging (one process, one
stack, ``pdb`` works) and for tests of the accounting, lag, preemption,
stale-batch and restart logic that run in milliseconds.

Examples:
    >>> class Counter:
    ...     def __init__(self, start):
    ...         self.n = start
    ...     def add(self, k):
    ...         self.n += k
    ...         return self.n
    >>> backend = InProcessBackend()
    >>> counter = backend.start(Counter, 10)
    >>> refs = [counter.call("add", 1), counter.call("add", 2)]
    >>> backend.get(refs[1]), backend.get(refs[0])
    (13, 11)
"""

from __future__ import annotations

import abc
import contextlib
import copy
import logging
import time
import traceback
from collections.abc import Sequence
from typing import Any

from fleetrl.distributed import warm
from fleetrl.distributed.runtime import remote_traceback

logger = logging.getLogger(__name__)

#: how long :meth:`RayBackend.kill_all` waits for the cluster to free what the workers held
RELEASE_WAIT_S = 10.0
RELEASE_LATE = (
    "%d workers ended, and after %.0f s the cluster has not freed what they held (%s): "
    "actors started now may wait for it"
)

__all__ = [
    "BACKENDS",
    "Actor",
    "Backend",
    "InProcessBackend",
    "RayBackend",
    "SimulatedDeath",
    "WorkerDied",
    "WorkerRaised",
    "end_idle_workers",
    "make_backend",
    "warm_workers",
]

#: the backends a config (``trainer.backend``) or a ``backend=`` argument names
BACKENDS = ("ray", "inprocess")


class WorkerDied(Exception):
    """A worker is gone (killed, crashed, its node lost): its calls in flight are lost."""

    def __init__(self, cause: str, *, node_lost: bool = False):
        super().__init__(cause)
        #: what the backend knows of the death, as text
        self.cause = cause
        #: its node looks lost (unreachable, or a result lost with its object store), not
        #: just its process: a replacement is started elsewhere while the node is suspect
        self.node_lost = node_lost


class WorkerRaised(Exception):
    """A worker's method raised; the worker itself lives on."""

    def __init__(self, error: BaseException | None, text: str):
        super().__init__(text)
        #: the exception the method raised (None where the backend could not rebuild it)
        self.error = error
        #: the error with the worker's traceback, as plain text
        self.text = text


class SimulatedDeath(Exception):
    """Raised by a worker in process to die as a killed Ray actor would (tests)."""


class Actor:
    """One started worker: issue its method calls through :attr:`backend`."""

    def __init__(
        self,
        backend: Backend,
        handle: Any,
        held: dict[str, float] | None = None,
        warm_key: Any = None,
    ):
        self.backend = backend
        #: the backend's own handle (a Ray ``ActorHandle``, or the in-process worker)
        self.handle = handle
        #: the cluster resources it holds while it lives (Ray: none inside a placement group,
        #: whose bundle keeps them), which :meth:`Backend.kill_all` waits to see freed
        self.held = held or {}
        #: where its process goes when it ends normally (None: it is killed; see warm_workers)
        self.warm_key = warm_key

    def __deepcopy__(self, memo: dict) -> Actor:
        # a handle names a worker, as a Ray actor handle does once pickled: a copy of the
        # arguments a worker starts with (the in-process backend's stand-in for Ray's
        # pickling) still calls the same worker, e.g. the replay buffer every worker fills
        return self

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Issue ``method(*args, **kwargs)``; returns a reference to read with ``backend.get``."""
        return self.backend.call(self, method, args, kwargs)

    def fire(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Issue a call whose result nobody reads (a signal: preempt, post)."""
        self.backend.fire(self, method, args, kwargs)

    def ask(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Issue a call and wait for its result."""
        return self.backend.get(self.call(method, *args, **kwargs))


class Backend(abc.ABC):
    """Starts workers and reads their results (see the module docstring)."""

    name: str
    #: workers run in other processes, which can be lost (and probed: fleetrl.distributed.workers)
    remote: bool = False

    @abc.abstractmethod
    def start(
        self, cls: type, *args: Any, options: dict[str, Any] | None = None, **kwargs: Any
    ) -> Actor:
        """Build ``cls(*args, **kwargs)`` as a worker. ``options``: Ray's actor options
        (resources, concurrency groups); the in-process backend has no use for them."""

    @abc.abstractmethod
    def call(self, actor: Actor, method: str, args: tuple, kwargs: dict[str, Any]) -> Any: ...

    def fire(self, actor: Actor, method: str, args: tuple, kwargs: dict[str, Any]) -> None:
        self.call(actor, method, args, kwargs)

    def hosts(
        self, options: dict[str, Any], exclude: Sequence[str] = ()
    ) -> tuple[dict[str, float], list[str], list[str]]:
        """Where a worker of these options could run (:meth:`RayBackend.hosts`): in this
        process, anywhere."""
        return {}, ["this process"], []

    def room(self, options: dict[str, Any], exclude: Sequence[str] = ()) -> int | None:
        """How many more workers of these options the live nodes (not in ``exclude``) hold
        now (:meth:`RayBackend.room`); None: no bound (this process holds any number)."""
        return None

    def placed(self, actor: Actor) -> bool:
        """Whether a started worker has a process (its node chose it), up or starting."""
        return True

    def request(self, bundles: list[dict[str, float]]) -> None:
        """Tell the cluster's autoscaler the resources wanted (:meth:`RayBackend.request`);
        nothing here."""
        return None

    @abc.abstractmethod
    def get(self, ref: Any) -> Any:
        """The result of a call; :class:`WorkerDied` or :class:`WorkerRaised` if there is none."""

    def get_all(self, refs: Sequence[Any]) -> list[Any]:
        return [self.get(ref) for ref in refs]

    @abc.abstractmethod
    def wait(
        self, refs: Sequence[Any], num_returns: int = 1, timeout: float | None = None
    ) -> tuple[list[Any], list[Any]]:
        """The refs whose calls are done (at least ``num_returns``, unless ``timeout``
        passes first) and the others, each in the order given."""

    @abc.abstractmethod
    def put(self, value: Any) -> Any:
        """Store ``value`` once for many calls; a call given the reference receives the value."""

    @abc.abstractmethod
    def kill(self, actor: Actor | None) -> None:
        """End a worker at once (nothing if it is gone already)."""

    def kill_all(self, actors: Sequence[Actor | None]) -> None:
        """End these workers; returns once what they held is free for the next ones."""
        for actor in actors:
            self.kill(actor)


# ----------------------------------------------------------------------- Ray


class RayBackend(Backend):
    """Each worker is a Ray actor (Ray must be started: :func:`fleetrl.distributed.runtime.start_ray`)."""

    name = "ray"
    remote = True

    def __init__(self) -> None:
        self._classes: dict[tuple[type, Any], Any] = {}

    def __reduce__(self) -> Any:  # travels to workers as a fresh, empty backend
        return (RayBackend, ())

    def _remote_class(self, cls: type, groups: Any) -> Any:
        """The Ray actor class, made once per class (Ray exports a class once per definition)."""
        key = (cls, groups)
        if key not in self._classes:
            import ray

            self._classes[key] = _RAY_CLASSES.setdefault(
                key,
                ray.remote(concurrency_groups=dict(groups))(cls) if groups else ray.remote(cls),
            )
        return self._classes[key]

    def start(
        self, cls: type, *args: Any, options: dict[str, Any] | None = None, **kwargs: Any
    ) -> Actor:
        options = dict(options or {})
        groups = options.pop("concurrency_groups", None)
        groups = tuple(sorted(groups.items())) if groups else None
        options.setdefault("max_restarts", 0)  # a death is the caller's to handle
        options.setdefault("max_task_retries", 0)
        held = _held(options)
        key = warm.WarmPool.key(cls, groups, options) if warm.POOL.enabled else None
        if key is None:
            if warm.POOL.enabled:  # a worker never kept still needs room the idle ones hold
                warm.POOL.end(warm.POOL.make_room(None, held))
            handle = self._remote_class(cls, groups).options(**options).remote(*args, **kwargs)
            return Actor(self, handle, held=held)
        host = warm.POOL.take(key, cls, args, kwargs)
        if host is None:
            # Ray starts the new worker as soon as they are gone: no wait here
            warm.POOL.end(warm.POOL.make_room(key, held))
            warm.POOL.started += 1
            warm.POOL.started_by[cls.__name__] = warm.POOL.started_by.get(cls.__name__, 0) + 1
            host = warm.host_class().options(**options).remote(cls, *args, **kwargs)
        warm.POOL.started_one(host, held)
        return Actor(self, warm.Hosted(host, cls), held=held, warm_key=key)

    def call(self, actor: Actor, method: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        return getattr(actor.handle, method).remote(*args, **kwargs)

    def hosts(
        self, options: dict[str, Any], exclude: Sequence[str] = ()
    ) -> tuple[dict[str, float], list[str], list[str]]:
        """Where a worker of these Ray options could run now: what it asks for (``CPU``,
        ``GPU`` and custom resources), the live nodes (not in ``exclude``) with that much
        free, and the nodes Ray counts as dead."""
        import ray

        demand = demand_of(options)
        free = _free_per_node()
        fit = [
            node
            for node, have in free.items()
            if node not in exclude and all(have.get(k, 0.0) >= v for k, v in demand.items())
        ]
        dead = [node["NodeID"] for node in ray.nodes() if not node["Alive"]]
        return demand, fit, dead

    def room(self, options: dict[str, Any], exclude: Sequence[str] = ()) -> int | None:
        """How many more workers of these Ray options fit in the live nodes' free resources
        (not those in ``exclude``); None where a worker holds nothing once placed (no CPU
        asked for, or in a placement group): no bound."""
        demand = _held(options)  # what each worker holds once placed
        if not demand:
            return None
        return sum(
            min(int(have.get(k, 0.0) / v + 1e-9) for k, v in demand.items())
            for node, have in _free_per_node().items()
            if node not in exclude
        )

    def placed(self, actor: Actor) -> bool:
        """Whether Ray gave the worker a process (Ray's actor table holds its pid once its
        node leased one; a worker waiting for resources has none)."""
        from ray._private import state

        handle = warm.ray_handle(actor.handle)
        try:
            return bool(state.actors(handle._actor_id.hex()).get("Pid"))
        except Exception:  # gone from the table, or Ray's state unreadable: not known placed
            return False

    def request(self, bundles: list[dict[str, float]]) -> None:
        """Ask Ray's autoscaler for room for these bundles (``request_resources``: a cloud or
        KubeRay cluster grows to hold them, on top of what runs); an empty list withdraws
        the request. The request is the cluster's, one at a time: the last one holds."""
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=bundles)

    def get(self, ref: Any) -> Any:
        import ray
        from ray.exceptions import (
            ActorUnavailableError,
            NodeDiedError,
            ObjectLostError,
            RayActorError,
            RayTaskError,
        )

        try:
            return ray.get(ref)
        except RayTaskError as err:
            raise WorkerRaised(getattr(err, "cause", None), remote_traceback(err)) from None
        except RayActorError as err:
            # unavailable: its process cannot be reached (a lost node answers so within
            # seconds, long before Ray's health checks declare the node dead)
            lost = isinstance(err, ActorUnavailableError)
            raise WorkerDied(remote_traceback(err), node_lost=lost) from None
        except (ObjectLostError, NodeDiedError) as err:
            # a finished result lost with its node's object store: an actor's results are
            # never rebuilt by Ray (no retries), so the work is the worker's to do again; its
            # actor went with the node, or is killed by the replacement
            cause = f"its result was lost: {type(err).__name__}: {err}"
            raise WorkerDied(cause, node_lost=True) from None

    def wait(
        self, refs: Sequence[Any], num_returns: int = 1, timeout: float | None = None
    ) -> tuple[list[Any], list[Any]]:
        import ray

        refs = list(refs)
        want = min(num_returns, len(refs))
        if not want:
            return [], refs
        ready, rest = ray.wait(refs, num_returns=want, timeout=timeout)
        if not ready or want == len(refs):
            return ready, rest
        # ray.wait picks its num_returns among the refs done by now in no set order; a caller
        # served out of issue order (a learner slower than its workers) would see lags hang
        # on the draw. Of the done ones, the first given are returned, as documented.
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        if len(done) == len(ready):
            return ready, rest
        order = {ref: i for i, ref in enumerate(refs)}
        chosen = set(sorted(done, key=order.__getitem__)[: len(ready)])
        return [r for r in refs if r in chosen], [r for r in refs if r not in chosen]

    def put(self, value: Any) -> Any:
        import ray

        return ray.put(value)

    def kill(self, actor: Actor | None) -> None:
        if actor is None:
            return
        if actor.warm_key is not None:
            warm.POOL.ended(warm.ray_handle(actor.handle))
        import ray

        with contextlib.suppress(Exception):  # already gone, or Ray shut down
            ray.kill(warm.ray_handle(actor.handle))

    def kill_all(self, actors: Sequence[Actor | None]) -> None:
        """``ray.kill`` only starts an actor's end: an actor started right after would find
        the CPUs (and GPU shares) still held, and Ray would warn that they are taken. So this
        waits, within :data:`RELEASE_WAIT_S`, until the cluster's free resources have grown
        by what the killed actors held (capped at its total); Ray frees them once an actor's
        process is gone, and its view follows within the next report (about 100 ms).

        With warm workers on (:func:`warm_workers`), a worker started while they were on is
        not killed: its process drops it and is kept for the next worker of its kind."""
        live = [a for a in actors if a is not None]
        if warm.POOL.enabled:
            for actor in [a for a in live if a.warm_key is not None]:
                warm.POOL.keep(actor.warm_key, warm.ray_handle(actor.handle), actor.held)
                live.remove(actor)
        self._kill_and_wait(live)

    def end_kept(self, kept: Sequence[Any]) -> None:
        """End kept processes (:mod:`fleetrl.distributed.warm`), waiting for what they held."""
        self._kill_and_wait([Actor(self, k.handle, held=k.held) for k in kept])

    def _kill_and_wait(self, live: list[Actor]) -> None:
        from fleetrl.distributed.runtime import ray_running

        held: dict[str, float] = {}
        for actor in live:
            for key, value in actor.held.items():
                held[key] = held.get(key, 0.0) + value
        if not held or not ray_running():
            super().kill_all(live)
            return
        import ray
        from ray.util import get_current_placement_group

        if get_current_placement_group() is not None:  # its bundles keep what actors free
            super().kill_all(live)
            return

        free, total = ray.available_resources(), ray.cluster_resources()
        want = {k: min(free.get(k, 0.0) + v, total.get(k, 0.0)) for k, v in held.items()}
        super().kill_all(live)
        deadline = time.monotonic() + RELEASE_WAIT_S
        while time.monotonic() < deadline:
            now = ray.available_resources()
            if all(now.get(k, 0.0) >= v - 1e-9 for k, v in want.items()):
                return
            time.sleep(0.02)
        logger.warning(RELEASE_LATE, len(live), RELEASE_WAIT_S, held)


def on_driver_node(backend: Backend, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` that keep a Ray actor on this process's node, where a lost node cannot
    take it (the run ends with its driver anyway): the actors the driver's own state lives in
    (a replay buffer, a weights board). Unchanged in process."""
    if not backend.remote:
        return options
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from fleetrl.distributed.runtime import node_id

    return {**options, "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id(), soft=False)}


def demand_of(options: dict[str, Any]) -> dict[str, float]:
    """What a Ray actor of these options needs free on a node to be placed: its CPUs (1 by
    default, as Ray asks to place an actor), GPUs and custom resources."""
    demand = {
        "CPU": float(options.get("num_cpus", 1)),
        "GPU": float(options.get("num_gpus", 0) or 0),
        **{k: float(v) for k, v in (options.get("resources") or {}).items()},
    }
    return {k: v for k, v in demand.items() if v > 0}


def _free_per_node() -> dict[str, dict[str, float]]:
    """Each live node's free resources, by node id (Ray's view, refreshed every 100 ms or so)."""
    from ray._private import state

    return state.available_resources_per_node()


def _held(options: dict[str, Any]) -> dict[str, float]:
    """What an actor started with Ray ``options`` holds while it lives: its CPUs, GPUs and
    custom resources, nothing inside a placement group (the bundle keeps them), and no CPU
    where none was asked for (Ray's actors hold 0 CPUs by default once scheduled)."""
    if {"scheduling_strategy", "placement_group"} & options.keys():
        return {}
    held = {"CPU": options.get("num_cpus") or 0.0, "GPU": options.get("num_gpus") or 0.0}
    held.update(options.get("resources") or {})
    return {k: float(v) for k, v in held.items() if v}


#: (class, concurrency groups) -> its Ray actor class, per process
_RAY_CLASSES: dict[tuple[type, Any], Any] = {}


# ----------------------------------------------------------------- in process


class _Call:
    """A call issued in process: run when its result is first asked for."""

    __slots__ = ("actor", "args", "done", "error", "kwargs", "method", "value")

    def __init__(self, actor: _LocalWorker, method: str, args: tuple, kwargs: dict[str, Any]):
        self.actor, self.method, self.args, self.kwargs = actor, method, args, kwargs
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None


class _Stored:
    """What :meth:`InProcessBackend.put` returns: a call given it receives the value."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class _LocalWorker:
    """An in-process worker: its object (None once dead) and the calls it has queued."""

    def __init__(self, obj: Any, death: str | None = None):
        self.obj = obj
        self.death = death  # why it died (None: alive)
        self.queue: list[_Call] = []


class InProcessBackend(Backend):
    """Each worker is an object in this process, run serially (see the module docstring)."""

    name = "inprocess"

    def start(
        self, cls: type, *args: Any, options: dict[str, Any] | None = None, **kwargs: Any
    ) -> Actor:
        import torch

        args, kwargs = copy.deepcopy((_resolve(args), _resolve(kwargs)))  # Ray pickles them
        threads = torch.get_num_threads()  # a worker pins its process's threads: not ours
        try:
            worker = _LocalWorker(cls(*args, **kwargs))
        except SimulatedDeath as err:
            worker = _LocalWorker(None, f"the worker died while starting: {err}")
        except Exception as err:  # Ray reports a constructor that raised as a dead actor
            worker = _LocalWorker(None, _text(err))
        finally:
            torch.set_num_threads(threads)
        return Actor(self, worker)

    def call(self, actor: Actor, method: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        call = _Call(actor.handle, method, args, kwargs)
        actor.handle.queue.append(call)
        return call

    def fire(self, actor: Actor, method: str, args: tuple, kwargs: dict[str, Any]) -> None:
        worker = actor.handle
        if worker.death is None:  # a signal to a dead worker is lost, as on Ray
            self._run(_Call(worker, method, args, kwargs))

    def _run(self, call: _Call) -> None:
        import torch

        worker = call.actor
        call.done = True
        if worker.death is not None:
            call.error = WorkerDied(worker.death)
            return
        threads = torch.get_num_threads()
        try:
            call.value = getattr(worker.obj, call.method)(
                *_resolve(call.args), **_resolve(call.kwargs)
            )
        except SimulatedDeath as err:
            worker.obj, worker.death = None, f"the worker died: {err}"
            call.error = WorkerDied(worker.death)
        except Exception as err:
            call.error = WorkerRaised(err, _text(err))
        finally:
            torch.set_num_threads(threads)

    def _complete(self, call: _Call) -> None:
        """Run ``call`` and the calls queued before it on its worker, in order."""
        queue = call.actor.queue
        while not call.done:
            first = queue.pop(0)
            self._run(first)

    def get(self, ref: Any) -> Any:
        if isinstance(ref, _Stored):
            return ref.value
        self._complete(ref)
        if ref.error is not None:
            raise ref.error
        return ref.value

    def wait(
        self, refs: Sequence[Any], num_returns: int = 1, timeout: float | None = None
    ) -> tuple[list[Any], list[Any]]:
        """Runs calls, in the order given, until ``num_returns`` are done (serially there is
        nothing to wait for: ``timeout`` does not apply); returns ``num_returns`` of them, as
        ``ray.wait`` does, even where more were done already (e.g. by ``pause()``)."""
        refs = list(refs)
        wanted = min(num_returns, len(refs))
        for ref in refs:
            if sum(r.done for r in refs) >= wanted:
                break
            self._complete(ref)
        ready = [r for r in refs if r.done][:wanted]
        return ready, [r for r in refs if r not in ready]

    def put(self, value: Any) -> Any:
        return _Stored(value)

    def kill(self, actor: Actor | None) -> None:
        if actor is None:
            return
        worker = actor.handle
        if worker.death is None:
            worker.obj, worker.death = None, "the worker was killed"
        for call in worker.queue:
            call.done, call.error = True, WorkerDied(worker.death)
        worker.queue.clear()


def _resolve(value: Any) -> Any:
    """Arguments as a Ray call receives them: a stored object given directly is its value."""
    if isinstance(value, _Stored):
        return value.value
    if isinstance(value, tuple):
        return tuple(v.value if isinstance(v, _Stored) else v for v in value)
    if isinstance(value, dict):
        return {k: v.value if isinstance(v, _Stored) else v for k, v in value.items()}
    return value


def _text(err: BaseException) -> str:
    return "Traceback (most recent call last, in the worker):\n" + "".join(
        traceback.format_exception(type(err), err, err.__traceback__)[1:]
    )


def warm_workers(enabled: bool | None = None) -> bool:
    """Keep the processes of Ray workers that end normally, and build the next worker with
    the same Ray options, of any class, in one of them (:mod:`fleetrl.distributed.warm`: what a kept
    process gives back first, what it holds while idle, and which workers are never kept). For a driver that starts workers again
    and again: a notebook, a test suite. Applies to workers started from now on; returns
    the previous setting (the current one when called without an argument). Turning it off
    ends the idle processes, and returns once what they held is free.

    Examples:
        >>> previous = warm_workers(True)
        >>> warm_workers()
        True
        >>> _ = warm_workers(previous)  # as it was
    """
    previous = warm.POOL.enabled
    if enabled is None:
        return previous
    warm.POOL.enabled = bool(enabled)
    if not enabled:
        end_idle_workers()
    return previous


def end_idle_workers() -> None:
    """End the idle warm workers' processes (:func:`warm_workers` stays as it is); returns
    once what they held is free. For work that reserves the cluster's resources other than
    through :meth:`RayBackend.start`, which would otherwise wait for them: Ray Tune's
    placement groups (:func:`fleetrl.tune` calls it), another library's actors."""
    RayBackend().end_kept(warm.POOL.drain())


def make_backend(backend: str | Backend) -> Backend:
    """A backend by name (``"ray"`` or ``"inprocess"``), or the one given.

    Examples:
        >>> make_backend("inprocess").name
        'inprocess'
    """
    if isinstance(backend, Backend):
        return backend
    if backend == "ray":
        return RayBackend()
    if backend == "inprocess":
        return InProcessBackend()
    raise ValueError(
        f"backend={backend!r} is invalid: must be one of {list(BACKENDS)} or a Backend"
    )

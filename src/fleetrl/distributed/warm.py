"""Warm workers: Ray actor processes kept after their worker ends, for the next one.

Starting a Ray actor costs a new Python process that imports torch, tensordict and
torchrl: about 4.5 s of CPU on this project's 2-core machine, where building the worker
itself takes milliseconds. A driver that starts workers again and again (a notebook, a
test suite, evaluation between runs) pays it every time. With warm workers on
(:func:`fleetrl.distributed.backends.warm_workers`), :class:`~fleetrl.distributed.backends.RayBackend` starts each
worker that can be kept in a host process (:func:`host_class`) and does not kill it when it
ends normally (``kill_all``, what every shutdown calls): it asks the process to drop the
worker and return to the state it started in, and keeps it. The next worker started with
the same Ray options, of any class (a collector's worker after a gradient worker), is
built in that process, in milliseconds. Its handle (:class:`Hosted`) is called as the
worker's own Ray handle would be: ``handle.method.remote(...)``.

What a reused process gives back before it is reused, or else it is killed:

- the worker's ``shutdown()`` or ``close()`` ran and the object is gone;
- no child process, no new thread, no ``torch.distributed`` group is left;
- the environment variables, torch's thread count and torch's default random generator are
  those the process started with (a fresh process's torch generator has a fixed seed).

What is not given back, as within any long-lived process: imported modules, ids registered
with gymnasium, compiled graphs. A worker killed (a death, ``Backend.kill``) is never kept.
Warm workers hold the resources they were started with while idle (Ray's resources belong
to the actor), so a start that finds none of its kind first ends the idle ones that hold
resources, and :func:`idle_held` tells resource checks what idle workers hold. Off by
default. Never kept: workers in placement groups, named ones, ones Ray restarts (a restart
would rebuild the process's first worker, not its last), and classes whose methods run in
concurrency groups other than :data:`HOST_GROUPS`.

Examples:
    >>> class Doubler:
    ...     def double(self, x):
    ...         return 2 * x
    >>> WarmPool.key(Doubler, None, {"num_cpus": 1}) is not None  # kept when it ends
    True
    >>> WarmPool.key(Doubler, None, {"num_cpus": 1}) == WarmPool.key(dict, None, {"num_cpus": 1})
    True
    >>> WarmPool.key(Doubler, None, {"name": "board"}) is None  # a named actor: never
    True
    >>> WarmPool.key(Doubler, None, {"max_restarts": -1}) is None  # Ray restarts it: never
    True
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["HOST_GROUPS", "POOL", "Hosted", "WarmPool", "host_class", "idle_held"]

#: how long a start waits for an ended worker's process to finish dropping it
RETURN_WAIT_S = 2.0
#: Ray options under which a process is never kept: it is bound to a bundle or a name (a
#: ``runtime_env`` is part of the kind: only a process started with the same one is reused)
NOT_KEPT = ("placement_group", "scheduling_strategy", "name", "lifetime")
#: the concurrency groups every host process defines: a worker whose methods run in these
#: (or in none) can be built in any host (fleetrl's collectors answer ``preempt`` in
#: ``control`` beside a rollout)
HOST_GROUPS = {"control": 1}


# ------------------------------------------------------------------ in the worker


class _Baseline:
    """What a worker process looked like before its first worker was built."""

    def __init__(self) -> None:
        import torch

        self.environ = dict(os.environ)
        self.threads = torch.get_num_threads()
        self.seed = torch.initial_seed()
        self.thread_ids = {t.ident for t in threading.enumerate()}

    def restore(self) -> None:
        import torch

        os.environ.clear()
        os.environ.update(self.environ)
        torch.set_num_threads(self.threads)
        torch.manual_seed(self.seed)

    def leftovers(self) -> list[str]:
        """What the dropped worker left running: child processes, threads, a process group."""
        import multiprocessing

        import torch.distributed as dist

        left = [f"child process {p.pid}" for p in multiprocessing.active_children()]
        left += [
            f"thread {t.name!r}"
            for t in threading.enumerate()
            # "Dummy-N": a thread started outside Python (Ray's own) that called into it
            if t.ident not in self.thread_ids and not t.name.startswith("Dummy-")
        ]
        if dist.is_available() and dist.is_initialized():
            left.append("a torch.distributed process group")
        return left


#: this process's baseline, taken before its first worker (one actor per process)
_BASELINE: _Baseline | None = None


class WarmHost:
    """A kept process's worker: it builds a worker of any class in its process, calls its
    methods for the handle (:class:`Hosted`), and drops it when it ends. Its Ray class is
    :func:`host_class`'s."""

    # the arguments travel as the worker's own would, at the top level of the call, where
    # Ray resolves object references (nested in a tuple, they would arrive as references)
    def __init__(self, fleetrl_cls: type, /, *args: Any, **kwargs: Any) -> None:
        global _BASELINE
        if _BASELINE is None:
            _BASELINE = _Baseline()
        self._worker = fleetrl_cls(*args, **kwargs)

    def fleetrl_rebuild(self, fleetrl_cls: type, /, *args: Any, **kwargs: Any) -> bool:
        """Build the next worker in this process."""
        assert _BASELINE is not None
        _BASELINE.restore()
        self._worker = fleetrl_cls(*args, **kwargs)
        return True

    def fleetrl_call(self, fleetrl_method: str, /, *args: Any, **kwargs: Any) -> Any:
        """``worker.method(*args, **kwargs)``: the handle's calls of the default group."""
        return getattr(self._worker, fleetrl_method)(*args, **kwargs)

    def fleetrl_release(self) -> list[str]:
        """Drop this worker; returns what it left behind (empty: the process can be reused)."""
        worker = self.__dict__.pop("_worker", None)
        for name in ("shutdown", "close"):
            end = getattr(worker, name, None)
            if callable(end):
                end()
                break
        del worker
        gc.collect()
        assert _BASELINE is not None
        return _BASELINE.leftovers()


_HOST_CLASS: Any = None


def host_class() -> Any:
    """The Ray actor class of kept processes, made once (Ray exports a class once): a
    :class:`WarmHost` with :data:`HOST_GROUPS` and ``fleetrl_call_control``, the calls of
    methods that run in the ``control`` group."""
    global _HOST_CLASS
    if _HOST_CLASS is None:
        import ray

        def fleetrl_call_control(self, fleetrl_method: str, /, *args: Any, **kwargs: Any) -> Any:
            return getattr(self._worker, fleetrl_method)(*args, **kwargs)

        body = {
            "__module__": __name__,
            "fleetrl_call_control": ray.method(concurrency_group="control")(fleetrl_call_control),
        }
        cls = type("WarmHost", (WarmHost,), body)
        _HOST_CLASS = ray.remote(concurrency_groups=dict(HOST_GROUPS))(cls)
    return _HOST_CLASS


@functools.cache
def _groups_of(cls: type) -> frozenset[str]:
    """The concurrency groups ``cls``'s methods run in (``ray.method``'s mark)."""
    return frozenset(
        group
        for name in dir(cls)
        if (group := getattr(getattr(cls, name, None), "__ray_concurrency_group__", None))
    )


class _Method:
    """``handle.method`` of a hosted worker: ``.remote(...)`` calls it in its host."""

    __slots__ = ("name", "via")

    def __init__(self, via: Any, name: str) -> None:
        self.via, self.name = via, name

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self.via.remote(self.name, *args, **kwargs)

    def options(self, **options: Any) -> _Method:
        return _Method(self.via.options(**options), self.name)


class Hosted:
    """The handle of a worker built in a host process: its methods are called as on the
    worker's own Ray handle (``handle.method.remote(...)``); ``actor_handle`` is the host's
    Ray handle (what ``ray.kill`` takes)."""

    __slots__ = ("actor_handle", "cls")

    def __init__(self, actor_handle: Any, cls: type) -> None:
        self.actor_handle, self.cls = actor_handle, cls

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("__") or name in Hosted.__slots__:
            raise AttributeError(name)
        method = getattr(self.cls, name)  # AttributeError, as Ray's handle raises
        group = getattr(method, "__ray_concurrency_group__", None)
        via = "fleetrl_call_control" if group == "control" else "fleetrl_call"
        return _Method(getattr(self.actor_handle, via), name)

    def __reduce__(self) -> Any:
        return (Hosted, (self.actor_handle, self.cls))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Hosted) and other.actor_handle == self.actor_handle

    def __hash__(self) -> int:
        return hash(self.actor_handle)

    def __repr__(self) -> str:
        return f"Hosted({self.cls.__name__}, {self.actor_handle!r})"


def ray_handle(handle: Any) -> Any:
    """The Ray actor handle behind ``handle`` (a :class:`Hosted` worker's host's)."""
    return handle.actor_handle if isinstance(handle, Hosted) else handle


# ------------------------------------------------------------------ in the driver


@dataclass(eq=False)
class _Kept:
    handle: Any
    held: dict[str, float]
    released: Any = None  # the reference to the fleetrl_release call


@dataclass
class WarmPool:
    """The processes kept in this driver, by their Ray options (:meth:`key`)."""

    enabled: bool = False
    idle: dict[Any, list[_Kept]] = field(default_factory=dict)
    #: what this driver's running workers of kinds that are kept hold, by actor handle
    live: dict[Any, dict[str, float]] = field(default_factory=dict)
    job: Any = None
    #: workers started in a new process that can be kept, and workers built in a kept one
    started: int = 0
    reused: int = 0
    #: workers built in a kept process, and workers that started a new one, by class name
    reused_by: dict[str, int] = field(default_factory=dict)
    started_by: dict[str, int] = field(default_factory=dict)
    #: kept processes ended to make room for a worker of another kind
    evicted: int = 0
    #: why kept processes were ended instead of reused, and how often
    refused: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def key(cls: type, groups: Any, options: dict[str, Any]) -> Any | None:
        """The pool key of a start (its Ray options: any class that can be hosted shares
        it), or None where such a worker is never kept."""
        if NOT_KEPT_KEYS & options.keys() or options.get("max_restarts") not in (None, 0):
            return None
        if not (
            dict(groups or ()).items() <= HOST_GROUPS.items()
            and _groups_of(cls) <= HOST_GROUPS.keys()
        ):
            return None  # a concurrency group (or a size of one) the hosts do not define
        canonical = [(k, _number(v)) for k, v in sorted(options.items())]  # 1 and 1.0 alike
        return repr(canonical)

    def _current(self) -> None:
        """Forget processes of a Ray instance that is gone (a new ``ray.init``)."""
        import ray

        job = ray.get_runtime_context().get_job_id() if ray.is_initialized() else None
        if job != self.job:
            self.idle.clear()
            self.live.clear()
            self.job = job
            _refresh_held(self)

    def take(self, key: Any, cls: type, args: tuple, kwargs: dict[str, Any]) -> Any | None:
        """A kept process of ``key`` (the one kept last first) with the next worker, of
        ``cls``, built in it, or None."""
        import ray

        self._current()
        kept = self.idle.get(key, [])
        while kept:
            one = kept.pop()
            _refresh_held(self)
            ready, _ = ray.wait([one.released], timeout=RETURN_WAIT_S)
            if not ready:  # still busy with what it was given before: not worth the wait
                self._count("busy")
                self.end([one])
                continue
            try:
                left = ray.get(one.released)
                if left:
                    raise RuntimeError(f"left {', '.join(left)}")
                ray.get(one.handle.fleetrl_rebuild.remote(cls, *args, **kwargs))
            except Exception as err:  # a dead or unclean process, or a constructor that raised
                reason = _reason(err)
                self._count(reason)
                logger.debug("a kept worker is not reused: %s", reason)
                self.end([one])
                continue
            self.reused += 1
            self.reused_by[cls.__name__] = self.reused_by.get(cls.__name__, 0) + 1
            return one.handle
        return None

    def keep(self, key: Any, handle: Any, held: dict[str, float]) -> None:
        """Keep an ended worker's process: it drops the worker now, in the background."""
        self._current()
        self.ended(handle)
        self.idle.setdefault(key, []).append(_Kept(handle, held, handle.fleetrl_release.remote()))
        _refresh_held(self)

    def prune(self) -> None:
        """End the kept processes that finished dropping their worker and cannot be reused
        (dead: a worker killed just before its shutdown; or left unclean), so that what
        they are counted as holding is what Ray sees held."""
        import ray

        self._current()
        kept = [k for group in self.idle.values() for k in group]
        if not kept or not ray.is_initialized():
            return
        refs = [k.released for k in kept]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        done = {r.hex() for r in ready}
        bad = []
        for k in kept:
            if k.released.hex() not in done:
                continue
            try:
                left = ray.get(k.released)
            except Exception as err:  # died, or its worker's shutdown raised
                self._count(_reason(err))
                bad.append(k)
                continue
            if left:
                self._count(f"left {', '.join(left)}")
                bad.append(k)
        if bad:
            self.end(bad)

    def _count(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1

    def make_room(self, key: Any, need: dict[str, float]) -> list[_Kept]:
        """The kept processes of other kinds to end so that a new worker that holds ``need``
        can start (oldest first; none where the cluster has room). What is free is read
        twice and the lower figure taken: Ray's free resources (which follow a start or an
        end within its next report) and the cluster's total less what this driver's live
        workers and kept processes hold (exact, but blind to other drivers' actors)."""
        import ray

        self.prune()
        if not need:
            return []
        total, ray_free = ray.cluster_resources(), ray.available_resources()
        ours = dict(_IDLE_HELD)
        for held in self.live.values():
            for name, amount in held.items():
                ours[name] = ours.get(name, 0.0) + amount
        free = {
            name: min(ray_free.get(name, 0.0), total.get(name, 0.0) - ours.get(name, 0.0))
            for name in need
        }
        out: list[_Kept] = []
        for other, kept in self.idle.items():
            if other == key:
                continue
            for k in list(kept):
                short = [n for n, amount in need.items() if free[n] + 1e-9 < amount]
                if not short:
                    break
                if any(k.held.get(n, 0.0) > 0 for n in short):
                    kept.remove(k)
                    out.append(k)
                    self.evicted += 1
                    for name in free:
                        free[name] += k.held.get(name, 0.0)
        _refresh_held(self)
        return out

    def started_one(self, handle: Any, held: dict[str, float]) -> None:
        """A worker of a kind that is kept now runs (its resources count as this driver's)."""
        self.live[handle] = held

    def ended(self, handle: Any) -> None:
        """A worker counted by :meth:`started_one` is kept or killed."""
        self.live.pop(handle, None)

    def end(self, kept: list[_Kept]) -> None:
        """Kill kept processes (without waiting for their resources)."""
        import ray

        for k in list(kept):
            for group in self.idle.values():
                if k in group:
                    group.remove(k)
            with contextlib.suppress(Exception):  # already gone, or Ray shut down
                ray.kill(k.handle)
        _refresh_held(self)

    def drain(self) -> list[_Kept]:
        """Every kept process, taken out of the pool (the caller ends them)."""
        out = [k for kept in self.idle.values() for k in kept]
        self.idle.clear()
        _refresh_held(self)
        return out


NOT_KEPT_KEYS = frozenset(NOT_KEPT)


def _number(value: Any) -> Any:
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if is_number else value


def _reason(err: BaseException) -> str:
    """A short reason: the error's last line (Ray's own first line names the call only)."""
    lines = [line for line in str(err).splitlines() if line.strip()]
    return lines[-1][:200] if lines else type(err).__name__


#: this driver's pool
POOL = WarmPool()
_IDLE_HELD: dict[str, float] = {}


def _refresh_held(pool: WarmPool) -> None:
    _IDLE_HELD.clear()
    for kept in pool.idle.values():
        for k in kept:
            for name, amount in k.held.items():
                _IDLE_HELD[name] = _IDLE_HELD.get(name, 0.0) + amount


def idle_held() -> dict[str, float]:
    """The resources idle kept processes hold: a start that needs them ends those processes."""
    if POOL.idle:
        POOL.prune()
    return dict(_IDLE_HELD)

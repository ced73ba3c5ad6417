"""Warm workers: Ray actor processes kept after their worker ends, for the next one.

Starting a Ray actor costs a new Python process that imports torch, tensordict and
torchrl: about 4.5 s of CPU on this project's 2-core machine, where building the worker
itself takes milliseconds. A driver that starts collectors again and again (a notebook, a
test suite, evaluation between runs) pays it every time. With warm workers on
(:func:`fleetrl.backends.warm_workers`), :class:`~fleetrl.backends.RayBackend` does not kill a worker that
ends normally (``kill_all``, what every shutdown calls): it asks the process to drop the
worker and return to the state it started in, and keeps it. The next worker started with
the same class and the same Ray options is built in that process, in milliseconds.

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
default; workers in placement groups and named ones are never kept.

Examples:
    >>> class Doubler:
    ...     def double(self, x):
    ...         return 2 * x
    >>> cls = warm_class(Doubler)
    >>> cls.__name__, [c.__name__ for c in cls.__mro__[1:3]]
    ('WarmDoubler', ['WarmWorker', 'Doubler'])
    >>> WarmPool.key(Doubler, None, {"num_cpus": 1}) is not None  # kept when it ends
    True
    >>> WarmPool.key(Doubler, None, {"name": "board"}) is None  # a named actor: never
    True
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["POOL", "WarmPool", "WarmWorker", "idle_held", "warm_class"]

#: how long a start waits for an ended worker's process to finish dropping it
RETURN_WAIT_S = 2.0
#: Ray options under which a process is never kept: it is bound to a bundle or a name (a
#: ``runtime_env`` is part of the kind: only a process started with the same one is reused)
NOT_KEPT = ("placement_group", "scheduling_strategy", "name", "lifetime")


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


class WarmWorker:
    """The mixin of a kept worker's Ray class: ``type(name, (WarmWorker, cls), {})``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        global _BASELINE
        if _BASELINE is None:
            _BASELINE = _Baseline()
        super().__init__(*args, **kwargs)

    def fleetrl_rebuild(self, *args: Any, **kwargs: Any) -> bool:
        """Build the next worker in this process (arguments as the constructor's)."""
        assert _BASELINE is not None
        _BASELINE.restore()
        super().__init__(*args, **kwargs)
        return True

    def fleetrl_release(self) -> list[str]:
        """Drop this worker; returns what it left behind (empty: the process can be reused)."""
        for name in ("shutdown", "close"):
            end = getattr(self, name, None)
            if callable(end):
                end()
                break
        self.__dict__.clear()
        gc.collect()
        assert _BASELINE is not None
        return _BASELINE.leftovers()


def warm_class(cls: type) -> type:
    """``cls`` with :class:`WarmWorker`'s methods, under a name of its own."""
    return type(f"Warm{cls.__name__}", (WarmWorker, cls), {"__module__": __name__})


# ------------------------------------------------------------------ in the driver


@dataclass(eq=False)
class _Kept:
    handle: Any
    held: dict[str, float]
    released: Any = None  # the reference to the fleetrl_release call


@dataclass
class WarmPool:
    """The processes kept in this driver, by (class, concurrency groups, Ray options)."""

    enabled: bool = False
    idle: dict[Any, list[_Kept]] = field(default_factory=dict)
    #: what this driver's running workers of kinds that are kept hold, by actor handle
    live: dict[Any, dict[str, float]] = field(default_factory=dict)
    job: Any = None
    #: workers started in a new process that can be kept, and workers built in a kept one
    started: int = 0
    reused: int = 0
    #: workers built in a kept process, by class name
    reused_by: dict[str, int] = field(default_factory=dict)
    #: kept processes ended to make room for a worker of another kind
    evicted: int = 0
    #: why kept processes were ended instead of reused, and how often
    refused: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def key(cls: type, groups: Any, options: dict[str, Any]) -> Any | None:
        """The pool key of a start, or None where such a worker is never kept."""
        if NOT_KEPT_KEYS & options.keys():
            return None
        canonical = [(k, _number(v)) for k, v in sorted(options.items())]  # 1 and 1.0 alike
        return (cls, groups, repr(canonical))

    def _current(self) -> None:
        """Forget processes of a Ray instance that is gone (a new ``ray.init``)."""
        import ray

        job = ray.get_runtime_context().get_job_id() if ray.is_initialized() else None
        if job != self.job:
            self.idle.clear()
            self.live.clear()
            self.job = job
            _refresh_held(self)

    def take(self, key: Any, args: tuple, kwargs: dict[str, Any]) -> Any | None:
        """A kept process of ``key`` with the next worker built in it, or None."""
        import ray

        self._current()
        kept = self.idle.get(key, [])
        while kept:
            ready, _ = ray.wait([k.released for k in kept], num_returns=1, timeout=RETURN_WAIT_S)
            if not ready:  # still busy with what it was given before: not worth the wait
                self.refused["busy"] = self.refused.get("busy", 0) + len(kept)
                self.end(kept)
                break
            one = next(k for k in kept if k.released == ready[0])
            kept.remove(one)
            _refresh_held(self)
            try:
                left = ray.get(one.released)
                if left:
                    raise RuntimeError(f"left {', '.join(left)}")
                ray.get(one.handle.fleetrl_rebuild.remote(*args, **kwargs))
            except Exception as err:  # a dead or unclean process, or a constructor that raised
                reason = _reason(err)
                self.refused[reason] = self.refused.get(reason, 0) + 1
                logger.debug("a kept worker is not reused: %s", reason)
                self.end([one])
                continue
            self.reused += 1
            name = key[0].__name__
            self.reused_by[name] = self.reused_by.get(name, 0) + 1
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

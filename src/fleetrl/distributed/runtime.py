"""What every layer may use to run work elsewhere: starting Ray, reading a remote error,
the resources the cluster can give, and the thread count of a worker process.

The collectors and the learners both start Ray when they need it and nobody
started it yet (:func:`start_ray`), and both report an error raised in another
process with its traceback (:func:`remote_traceback`). Ray is imported when
first needed: ``import fleetrl.distributed.runtime`` loads neither Ray nor torch.

Examples:
    >>> remote_traceback(ValueError("\\x1b[31mbad\\x1b[0m value"))
    'Traceback (most recent call last, in the worker):\\nbad value'
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import threading
from dataclasses import dataclass
from typing import Any

__all__ = [
    "RayStart",
    "Shortfall",
    "human_bytes",
    "node_id",
    "physical_memory",
    "pin_threads",
    "ray_running",
    "remote_traceback",
    "resource_shortfalls",
    "resource_waits",
    "start_ray",
]

logger = logging.getLogger(__name__)


def physical_memory() -> int | None:
    """This machine's memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def human_bytes(n: float) -> str:
    """A size for people, in decimal units (as ``ls -h --si``).

    Examples:
        >>> human_bytes(512), human_bytes(14_600_000), human_bytes(56_448_000_000)
        ('512 B', '14.6 MB', '56.4 GB')
    """
    unit = "B"
    for bigger in ("kB", "MB", "GB", "TB"):
        if n < 1000:
            break
        n, unit = n / 1000, bigger
    return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def ray_running() -> bool:
    """Whether this process is connected to Ray (without importing Ray if nothing did)."""
    import sys

    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def start_ray(init_kwargs: dict[str, Any] | None = None) -> bool:
    """Use the Ray this process is connected to, or start (or attach to) one.

    ``init_kwargs`` are ``ray.init``'s arguments (``{"address": ...}`` attaches to a
    cluster); a local instance starts without its dashboard. Returns whether this
    call started or attached, so that its caller shuts down only what it started.
    A start in flight in the background (:class:`RayStart`) is waited for first.
    """
    if _IN_FLIGHT:
        _IN_FLIGHT[-1].wait()
    return _init(init_kwargs)


def _init(init_kwargs: dict[str, Any] | None) -> bool:
    import ray

    kwargs = dict(init_kwargs or {})
    if ray.is_initialized():
        if kwargs.get("address") or len(kwargs) > 1:
            logger.warning(
                "Ray is already initialized; ray.init arguments %r are not applied", kwargs
            )
        return False
    if not kwargs.get("address"):
        kwargs.pop("address", None)
        kwargs.setdefault("include_dashboard", False)
    ray.init(**kwargs)
    return True


class RayStart:
    """Start Ray in a background thread now, so that its processes come up while this
    process goes on (imports, checks, building networks); :meth:`wait` returns whether
    it started Ray. Any :func:`start_ray` meanwhile waits for it.

    Examples:
        >>> start = RayStart({"address": "local", "num_cpus": 1})  # doctest: +SKIP
        >>> start.wait()  # doctest: +SKIP
        True
    """

    def __init__(self, init_kwargs: dict[str, Any] | None = None):
        self.started = False
        self._error: BaseException | None = None
        #: a start already in flight (the CLI's): this one waits for it and starts nothing
        self._leader = _IN_FLIGHT[-1] if _IN_FLIGHT else None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._abandoned = False  # see abandon()
        self._thread = threading.Thread(target=self._run, args=(init_kwargs,), daemon=True)
        if self._leader is None:
            _IN_FLIGHT.append(self)
            self._thread.start()

    def _run(self, init_kwargs: dict[str, Any] | None) -> None:
        # Ray says once that a thread other than the main one sets no SIGTERM handler: the
        # trainer installs its own
        worker_log = logging.getLogger("ray._private.worker")
        level = worker_log.level
        worker_log.setLevel(logging.ERROR)
        # nor does a user need Ray's notice that the local instance it starts uses token
        # authentication, Ray's default (a cluster started without it is still warned of)
        auth_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
        auth_log.addFilter(_AUTH_ENABLED_NOTICE)
        try:
            self.started = _init(init_kwargs)
        except BaseException as err:  # raised again by wait(), in the caller's thread
            self._error = err
        finally:
            worker_log.setLevel(level)
            auth_log.removeFilter(_AUTH_ENABLED_NOTICE)
            with self._lock:
                self._done.set()
                abandoned = self._abandoned
        if abandoned:
            self._release()
            return
        if self.started:
            # Ray's processes die with the thread that started them (PR_SET_PDEATHSIG is
            # per thread on Linux): this one stays, parked, for the life of the process
            threading.Event().wait()

    def wait(self) -> bool:
        """Wait for the start; raises what it raised. Returns whether it started Ray."""
        if self._leader is not None:
            self._leader.wait()  # its caller owns the instance
            return False
        if self._thread.ident is not None:
            self._done.wait()
        if self._abandoned:  # nobody's: its error, if any, is nobody's either
            return False
        if self in _IN_FLIGHT:
            _IN_FLIGHT.remove(self)
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self.started

    def abandon(self) -> None:
        """The caller stopped before it needed Ray (a bad config): nothing waits for this
        start, and a Ray it started is shut down once it is up, by its own thread. The
        process does not exit before that (an exit in the middle of Ray's start would leave
        some of its processes behind): the caller reports its error first, then exits."""
        if self._leader is not None:
            return
        with self._lock:
            self._abandoned = True
            done = self._done.is_set()
        if done:
            self._release()
        else:
            atexit.register(self._thread.join, ABANDONED_START_S)

    def _release(self) -> None:
        if self.started:
            import ray

            ray.shutdown()
        if self in _IN_FLIGHT:
            _IN_FLIGHT.remove(self)


class _NoticeFilter(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


_AUTH_ENABLED_NOTICE = _NoticeFilter("Token authentication is enabled for this Ray cluster")

#: how long an exiting process waits for an abandoned Ray start to finish and shut down
ABANDONED_START_S = 120.0
#: background starts not yet waited for
_IN_FLIGHT: list[RayStart] = []


def remote_traceback(err: BaseException) -> str:
    """The remote error with its traceback, as plain text (Ray colours it for terminals)."""
    text = _ANSI.sub("", str(err))
    if not text.lstrip().startswith("Traceback"):
        text = "Traceback (most recent call last, in the worker):\n" + text
    return text


def pin_threads(num_threads: int | None) -> None:
    """Use ``num_threads`` torch threads in this process (None: torch's default): workers
    that share a machine's cores each take one unless told otherwise."""
    if num_threads is not None:
        import torch

        torch.set_num_threads(num_threads)


def node_id() -> str:
    """The Ray node this process runs on ("local" outside Ray)."""
    if not ray_running():
        return "local"
    import ray

    return ray.get_runtime_context().get_node_id()


@dataclass(frozen=True)
class Shortfall:
    """A resource request the running Ray cluster cannot meet.

    ``request`` is the index of a request that fits on no alive node (None: the
    requests together exceed the cluster's total of ``resource``).
    """

    request: int | None
    resource: str
    asked: float
    have: float


def _asked(requests: list[dict[str, float]]) -> dict[str, float]:
    """Each resource's total over ``requests`` (the ones asked for at all)."""
    asked: dict[str, float] = {}
    for request in requests:
        for name, amount in request.items():
            if amount:
                asked[name] = asked.get(name, 0) + amount
    return asked


def resource_waits(requests: list[dict[str, float]]) -> list[Shortfall]:
    """What the running Ray cluster has but holds for others now: a resource whose total
    ``requests`` ask for more of than is free (another job's actors), so new actors wait
    until it frees up. ``Shortfall.have`` is the amount free. Empty where Ray does not run,
    and inside a placement group (a sweep's trial): its bundles hold what its actors ask for.
    """
    if not ray_running():
        return []
    import ray
    from ray.util import get_current_placement_group

    if get_current_placement_group() is not None:
        return []

    from fleetrl.distributed.warm import idle_held

    free = ray.available_resources()
    for name, amount in idle_held().items():  # idle warm workers: a start ends them for room
        free[name] = free.get(name, 0.0) + amount
    asked = _asked(requests)
    return [
        Shortfall(None, name, amount, free.get(name, 0))
        for name, amount in asked.items()
        if amount > free.get(name, 0) + 1e-9
    ]


def resource_shortfalls(requests: list[dict[str, float]]) -> list[Shortfall]:
    """What the running Ray cluster can never give ``requests`` (one mapping of resource
    name to amount per worker): a worker no alive node can hold, and a total beyond the
    cluster's. Empty where Ray does not run (it is checked once it does).

    The one resource check of fleetrl: the config's check (in config keys) and
    RayCollector's (in its arguments' words) both say what it finds.
    """
    if not ray_running():
        return []
    import ray

    total = ray.cluster_resources()
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    found: list[Shortfall] = []
    for index, request in enumerate(requests):
        for name, amount in request.items():
            best = max((n.get(name, 0) for n in nodes), default=0)
            if amount and amount > best:
                found.append(Shortfall(index, name, amount, best))
    for name, amount in _asked(requests).items():
        if amount > total.get(name, 0):
            found.append(Shortfall(None, name, amount, total.get(name, 0)))
    return found

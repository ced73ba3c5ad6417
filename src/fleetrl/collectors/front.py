"""``fleetrl.Collector``: torchrl 0.14's front door, mapped to fleetrl's collectors.

torchrl 0.14 steers users to ``torchrl.collectors.Collector(create_env_fn,
policy, backend=..., num_collectors=..., sync=..., backend_options=..., ...)``,
which picks an implementation by ``backend``. :func:`Collector` takes the same
arguments with the same meaning and defaults, and changing the import is the
whole switch. Its docstring holds the table of backends and what fleetrl builds
for each (the API reference shows it).

Examples:
    >>> from fleetrl import Collector, SyncDataCollector
    >>> c = Collector("CartPole-v1", None, frames_per_batch=64, total_frames=128)
    >>> type(c).__name__, sum(b.numel() for b in c), c.stats()["completed"]
    ('SyncDataCollector', 128, True)
    >>> Collector("CartPole-v1", None, frames_per_batch=64, num_collectors=2)
    Traceback (most recent call last):
    ...
    fleetrl.errors.ConfigError: backend='process' is invalid: ...
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fleetrl.errors import Problems

__all__ = ["BACKEND_ALTERNATIVES", "Collector"]

#: torchrl's backends fleetrl does not implement, and what to use instead
BACKEND_ALTERNATIVES = {
    "process": (
        "torchrl's multiprocessing collectors (its default once num_collectors is given) are "
        "not part of fleetrl: pass backend='ray' for num_collectors collectors in their own "
        "processes (Ray actors, on this machine or a cluster), or leave num_collectors out for "
        "one collector in this process (backend='direct')"
    ),
    "rpc": "fleetrl runs remote collectors on Ray only: pass backend='ray'",
    "distributed": "fleetrl runs remote collectors on Ray only: pass backend='ray'",
    "submitit": (
        "fleetrl runs remote collectors on Ray only: start a Ray cluster on the nodes (ray "
        "start) and pass backend='ray'"
    ),
}
BACKENDS = ("direct", "ray", "inprocess")
DIRECT_SERVER_MSG = (
    "is central inference's, which serves remote collectors: use backend='ray' (or "
    "'inprocess'); backend='direct' runs its policy in this process"
)
#: keys torchrl keeps for the selector, never passed through ``backend_options``
RESERVED_OPTIONS = ("backend_options", "num_collectors", "num_workers", "sync")


def Collector(
    create_env_fn: Any = None,
    policy: Any = None,
    *,
    backend: str | None = None,
    backend_options: dict[str, Any] | None = None,
    num_collectors: int | None = None,
    sync: bool | None = None,
    **kwargs: Any,
) -> Any:
    """A :class:`~fleetrl.SyncDataCollector` or :class:`~fleetrl.RayCollector`, chosen by
    ``backend`` as torchrl 0.14's ``Collector`` chooses.

    torchrl 0.14's ``torchrl.collectors.Collector`` picks an implementation by
    ``backend``; this takes the same arguments with the same meaning and defaults, so
    changing the import is the whole switch:

    | ``backend`` | fleetrl builds |
    |---|---|
    | ``"direct"`` (torchrl's default without ``num_collectors``) | a :class:`~fleetrl.SyncDataCollector`: one collector in this process |
    | ``"ray"`` | a :class:`~fleetrl.RayCollector`: ``num_collectors`` Ray actors |
    | ``"inprocess"`` | a :class:`~fleetrl.RayCollector` with its workers as objects in this process (fleetrl's own: debugging, tests without Ray) |
    | ``"process"`` (torchrl's default once ``num_collectors`` is given) | nothing: refused, as fleetrl has no multiprocessing collectors; use ``backend="ray"`` |
    | ``"rpc"``, ``"distributed"``, ``"submitit"`` | nothing: refused; use ``backend="ray"``, on one machine or a Ray cluster |

    As in torchrl: ``sync`` defaults to ``False`` (first ready) for a remote backend and
    is refused for ``"direct"``; ``backend_options`` are more keyword arguments of the
    chosen class (not ``sync``, ``num_collectors``, ``num_workers``, nor a key given at
    the top level); ``"direct"`` takes one env constructor (a list of one is unwrapped)
    and ``num_collectors`` of at most 1. Every problem is said at once, as a
    :class:`~fleetrl.ConfigError`, before anything starts. What a torchrl user reads of
    the returned collector (``stats()``, ``update_policy_weights_``, iteration,
    ``shutdown``) is there.

    Args:
        create_env_fn: the env (a gymnasium id, a gymnasium or torchrl env, a callable
            returning one), or for a remote backend one per collector (a list).
        policy: the policy (a ``TensorDictModule``, any callable torchrl accepts, or None for
            random actions).
        backend: ``"direct"``, ``"ray"`` or ``"inprocess"`` (None: ``"direct"``, or
            ``"process"`` when ``num_collectors`` is given, as in torchrl, which fleetrl
            refuses with what to use).
        backend_options: more keyword arguments of the chosen collector.
        num_collectors: remote collectors (None: one per env constructor, else 1).
        sync: a remote backend's mode: stacked rounds (True) or first ready (False, the
            default).
        **kwargs: the collector's arguments (``frames_per_batch``, ``total_frames``, ...).

    Examples:
        >>> from fleetrl import Collector
        >>> collector = Collector("CartPole-v1", None, frames_per_batch=8, total_frames=16)
        >>> type(collector).__name__, [batch.numel() for batch in collector]
        ('SyncDataCollector', [8, 8])
        >>> collector.shutdown()
    """
    p = Problems()
    if (
        num_collectors is not None
        and (isinstance(num_collectors, bool) or not isinstance(num_collectors, int))
    ) or (num_collectors is not None and num_collectors < 1):
        p.add("num_collectors", num_collectors, "must be a positive int, or None")
    if sync is not None and not isinstance(sync, bool):
        p.add("sync", sync, "must be True, False or None")
    chosen = backend
    if chosen is None:
        chosen = "process" if num_collectors is not None else "direct"
    if isinstance(chosen, str):
        chosen = chosen.lower()
    if chosen in BACKEND_ALTERNATIVES:
        said = BACKEND_ALTERNATIVES[chosen]
        if backend is None:
            said = f"the default once num_collectors is given; {said}"
        p.add("backend", chosen, said)
    elif chosen not in BACKENDS:
        known = sorted({*BACKENDS, *BACKEND_ALTERNATIVES})
        p.add("backend", backend, f"must be one of {list(BACKENDS)} (torchrl's {known})")
    options = dict(backend_options or {})
    if backend_options is not None and not isinstance(backend_options, dict):
        p.add("backend_options", backend_options, "must be a dict of keyword arguments")
        options = {}
    reserved = sorted(set(RESERVED_OPTIONS) & set(options))
    duplicates = sorted(set(options) & {*kwargs, "create_env_fn", "policy"})
    if chosen == "direct" and options:
        p.add("backend_options", options, "are a remote backend's: pass them as arguments")
    elif reserved:
        p.add("backend_options", options, f"holds the selector's own keys {reserved}")
    elif duplicates:
        p.add("backend_options", options, f"repeats arguments given directly: {duplicates}")
    if chosen == "direct":
        # RayCollector's central-inference arguments (fleetrl.collectors.inference)
        from fleetrl.collectors.inference.options import INFERENCE_ARGUMENTS

        if _local(kwargs.get("inference")):  # the direct collector's only mode
            kwargs.pop("inference")
        for key in sorted(set(INFERENCE_ARGUMENTS) & set(kwargs)):
            p.add(key, kwargs[key], DIRECT_SERVER_MSG)
        if num_collectors not in (None, 1):
            p.add("num_collectors", num_collectors, "backend='direct' runs one collector")
        if sync is not None:
            p.add("sync", sync, "is a remote backend's mode: leave it out for backend='direct'")
        envs = _as_list(create_env_fn)
        if envs is not None and len(envs) != 1:
            p.add("create_env_fn", create_env_fn, "backend='direct' takes one env constructor")
        elif envs is not None:
            create_env_fn = envs[0]
    p.raise_if_any()
    if chosen == "direct":
        from fleetrl.collectors.local.sync import SyncDataCollector

        return SyncDataCollector(create_env_fn, policy, **kwargs)
    from fleetrl.collectors.remote.collector import RayCollector

    return RayCollector(
        create_env_fn,
        policy,
        num_collectors=num_collectors,
        sync=bool(sync),
        backend="ray" if chosen == "ray" else "inprocess",
        **kwargs,
        **options,
    )


def _local(inference: Any) -> bool:
    """``inference="local"``, or the default ``InferenceOptions`` (local inference)."""
    from fleetrl.collectors.inference.options import InferenceOptions

    if isinstance(inference, InferenceOptions):
        return inference == InferenceOptions()
    return isinstance(inference, str) and inference == "local"


def _as_list(create_env_fn: Any) -> list[Any] | None:
    if isinstance(create_env_fn, Sequence) and not isinstance(create_env_fn, (str, bytes)):
        return list(create_env_fn)
    return None

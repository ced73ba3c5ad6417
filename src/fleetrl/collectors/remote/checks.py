"""Checks of RayCollector arguments, all made before any actor starts.

Every problem is gathered and raised at once (:class:`~fleetrl.errors.ConfigError`),
naming the argument, the value and what is allowed. The checks that need the
cluster (:func:`check_resources`) ask Ray for its totals. The sizes become one
:class:`~fleetrl.collectors.rollout_options.RolloutOptions`, checked once against each
collector's env count where the arguments tell it (:func:`fleet_rollout`); a count first
known when a worker builds its envs is checked when the worker reports it
(:func:`check_env_counts`).
"""

from __future__ import annotations

import difflib
import inspect
import logging
from dataclasses import dataclass
from typing import Any

from torchrl.envs.utils import ExplorationType

from fleetrl.batch_sizes import batch_size_problems, is_unlimited
from fleetrl.collectors.arguments import check_weight_update
from fleetrl.collectors.base import as_exploration_type, check_common_arguments
from fleetrl.collectors.local.overlap import check_overlap_kwargs
from fleetrl.collectors.local.sync import SyncDataCollector
from fleetrl.collectors.rollout_options import RolloutOptions, given_rollout
from fleetrl.collectors.rules import MAX_RESTART_ATTEMPTS, MAX_SERVED_LAG, Audience
from fleetrl.distributed.backends import Backend, WorkerRaised
from fleetrl.distributed.runtime import resource_shortfalls, resource_waits
from fleetrl.errors import ConfigError, EnvError, FleetError, PolicyError, Problems, WorkerError

__all__ = [
    "MAX_RESTART_ATTEMPTS_ALLOWED",
    "MAX_SERVED_LAG_ALLOWED",
    "SET_BY_RAY",
    "RayArguments",
    "all_problems",
    "check_added_collectors",
    "check_arguments",
    "check_collector_kwargs",
    "check_env_counts",
    "check_resources",
    "check_weight_update",
    "env_counts",
    "fleet_rollout",
    "is_torchrl_collector_class",
    "per_collector_args",
    "probe_envs",
    "put_policy",
    "takes_env_list",
    "told_num_envs",
    "worker_failure",
]

logger = logging.getLogger(__name__)

COLLECTOR_CLASS_MSG = (
    "must be fleetrl.SyncDataCollector (or a subclass) or a torchrl collector class "
    "(torchrl.collectors.Collector, MultiSyncCollector, MultiAsyncCollector)"
)
WAIT_MSG = (
    "the {collectors} ask for {asked:g} {name} in all and {free:g} of the Ray "
    "cluster's are free: other actors hold the rest (another collector or run not shut down?); "
    "the collectors' actors wait until enough are free"
)
RESOURCES_MSG = (
    "the {count} collectors ask for {asked:g} {name} in all but the Ray cluster has {have:g}; "
    "lower the request per collector (e.g. remote_configs={{'num_cpus': 0.5}}), use fewer "
    "collectors, or add nodes"
)
NODE_RESOURCES_MSG = (
    "collector {index} asks for {asked:g} {name} but no Ray node has more than {have:g}; "
    "lower remote_configs[{index}]['{key}']"
)
SYNC_ENVS_MSG = (
    "sync=True stacks the collectors' batches, so every collector needs the same number of envs; "
    "got {counts}"
)

UNKNOWN_KWARG_MSG = (
    "{cls} takes no argument {key!r}{hint}; its arguments are listed in its signature "
    "(inspect.signature({cls}))"
)
SET_BY_RAY_MSG = (
    "is set by RayCollector itself; pass it to RayCollector(...) instead of collector_kwargs"
)
#: collector arguments RayCollector passes itself
SET_BY_RAY = frozenset({"create_env_fn", "policy", "frames_per_batch", "total_frames", "rollout"})
POLICY_PICKLE_MSG = (
    "policy={policy!r} cannot be pickled to reach the Ray workers ({err}); pass "
    "policy_factory=<a callable returning the policy> instead of policy=, so that each worker "
    "builds its own"
)
MAX_SERVED_LAG_ALLOWED = MAX_SERVED_LAG.says(Audience.ARGUMENTS)
MAX_RESTART_ATTEMPTS_ALLOWED = MAX_RESTART_ATTEMPTS.says(Audience.ARGUMENTS)


def default_remote_config() -> dict[str, Any]:
    """A fresh dict every call: callers may change theirs."""
    return {"num_cpus": 1}


@dataclass
class RayArguments:
    """The arguments, checked and expanded to one entry per collector."""

    rollout: RolloutOptions
    counts: list[int | None]
    policy: Any
    native: bool
    env_fns: list[Any]
    kwargs_list: list[dict[str, Any]]
    remotes: list[dict[str, Any]]
    devices: dict[str, list[Any]]
    exploration_type: ExplorationType
    init_random_frames: int


def check_arguments(
    *,
    create_env_fn: Any,
    policy: Any,
    frames_per_batch: Any,
    total_frames: Any,
    collector_class: Any,
    collector_kwargs: Any,
    num_workers_per_collector: Any,
    sync: bool,
    remote_configs: Any,
    num_collectors: Any,
    init_random_frames: Any,
    exploration_type: Any,
    postproc: Any,
    devices: dict[str, Any],
    max_frames_per_traj: Any = None,
    rollout: RolloutOptions | None = None,
    elastic: bool = False,
) -> RayArguments:
    """Check every argument but the fleet's options (:class:`~fleetrl.collectors.remote.fleet_options.FleetOptions`
    checks those when made); raise one ConfigError listing all problems.

    The sizes become one :class:`~fleetrl.collectors.rollout_options.RolloutOptions`
    (``rollout`` as given, or made from the keywords), checked once here with each
    collector's env count where the arguments tell it; a count first known when a worker
    builds its envs is checked by the driver when the worker reports it
    (:func:`check_env_counts`)."""
    p = Problems()
    env_fns, kwargs_list, remotes, count = per_collector_args(
        p, create_env_fn, collector_kwargs, remote_configs, num_collectors
    )
    p.positive_int("num_workers_per_collector", num_workers_per_collector)
    native = isinstance(collector_class, type) and issubclass(collector_class, SyncDataCollector)
    if not native and not is_torchrl_collector_class(collector_class):
        p.add("collector_class", collector_class, COLLECTOR_CLASS_MSG)
    else:
        check_collector_kwargs(p, collector_class, kwargs_list, SET_BY_RAY)
        if native:
            check_overlap_kwargs(p, env_fns, kwargs_list, num_workers_per_collector)
    counts = env_counts(p, env_fns, kwargs_list, num_workers_per_collector) if native else []
    sizes = fleet_rollout(
        p,
        rollout,
        counts,
        sync=sync,
        elastic=elastic,
        count=count,
        frames_per_batch=frames_per_batch,
        total_frames=total_frames,
        max_frames_per_traj=max_frames_per_traj,
    )
    exploration = as_exploration_type(exploration_type, p)
    acting = check_common_arguments(
        p, policy=policy, postproc=postproc, init_random_frames=init_random_frames
    )
    per_device = {name: per_collector(p, name, value, count) for name, value in devices.items()}
    p.raise_if_any()
    assert sizes is not None  # its problems were raised with the others
    return RayArguments(
        rollout=sizes,
        counts=counts,
        policy=acting,
        native=native,
        env_fns=env_fns,
        kwargs_list=kwargs_list,
        remotes=remotes,
        devices=per_device,
        exploration_type=exploration,
        init_random_frames=0 if init_random_frames in (None, -1) else init_random_frames,
    )


ROLLOUT_SPLIT_MSG = (
    "splits each batch over {split} collectors; these collectors need {want} (a sync "
    "fleet of a fixed size splits it over its collectors, any other takes whole batches)"
)
ROLLOUT_ENVS_MSG = (
    "is given twice: rollout=RolloutOptions(num_envs={n}) holds the envs per collector; "
    "leave it out here, or make them agree"
)


def env_counts(
    p: Problems, env_fns: list[Any], kwargs_list: list[dict[str, Any]], per_collector: Any
) -> list[int | None]:
    """Each native collector's envs per call where its arguments tell (None: the env's own
    count, known once a worker builds it); a ``collector_kwargs`` count is checked here."""
    counts: list[int | None] = []
    for i, (env_fn, kwargs) in enumerate(zip(env_fns, kwargs_list)):
        if not isinstance(kwargs, dict):
            counts.append(None)
            continue
        cut = kwargs.get("max_frames_per_traj")
        if not is_unlimited(cut):  # a collector's own episode cut: its share takes it
            p.positive_int(
                f"collector_kwargs[{i}]['max_frames_per_traj']", cut, allow_minus_one=True
            )
        if kwargs.get("num_envs") is not None:
            p.positive_int(f"collector_kwargs[{i}]['num_envs']", kwargs["num_envs"])
        counts.append(told_num_envs(env_fn, kwargs, per_collector))
    return counts


def told_num_envs(env_fn: Any, kwargs: dict[str, Any], per_collector: Any) -> int | None:
    """A native collector's envs per call where its arguments tell: its ``collector_kwargs``'
    ``num_envs``, else ``per_collector`` above 1, else 1 env of a gymnasium id; None: the
    env's own count (a factory's, known once a worker builds it; make_env treats 1 so too)."""
    n = kwargs.get("num_envs")
    if n is None and isinstance(per_collector, int) and per_collector > 1:
        n = per_collector
    elif n is None and isinstance(env_fn, str):
        n = 1
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def fleet_rollout(
    p: Problems,
    rollout: RolloutOptions | None,
    counts: list[int | None],
    *,
    sync: bool,
    elastic: bool,
    count: int,
    **given: Any,
) -> RolloutOptions | None:
    """The fleet's rollout options: ``rollout`` as given (its env count agreeing with the
    collectors' own), or made from the keywords with the collectors' count where every
    collector's is the same and known; with counts that differ (first ready), the one
    check of the sizes against them (:func:`check_env_counts`). A sync fleet of ``count``
    collectors, of a fixed size, splits each batch over them."""
    split = count if sync and not elastic else 1
    known = counts and None not in counts and len(set(counts)) == 1
    if rollout is not None:
        sizes = given_rollout(p, rollout, **given)
        if sizes is None:
            return None
        if sizes.split != split:
            p.add("rollout", sizes, ROLLOUT_SPLIT_MSG.format(split=sizes.split, want=split))
        n = sizes.num_envs
        if n is not None and any(c is not None and c != n for c in counts):
            p.add("num_workers_per_collector", counts, ROLLOUT_ENVS_MSG.format(n=n))
        return sizes
    sizes = given_rollout(p, None, num_envs=counts[0] if known else None, split=split, **given)
    if sizes is not None and not known and counts and None not in counts:
        try:  # first ready, each collector its own count: the lcm rule, said once here
            check_env_counts(counts, sync=sync, frames_per_batch=sizes.frames_per_batch,
                             total_frames=sizes.total_frames, elastic=elastic)  # fmt: skip
        except ConfigError as err:
            p.extend(err.details)
    return sizes


def per_collector_args(
    p: Problems,
    create_env_fn: Any,
    collector_kwargs: Any,
    remote_configs: Any,
    num_collectors: Any,
) -> tuple[list[Any], list[dict[str, Any]], list[dict[str, Any]], int]:
    count = num_collectors
    if count is None:
        count = len(create_env_fn) if isinstance(create_env_fn, (list, tuple)) else 1
    if not (isinstance(count, int) and not isinstance(count, bool) and count > 0):
        p.add(
            "num_collectors",
            num_collectors,
            "must be an int > 0 (or None: one per env factory)",
        )
        return [], [], [], 0

    def expand(name: str, value: Any, default: Any) -> list[Any]:
        if isinstance(value, (list, tuple)):
            if len(value) != count:
                p.add(
                    name,
                    f"<list of {len(value)}>",
                    f"a list must have one entry per collector (num_collectors={count}), or pass "
                    "a single value shared by all",
                )
                return [default] * count
            return list(value)
        return [value if value is not None else default for _ in range(count)]

    env_fns = expand("create_env_fn", create_env_fn, None)
    kwargs_list = [dict(k or {}) for k in expand("collector_kwargs", collector_kwargs, None)]
    remotes = [
        dict(r) if r is not None else default_remote_config()
        for r in expand("remote_configs", remote_configs, None)
    ]
    for i, kw in enumerate(kwargs_list):
        if not isinstance(kw, dict):
            p.add(f"collector_kwargs[{i}]", kw, "must be a dict")
    return env_fns, kwargs_list, remotes, count


def per_collector(p: Problems, name: str, value: Any, count: int) -> list[Any]:
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            p.add(name, value, f"a list must have one device per collector ({count})")
            return [None] * count
        return list(value)
    return [value] * count


def probe_envs(env_fns: list[Any], kwargs_list: list[dict[str, Any]], *, build: bool) -> bool:
    """Refuse here what the workers would refuse when they build their envs, or what could
    not be sent to them.

    Each distinct ``create_env_fn`` of a user's making (a factory, a built gymnasium or
    torchrl env, an id other than fleetrl's Atari and MuJoCo ones, whose spaces are known):

    - it must pickle: Ray sends it to each worker (and the in-process backend copies it
      as Ray would); a built env that does not (an envpool engine) is refused with the
      fix, a factory.
    - ``build`` (fleetrl's own collector): it is turned into the batched env once, in
      this process, as a worker would: an observation space fleetrl cannot batch (e.g.
      ``Dict``), a NEXT_STEP vector env, a ``num_envs`` the env does not have are raised
      before any actor starts. A factory that fails here for another reason (a package
      or device only the workers have) is left to the workers, which report what they meet.

    Returns:
        Whether a probed env has agent groups (a multi-agent torchrl env: the workers
        collect it in torchrl's grouped layout, which refuses some arguments).

    Raises:
        EnvError: the message the worker would have raised, naming the collector (its
            ``worker_id`` set, as a worker's error has it).
    """
    from fleetrl.envs.atari import AtariEnv, is_atari_id
    from fleetrl.envs.mujoco import MujocoEnv, is_mujoco_id

    grouped = False
    seen: set[int] = set()
    for index, (create_env_fn, kwargs) in enumerate(zip(env_fns, kwargs_list)):
        if id(create_env_fn) in seen or isinstance(create_env_fn, (AtariEnv, MujocoEnv)):
            continue
        seen.add(id(create_env_fn))
        if isinstance(create_env_fn, str) and (
            is_atari_id(create_env_fn) or is_mujoco_id(create_env_fn)
        ):
            continue
        try:
            _check_pickles(create_env_fn)
            if build:
                grouped |= _probe(
                    create_env_fn, kwargs.get("num_envs"), kwargs.get("create_env_kwargs")
                )
        except EnvError as err:
            error = EnvError(f"collector {index}: {err}")
            error.worker_id = index  # type: ignore[attr-defined]
            raise error from None
    return grouped


UNPICKLABLE_MSG = (
    "create_env_fn={value!r} cannot be sent to the collector workers: it does not pickle "
    "({err}); "
    "pass a factory that builds it where it runs instead (e.g. lambda: envpool.make(...)), "
    "which each worker calls"
)


def _check_pickles(create_env_fn: Any) -> None:
    """Pickle ``create_env_fn`` as Ray will (cloudpickle), once, before any actor starts."""
    from ray import cloudpickle

    try:
        cloudpickle.dumps(create_env_fn)
    except Exception as err:
        text = f"{type(err).__name__}: {err}".splitlines()[0]
        raise EnvError(UNPICKLABLE_MSG.format(value=create_env_fn, err=text)) from None


def _probe(create_env_fn: Any, num_envs: Any, create_env_kwargs: Any) -> bool:
    """Build the env as a worker would; whether it has agent groups (False: not probed)."""
    import gymnasium as gym

    from fleetrl.envs.grouped import GroupedEnv
    from fleetrl.envs.make import make_env
    from fleetrl.envs.torchrl_env import is_torchrl_env

    built = isinstance(create_env_fn, (gym.Env, gym.vector.VectorEnv)) or is_torchrl_env(
        create_env_fn
    )
    try:  # one env of a factory is enough to read its spaces; a built env is only wrapped
        env = make_env(create_env_fn, num_envs if built else None, create_env_kwargs)
    except EnvError:
        raise
    except Exception as err:
        logger.debug("create_env_fn=%r not probed here: %s", create_env_fn, err)
        return False
    if not built:  # the user's own env stays open for its workers
        env.close()
    return isinstance(env, GroupedEnv)


def check_resources(remotes: list[dict[str, Any]]) -> None:
    """Refuse requests the cluster can never satisfy, before any actor starts
    (:func:`fleetrl.distributed.runtime.resource_shortfalls`, said in ``remote_configs``' words)."""
    requests = []
    for config in remotes:
        wants = {"CPU": config.get("num_cpus", 1), "GPU": config.get("num_gpus", 0) or 0}
        wants.update(config.get("resources") or {})
        if config.get("memory"):
            wants["memory"] = config["memory"]
        requests.append(wants)
    p = Problems()
    shortfalls = resource_shortfalls(requests)
    if not shortfalls:  # what the cluster has, other jobs may hold: then the actors wait
        for wait in resource_waits(requests):
            logger.warning(
                WAIT_MSG.format(
                    collectors=f"{len(remotes)} collector{'s' * (len(remotes) != 1)}",
                    asked=wait.asked,
                    name=wait.resource,
                    free=wait.have,
                )
            )
    for short in shortfalls:
        if short.request is not None:
            index = short.request
            key = {"CPU": "num_cpus", "GPU": "num_gpus"}.get(short.resource, short.resource)
            p.add(
                f"remote_configs[{index}]",
                remotes[index],
                NODE_RESOURCES_MSG.format(
                    index=index, asked=short.asked, name=short.resource, have=short.have, key=key
                ),
            )
        else:
            p.add(
                "remote_configs",
                remotes[0] if len(remotes) == 1 else "<per collector>",
                RESOURCES_MSG.format(
                    count=len(remotes), asked=short.asked, name=short.resource, have=short.have
                ),
            )
    p.raise_if_any()


def check_env_counts(
    counts: list[int | None],
    *,
    sync: bool,
    frames_per_batch: int,
    total_frames: int,
    elastic: bool = False,
) -> None:
    """Check batch sizes against each collector's env count (skipped while a count is unknown).
    ``elastic``: the fleet grows and shrinks, so a sync batch's shares are whole env steps,
    not equal."""
    if None in counts or not counts:
        return
    p = Problems()
    if sync and len(set(counts)) > 1:
        p.add("collector_kwargs", "<per collector>", SYNC_ENVS_MSG.format(counts=counts))
    p.items += batch_size_problems(
        frames_per_batch=frames_per_batch,
        total_frames=total_frames,
        # sync: the batch splits evenly, then each share over one collector's envs
        num_envs=counts[0] if sync else counts,
        split=len(counts) if sync and not elastic else 1,
    )
    p.raise_if_any()


def takes_env_list(cls: Any) -> bool:
    """Whether a torchrl collector class wants a list of env factories (the Multi* collectors)."""
    from torchrl.collectors import Collector

    return is_torchrl_collector_class(cls) and not issubclass(cls, Collector)


def is_torchrl_collector_class(cls: Any) -> bool:
    try:
        from torchrl.collectors import BaseCollector
    except ImportError:  # pragma: no cover
        return False
    return isinstance(cls, type) and issubclass(cls, BaseCollector)


def collector_parameters(cls: type) -> set[str] | None:
    """Keyword names ``cls(...)`` accepts, following ``**kwargs`` up the MRO (None: anything)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is object or "__init__" not in vars(klass):
            continue
        try:
            params = inspect.signature(vars(klass)["__init__"]).parameters.values()
        except (TypeError, ValueError):  # no introspectable signature: accept anything
            return None
        names.update(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return names - {"self"}
    return names - {"self"}


def check_collector_kwargs(
    p: Problems, collector_class: Any, kwargs_list: list[Any], set_by_ray: frozenset[str]
) -> None:
    """Every collector_kwargs key must be an argument of ``collector_class`` (closest name as hint)."""
    if not isinstance(collector_class, type):
        return
    accepted = collector_parameters(collector_class)
    if accepted is None:
        return
    shared = all(k is kwargs_list[0] or _same(k, kwargs_list[0]) for k in kwargs_list)
    for index, kwargs in enumerate(kwargs_list[:1] if shared else kwargs_list):
        if not isinstance(kwargs, dict):
            continue
        arg = "collector_kwargs" if shared else f"collector_kwargs[{index}]"
        for key in kwargs:
            if key in set_by_ray:
                p.add(f"{arg}[{key!r}]", kwargs[key], SET_BY_RAY_MSG)
            elif key not in accepted:
                close = difflib.get_close_matches(str(key), sorted(accepted), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                p.add(
                    f"{arg}[{key!r}]",
                    kwargs[key],
                    UNKNOWN_KWARG_MSG.format(cls=collector_class.__name__, key=key, hint=hint),
                )


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # values that do not compare (tensors): report per collector
        return False


def check_added_collectors(
    slots: list[Any],
    num_collectors: Any,
    *,
    sync: bool,
    frames_per_batch: int,
    collector_class: Any,
    create_env_fn: Any,
    collector_kwargs: Any,
    remote_configs: Any,
) -> tuple[list[Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """Check ``add_collectors``' arguments (defaults: the first worker's); returns them per worker."""
    p = Problems()
    env_fn = slots[0].env_fn if create_env_fn is None else create_env_fn
    kwargs = slots[0].kwargs if collector_kwargs is None else collector_kwargs
    remote = slots[0].remote_config if remote_configs is None else remote_configs
    env_fns, kwargs_list, remotes, count = per_collector_args(
        p, env_fn, kwargs, remote, num_collectors
    )
    if sync:
        p.items += batch_size_problems(
            frames_per_batch=frames_per_batch,
            total_frames=None,
            num_envs=None,
            split=len(slots) + count,
        )
    check_collector_kwargs(p, collector_class, kwargs_list, SET_BY_RAY)
    p.raise_if_any()
    check_resources([s.remote_config for s in slots] + remotes)
    return env_fns, kwargs_list, remotes


def put_policy(backend: Backend, policy: Any) -> Any:
    """Store the policy once for every worker; on Ray, one that cannot be pickled is refused
    with the fix (``policy_factory``), before any actor starts."""
    try:
        return backend.put(policy)
    except Exception as err:  # pickling errors come as TypeError, PicklingError, ...
        raise PolicyError(POLICY_PICKLE_MSG.format(policy=policy, err=err)) from err


def worker_failure(worker_id: int, err: WorkerRaised) -> FleetError:
    """The error to raise for an exception a worker raised.

    A :class:`ConfigError`, :class:`EnvError` or :class:`PolicyError` arrives as
    its own type, its message first naming the collector and the cause, then
    the remote traceback. Anything else is a :class:`WorkerError`. Both carry
    ``worker_id`` and the traceback as ``cause``.
    """
    cause, text = err.error, err.text
    if isinstance(cause, ConfigError):
        error: FleetError = ConfigError([f"collector {worker_id}: {p}" for p in cause.problems])
    elif isinstance(cause, (EnvError, PolicyError)):
        kind = EnvError if isinstance(cause, EnvError) else PolicyError
        error = kind(f"collector {worker_id}: {cause}")
    else:
        return WorkerError(worker_id, text)
    error.args = (f"{error}\n\nremote traceback of collector {worker_id}:\n{text}",)
    error.worker_id = worker_id  # type: ignore[attr-defined]
    error.cause = text  # type: ignore[attr-defined]
    return error


def all_problems(p: Problems, check: Any, **arguments: Any) -> Any:
    """``check(**arguments)``, raising its problems and those already in ``p`` at once."""
    try:
        result = check(**arguments)
    except ConfigError as err:
        raise ConfigError(err.problems + p.items) from None
    p.raise_if_any()
    return result

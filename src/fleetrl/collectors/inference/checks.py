"""What central inference refuses before anything starts: the arguments a RayCollector and a
SyncDataCollector are given with inference servers, a policy that cannot run away from its
env, and servers that do not fit in the Ray cluster beside the collectors.

The rules on the options themselves (:class:`~fleetrl.collectors.inference.InferenceOptions`)
are in :mod:`fleetrl.collectors.inference.options`; here are those that also read the
collector's other arguments.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType as ExplorationType
from torch import nn

from fleetrl.collectors.inference.options import (
    Audience,
    InferenceMode,
    InferenceOptions,
    check_cuda,
    check_options,
)
from fleetrl.errors import PolicyError, Problems

__all__ = [
    "CLASS_MSG",
    "FACTORY_MSG",
    "LOCAL_ONLY_MSG",
    "NEEDS_ENV_MSG",
    "NOT_MODULE_MSG",
    "NO_POLICY_MSG",
    "PER_ENV_MSG",
    "SERVER_RESOURCES_MSG",
    "SERVER_WEIGHTS_MSG",
    "WEIGHTS_TARGET_MSG",
    "check_inference",
    "check_served",
    "check_server_resources",
    "needs_env",
    "probe_batched",
]

NO_POLICY_MSG = (
    "inference='server' runs the policy on inference servers, and there is no policy to serve "
    "(policy=None acts at random in each worker); pass a policy, or inference='local'"
)
FACTORY_MSG = (
    "inference='server' builds the policy once per server from the policy itself; "
    "policy_factory builds it in each worker: pass policy=..., or inference='local'"
)
NOT_MODULE_MSG = (
    "inference='server' needs a policy that maps a batch of observations to a batch of "
    "actions (a TensorDictModule or nn.Module); {policy!r} is not one"
)
NEEDS_ENV_MSG = (
    "inference='server' runs the policy on batches from many envs, and {policy!r} {why}; "
    "use a policy that reads only the TensorDict it is given, or inference='local'"
)
CLASS_MSG = (
    "inference='server' is built into fleetrl's SyncDataCollector; collector_class={cls!r} "
    "runs its own policy: use collector_class=SyncDataCollector, or inference='local'"
)
LOCAL_ONLY_MSG = (
    "only takes effect with inference='local': the policy runs on the inference servers, "
    "on inference_device; {fix}"
)
WEIGHTS_TARGET_MSG = (
    "with inference='server' the weights go to the inference servers, which serve every "
    "worker; publish to all workers (worker_ids=None)"
)
SERVER_WEIGHTS_MSG = (
    "this collector acts through an inference server, which holds the weights; publish them "
    "with the RayCollector (or InferenceServers.publish)"
)
PER_ENV_MSG = (
    "inference='server' runs the policy on batches from many envs, and {policy!r} acts on "
    "one env at a time (it is built for one env's shapes, e.g. from one env's action spec); "
    "use a policy that acts on a batch of envs, or inference='local'"
)
SERVER_RESOURCES_MSG = (
    "the collectors ({alone:g} {name}) and {count} inference server(s) together ask {asked:g} "
    "{name}, and the Ray cluster has {have:g}; ask less per server (e.g. "
    "inference_remote_config={{'num_cpus': 0}}: the servers then share the collectors' "
    "cores), or fewer collectors or servers"
)


# ---------------------------------------------------------------------- checks
def check_inference(
    p: Problems,
    options: InferenceOptions,
    *,
    num_collectors: Any,
    policy: Any,
    policy_factory: Any,
    collector_class: Any,
    native: bool,
    devices: dict[str, Any],
    compile_policy: Any,
    cudagraph_policy: Any,
    max_weight_update_interval: Any,
    address: Any = None,
) -> None:
    """Refuse inference arguments that cannot work, each naming its argument, before any actor
    starts: the rules that tie the options (valid since made) to the collector's count and
    cluster (:func:`~fleetrl.collectors.inference.check_options`, once per context), then
    with ``inference='server'`` what the collector's other arguments must leave to the
    servers. ``native``: ``collector_class`` is fleetrl's SyncDataCollector (or a subclass);
    ``address``: the Ray cluster to attach to, if any."""
    check_options(p, options, num_collectors=num_collectors, address=address)
    if options.mode is not InferenceMode.SERVER:
        return
    if policy_factory is not None:
        p.add("policy_factory", policy_factory, FACTORY_MSG)
    elif policy is None:
        p.add("policy", None, NO_POLICY_MSG)
    else:
        why = needs_env(policy)
        if why is not None:
            p.add("inference", "server", NEEDS_ENV_MSG.format(policy=policy, why=why))
        elif not isinstance(policy, nn.Module):
            p.add("inference", "server", NOT_MODULE_MSG.format(policy=policy))
    if not native:
        p.add("collector_class", collector_class, CLASS_MSG.format(cls=collector_class))
    for key in ("device", "policy_device"):
        value = devices.get(key)
        if value is not None and not _all_cpu(value):
            p.add(key, value, LOCAL_ONLY_MSG.format(fix="set inference_device instead"))
    for key, value in (("compile_policy", compile_policy), ("cudagraph_policy", cudagraph_policy)):
        if value not in (None, False):
            p.add(key, value, LOCAL_ONLY_MSG.format(fix=f"leave {key} unset"))
    if isinstance(max_weight_update_interval, int) and max_weight_update_interval > 0:
        p.add(
            "max_weight_update_interval",
            max_weight_update_interval,
            "only takes effect with inference='local': the servers load each version as it "
            "is published; leave it at -1",
        )


def check_served(
    p: Problems,
    policy: Any,
    policy_factory: Any,
    policy_device: Any,
    compile_policy: Any,
    cudagraph_policy: Any,
) -> None:
    """What a :class:`~fleetrl.SyncDataCollector` given an ``inference_server`` refuses."""
    if policy_factory is not None:
        p.add("policy_factory", policy_factory, FACTORY_MSG)
    elif policy is None:
        p.add("policy", None, NO_POLICY_MSG)
    if policy_device is not None and not _all_cpu(policy_device):
        p.add("policy_device", str(policy_device), LOCAL_ONLY_MSG.format(fix="leave it unset"))
    for key, value in (("compile_policy", compile_policy), ("cudagraph_policy", cudagraph_policy)):
        if value not in (None, False):
            p.add(key, value, LOCAL_ONLY_MSG.format(fix=f"leave {key} unset"))


def probe_batched(
    policy: Any,
    create_env_fn: Any,
    num_envs: int | None,
    create_env_kwargs: dict[str, Any] | None,
    exploration_type: ExplorationType,
) -> None:
    """Refuse, before any actor starts, a policy that must be fed one env at a time (built
    for one env's shapes): a server feeds it batches from many envs. The env is built here
    once, as a worker builds it, and the policy probed on its first step; anything else
    that fails here is left to the workers, which report what they meet.

    Raises:
        PolicyError: the policy acts on one env at a time.
    """
    from fleetrl.collectors.local.acting_setup import initial_states, set_up_acting
    from fleetrl.envs.make import make_env
    from fleetrl.networks.policies import PerEnvPolicy

    try:
        env = make_env(create_env_fn, num_envs, create_env_kwargs)
    except Exception:  # a package or device only the workers have
        return
    try:
        n = env.num_envs
        step = TensorDict(batch_size=[n])
        for key, value in env.reset().items():
            step.set(key, torch.as_tensor(value))
        for key, value in initial_states(policy, n).items():
            step.set(key, value)
        plan = set_up_acting(policy, env, step, exploration_type)
    except Exception:
        return
    finally:
        env.close()
    if isinstance(plan.act, PerEnvPolicy):
        raise PolicyError(PER_ENV_MSG.format(policy=policy))


def _all_cpu(value: Any) -> bool:
    values = value if isinstance(value, (list, tuple)) else [value]
    try:
        return all(v is None or torch.device(v).type == "cpu" for v in values)
    except (RuntimeError, TypeError):
        return True  # a malformed device is reported by the device checks


def needs_env(policy: Any) -> str | None:
    """Why ``policy`` cannot run away from its env, or None: it (or a submodule, or a function
    it closes over) holds an env object, which a server serving many workers does not have."""
    from fleetrl.envs.base import BatchedEnv

    env_types: list[type] = [BatchedEnv]
    try:
        from torchrl.envs import EnvBase

        env_types.append(EnvBase)
    except ImportError:  # pragma: no cover - torchrl is a dependency
        pass
    try:
        import gymnasium

        env_types += [gymnasium.Env, gymnasium.vector.VectorEnv]
    except ImportError:  # pragma: no cover - gymnasium is a dependency
        pass
    kinds = tuple(env_types)
    if isinstance(policy, kinds):
        return "is an env"
    seen: set[int] = set()
    objects = list(policy.modules()) if isinstance(policy, nn.Module) else [policy]
    for obj in objects:
        for name, value in _attributes(obj):
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, kinds):
                return f"holds an env object ({name}={type(value).__name__})"
    return None


def _attributes(obj: Any) -> list[tuple[str, Any]]:
    """An object's attributes, and what it (a function) or a function attribute closes over."""
    out: list[tuple[str, Any]] = list(getattr(obj, "__dict__", {}).items())
    for name, value in list(out):
        out += _closed_over(value, f"{name}.")
    if not isinstance(obj, nn.Module):
        out += _closed_over(obj, "")
    return out


def _closed_over(fn: Any, prefix: str) -> list[tuple[str, Any]]:
    """``(prefix<name>, value)`` of each variable a function closes over (none: not one)."""
    cells = getattr(fn, "__closure__", None) if callable(fn) else None
    if not cells:
        return []
    found = []
    for free, cell in zip(fn.__code__.co_freevars, cells):
        with contextlib.suppress(ValueError):  # an empty cell
            found.append((f"{prefix}<{free}>", cell.cell_contents))
    return found


def check_server_resources(
    options: InferenceOptions, collector_configs: list[dict[str, Any]]
) -> None:
    """Once Ray is up, before any actor starts: a CUDA ``options.device`` needs a GPU in
    its cluster, and the servers' requests (``inference_remote_config``) must fit beside the
    collectors' (a request that never fits would leave an actor waiting forever)."""
    from fleetrl.distributed.runtime import resource_shortfalls

    p = Problems()
    if options.device is not None:
        check_cuda(p, options.device, Audience.ARGUMENTS)
        p.raise_if_any()
    server_config, count = options.ray_options(), options.num_servers
    collectors = [_wants(c) for c in collector_configs]
    if resource_shortfalls(collectors):
        return  # the collectors' own check says what they ask too much of
    for short in resource_shortfalls(collectors + [_wants(server_config)] * count):
        p.add(
            "inference_remote_config",
            server_config,
            SERVER_RESOURCES_MSG.format(
                count=count,
                asked=short.asked,
                name=short.resource,
                have=short.have,
                alone=sum(c.get(short.resource, 0) for c in collectors),
            ),
        )
        break
    p.raise_if_any()


def _wants(config: dict[str, Any]) -> dict[str, float]:
    wants = {"CPU": config.get("num_cpus", 1), "GPU": config.get("num_gpus", 0) or 0}
    wants.update(config.get("resources") or {})
    return wants

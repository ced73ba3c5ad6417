"""RayCollector's plan: every argument checked and every probe made, before anything starts.

:func:`preflight` takes the constructor's arguments, gathers every problem
(:mod:`fleetrl.collectors.remote.checks`, :mod:`fleetrl.collectors.arguments`,
:mod:`fleetrl.collectors.remote.replay`, :mod:`fleetrl.collectors.inference`) and raises
them at once, as one :class:`~fleetrl.errors.ConfigError`; then it probes what the
workers would refuse in their envs, and what an inference server would refuse in
the policy. What it returns, a :class:`Preflight`, is what the collector starts:
the backend, then the inference servers, then the worker pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleetrl.collectors.arguments import check_feature_arguments
from fleetrl.collectors.inference.checks import check_inference, probe_batched
from fleetrl.collectors.inference.options import InferenceOptions, given_options
from fleetrl.collectors.local.grouped import check_grouped_arguments
from fleetrl.collectors.local.sync import SyncDataCollector
from fleetrl.collectors.remote.checks import RayArguments, all_problems, check_arguments, probe_envs
from fleetrl.collectors.remote.fleet_options import FLEET_ARGUMENTS, FleetOptions, given_fleet
from fleetrl.collectors.remote.replay import buffer_actor, check_replay_buffer
from fleetrl.distributed.backends import BACKENDS, Backend, make_backend
from fleetrl.errors import Problems
from fleetrl.fleet_size import FleetSize

__all__ = ["Preflight", "preflight"]


@dataclass(frozen=True)
class Preflight:
    """What a :class:`~fleetrl.RayCollector` starts, from its checked arguments."""

    given: dict[str, Any]
    """the constructor's arguments, as given (each checked)."""
    args: RayArguments
    """the arguments expanded to one entry per collector, and the policy it acts with."""
    inference: InferenceOptions
    """where the policy runs (:mod:`fleetrl.collectors.inference`)."""
    options: FleetOptions
    """how the fleet collects and is kept (:mod:`fleetrl.collectors.remote.fleet_options`)."""
    backend: Backend
    """where the workers (and servers) run."""
    common: dict[str, Any]
    """what every worker's collector gets besides its own ``collector_kwargs``."""
    fleet: FleetSize
    """how many workers: fixed, or a range the fleet grows and shrinks in
    (:mod:`fleetrl.collectors.remote.elastic`), which starts with its minimum."""

    def server_arguments(self) -> dict[str, Any]:
        """:meth:`InferenceServers.start <fleetrl.collectors.inference.InferenceServers.start>`'s
        keywords, but the options."""
        return {
            "exploration_type": self.args.exploration_type,
            "num_threads": self.options.num_threads,
            "num_workers": len(self.args.env_fns),
        }

    def pool_arguments(self) -> dict[str, Any]:
        """:class:`~fleetrl.collectors.remote.pool.WorkerPool`'s keywords, but its servers."""
        g, replay_buffer = self.given, self.given["replay_buffer"]
        return {
            "collector_class": g["collector_class"],
            "native": self.args.native,
            "num_workers_per_collector": g["num_workers_per_collector"],
            "options": self.options,
            "rollout": self.args.rollout,
            # the counts the sizes were checked with, where the arguments told every one
            "env_counts": None if None in self.args.counts else self.args.counts,
            "init_random_frames": self.args.init_random_frames,
            "devices": self.args.devices,
            "common": self.common,
            "replay_buffer": None if replay_buffer is None else buffer_actor(replay_buffer),
        }


def preflight(**given: Any) -> Preflight:
    """Check every argument of :class:`~fleetrl.RayCollector` (given by name, all of them),
    raise every problem at once, then probe the envs (and, for inference servers, the
    policy) as the workers would build them.

    Raises:
        ConfigError: every argument that cannot work, named with its value and the fix.
        EnvError: an env a worker would refuse (:func:`~fleetrl.collectors.remote.checks.probe_envs`).
        PolicyError: a policy a server cannot feed batches (:func:`~fleetrl.collectors.inference.probe_batched`).
    """
    g = given
    p = Problems()
    if not isinstance(g["backend"], Backend) and g["backend"] not in BACKENDS:
        p.add("backend", g["backend"], f"must be one of {list(BACKENDS)} or a fleetrl Backend")
    options = given_fleet(p, g["fleet"], **{k: g[k] for k in FLEET_ARGUMENTS})
    # the options as given where they have problems (raised below, with every other one)
    fleet_values = options.arguments() if options else {k: g[k] for k in FLEET_ARGUMENTS}
    check_replay_buffer(
        p,
        g["replay_buffer"],
        **{k: g[k] for k in ("trajs_per_batch", "split_trajs", "postproc")},
        sync=fleet_values["sync"],
        max_served_lag=fleet_values["max_served_lag"],
        backend=g["backend"],
    )
    features = {k: g[k] for k in FEATURES}
    check_feature_arguments(
        p,
        policy=g["policy"],
        trajs_per_batch=g["trajs_per_batch"],
        split_trajs=g["split_trajs"],
        policy_devices=g["policy_device"] if g["policy_device"] is not None else g["device"],
        **features,
    )
    fleet = _fleet_size(p, g)
    inference = _inference(p, g, fleet, fleet_values["max_weight_update_interval"])
    args = all_problems(
        p,
        check_arguments,
        **{k: g[k] for k in CHECKED},
        sync=fleet_values["sync"],
        num_collectors=None if fleet is None else fleet.min,
        elastic=fleet is not None and fleet.elastic,
        devices={k: g[k] for k in ("device", "storing_device", "env_device", "policy_device")},
    )
    assert inference is not None  # a problem of the options was raised with the others
    backend = make_backend(g["backend"])
    # what a worker would refuse in its envs, or could not be sent it: refused here
    if probe_envs(args.env_fns, args.kwargs_list, build=args.native):
        # a multi-agent env: what its workers' grouped rollout would refuse, refused here
        check_grouped_arguments(
            trajs_per_batch=g["trajs_per_batch"],
            split_trajs=g["split_trajs"],
            max_frames_per_traj=args.rollout.max_frames_per_traj,
            compile_policy=g["compile_policy"] or None,
            cudagraph_policy=g["cudagraph_policy"] or None,
            set_truncated=g["set_truncated"],
        )
    if inference.served:  # a policy a server cannot feed batches: refused here
        kwargs = args.kwargs_list[0]
        probe_batched(
            args.policy,
            args.env_fns[0],
            kwargs.get("num_envs", g["num_workers_per_collector"]),
            kwargs.get("create_env_kwargs"),
            args.exploration_type,
        )
    common = {
        "max_frames_per_traj": args.rollout.max_frames_per_traj,
        "reset_at_each_iter": g["reset_at_each_iter"],
        "exploration_type": args.exploration_type,
        # torchrl 0.14's arguments reach the workers only when set (any collector class takes
        # them)
        **{k: v for k, v in features.items() if v is not None and v is not False},
    }
    fleet = fleet or FleetSize(len(args.env_fns), len(args.env_fns))
    assert options is not None  # a problem of the options was raised with the others
    return Preflight(
        given=g,
        args=args,
        inference=inference,
        options=options,
        backend=backend,
        common=common,
        fleet=fleet,
    )


#: torchrl 0.14's collector arguments that act in each worker (:mod:`fleetrl.collectors.arguments`)
FEATURES = ("policy_factory", "compile_policy", "cudagraph_policy", "set_truncated")
#: the arguments :func:`~fleetrl.collectors.remote.checks.check_arguments` checks (and the devices)
CHECKED = (
    "create_env_fn",
    "policy",
    "frames_per_batch",
    "total_frames",
    "collector_class",
    "collector_kwargs",
    "num_workers_per_collector",
    "remote_configs",
    "init_random_frames",
    "exploration_type",
    "postproc",
    "max_frames_per_traj",
    "rollout",
)


#: the arguments that take one value per collector, which a range of collectors cannot
PER_COLLECTOR = (
    "create_env_fn",
    "collector_kwargs",
    "remote_configs",
    "device",
    "storing_device",
    "env_device",
    "policy_device",
)
ELASTIC_LIST_MSG = (
    "a list holds one value per collector, and num_collectors={size} is a range: pass one "
    "value that every worker gets (a worker that joins copies the first's)"
)
ELASTIC_AUTO_MSG = (
    "'auto' counts the Ray cluster's room for workers: it needs backend='ray' (a range, "
    "'MIN-MAX', starts its maximum in this process)"
)
ELASTIC_SERVED_MSG = (
    "a range of collectors cannot use inference='server' yet (the servers are placed for a "
    "fixed fleet): pass an int, or inference='local'"
)


def _fleet_size(p: Problems, g: dict[str, Any]) -> FleetSize | None:
    """``num_collectors`` as a fleet size (None: not given, one per env factory)."""
    value = g["num_collectors"]
    if value is None:
        return None
    try:
        fleet = FleetSize.parse(value)
    except ValueError as err:
        p.add("num_collectors", value, f"{err} (or None: one per env factory)")
        return None
    if not fleet.elastic:
        return fleet
    for name in PER_COLLECTOR:
        if isinstance(g[name], (list, tuple)):
            p.add(name, f"<list of {len(g[name])}>", ELASTIC_LIST_MSG.format(size=fleet))
    if fleet.max is None and g["backend"] != "ray" and getattr(g["backend"], "name", "") != "ray":
        p.add("num_collectors", value, ELASTIC_AUTO_MSG)
    if g["inference"] != "local":
        p.add("inference", g["inference"], ELASTIC_SERVED_MSG)
    return fleet


def _inference(
    p: Problems, g: dict[str, Any], fleet: FleetSize | None, max_weight_update_interval: Any
) -> InferenceOptions | None:
    """The inference options (``inference=InferenceOptions(...)`` or the separate keywords),
    checked with what the collector's other arguments must leave to the servers (None where
    the keywords have problems: they are in ``p``)."""
    options = given_options(
        p,
        g["inference"],
        num_inference_servers=g["num_inference_servers"],
        inference_device=g["inference_device"],
        inference_max_batch=g["inference_max_batch"],
        inference_max_wait_ms=g["inference_max_wait_ms"],
        inference_remote_config=g["inference_remote_config"],
        inference_transport=g["inference_transport"],
    )
    if options is None:
        return None
    envs = g["create_env_fn"]
    ray_init = g["ray_init_config"]
    collector_class = g["collector_class"]
    check_inference(
        p,
        options,
        num_collectors=fleet.min
        if fleet is not None
        else len(envs if isinstance(envs, list) else [envs]),
        policy=g["policy"],
        policy_factory=g["policy_factory"],
        collector_class=collector_class,
        native=isinstance(collector_class, type) and issubclass(collector_class, SyncDataCollector),
        devices={"device": g["device"], "policy_device": g["policy_device"]},
        compile_policy=g["compile_policy"],
        cudagraph_policy=g["cudagraph_policy"],
        max_weight_update_interval=max_weight_update_interval,
        address=ray_init.get("address") if isinstance(ray_init, dict) else None,
    )
    return options

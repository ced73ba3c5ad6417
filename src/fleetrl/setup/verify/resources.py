"""What the cluster, not the config, decides: the CPUs and custom resources the run asks for.

:func:`resource_problems` is asked once Ray runs, before any actor starts (the
config's own checks, :func:`fleetrl.setup.verify.verify`, come first and need no
cluster): the collectors', inference servers' and gradient workers' requests
against the cluster's resources (:func:`fleetrl.distributed.runtime.resource_shortfalls`),
each problem in config keys with the arithmetic and the fix.
"""

from __future__ import annotations

from fleetrl.config import Config
from fleetrl.distributed.runtime import resource_shortfalls
from fleetrl.errors import ConfigError, Problem, Problems

__all__ = [
    "GRAD_WORKERS_MSG",
    "GRAD_WORKER_RESOURCES_MSG",
    "NODE_MSG",
    "RESOURCES_MSG",
    "SERVER_CPUS_MSG",
    "TRIAL_MSG",
    "check_trial_resources",
    "resource_problems",
]

RESOURCES_MSG = (
    "collector.num_collectors={count} is invalid here: {count} collectors x "
    "collector.num_cpus_per_collector={cpus:g} ask Ray for {asked:g} CPUs{have}; lower "
    "collector.num_cpus_per_collector (e.g. {suggest:g}), use fewer collectors, or attach to a "
    "bigger cluster with collector.address"
)
NODE_MSG = (
    "collector.num_cpus_per_collector={cpus:g} is invalid here: each collector asks Ray for "
    "{cpus:g} CPUs but no Ray node has more than {have:g}; lower "
    "collector.num_cpus_per_collector (e.g. {have:g})"
)
SERVER_CPUS_MSG = (
    "collector.num_cpus_per_inference_server={cpus:g} is invalid here: {servers} inference "
    "server(s) and the collectors ({collectors:g} CPUs) ask Ray for {asked:g} CPUs, and the "
    "Ray cluster has {have:g}; use 0 (the servers share the collectors' cores), fewer "
    "servers, or a lower collector.num_cpus_per_collector"
)
GRAD_WORKERS_MSG = (
    "scheme.num_grad_workers={g} is invalid: {g} gradient workers x {per:g} CPUs "
    "(scheme.num_cpus_per_grad_worker + collector.num_collectors x "
    "collector.num_cpus_per_collector) need {need:g} CPUs; the Ray cluster has {have:g}"
)
GRAD_WORKER_RESOURCES_MSG = (
    "scheme.grad_worker_resources={value!r} is invalid: {g} gradient workers x {amount:g} "
    "{name!r} need {need:g}; the Ray cluster has {have:g}"
)


TRIAL_MSG = (
    "each trial of the sweep is a placement group of {asked:g} {name} (1 CPU for the trial's "
    "learner, then its workers': collector.num_collectors={count} x collector.num_cpus_per_collector="
    "{cpus:g}{more}) and the Ray cluster has {have:g}, so no trial would ever start; lower "
    "collector.num_cpus_per_collector (e.g. 0), collect in the trial (collector.num_collectors=0), "
    "or attach to a bigger cluster with collector.address"
)


def check_trial_resources(config: Config, bundles: list[dict[str, float]]) -> None:
    """A sweep's trial (``bundles``: ``fleetrl.run.sweep.trial_bundles``) that the running
    cluster can never place is refused before Tune waits on it forever."""
    c = config.collector
    more = " and the inference servers'" if c.inference == "server" and c.fleet.min else ""
    if config.scheme.num_grad_workers > 1:
        more += f" for each of scheme.num_grad_workers={config.scheme.num_grad_workers}"
    problems = [
        Problem(
            "collector.num_cpus_per_collector",
            text=TRIAL_MSG.format(
                asked=short.asked,
                name=short.resource,
                count=c.fleet.min,
                cpus=c.num_cpus_per_collector,
                more=more,
                have=short.have,
            ),
        )
        for short in resource_shortfalls(bundles)
        if short.request is None  # the trial's total: its bundles may spread over nodes
    ]
    if problems:
        raise ConfigError(problems)


def resource_problems(config: Config) -> list[Problem]:
    """Where Ray runs already: the CPUs (and custom resources) the run's workers ask for,
    against the cluster's (:func:`fleetrl.distributed.runtime.resource_shortfalls`), in config keys.
    Empty where Ray does not run yet, or the workers run in process."""
    if config.trainer.backend != "ray":
        return []
    c, s = config.collector, config.scheme
    check = Problems()
    if s.num_grad_workers > 1:
        per = s.num_cpus_per_grad_worker + c.fleet.min * c.num_cpus_per_collector
        if c.inference == "server" and c.fleet.min > 0:  # each worker's own servers
            per += c.num_inference_servers * c.num_cpus_per_inference_server
        request = {"CPU": per, **s.grad_worker_resources}
        for short in resource_shortfalls([request] * s.num_grad_workers):
            if short.request is not None:
                continue  # the totals say it in the config's terms
            if short.resource == "CPU":
                text = GRAD_WORKERS_MSG.format(
                    g=s.num_grad_workers, per=per, need=short.asked, have=short.have
                )
                check.say("scheme.num_grad_workers", text)
            else:
                text = GRAD_WORKER_RESOURCES_MSG.format(
                    value=s.grad_worker_resources,
                    g=s.num_grad_workers,
                    amount=s.grad_worker_resources[short.resource],
                    name=short.resource,
                    need=short.asked,
                    have=short.have,
                )
                check.say("scheme.grad_worker_resources", text)
        return list(check)
    if c.fleet.min == 0:
        return []
    requests = [{"CPU": c.num_cpus_per_collector}] * c.fleet.min
    for short in resource_shortfalls(requests):
        if short.request == 0:  # every collector asks the same: said once
            text = NODE_MSG.format(cpus=c.num_cpus_per_collector, have=short.have)
            check.say("collector.num_cpus_per_collector", text)
        elif short.request is None:
            text = RESOURCES_MSG.format(
                count=c.fleet.min,
                cpus=c.num_cpus_per_collector,
                asked=short.asked,
                have=f" but the Ray cluster has {short.have:g}",
                suggest=short.have / c.fleet.min if short.have else c.num_cpus_per_collector / 2,
            )
            check.say("collector.num_collectors", text)
    if c.inference == "server" and not list(check):
        servers = [{"CPU": c.num_cpus_per_inference_server}] * c.num_inference_servers
        for short in resource_shortfalls(requests + servers):
            if short.request is None and short.resource == "CPU":
                check.say(
                    "collector.num_cpus_per_inference_server",
                    SERVER_CPUS_MSG.format(
                        cpus=c.num_cpus_per_inference_server,
                        servers=c.num_inference_servers,
                        collectors=c.fleet.min * c.num_cpus_per_collector,
                        asked=short.asked,
                        have=short.have,
                    ),
                )
    return list(check)

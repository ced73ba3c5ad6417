"""Start-up: Ray comes up before the learner's set-up, and its workers import fleetrl meanwhile.

Where a distributed run's start-up goes (central learner, 2 Ray collectors x 8
CartPole envs, on the 2-core benchmark machine; ``benchmarks/time_to_solve.py``
prints the constructor-to-first-batch figure): the driver's imports take about
3.5 s, ``ray.init`` about 3 s, the collector actors' own imports of torch,
tensordict and torchrl (``fleetrl.collectors.worker``) 2 to 3 s after they are
created, the first rollout 0.3 s, and the learner's set-up (building the
algorithm, its env spec, networks and optimizer) only about 0.01 s. So there is
little to overlap with the learner's set-up; the actors' imports are what can
move.

Ray prestarts idle worker processes during ``ray.init`` and places the first
actors on them. :class:`RayStart` starts Ray with the Ray system setting
``preload_python_modules``: every Python worker imports
:data:`PRELOAD_MODULES` as it starts, so the collector (and gradient-worker)
actors' imports run during ``ray.init``'s tail and the driver's own set-up,
before the actors are created, and a replacement actor starts warm too. The
Trainer starts Ray this way in its constructor, before it builds the learner.

Cost: each worker process Ray prestarts (one per CPU it sees) holds torch,
tensordict and torchrl in memory from the start, a few hundred MB each, where
the actors placed on them would import the same anyway. A Ray this process did
not start (running already, or a cluster at ``collector.address``) is used as it
is: its workers import on demand.
"""

from __future__ import annotations

import logging
from typing import Any

import ray

from fleetrl.config import Config

__all__ = ["PRELOAD_MODULES", "RayStart", "ray_init_kwargs", "uses_ray"]

logger = logging.getLogger(__name__)

#: what every Ray worker of a Ray this package starts imports as it starts: the
#: collector actor's module, which brings torch, tensordict, torchrl and fleetrl
PRELOAD_MODULES: tuple[str, ...] = ("fleetrl.collectors.worker",)


def uses_ray(config: Config) -> bool:
    """True when the run has remote collectors or gradient workers."""
    return config.collector.num_collectors > 0 or config.scheme.num_grad_workers > 1


def ray_init_kwargs(config: Config) -> dict[str, Any]:
    """``ray.init`` arguments for a run: attach to ``collector.address``, or start a local Ray
    without the dashboard whose workers preload :data:`PRELOAD_MODULES`."""
    if config.collector.address:
        return {"address": config.collector.address}
    return {
        "include_dashboard": False,
        "_system_config": {"preload_python_modules": list(PRELOAD_MODULES)},
    }


class RayStart:
    """Starts Ray for a run that needs it, unless it runs already; :meth:`stop` undoes only that.

    Args:
        config: the run's config (:func:`uses_ray` decides, :func:`ray_init_kwargs` says how).
    """

    def __init__(self, config: Config):
        #: True while Ray runs because this object started (or attached to) it
        self.started = False
        if uses_ray(config) and not ray.is_initialized():
            ray.init(**ray_init_kwargs(config))
            self.started = True
            logger.info("Ray started before the learner's set-up (workers preload fleetrl)")

    def stop(self) -> None:
        """Shut Ray down if this object started it (idempotent)."""
        if self.started:
            ray.shutdown()
            self.started = False

"""Build the pieces of a training run from a :class:`~fleetrl.config.Config`.

Shared by the central :class:`~fleetrl.trainer.Trainer` and the gradient
workers of the distributed scheme, so both collect with the same settings.
"""

from __future__ import annotations

from typing import Any

import torch

from fleetrl.algorithms import ALGORITHMS, Algorithm, env_info
from fleetrl.config import Config
from fleetrl.engines import env_spec

__all__ = ["make_algorithm", "make_collector"]


def make_algorithm(config: Config, seed: int | None = None, **modules: Any) -> Algorithm:
    """The configured algorithm (custom networks such as ``actor``, ``critic`` as keywords).

    With a ``seed``, torch is seeded first, so default networks initialise alike
    wherever they are built (the trainer, every gradient worker); without one
    (a checkpoint's weights are loaded next), torch's random state is left alone.
    """
    if seed is not None:
        torch.manual_seed(seed)
    cls = ALGORITHMS[config.algorithm]
    return cls(config.algo, env_info(env_spec(config.env)), **modules)


def make_collector(
    config: Config,
    policy: Any,
    *,
    total_frames: int,
    seed: int | None,
    init_random_frames: int = -1,
    replay_buffer: Any = None,
) -> Any:
    """Remote collectors (a RayCollector), or with ``collector.num_collectors: 0`` a local
    SyncDataCollector acting with ``policy`` itself (no Ray).

    ``seed=None`` leaves the collector unseeded, for a caller that loads its
    saved state instead (seeding resets every env and torch's generator).
    ``replay_buffer``: the remote collectors write into it (decoupled mode,
    first ready: ``collector.sync`` is not used).
    """
    c, e = config.collector, config.env
    if c.num_collectors == 0:
        from fleetrl.collectors import SyncDataCollector

        collector = SyncDataCollector(
            env_spec(e),
            policy,
            frames_per_batch=c.frames_per_batch,
            total_frames=total_frames,
            num_envs=e.num_envs,
            max_frames_per_traj=e.max_episode_steps,
            init_random_frames=init_random_frames,
            overlap=c.overlap,
        )
    else:
        from fleetrl.collectors import RayCollector

        collector = RayCollector(
            env_spec(e),
            policy,
            frames_per_batch=c.frames_per_batch,
            total_frames=total_frames,
            num_collectors=c.num_collectors,
            num_workers_per_collector=e.num_envs,
            sync=c.sync and replay_buffer is None,
            prefetch=c.prefetch,
            compress=c.compress,
            fraction_samples=c.fraction_samples,
            fraction_workers=c.fraction_workers,
            max_policy_lag=c.max_policy_lag,
            max_restart_attempts=c.max_restart_attempts,
            num_threads=c.num_threads,
            max_frames_per_traj=e.max_episode_steps,
            init_random_frames=init_random_frames,
            collector_kwargs={"overlap": c.overlap},
            remote_configs={"num_cpus": c.num_cpus_per_collector},
            ray_init_config={"address": c.address} if c.address else None,
            replay_buffer=replay_buffer,
        )
    if seed is not None:
        collector.set_seed(seed)
    return collector

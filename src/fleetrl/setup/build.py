"""Build the pieces of a training run from a :class:`~fleetrl.config.Config`.

Shared by the central :class:`~fleetrl.run.trainer.Trainer` and the gradient
workers of the distributed scheme, so both collect with the same settings.
"""

from __future__ import annotations

from typing import Any

import torch

from fleetrl.algorithms import ALGORITHMS, Algorithm
from fleetrl.config import Config
from fleetrl.envs.make import create_env_fn
from fleetrl.envs.spec import EnvSpec
from fleetrl.errors import ConfigError
from fleetrl.networks.models import ActionDistribution, make_actor_critic
from fleetrl.networks.normalization import ObservationNormalizer, RewardScaler, find_normalizers
from fleetrl.setup.verify.checked import resolved_env, verified
from fleetrl.setup.verify.env import describe

__all__ = [
    "GROUPED_MODULES_MSG",
    "make_algorithm",
    "make_collector",
    "normalized_networks",
    "spec_of",
]

USER_NETWORK_MSG = (
    "env.normalize_observation=True but the {names} passed in code hold no "
    "fleetrl.networks.normalization.ObservationNormalizer: put one (the same instance in actor and "
    "critic) first in their observation path, or set env.normalize_observation=false"
)


GROUPED_MODULES_MSG = (
    "{names} passed in code are not taken by algorithm={algo!r}: it builds its MultiAgentMLP "
    "networks from the env's agent group ({algo}.hidden_sizes, {algo}.share_params; custom "
    "multi-agent networks are not taken yet): leave them out"
)


def make_algorithm(
    config: Config, seed: int | None = None, *, env_spec: EnvSpec | None = None, **modules: Any
) -> Algorithm:
    """The configured algorithm (custom networks such as ``actor``, ``critic`` as keywords).

    With a ``seed``, torch is seeded first, so default networks initialise alike
    wherever they are built (the trainer, every gradient worker); without one
    (a checkpoint's weights are loaded next), torch's random state is left alone.
    ``env_spec``: the run's (without it: the config's verification's, else
    :func:`fleetrl.setup.verify.describe`, which builds the env once per process).
    """
    if seed is not None:
        torch.manual_seed(seed)
    cls = ALGORITHMS[config.algorithm]
    spec = env_spec if env_spec is not None else spec_of(config)
    if spec.grouped and modules:  # MAPPO/IPPO build their MultiAgentMLPs from the env's specs
        raise ConfigError(
            [GROUPED_MODULES_MSG.format(algo=config.algorithm, names=sorted(modules))]
        )
    if config.env.normalize_observation:
        modules = normalized_networks(config, spec, modules)
    algorithm = cls(config.algo, spec, device=config.trainer.device, **modules)
    if config.env.normalize_reward:
        algorithm.reward_scaler = RewardScaler(clip=config.env.clip_reward)
    return algorithm


def spec_of(config: Config) -> EnvSpec:
    """The env's spec: its verification's (:func:`~fleetrl.setup.verify.verified`), else
    built once per process and env; ConfigError where it cannot be."""
    checked = verified(config)
    if checked is not None:
        return checked.spec
    spec, problems = describe(config)
    if problems:
        raise ConfigError(problems)
    assert spec is not None
    return spec


def normalized_networks(config: Config, spec: EnvSpec, modules: dict[str, Any]) -> dict[str, Any]:
    """The default actor and critic with one shared
    :class:`~fleetrl.networks.normalization.ObservationNormalizer` first in both (``env.normalize_observation``).

    Networks passed in code must hold their own normalizer: a missing one would
    leave the policy acting on raw observations while the config says otherwise.
    """
    given = {name: m for name, m in modules.items() if name in ("actor", "critic")}
    missing = [name for name, m in given.items() if not find_normalizers(m)]
    if missing:
        raise ConfigError([USER_NETWORK_MSG.format(names=missing)])
    if len(given) == 2:
        return modules
    normalizer = ObservationNormalizer(spec.obs_shape, clip=config.env.clip_observation)
    algo = config.algo
    actor, critic = make_actor_critic(
        algo.model,
        spec,
        algo.hidden_sizes,
        normalizer=normalizer,
        # PPO's section has it; A2C's and IMPALA's keep the TanhNormal
        distribution=getattr(algo, "distribution", ActionDistribution.TANH_NORMAL),
        recurrent_size=getattr(algo, "recurrent_size", 128),
        torso=getattr(algo, "torso", "auto"),
        head_sizes=getattr(algo, "head_sizes", ()),
        **given,
    )
    return {**modules, "actor": actor, "critic": critic}


def make_collector(
    config: Config,
    policy: Any,
    *,
    total_frames: int,
    seed: int | None,
    init_random_frames: int = -1,
    replay_buffer: Any = None,
    reads: Any = None,
) -> Any:
    """Remote collectors (a RayCollector), or with ``collector.num_collectors: 0`` a local
    SyncDataCollector acting with ``policy`` itself (no Ray).

    ``seed=None`` leaves the collector unseeded, for a caller that loads its
    saved state instead (seeding resets every env and torch's generator).
    ``replay_buffer``: the remote collectors write into it (decoupled mode,
    first ready: ``collector.sync`` is not used). ``reads``: the env keys the run's
    modules read (:meth:`~fleetrl.algorithms.Algorithm.env_keys_read`), where known: an env
    that can leave out what nothing reads does (a PettingZoo env's global ``"state"``).
    """
    from fleetrl.collectors.rollout_options import RolloutOptions

    c, e = config.collector, config.env
    env = create_env_fn(resolved_env(config))  # the run's resolution, where it verified here
    if reads is not None and hasattr(env, "reading"):
        env = env.reading(reads)
    # env.normalize_reward: the collectors track each env's discounted return (fleetrl.networks.normalization)
    return_discount = config.algo.gamma if e.normalize_reward else None
    # the sizes the config's verification checked (the same object, for the config's budget)
    rollout = RolloutOptions.from_config(config, total_frames=total_frames)
    if c.fleet.min == 0:
        from fleetrl.collectors import SyncDataCollector

        collector = SyncDataCollector(
            env,
            policy,
            rollout=rollout,
            init_random_frames=init_random_frames,
            overlap=c.overlap,
            return_discount=return_discount,
        )
    else:
        from fleetrl.collectors import RayCollector
        from fleetrl.collectors.inference.options import InferenceOptions
        from fleetrl.collectors.remote.fleet_options import FleetOptions

        collector = RayCollector(
            env,
            policy,
            rollout=rollout,
            num_collectors=c.fleet,
            num_workers_per_collector=e.num_envs,
            # decoupled: the workers write into the buffer, first ready, whatever collector.sync
            fleet=FleetOptions.from_config(c, sync=c.sync and replay_buffer is None),
            init_random_frames=init_random_frames,
            collector_kwargs={"overlap": c.overlap, "return_discount": return_discount},
            remote_configs={"num_cpus": c.num_cpus_per_collector},
            ray_init_config={"address": c.address} if c.address else None,
            replay_buffer=replay_buffer,
            backend=config.trainer.backend,
            inference=InferenceOptions.from_config(c),
        )
    if seed is not None:
        collector.set_seed(seed)
    return collector

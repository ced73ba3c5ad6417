"""Verify a config as a whole: every problem at once, in config keys, before any actor starts.

:func:`verify` ``(config, env_spec) -> [Problem]`` gathers every problem of a
:class:`~fleetrl.config.Config`, from its env section resolved once
(:func:`~fleetrl.envs.engine.resolve_env`): the type rules every field keeps
(finite floats, Enum values), the range of each key (:data:`RANGES`), the rules
that tie keys together (batch sizes, preemption, overlap, decoupling,
normalization, the learner's mode, the device), the algorithm section's own
checks, the engine's, the sweep's, and what the env's spaces (an
:class:`~fleetrl.envs.EnvSpec`) allow: the algorithm's kind of actions, a
convolutional network, normalization. Each :class:`~fleetrl.errors.Problem`
names the key, the value and what is allowed. What depends on the cluster
rather than the config (its CPUs and custom resources) is
:func:`resource_problems`'s, asked once Ray runs, before any actor starts.

:func:`describe` builds the env once to read its spaces; :func:`check_config`
runs both, raises one :class:`~fleetrl.errors.ConfigError`, and returns a
:class:`CheckedConfig` (the config, its resolved env, its spec) that a run takes
without checking again (:func:`checked_config`); :func:`check` returns its spec.

By concern:

- :mod:`~fleetrl.setup.verify.checked`: the whole (:func:`verify`, :func:`check`,
  :class:`CheckedConfig`);
- :mod:`~fleetrl.setup.verify.rules`: the rules and ranges of the keys;
- :mod:`~fleetrl.setup.verify.env`: the env's checks (:func:`describe`);
- :mod:`~fleetrl.setup.verify.sweep`: a sweep's checks (``tune``);
- :mod:`~fleetrl.setup.verify.resources`: the cluster's resources.

Examples:
    >>> from fleetrl.setup import parse_config
    >>> config, _ = parse_config({"algorithm": "ppo", "env": {"num_envs": 0}})
    >>> [str(p) for p in verify(config, None)]
    ['env.num_envs=0 is invalid: must be > 0']
"""

from __future__ import annotations

from fleetrl.setup.verify.checked import (
    CheckedConfig,
    check,
    check_config,
    checked_config,
    resolved_env,
    verified,
    verify,
)
from fleetrl.setup.verify.env import (
    ACTION_KINDS,
    ACTIONS_MSG,
    ENV_MAKE_MSG,
    REPLAY_MEMORY_MSG,
    UNKNOWN_ENV_MSG,
    describe,
)
from fleetrl.setup.verify.resources import (
    GRAD_WORKER_RESOURCES_MSG,
    GRAD_WORKERS_MSG,
    NODE_MSG,
    RESOURCES_MSG,
    SERVER_CPUS_MSG,
    resource_problems,
)
from fleetrl.setup.verify.rules import (
    CONFIG_NAMES,
    DECOUPLED_NEEDS,
    DEVICE_PROBLEM,
    NORMALIZING_ALGORITHMS,
    RANGES,
    TRACKER_EXTRA_MSG,
    TRACKERS,
    WANDB_PROJECT_FORBIDS,
)
from fleetrl.setup.verify.sweep import FLOAT_DRAWS, METRIC_PREFIXES, PBT_KEYS_MSG

__all__ = [
    "ACTIONS_MSG",
    "ACTION_KINDS",
    "CONFIG_NAMES",
    "DECOUPLED_NEEDS",
    "DEVICE_PROBLEM",
    "ENV_MAKE_MSG",
    "FLOAT_DRAWS",
    "GRAD_WORKERS_MSG",
    "GRAD_WORKER_RESOURCES_MSG",
    "METRIC_PREFIXES",
    "NODE_MSG",
    "NORMALIZING_ALGORITHMS",
    "PBT_KEYS_MSG",
    "RANGES",
    "REPLAY_MEMORY_MSG",
    "RESOURCES_MSG",
    "SERVER_CPUS_MSG",
    "TRACKERS",
    "TRACKER_EXTRA_MSG",
    "UNKNOWN_ENV_MSG",
    "WANDB_PROJECT_FORBIDS",
    "CheckedConfig",
    "check",
    "check_config",
    "checked_config",
    "describe",
    "resolved_env",
    "resource_problems",
    "verified",
    "verify",
]

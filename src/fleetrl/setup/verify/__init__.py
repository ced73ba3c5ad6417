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
- :mod:`~fleetrl.setup.verify.rules`: the rules and ranges of the keys, all but the
  device's needing neither the env nor torch (:func:`config_rules`: ``fleetrl train``
  runs them before torch is imported);
- :mod:`~fleetrl.setup.verify.env`: the env's checks (:func:`describe`);
- :mod:`~fleetrl.setup.verify.sweep`: a sweep's checks (``tune``);
- :mod:`~fleetrl.setup.verify.resources`: the cluster's resources.

Examples:
    >>> from fleetrl.setup import parse_config
    >>> from fleetrl.setup.verify import verify
    >>> config, _ = parse_config({"algorithm": "ppo", "env": {"num_envs": 0}})
    >>> [str(p) for p in verify(config, None)]
    ['env.num_envs=0 is invalid: must be > 0']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetrl._lazy import lazy_exports

#: public name -> the module that defines it (imported when first used, PEP 562: the
#: rules that need no env, fleetrl.setup.verify.rules, import no torch)
_EXPORTS = {
    "ACTIONS_MSG": "fleetrl.setup.verify.env",
    "ACTION_KINDS": "fleetrl.setup.verify.env",
    "CONFIG_NAMES": "fleetrl.setup.verify.rules",
    "DECOUPLED_NEEDS": "fleetrl.setup.verify.rules",
    "DEVICE_PROBLEM": "fleetrl.setup.verify.rules",
    "ENV_MAKE_MSG": "fleetrl.setup.verify.env",
    "FLOAT_DRAWS": "fleetrl.setup.verify.sweep",
    "GRAD_WORKERS_MSG": "fleetrl.setup.verify.resources",
    "GRAD_WORKER_RESOURCES_MSG": "fleetrl.setup.verify.resources",
    "METRIC_PREFIXES": "fleetrl.setup.verify.sweep",
    "NODE_MSG": "fleetrl.setup.verify.resources",
    "NORMALIZING_ALGORITHMS": "fleetrl.setup.verify.rules",
    "PBT_KEYS_MSG": "fleetrl.setup.verify.sweep",
    "RANGES": "fleetrl.setup.verify.rules",
    "REPLAY_MEMORY_MSG": "fleetrl.setup.verify.env",
    "RESOURCES_MSG": "fleetrl.setup.verify.resources",
    "SERVER_CPUS_MSG": "fleetrl.setup.verify.resources",
    "TRACKERS": "fleetrl.setup.verify.rules",
    "TRACKER_EXTRA_MSG": "fleetrl.setup.verify.rules",
    "UNKNOWN_ENV_MSG": "fleetrl.setup.verify.env",
    "WANDB_PROJECT_FORBIDS": "fleetrl.setup.verify.rules",
    "CheckedConfig": "fleetrl.setup.verify.checked",
    "check": "fleetrl.setup.verify.checked",
    "check_config": "fleetrl.setup.verify.checked",
    "checked_config": "fleetrl.setup.verify.checked",
    "config_rules": "fleetrl.setup.verify.rules",
    "describe": "fleetrl.setup.verify.env",
    "resolved_env": "fleetrl.setup.verify.checked",
    "resource_problems": "fleetrl.setup.verify.resources",
    "verified": "fleetrl.setup.verify.checked",
    "verify": "fleetrl.setup.verify.checked",
}

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
    "config_rules",
    "describe",
    "resolved_env",
    "resource_problems",
    "verified",
    "verify",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs see
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
        config_rules,
    )
    from fleetrl.setup.verify.sweep import FLOAT_DRAWS, METRIC_PREFIXES, PBT_KEYS_MSG

"""Setup: load a config, verify it, build what a run needs from it.

Between the entry points (the CLI, the Trainer) and the parts they build:

- :mod:`~fleetrl.setup.parse`: YAML and ``key=value`` overrides in, a typed
  :class:`~fleetrl.config.Config` out with the parsing problems (:func:`parse_config`),
  and back (:func:`config_to_dict`);
- :mod:`~fleetrl.setup.verify`: every problem of a config at once, in config keys
  (:func:`fleetrl.setup.verify.verify`, :func:`check`), with the env resolved and
  described once (:func:`describe`), split by concern (rules, env, sweep, resources);
  :func:`check_config` returns a :class:`CheckedConfig` that a run takes without
  checking again; ``verify`` is not exported here, where the name is the package's;
- :mod:`~fleetrl.setup.load`: parse, then verify once (:func:`load_config`,
  :func:`config_from_dict`);
- :mod:`~fleetrl.setup.build`: the algorithm and the collectors of a config
  (:func:`make_algorithm`, :func:`make_collector`);
- :mod:`~fleetrl.setup.resume`: what a resumed run may change.

Imported when first used (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetrl._lazy import lazy_exports

_EXPORTS = {
    "CheckedConfig": "fleetrl.setup.verify",
    "check": "fleetrl.setup.verify",
    "check_config": "fleetrl.setup.verify",
    "config_from_dict": "fleetrl.setup.load",
    "config_to_dict": "fleetrl.setup.parse",
    "describe": "fleetrl.setup.verify",
    "load_config": "fleetrl.setup.load",
    "make_algorithm": "fleetrl.setup.build",
    "make_collector": "fleetrl.setup.build",
    "parse_config": "fleetrl.setup.parse",
    "read_yaml_mapping": "fleetrl.setup.parse",
}

__all__ = [
    "CheckedConfig",
    "check",
    "check_config",
    "config_from_dict",
    "config_to_dict",
    "describe",
    "load_config",
    "make_algorithm",
    "make_collector",
    "parse_config",
    "read_yaml_mapping",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:
    from fleetrl.setup.build import make_algorithm, make_collector
    from fleetrl.setup.load import config_from_dict, load_config
    from fleetrl.setup.parse import config_to_dict, parse_config, read_yaml_mapping
    from fleetrl.setup.verify import CheckedConfig, check, check_config, describe

"""Load a config: parse it (:mod:`fleetrl.setup.parse`), then verify it as a whole
(:func:`fleetrl.setup.verify.check`); one :class:`~fleetrl.errors.ConfigError` lists
every problem, the parsing ones first.

Examples:
    >>> cfg = load_config("configs/ppo_cartpole.yaml", ["ppo.lr=3e-4", "env.num_envs=4"])
    >>> cfg.algorithm, cfg.env.id, cfg.env.num_envs, cfg.algo.lr
    ('ppo', 'CartPole-v1', 4, 0.0003)
    >>> load_config("configs/ppo_cartpole.yaml", ["ppo.lr=-1"])
    Traceback (most recent call last):
    ...
    fleetrl.errors.ConfigError: ...ppo.lr=-1.0 is invalid: must be > 0...
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetrl.config import Config
from fleetrl.setup.parse import parse_config, read_yaml_mapping
from fleetrl.setup.verify import check

__all__ = ["config_from_dict", "load_config"]


def config_from_dict(data: dict[str, Any] | None, overrides: list[str] | None = None) -> Config:
    """Build and verify a Config; raises one ConfigError listing every problem.

    Besides types and ranges, the env is checked (:func:`fleetrl.setup.verify.check`):
    ``env.id`` must be an env the configured engine can make, and its spaces must suit
    the algorithm.
    """
    config, problems = parse_config(data, overrides)
    check(config, problems=problems)
    return config


def load_config(path: str | Path, overrides: list[str] | None = None) -> Config:
    """Load a YAML config file, apply ``key=value`` overrides, verify everything."""
    return config_from_dict(read_yaml_mapping(path, "config"), overrides)

"""Load a config: screen it (parse it and check every rule that needs no env, before torch is
imported: :mod:`fleetrl.setup.screen`), then check what needs the env, once
(:func:`fleetrl.setup.verify.check_config`); one :class:`~fleetrl.errors.ConfigError` lists
the problems of each stage, the parsing ones first.

The config returned carries its verification (its resolved env and spec,
:func:`fleetrl.setup.verify.verified`): a :class:`~fleetrl.run.trainer.Trainer` given it
does not check it again, unless a key changed since.

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
from fleetrl.setup.screen import named_after, read_config_file, screen
from fleetrl.setup.verify.checked import check_config

__all__ = ["config_from_dict", "load_config"]


def config_from_dict(data: dict[str, Any] | None, overrides: list[str] | None = None) -> Config:
    """Build and verify a Config, once; raises one ConfigError listing every problem.

    Besides types and ranges, the env is checked (:func:`fleetrl.setup.verify.check_config`):
    ``env.id`` must be an env the configured engine can make, and its spaces must suit
    the algorithm.
    """
    config, problems = screen(data, overrides)
    return check_config(config, problems, screened=True).config


def load_config(path: str | Path, overrides: list[str] | None = None) -> Config:
    """Load a YAML config file (or the shipped config a bare name names: ``"ppo_cartpole"``),
    apply ``key=value`` overrides, verify everything.

    Every problem is reported at once, each naming its key, the value and what is allowed
    (one :class:`~fleetrl.errors.ConfigError`), before anything starts.

    The run is named after the file (``logging.run_name``, unless the file or an override
    names it), so its default directory is ``runs/<the file's name>_<time>``.

    Examples:
        >>> from fleetrl import ConfigError, load_config
        >>> config = load_config("configs/ppo_cartpole.yaml", ["ppo.lr=3e-4", "env.num_envs=4"])
        >>> config.algorithm, config.env.id, config.env.num_envs, config.algo.lr
        ('ppo', 'CartPole-v1', 4, 0.0003)
        >>> config.logging.run_name
        'ppo_cartpole'
        >>> try:
        ...     load_config("configs/ppo_cartpole.yaml", ["ppo.lr=-1", "env.num_envs=0"])
        ... except ConfigError as err:
        ...     print(err)
        2 problems:
          - env.num_envs=0 is invalid: must be > 0
          - ppo.lr=-1.0 is invalid: must be > 0
    """
    config, problems = screen(read_config_file(path), overrides)
    named_after(config, path)  # before the check: the verified config holds its name
    return check_config(config, problems, screened=True).config

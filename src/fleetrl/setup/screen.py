"""Screen a config before torch is imported: parse it, and check every rule that needs no env.

``fleetrl train`` screens its config first (:func:`screen_file`), so a typo, a value out of
range, a missing file or a bad override is refused in a fraction of a second, before
torch, torchrl or Ray is imported and before Ray starts. The checks that need the env's
spaces (and the device's, which needs torch) follow in
:func:`fleetrl.setup.verify.check_config`, which does not run these again
(``screened=True``). :func:`fleetrl.setup.load.load_config` does both, and lists the
problems of both stages at once; ``fleetrl train`` refuses at the first stage that finds
any, so a config with a typo and an env that does not suit it is refused for the typo
first, then, once the typo is mended, for the env.

Examples:
    >>> config = screen_file("ppo_cartpole", ["ppo.lr=1e-3"])  # a shipped config, by name
    >>> config.algorithm, config.algo.lr
    ('ppo', 0.001)
    >>> try:
    ...     screen_file("ppo_cartpole", ["ppo.lr=-1", "collector.num_colectors=4"])
    ... except ConfigError as err:
    ...     print(err)
    2 problems:
      - collector.num_colectors is not a config key; did you mean 'collector.num_collectors'?
      - ppo.lr=-1.0 is invalid: must be > 0
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetrl.config import Config
from fleetrl.errors import ConfigError, Problem, Problems
from fleetrl.setup.parse import parse_config, read_yaml_mapping
from fleetrl.setup.shipped import config_path, missing_config_hint
from fleetrl.setup.verify.rules import config_rules

__all__ = ["named_after", "read_config_file", "said_already", "screen", "screen_file"]


def said_already(problem: Problem, found: list[Problem]) -> bool:
    """A key that has a problem already gets no second one (a bad type, then its range)."""
    return problem.text is None and any(p.key == problem.key for p in found)


def screen(
    data: dict[str, Any] | None, overrides: list[str] | None = None
) -> tuple[Config, list[Problem]]:
    """The config of ``data`` with ``key=value`` ``overrides``, parsed and checked by every
    rule that needs no env (:func:`~fleetrl.setup.verify.config_rules`), and every problem
    found, the parsing ones first (a key with a parsing problem gets no second one)."""
    config, found = parse_config(data, overrides)
    check = Problems()
    config_rules(config, check)
    found += [p for p in check if p not in found and not said_already(p, found)]
    return config, found


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The mapping of a YAML config file, or of the shipped config a bare name names
    (:func:`~fleetrl.setup.shipped.config_path`); ConfigError when there is none."""
    file = config_path(path)
    if not file.exists():
        raise ConfigError([Problem("config", str(path), missing_config_hint(path))])
    return read_yaml_mapping(file, "config")


def screen_file(path: str | Path, overrides: list[str] | None = None) -> Config:
    """:func:`screen` of a config file (:func:`read_config_file`), named after it
    (:func:`named_after`): the config, or one ConfigError listing every problem found.
    ``fleetrl train`` calls it before torch is imported; the env's checks follow
    (:func:`~fleetrl.setup.verify.check_config` with ``screened=True``)."""
    config, found = screen(read_config_file(path), overrides)
    if found:
        raise ConfigError(found)
    return named_after(config, path)


def named_after(config: Config, path: str | Path) -> Config:
    """``config`` with its run named after its file (``logging.run_name``, unless the file
    or an override names it), so its default directory is ``runs/<the file's name>_<time>``."""
    if config.logging.run_name is None:
        config.logging.run_name = Path(path).stem
    return config

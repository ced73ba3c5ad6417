"""The configs that ship with fleetrl: package data, named by their file's stem.

``fleetrl train ppo_cartpole`` runs the shipped ``ppo_cartpole.yaml`` when no file of
that name is in the current directory (:func:`config_path`: a path that exists, or that
names a folder, is always a file's); ``fleetrl configs`` lists them with what each reaches
in what time (:func:`shipped_configs`), read from the benchmark results that
``benchmarks/config_results.py`` gathers into ``results.json`` beside them.

In a checkout, the top-level ``configs`` is a link to the same folder, so
``fleetrl train configs/ppo_cartpole.yaml`` names the same file.

Nothing here imports torch: the CLI resolves and lists configs at once.

Examples:
    >>> config_path("ppo_cartpole") == CONFIG_DIR / "ppo_cartpole.yaml"
    True
    >>> config_path("ppo_cartpole.yaml").name, config_path("my/own.yaml")
    ('ppo_cartpole.yaml', PosixPath('my/own.yaml'))
    >>> cartpole = next(c for c in shipped_configs() if c.name == "ppo_cartpole")
    >>> cartpole.algorithm, cartpole.env_id
    ('ppo', 'CartPole-v1')
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fleetrl.config import Config, EnvConfig

__all__ = [
    "CONFIG_DIR",
    "RESULTS_FILE",
    "ShippedConfig",
    "config_path",
    "missing_config_hint",
    "shipped_config",
    "shipped_configs",
]

#: the shipped configs, inside the installed package
CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
#: what each shipped config reaches, from the benchmark results (config name -> entry)
RESULTS_FILE = CONFIG_DIR / "results.json"


@dataclass(frozen=True)
class ShippedConfig:
    """One shipped config: its name, file, algorithm, env and what it was measured to reach."""

    name: str
    path: Path
    algorithm: str
    env_id: str
    #: what it reaches in what time, from a benchmark (None: not measured yet)
    reaches: str | None
    #: the benchmark result file that measured it (a path in a fleetrl checkout)
    source: str | None

    def line(self, width: int = 28) -> str:
        """One line of ``fleetrl configs``: name, algorithm, env, what it reaches."""
        measured = self.reaches or "not measured yet"
        return f"{self.name:<{width}} {self.algorithm:<7} {self.env_id:<24} {measured}"


def _stem(name: str) -> str:
    return name[: -len(".yaml")] if name.endswith(".yaml") else name


def shipped_config(name: str) -> Path | None:
    """The shipped config file a bare ``name`` (``ppo_cartpole`` or ``ppo_cartpole.yaml``)
    names; None when ``name`` has a folder in it or no shipped config has that name."""
    if not name or Path(name).name != name:
        return None
    path = CONFIG_DIR / f"{_stem(name)}.yaml"
    return path if path.is_file() else None


def config_path(arg: str | Path) -> Path:
    """The file ``fleetrl train ARG`` reads: ``arg`` where it exists (a path means a file),
    or ``ARG.yaml`` here (a copy edited in place wins over the shipped one), else the
    shipped config that a bare name names, else ``arg`` (its loading says it is missing,
    with :func:`missing_config_hint`)."""
    path = Path(arg)
    if path.exists():
        return path
    local = path.with_name(f"{path.name}.yaml")
    if not path.name.endswith(".yaml") and local.is_file():
        return local
    return shipped_config(str(arg)) or path


def missing_config_hint(arg: str | Path) -> str:
    """What a user who gave a config that does not exist can do instead."""
    names = [p.stem for p in sorted(CONFIG_DIR.glob("*.yaml"))]
    close = difflib.get_close_matches(Path(str(arg)).stem, names, n=3, cutoff=0.6)
    said = f"did you mean {', '.join(close)}? " if close else ""
    return (
        f"no such file; {said}a shipped config is named alone (fleetrl train ppo_cartpole), "
        "and 'fleetrl configs' lists them all"
    )


def _results() -> dict[str, Any]:
    try:
        return json.loads(RESULTS_FILE.read_text())["configs"]
    except (OSError, ValueError, KeyError):
        return {}


def shipped_configs() -> list[ShippedConfig]:
    """Every shipped config, by name, with its algorithm, env and measured result."""
    results = _results()
    found = []
    for path in sorted(CONFIG_DIR.glob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        env = data.get("env") or {}
        result = results.get(path.stem) or {}
        found.append(
            ShippedConfig(
                name=path.stem,
                path=path,
                algorithm=str(data.get("algorithm", Config.algorithm)),
                env_id=str(env.get("id", EnvConfig.id)),
                reaches=result.get("reaches"),
                source=result.get("source"),
            )
        )
    return found

"""A sweep's search space: ``tune.search``'s distributions, read and checked.

Each entry of ``tune.search`` maps a config key to a distribution written as
a call: ``uniform(a, b)``, ``loguniform(a, b)``, ``randint(a, b)`` (``a`` to
``b - 1``), ``choice(v1, v2, ...)`` or ``grid(v1, v2, ...)``. The values are
YAML (``choice([64, 64], [256, 256])`` for lists). :func:`parse_dimension`
reads one; :meth:`Dimension.candidates` are the values the checks try in the
key's place (the bounds, every choice), so that a range outside what the key
allows is refused before any trial starts (:func:`fleetrl.setup.verify`).
:meth:`Dimension.domain` is the Ray Tune sampler (imported only then).

Examples:
    >>> dim = parse_dimension("ppo.lr", "loguniform(1e-4, 1e-2)")
    >>> dim.kind, dim.values, dim.candidates()
    (<Distribution.LOGUNIFORM: 'loguniform'>, (0.0001, 0.01), (0.0001, 0.01))
    >>> parse_dimension("ppo.hidden_sizes", "choice([64, 64], [256, 256])").values
    ([64, 64], [256, 256])
    >>> parse_dimension("ppo.lr", "lognormal(0, 1)")
    Traceback (most recent call last):
    ...
    fleetrl.errors.ConfigError: tune.search.ppo.lr='lognormal(0, 1)' is invalid: ...
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from typing import Any

import yaml

from fleetrl.errors import ConfigError, Problem

__all__ = ["DISTRIBUTIONS_HELP", "Dimension", "Distribution", "parse_dimension", "search_key"]


class Distribution(str, enum.Enum):
    UNIFORM = "uniform"
    LOGUNIFORM = "loguniform"
    RANDINT = "randint"
    CHOICE = "choice"
    GRID = "grid"


DISTRIBUTIONS_HELP = (
    "write uniform(a, b), loguniform(a, b) (0 < a < b), randint(a, b) (ints a to b-1), "
    "choice(v1, v2, ...) or grid(v1, v2, ...)"
)
_CALL = re.compile(r"^\s*([a-z_]+)\s*\((.*)\)\s*$", re.DOTALL)


def search_key(key: str) -> str:
    """The config key that names a search entry in messages: ``tune.search.<key>``."""
    return f"tune.search.{key}"


@dataclass(frozen=True)
class Dimension:
    """One searched key and its distribution."""

    key: str
    kind: Distribution
    values: tuple[Any, ...]
    spec: str
    """the distribution as written."""

    def candidates(self) -> tuple[Any, ...]:
        """Values the checks put in the key's place: the bounds, or every choice."""
        if self.kind == Distribution.RANDINT:
            low, high = self.values
            return (low, high - 1)
        return self.values

    @property
    def is_numeric_range(self) -> bool:
        return self.kind in (Distribution.UNIFORM, Distribution.LOGUNIFORM, Distribution.RANDINT)

    def domain(self) -> Any:
        """The Ray Tune sampler of this distribution (``ray.tune.loguniform(...)``, ...)."""
        from ray import tune

        if self.kind == Distribution.GRID:
            return tune.grid_search(list(self.values))
        if self.kind == Distribution.CHOICE:
            return tune.choice(list(self.values))
        return getattr(tune, self.kind.value)(*self.values)


def parse_dimension(key: str, spec: Any) -> Dimension:
    """``key``'s distribution from its text; a ConfigError names ``tune.search.<key>``."""
    name = search_key(key)
    if not isinstance(spec, str):
        raise _refuse(name, spec, f"must be a distribution as text: {DISTRIBUTIONS_HELP}")
    match = _CALL.match(spec)
    kinds = [d.value for d in Distribution]
    if match is None or match.group(1) not in kinds:
        said = f"unknown distribution {match.group(1)!r}; " if match else ""
        raise _refuse(name, spec, said + DISTRIBUTIONS_HELP)
    kind = Distribution(match.group(1))
    try:
        values = yaml.safe_load(f"[{match.group(2)}]")
    except yaml.YAMLError:
        said = "its arguments are not YAML values; " + DISTRIBUTIONS_HELP
        raise _refuse(name, spec, said) from None
    values = tuple(_number(v) for v in values)
    if kind in (Distribution.CHOICE, Distribution.GRID):
        if not values:
            raise _refuse(name, spec, f"{kind.value} needs at least one value")
        return Dimension(key, kind, values, spec)
    if len(values) != 2 or not all(_is_number(v) for v in values):
        raise _refuse(name, spec, f"{kind.value} takes two numbers, low and high")
    low, high = values
    if not low < high:
        raise _refuse(name, spec, f"{kind.value} needs low < high")
    if kind == Distribution.LOGUNIFORM and low <= 0:
        raise _refuse(name, spec, "loguniform needs 0 < low")
    if kind == Distribution.RANDINT:
        if not all(isinstance(v, int) for v in values):
            raise _refuse(name, spec, "randint takes two ints")
    else:
        values = (float(low), float(high))
    return Dimension(key, kind, values, spec)


def _number(value: Any) -> Any:
    """YAML reads ``1e-4`` as text: a number written so is a float."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def _refuse(name: str, spec: Any, allowed: str) -> ConfigError:
    return ConfigError([Problem(name, spec, allowed)])

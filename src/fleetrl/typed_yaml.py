"""The YAML/CLI edge of typed configs: plain mappings in, typed dataclasses out, and back.

:func:`fill_dataclass` builds a dataclass from a mapping, checking each value
against its field's type hint and converting a value to its Enum member
(``"async"`` -> ``GradCommunication.ASYNC``); every problem is gathered, with the
closest known key for a typo. :func:`to_plain` is the way back (Enums as their
values), safe for ``yaml.safe_dump`` and ``torch.load(weights_only=True)``.
:func:`parse_override` reads ``key=value`` overrides, :func:`read_yaml_mapping`
a config file. :class:`Checks` gathers range problems, one per key. Nothing
here knows fleetrl's sections: :mod:`fleetrl.config` does.

Examples:
    >>> from fleetrl.config import SchemeConfig
    >>> problems = []
    >>> scheme = fill_dataclass(
    ...     SchemeConfig, {"grad_communication": "async", "num_grad_worker": 2}, "scheme.", problems
    ... )
    >>> scheme.grad_communication
    <GradCommunication.ASYNC: 'async'>
    >>> problems
    ["scheme.num_grad_worker is not a config key; did you mean 'scheme.num_grad_workers'?"]
    >>> to_plain(scheme)["grad_communication"]
    'async'
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import enum
import math
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from fleetrl.errors import ConfigError

__all__ = [
    "Checks",
    "allowed_values",
    "check_fields",
    "deep_copy",
    "enum_of",
    "enum_value",
    "fill_dataclass",
    "parse_override",
    "read_yaml_mapping",
    "shown",
    "to_plain",
    "yaml_problem",
]


class Checks:
    """Gathers a config's range problems, one per key: ``<key>=<value> is invalid: <allowed>``.

    Examples:
        >>> problems = []
        >>> check = Checks(problems).section("ppo")
        >>> check(0.0 > 0, "lr", 0.0, "must be > 0")
        >>> problems
        ['ppo.lr=0.0 is invalid: must be > 0']
    """

    def __init__(self, problems: list[str], prefix: str = ""):
        self.problems = problems
        self.prefix = prefix

    def __call__(self, ok: bool, key: str, value: Any, allowed: str) -> None:
        path = f"{self.prefix}{key}"
        # one problem per key: a .nan lr is not finite, and need not also be "not > 0"
        if not ok and not any(p.startswith(f"{path}=") for p in self.problems):
            self.problems.append(f"{path}={shown(value)!r} is invalid: {allowed}")

    def section(self, name: str) -> Checks:
        """The same problems, with keys under ``name.``."""
        return Checks(self.problems, f"{self.prefix}{name}.")


def enum_of(hint: Any) -> type[enum.Enum] | None:
    return hint if isinstance(hint, type) and issubclass(hint, enum.Enum) else None


def enum_value(cls: type[enum.Enum], value: Any) -> enum.Enum | None:
    """``value`` as a member of ``cls`` (given by member or by value), None if it is neither."""
    if isinstance(value, cls):
        return value
    try:
        return cls(value)
    except ValueError:
        return None


def allowed_values(cls: type[enum.Enum]) -> str:
    values = [e.value for e in cls]
    if len(values) == 2:
        return f"must be {values[0]!r} or {values[1]!r}"
    return f"must be one of {values}"


def shown(value: Any) -> Any:
    """What a message shows: an Enum member by its value, as the YAML has it."""
    return value.value if isinstance(value, enum.Enum) else value


def _type_ok(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is dict:
        key_hint, value_hint = typing.get_args(hint) or (Any, Any)
        return isinstance(value, dict) and all(
            _type_ok(k, key_hint) and _type_ok(v, value_hint) for k, v in value.items()
        )
    if origin is list:
        (inner,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(_type_ok(v, inner) for v in value)
    if hint is Any:
        return True
    return isinstance(value, hint)


def fill_dataclass(
    cls: type, data: dict[str, Any], prefix: str, problems: list[str], hidden: tuple[str, ...] = ()
) -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in hidden]
    obj = cls()
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f"; did you mean '{prefix}{close[0]}'?" if close else f"; known: {names}"
            problems.append(f"{path} is not a config key{hint}")
            continue
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                problems.append(
                    f"{path}={value!r} is invalid: must be a mapping of {hint.__name__} fields"
                )
                continue
            setattr(obj, key, fill_dataclass(hint, value, f"{path}.", problems))
            continue
        enum_cls = enum_of(hint)
        if enum_cls is not None:  # the YAML/CLI edge: a value becomes its Enum member
            member = enum_value(enum_cls, value)
            if member is None:
                problems.append(f"{path}={value!r} is invalid: {allowed_values(enum_cls)}")
            else:
                setattr(obj, key, member)
            continue
        if isinstance(value, int) and not isinstance(value, bool) and hint in (float, float | None):
            value = float(value)
        if not _type_ok(value, hint):
            problems.append(f"{path}={value!r} is invalid: must be {_hint_name(hint)}")
            continue
        setattr(obj, key, value)
    return obj


def _hint_name(hint: Any) -> str:
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"ppo.lr=1e-3"`` -> (["ppo", "lr"], 0.001)."""
    if "=" not in text:
        raise ConfigError([f"override {text!r} is invalid: write key=value, e.g. ppo.lr=1e-3"])
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as err:
        raise ConfigError(
            [
                f"override {text!r} is invalid: its value is not YAML ({yaml_problem(err)}); "
                "close brackets and quotes, e.g. ppo.hidden_sizes=[64, 64]"
            ]
        ) from None
    if isinstance(value, str):  # YAML reads "1e-3" as a string
        with contextlib.suppress(ValueError):
            value = float(value) if any(ch in value for ch in ".eE") else value
    return key.strip().split("."), value


def read_yaml_mapping(path: str | Path, arg: str) -> dict[str, Any]:
    """The mapping a YAML file holds; ConfigError naming ``arg`` and the file otherwise.

    Refuses a missing file, a YAML syntax error (with its line and column), an
    empty file (which would silently train the defaults) and a file that holds
    something other than a mapping.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError([f"{arg}={str(path)!r} is invalid: no such file"])
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(
            [f"{arg}={str(path)!r} is invalid: {path} is not valid YAML ({yaml_problem(err)})"]
        ) from None
    if data is None:
        raise ConfigError(
            [
                f"{arg}={str(path)!r} is invalid: {path} holds no settings; a config names at "
                "least the algorithm and env.id (start from one in configs/)"
            ]
        )
    if not isinstance(data, dict):
        raise ConfigError(
            [
                f"{arg}={str(path)!r} is invalid: {path} must hold a mapping of config sections "
                f"(algorithm, env, collector, ...), not a {type(data).__name__}"
            ]
        )
    return data


def yaml_problem(err: yaml.YAMLError) -> str:
    """'<problem> at line L, column C' of a YAML error (lines counted from 1)."""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    context = getattr(err, "context", None)
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{context + ': ' if context else ''}{problem}{where}"


def to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_plain(v) for v in value]
    return value


def deep_copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: deep_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [deep_copy(v) for v in data]
    return data


def check_fields(obj: Any, check: Checks) -> None:
    """What holds for every field of a dataclass, nested ones too: a float is finite (``.nan``
    and ``.inf`` pass ``> 0``-style checks) and an Enum-typed field holds one of its values."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        enum_cls = enum_of(hints[f.name])
        if dataclasses.is_dataclass(value):
            check_fields(value, check.section(f.name))
        elif isinstance(value, float) and not math.isfinite(value):
            check(False, f.name, value, "must be a finite number")
        elif enum_cls is not None:
            check(enum_value(enum_cls, value) is not None, f.name, value, allowed_values(enum_cls))

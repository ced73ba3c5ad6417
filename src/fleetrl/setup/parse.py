"""Parse a config: YAML and ``key=value`` overrides in, a typed :class:`~fleetrl.config.Config` out.

The YAML/CLI edge: :func:`fill_dataclass` builds a dataclass from a mapping,
checking each value against its field's type hint and converting a value to
its Enum member (``"async"`` -> ``LearnerMode.ASYNC``); every problem is
gathered, with the closest known key for a typo. :func:`parse_override` reads
``key=value`` overrides (values parsed as YAML: ``1e-3``, ``true``,
``[64, 64]``), :func:`read_yaml_mapping` a config file, :func:`to_plain` and
:func:`config_to_dict` are the way back (Enums as their values), safe for
``yaml.safe_dump`` and ``torch.load(weights_only=True)``.

:func:`parse_config` gathers the parsing problems without raising;
:func:`fleetrl.setup.load.load_config` and
:func:`~fleetrl.setup.load.config_from_dict` then verify the config as a whole
(:func:`fleetrl.setup.verify.check`): one :class:`~fleetrl.errors.ConfigError`
lists every problem, the parsing ones with the rest. A config names its algorithm (``algorithm: ppo``) and holds its
section (``ppo:``); another algorithm's section in a file (an older run's
``config.yaml``, or a file switched with ``algorithm=...``) is dropped with one
logged warning, and an override naming one is a problem.

Examples:
    >>> cfg, problems = parse_config({"algorithm": "ppo", "ppo": {"lr": 3e-4}}, ["env.num_envs=4"])
    >>> cfg.algorithm, cfg.env.num_envs, cfg.algo.lr, problems
    ('ppo', 4, 0.0003, [])
    >>> sorted(config_to_dict(cfg))
    ['algorithm', 'collector', 'env', 'logging', 'ppo', 'scheme', 'trainer']
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import enum
import logging
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from fleetrl.algorithms.sections import SECTIONS
from fleetrl.config import Config, TuneConfig, enum_of, enum_value, type_hints
from fleetrl.errors import ConfigError, Problem

__all__ = [
    "OTHER_SECTION_MSG",
    "allowed_values",
    "config_to_dict",
    "deep_copy",
    "fill_dataclass",
    "parse_config",
    "parse_override",
    "read_yaml_mapping",
    "to_plain",
    "with_algorithm_section",
    "with_value",
    "yaml_problem",
]

log = logging.getLogger(__name__)

OTHER_SECTION_MSG = (
    "{key} is invalid here: the {section} section belongs to algorithm={section!r} and this "
    "config trains algorithm={algorithm!r}; set {algorithm}.{rest} instead, or train {section} "
    "with algorithm={section}"
)
IGNORED_WARNING = (
    "config: ignored %s (this config trains algorithm=%r and holds only its section; a run's "
    "config.yaml keeps just that one)"
)


#: keys that were renamed, and what to write instead (the docs' changelog lists them)
RENAMED: dict[str, str] = {
    "trainer.clip_schedule": "write ppo.clip_schedule (appo.clip_schedule for APPO)",
    "collector.max_policy_lag": "write collector.max_served_lag",
    "scheme.max_policy_lag": "write scheme.max_gradient_lag",
    "scheme.grad_communication": "write scheme.update: sync or async",
    "scheme.decentralized_update": "write scheme.update: decentralized",
    "impala.max_policy_lag": "write impala.max_learn_lag",
    "appo.max_policy_lag": "write appo.max_learn_lag",
    "sac.start_steps": "write sac.learning_starts",
    # the optimizer's and the networks' keys moved from trainer to each algorithm's section
    **{
        f"trainer.{key}": (
            f"it moved to the trained algorithm's section: write ppo.{key} for PPO "
            f"(a2c.{key} for A2C, and so on)"
        )
        for key in (
            "lr",
            "lr_schedule",
            "gamma",
            "gae_lambda",
            "entropy_coef",
            "critic_coef",
            "max_grad_norm",
            "normalize_advantage",
            "hidden_sizes",
        )
    },
}
RENAMED_MSG = "{key} is not a config key: it was renamed; {fix} (see the changelog)"
#: the changelog's section that lists every key in :data:`RENAMED` (a test holds the two equal)
CHANGELOG_SECTION = "### Renamed config keys"


def allowed_values(cls: type[enum.Enum]) -> str:
    values = [e.value for e in cls]
    if len(values) == 2:
        return f"must be {values[0]!r} or {values[1]!r}"
    return f"must be one of {values}"


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
    cls: type,
    data: dict[str, Any],
    prefix: str,
    problems: list[Problem],
    hidden: tuple[str, ...] = (),
    *,
    base: Any = None,
) -> Any:
    """An instance of ``cls`` from a mapping: each value checked against its field's type hint
    (an Enum's value becomes its member); every problem is appended to ``problems`` (an
    unknown key with the closest known one), and a field with a bad value keeps its default
    (``base``'s value where given: the mapping then changes a copy of ``base``)."""
    hints = type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in hidden]
    obj = cls() if base is None else dataclasses.replace(base)
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in names and path in RENAMED:
            problems.append(Problem(path, text=RENAMED_MSG.format(key=path, fix=RENAMED[path])))
            continue
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f"; did you mean '{prefix}{close[0]}'?" if close else f"; known: {names}"
            problems.append(Problem(path, text=f"{path} is not a config key{hint}"))
            continue
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                problems.append(
                    Problem(path, value, f"must be a mapping of {hint.__name__} fields")
                )
                continue
            inner = None if base is None else getattr(base, key)
            setattr(obj, key, fill_dataclass(hint, value, f"{path}.", problems, base=inner))
            continue
        enum_cls = enum_of(hint)
        if enum_cls is not None:  # the YAML/CLI edge: a value becomes its Enum member
            member = enum_value(enum_cls, value)
            if member is None:
                problems.append(Problem(path, value, allowed_values(enum_cls)))
            else:
                setattr(obj, key, member)
            continue
        if isinstance(value, int) and not isinstance(value, bool) and hint in (float, float | None):
            value = float(value)
        if not _type_ok(value, hint):
            problems.append(Problem(path, value, f"must be {_hint_name(hint)}"))
            continue
        setattr(obj, key, value)
    return obj


def _hint_name(hint: Any) -> str:
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"ppo.lr=1e-3"`` -> (["ppo", "lr"], 0.001)."""
    if "=" not in text:
        raise ConfigError(
            [
                Problem(
                    "override",
                    text=f"override {text!r} is invalid: write key=value, e.g. ppo.lr=1e-3",
                )
            ]
        )
    key, raw = text.split("=", 1)
    if not all(key.strip().split(".")):  # "=3", "ppo.=3", "ppo..lr=3"
        said = (
            f"override {text!r} is invalid: the key before '=' needs a name in each dotted "
            "part, e.g. ppo.lr=1e-3"
        )
        raise ConfigError([Problem("override", text=said)])
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as err:
        said = (
            f"override {text!r} is invalid: its value is not YAML ({yaml_problem(err)}); close "
            "brackets and quotes, e.g. ppo.hidden_sizes=[64, 64]"
        )
        raise ConfigError([Problem("override", text=said)]) from None
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
        raise ConfigError([Problem(arg, str(path), "no such file")])
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        allowed = f"{path} is not valid YAML ({yaml_problem(err)})"
        raise ConfigError([Problem(arg, str(path), allowed)]) from None
    if data is None:
        allowed = (
            f"{path} holds no settings; a config names at least the algorithm and env.id "
            "(start from one in configs/)"
        )
        raise ConfigError([Problem(arg, str(path), allowed)])
    if not isinstance(data, dict):
        allowed = (
            f"{path} must hold a mapping of config sections (algorithm, env, collector, ...), "
            f"not a {type(data).__name__}"
        )
        raise ConfigError([Problem(arg, str(path), allowed)])
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


# ------------------------------------------------------------------ configs


def parse_config(
    data: dict[str, Any] | None, overrides: list[str] | None = None
) -> tuple[Config, list[Problem]]:
    """The typed config of a mapping with ``key=value`` overrides applied, and the problems of
    the parsing (unknown keys, values of the wrong type, overrides that cannot be read).

    Nothing is range-checked here (:func:`fleetrl.setup.verify.verify` does): a field with
    a bad value keeps its default, so the other checks can run on the rest at the same time.
    """
    if data is not None and not isinstance(data, dict):
        raise ConfigError([Problem("config", data, "must be a mapping of config sections")])
    data = deep_copy(data or {})
    problems: list[Problem] = []
    parsed = []
    for text in overrides or []:
        try:
            parsed.append((text, *parse_override(text)))
        except ConfigError as err:
            problems.extend(err.details)
    algorithm = data.get("algorithm", Config.algorithm)
    for _, path, value in parsed:
        if path == ["algorithm"]:
            algorithm = value
    _drop_other_sections(data, algorithm)
    for text, path, value in parsed:
        key = ".".join(path)
        if len(path) > 1 and path[0] != algorithm and path[0] in SECTIONS:
            said = OTHER_SECTION_MSG.format(
                key=key, section=path[0], algorithm=algorithm, rest=".".join(path[1:])
            )
            problems.append(Problem(key, text=said))
            continue
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                said = f"override {text!r} is invalid: {part} is not a section"
                problems.append(Problem("override", text=said))
                break
        else:
            node[path[-1]] = value
    return _fill_config(data, problems), problems


def _fill_config(data: dict[str, Any], problems: list[Problem]) -> Config:
    algorithm = data.get("algorithm", Config.algorithm)
    cls = SECTIONS.get(algorithm) if isinstance(algorithm, str) else None
    section = data.pop(algorithm, {}) if cls is not None else {}
    cfg = fill_dataclass(Config, data, "", problems, hidden=("algo",))
    if cls is None:
        cfg.algo = None  # the unknown name is reported by the checks
    elif not isinstance(section, dict):
        allowed = f"must be a mapping of {cls.__name__} fields"
        problems.append(Problem(algorithm, section, allowed))
        cfg.algo = cls()
    else:
        cfg.algo = fill_dataclass(cls, section, f"{algorithm}.", problems)
    return cfg


def with_value(config: Config, key: str, value: Any) -> tuple[Config, list[Problem]]:
    """A copy of ``config`` with the dotted ``key`` set to ``value`` as :func:`parse_config`
    sets an override (typed against the field, an Enum's value as its member), and the
    problems of doing so; ``config`` and the sections off the key's path are not copied
    (nor changed)."""
    *sections, name = key.split(".")
    problems: list[Problem] = []
    data: dict[str, Any] = {name: value}
    for part in reversed(sections[1:]):
        data = {part: data}
    head = sections[0] if sections else None
    if head == config.algorithm and config.algo is not None:
        algo = fill_dataclass(type(config.algo), data, f"{head}.", problems, base=config.algo)
        return dataclasses.replace(config, algo=algo), problems
    if head is not None and head in SECTIONS:  # another algorithm's section
        said = OTHER_SECTION_MSG.format(
            key=key, section=head, algorithm=config.algorithm, rest=".".join(key.split(".")[1:])
        )
        return config, [Problem(key, text=said)]
    if head is not None:
        data = {head: data}
    return fill_dataclass(Config, data, "", problems, hidden=("algo",), base=config), problems


def with_algorithm_section(config: Config) -> Config:
    """``config`` with its algorithm's section: a config built in code without one
    (``algo=None``) gets the section's defaults, in a copy (``config`` is left as it is)."""
    cls = SECTIONS.get(config.algorithm)
    if config.algo is not None or cls is None:
        return config
    return dataclasses.replace(config, algo=cls())


def _drop_other_sections(data: dict[str, Any], algorithm: Any) -> None:
    """Drop the sections of other algorithms; one warning names them."""
    dropped = [key for key in data if key in SECTIONS and key != algorithm]
    for key in dropped:
        del data[key]
    if dropped:
        log.warning(IGNORED_WARNING, ", ".join(f"the {k} section" for k in dropped), algorithm)


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """Plain dict (YAML- and ``torch.load(weights_only=True)``-safe): the sections and the
    chosen algorithm's, under its name; Enums as their values."""
    out = {
        f.name: to_plain(getattr(cfg, f.name))
        for f in dataclasses.fields(cfg)
        # the tune section is written where a sweep is configured, not in every run's config
        if f.name != "algo" and not (f.name == "tune" and cfg.tune == TuneConfig())
    }
    if cfg.algo is not None:
        out[cfg.algorithm] = to_plain(cfg.algo)
    return out

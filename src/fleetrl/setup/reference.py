"""Every config key, described from the code: the source of the config reference.

The docs site's config reference (``docs/reference/config.md``) is generated from
:func:`config_keys` at build time, so it cannot drift from the dataclasses:

- the keys are the fields of the config's sections (:mod:`fleetrl.config`) and of each
  algorithm's section (its ``config_class``), nested ones (``env.atari.*``) included;
- a key's description is the doc line under its field (an attribute docstring, read
  from the source, inherited ones included);
- its type and default are the field's type hint and default;
- what it allows is what the checks say: an Enum's values, the range in
  :data:`fleetrl.setup.verify.RANGES`, or else the message :func:`fleetrl.setup.verify`
  gives when the key is set to an out-of-range probe value (-1, 0, 2) on an otherwise
  valid config of that algorithm. A key none of these constrain says its type.

Examples:
    >>> keys = {k.key: k for k in config_keys()}
    >>> keys["ppo.clip_schedule"].allowed
    "'constant' or 'linear'"
    >>> keys["collector.num_collectors"].allowed
    "must be >= 0 (0: local, no Ray), a range 'MIN-MAX' with 1 <= MIN <= MAX (e.g. '2-8'), or 'auto'"
    >>> keys["ppo.lr"].default, keys["ppo.lr"].type
    ('0.0003', 'float')
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import enum
import functools
import inspect
import itertools
import textwrap
import types
import typing
from dataclasses import dataclass
from typing import Any

from fleetrl.algorithms.sections import SAC_CUDAGRAPHS_MSG
from fleetrl.algorithms.sections import SECTIONS as ALGORITHM_SECTIONS
from fleetrl.config import (
    CollectorConfig,
    Config,
    EnvConfig,
    LoggingConfig,
    SchemeConfig,
    TrainerConfig,
    TuneConfig,
    enum_of,
    type_hints,
)
from fleetrl.envs.atari import ATARI_RANGES
from fleetrl.setup.verify import RANGES, verify

__all__ = ["SECTIONS", "KeyDoc", "config_keys", "field_docs", "section_of"]

#: the sections every config has, in the order a config file writes them
SECTIONS: dict[str, type] = {
    "env": EnvConfig,
    "collector": CollectorConfig,
    "trainer": TrainerConfig,
    "scheme": SchemeConfig,
    "logging": LoggingConfig,
    "tune": TuneConfig,
}

# out-of-range values tried, in order, to learn what the checks allow for a number
_PROBES: dict[type, tuple[Any, ...]] = {int: (-1, 0), float: (-1.0, 0.0, 2.0)}
# the env each algorithm's probe config is made for (its action space must suit)
_PROBE_ENV = {"sac": "Pendulum-v1"}
# keys whose bound depends on other keys: the probe's message would quote the default
# config's numbers, so the rule is said in words
_RULES = {
    f"{algo}.max_learn_lag": "null (no bound) or >= (trainer.weight_update_interval - 1) x "
    "the optimizer steps per batch, the lag the interval alone gives"
    for algo in ("impala", "appo")
} | {
    "sac.cudagraphs": f"false only: {SAC_CUDAGRAPHS_MSG}",
    "appo.gae_lambda": "in [0, 1]; set only with appo.advantage: gae",
}


@dataclass(frozen=True)
class KeyDoc:
    """One config key as the reference shows it.

    Attributes:
        key: the dotted key, as written in YAML sections and ``key=value`` overrides.
        section: the section it belongs to (``env.atari`` for ``env.atari.frame_skip``).
        type: the value's type, in YAML words (``int``, ``float or null``, ``list of int``).
        default: the default, as YAML writes it.
        allowed: what the checks accept ('' where the type says it all).
        doc: the field's doc line.
    """

    key: str
    section: str
    type: str
    default: str
    allowed: str
    doc: str


def field_docs(cls: type) -> dict[str, str]:
    """The doc line under each field of a dataclass (its own and its bases'), whitespace
    folded. A field without one is absent."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        docs.update(_own_field_docs(klass))
    return docs


@functools.cache
def _own_field_docs(cls: type) -> dict[str, str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = " ".join(inspect.cleandoc(after.value.value).split())
    return docs


def section_of(key: str) -> str:
    """The section a key belongs to: everything before its last dot ('' for ``algorithm``)."""
    return key.rpartition(".")[0]


def config_keys() -> list[KeyDoc]:
    """Every key of every config, in file order: ``algorithm``, the sections, then each
    algorithm's section in registry order."""
    keys = [
        KeyDoc(
            "algorithm",
            "",
            "str",
            _yaml(Config.algorithm),
            f"one of {', '.join(repr(a) for a in ALGORITHM_SECTIONS)}",
            field_docs(Config)["algorithm"],
        )
    ]
    for name, cls in SECTIONS.items():
        keys += _section_keys(name, cls, "ppo")
    for algo, section in ALGORITHM_SECTIONS.items():
        keys += _section_keys(algo, section, algo)
    return keys


def _section_keys(prefix: str, cls: type, algorithm: str) -> list[KeyDoc]:
    docs, hints = field_docs(cls), type_hints(cls)
    out: list[KeyDoc] = []
    nested: list[KeyDoc] = []  # a nested section (env.atari) follows its parent's own keys
    for f in dataclasses.fields(cls):
        key, hint = f"{prefix}.{f.name}", hints[f.name]
        if dataclasses.is_dataclass(hint):
            nested += _section_keys(key, hint, algorithm)
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        out.append(
            KeyDoc(
                key,
                prefix,
                _type_name(hint),
                _yaml(default),
                _allowed(key, hint, algorithm),
                docs.get(f.name, ""),
            )
        )
    return out + nested


def _type_name(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        named = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(named + (["null"] if type(None) in args else []))
    if origin is list:
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return (
            "mapping" if not args or args[1] is Any else f"mapping of str to {_type_name(args[1])}"
        )
    if enum_of(hint):
        return "str"
    if hint is Any:
        return "any"
    return getattr(hint, "__name__", str(hint))


def _yaml(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return str(value.value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value == int(value) and abs(value) < 1e15:
        return repr(value)
    if isinstance(value, (list, dict)):
        return str(value) if value else ("[]" if isinstance(value, list) else "{}")
    return str(value)


def _allowed(key: str, hint: Any, algorithm: str) -> str:
    members = _enum_in(hint)
    if members is not None:
        values = [repr(e.value) for e in members]
        null = " (or null)" if type(None) in typing.get_args(hint) else ""
        text = (" or ".join(values) if len(values) == 2 else "one of " + ", ".join(values)) + null
        # what the checks say of a member on a default config (scheme.update='central': no)
        notes = [(repr(e.value), _what_checks_say(key, e, algorithm)) for e in members]
        return "; ".join([text, *(f"{v}: {said}" for v, said in notes if said)])
    if key in RANGES:
        return RANGES[key][1]
    if key in _RULES:
        return _RULES[key]
    section, _, name = key.rpartition(".")
    if section == "env.atari" and name in ATARI_RANGES:
        return ATARI_RANGES[name]
    if hint is bool:
        return "true or false"
    for probe in _probes(hint):
        said = _what_checks_say(key, probe, algorithm)
        if said:
            return said
    return ""


def _enum_in(hint: Any) -> type[enum.Enum] | None:
    for h in (hint, *typing.get_args(hint)):
        if enum_of(h):
            return enum_of(h)
    return None


def _probes(hint: Any) -> tuple[Any, ...]:
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    kinds = [h for h in (hint, *(typing.get_args(hint) if union else ())) if h in _PROBES]
    return _PROBES[kinds[0]] if kinds else ()


def _what_checks_say(key: str, value: Any, algorithm: str) -> str:
    config = copy.deepcopy(_probe_config(algorithm))
    *path, name = key.split(".")
    obj: Any = config
    for part in path:
        obj = config.algo if part == algorithm and obj is config else getattr(obj, part)
    setattr(obj, name, value)
    return next((p.allowed for p in verify(config, None) if p.key == key and p.allowed), "")


@functools.cache
def _probe_config(algorithm: str) -> Config:
    config = Config(
        algorithm=algorithm,
        env=EnvConfig(id=_PROBE_ENV.get(algorithm, "CartPole-v1")),
        algo=ALGORITHM_SECTIONS[algorithm](),
    )
    problems = verify(config, None)
    assert not problems, f"the {algorithm} probe config is invalid: {problems}"
    return config

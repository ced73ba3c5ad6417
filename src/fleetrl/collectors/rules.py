"""A rule on one collector setting, written once, said in its reader's words.

A :class:`~fleetrl.RayCollector` caller writes ``inference_max_batch=0``; a
config's author writes ``collector.inference_max_batch: 0``. The rule that
refuses both (an int >= 1, or None) is one :class:`Rule`, and :func:`phrase`
says it to either :class:`Audience`: the constructor's checks
(:mod:`fleetrl.collectors.remote.preflight`) and the config's (``fleetrl.setup.verify``,
through :func:`fleetrl.collectors.inference.config_problems`) read the same
text.

The words that differ, written in a rule's text as placeholders:

==================  =========================  ====================================
placeholder         arguments                  config
==================  =========================  ====================================
``{None}``          ``None``                   ``null`` (and ``{True}``, ``{False}``)
``{int}``           ``an int`` (then a space)  nothing: config keys are typed
``{number}``        ``a number``               nothing
``{<argument>}``    the argument's name        its key, ``collector.<key>``
==================  =========================  ====================================

Examples:
    >>> from fleetrl.errors import Problems
    >>> p = Problems()
    >>> MAX_SERVED_LAG.check(p, -1, Audience.ARGUMENTS)
    False
    >>> MAX_SERVED_LAG.check(p, -1, Audience.CONFIG)
    False
    >>> [str(x) for x in p]  # doctest: +NORMALIZE_WHITESPACE
    ['max_served_lag=-1 is invalid: must be None (no bound) or an int >= 0',
     'collector.max_served_lag=-1 is invalid: must be null (no bound) or >= 0']
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleetrl.errors import Problems

__all__ = [
    "COLLECTOR_KEYS",
    "COMPRESS",
    "FRACTION_SAMPLES",
    "FRACTION_WORKERS",
    "MAX_RESTART_ATTEMPTS",
    "MAX_SERVED_LAG",
    "NUM_THREADS",
    "PREFETCH",
    "REPLACEMENT_TIMEOUT",
    "Audience",
    "Rule",
    "named",
    "number_at_least",
    "optional",
    "phrase",
    "whole_at_least",
]


class Audience(enum.Enum):
    """Who reads a problem: a caller of the collector's constructor, or a config's author."""

    ARGUMENTS = "arguments"
    CONFIG = "config"


#: arguments named otherwise in the constructor's words than by their own name
ARGUMENT_NAMES = {"address": "ray_init_config['address']"}
#: arguments whose config key (in the ``collector`` section) is another name
CONFIG_KEYS = {"inference_remote_config": "num_cpus_per_inference_server"}
#: what a config does not say, because its keys are typed
_TYPE_WORDS = {"int": "an int ", "number": "a number "}


def named(argument: str, audience: Audience) -> str:
    """``argument``'s name for ``audience``: itself, or its config key.

    Examples:
        >>> named("inference_max_batch", Audience.CONFIG)
        'collector.inference_max_batch'
    """
    if audience is Audience.CONFIG:
        return "collector." + CONFIG_KEYS.get(argument, argument)
    return ARGUMENT_NAMES.get(argument, argument)


class _Words(dict):
    """The placeholders of a rule's text, for one audience (see the module docstring)."""

    def __init__(self, audience: Audience, values: dict[str, Any]):
        super().__init__(values)
        self.audience = audience

    def __missing__(self, key: str) -> str:
        config = self.audience is Audience.CONFIG
        if key in ("None", "True", "False"):
            return {"None": "null", "True": "true", "False": "false"}[key] if config else key
        if key in _TYPE_WORDS:
            return "" if config else _TYPE_WORDS[key]
        return named(key, self.audience)


def phrase(text: str, audience: Audience, **values: Any) -> str:
    """``text`` in ``audience``'s words; ``values`` fill the other placeholders.

    Examples:
        >>> phrase("must be <= {num_collectors}={n}", Audience.CONFIG, n=2)
        'must be <= collector.num_collectors=2'
        >>> phrase("must be {int}>= 1, or {None}: no bound", Audience.ARGUMENTS)
        'must be an int >= 1, or None: no bound'
    """
    return text.format_map(_Words(audience, values))


@dataclass(frozen=True)
class Rule:
    """What one argument (and its config key) allows: a test, and the text that says it.

    Args:
        argument: the constructor's argument.
        ok: whether a value passes.
        allowed: what is allowed, with the placeholders of :func:`phrase`.
        key: its config key (in the ``collector`` section) where it is not
            :func:`named`'s.
    """

    argument: str
    ok: Callable[[Any], bool]
    allowed: str
    key: str | None = None

    def name(self, audience: Audience) -> str:
        if audience is Audience.CONFIG and self.key is not None:
            return f"collector.{self.key}"
        return named(self.argument, audience)

    @property
    def config_key(self) -> str:
        """The config key this rule checks: ``collector.<key>``."""
        return self.name(Audience.CONFIG)

    def says(self, audience: Audience, **values: Any) -> str:
        """What is allowed, in ``audience``'s words."""
        return phrase(self.allowed, audience, **values)

    def check(self, p: Problems, value: Any, audience: Audience, **values: Any) -> bool:
        """Whether ``value`` passes; a problem in ``p`` where it does not (one per name)."""
        ok = bool(self.ok(value))
        p.check(ok, self.name(audience), value, self.says(audience, **values))
        return ok


def whole_at_least(low: int) -> Callable[[Any], bool]:
    """An int (not a bool) >= ``low``."""
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low


def number_at_least(low: float) -> Callable[[Any], bool]:
    """A finite int or float (not a bool) >= ``low``."""
    return lambda v: (
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= low
    )


def optional(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """None, or a value that passes ``test``."""
    return lambda v: v is None or test(v)


def fraction(v: Any) -> bool:
    """A number (not a bool) in (0, 1]."""
    return number_at_least(0)(v) and 0 < v <= 1


#: ``max_served_lag`` / ``collector.max_served_lag``
MAX_SERVED_LAG = Rule(
    "max_served_lag", optional(whole_at_least(0)), "must be {None} (no bound) or {int}>= 0"
)
#: ``replacement_timeout_s`` / ``collector.replacement_timeout_s``
REPLACEMENT_TIMEOUT = Rule(
    "replacement_timeout_s", lambda v: number_at_least(0)(v) and v > 0, "must be {number}> 0"
)
#: ``max_restart_attempts`` / ``collector.max_restart_attempts``
MAX_RESTART_ATTEMPTS = Rule(
    "max_restart_attempts",
    whole_at_least(0),
    "must be {int}>= 0 (0: a collector worker's death ends the run)",
)
#: ``prefetch`` / ``collector.prefetch``
PREFETCH = Rule("prefetch", whole_at_least(0), "must be {int}>= 0")
#: ``num_threads`` / ``collector.num_threads``: torch threads in each worker process
NUM_THREADS = Rule(
    "num_threads", optional(whole_at_least(1)), "must be {int}>= 1, or {None} for torch's default"
)
#: ``fraction_samples`` / ``collector.fraction_samples``
FRACTION_SAMPLES = Rule("fraction_samples", fraction, "must be in (0, 1]")
#: ``fraction_workers`` / ``collector.fraction_workers``
FRACTION_WORKERS = Rule("fraction_workers", fraction, "must be in (0, 1]")
#: the codecs of ``compress`` (:class:`fleetrl.distributed.wire.Compression`'s names)
CODECS = ("lz4", "zstd")
#: ``compress`` / ``collector.compress``
COMPRESS = Rule("compress", lambda v: v is None or v in CODECS, "must be {None}, 'lz4' or 'zstd'")

#: the rules of the keys a config's ``collector`` section and RayCollector's arguments share,
#: each written once here: the constructor checks its arguments with them
#: (:func:`fleetrl.collectors.remote.checks.check_arguments`) and a config's verification its
#: keys (:data:`fleetrl.setup.verify.RANGES` holds them by config key)
COLLECTOR_KEYS: tuple[Rule, ...] = (
    PREFETCH,
    NUM_THREADS,
    MAX_SERVED_LAG,
    MAX_RESTART_ATTEMPTS,
    REPLACEMENT_TIMEOUT,
    FRACTION_SAMPLES,
    FRACTION_WORKERS,
    COMPRESS,
)

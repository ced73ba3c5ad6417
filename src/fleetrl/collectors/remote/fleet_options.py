"""How a RayCollector's fleet collects and is kept, as one object validated once.

:class:`FleetOptions` holds what does not depend on the envs or the policy: stacked rounds
or first ready, how far workers run ahead, how stale a served batch may be, how a dead
worker is replaced, the workers' threads, preemption, compression and how workers look
for new weights. It checks itself when it is made, in its reader's words (a caller's
argument names, or a config's ``collector.*`` keys: :class:`~fleetrl.collectors.rules.Audience`),
with the rules written once in :mod:`fleetrl.collectors.rules`. What holds one is valid:
the collector, its pool and its workers read it without checking again.

``RayCollector(fleet=FleetOptions(...))`` takes it, as it takes the same values as separate
keywords (:func:`given_fleet`); a config's ``collector`` section builds it
(:meth:`FleetOptions.from_config`).

Examples:
    >>> FleetOptions(sync=True, prefetch=0).prefetch
    0
    >>> try:
    ...     FleetOptions(prefetch=-1, num_threads=0)
    ... except ConfigError as err:
    ...     print(err)
    2 problems:
      - prefetch=-1 is invalid: must be an int >= 0
      - num_threads=0 is invalid: must be an int >= 1, or None for torch's default
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

from fleetrl.collectors.rules import (
    COMPRESS,
    FRACTION_SAMPLES,
    FRACTION_WORKERS,
    MAX_RESTART_ATTEMPTS,
    MAX_SERVED_LAG,
    NUM_THREADS,
    PREFETCH,
    REPLACEMENT_TIMEOUT,
    Audience,
    Rule,
)
from fleetrl.config import CollectorConfig
from fleetrl.distributed.workers import DEFAULT_MAX_RESTART_ATTEMPTS
from fleetrl.errors import ConfigError, Problems

__all__ = ["FLEET_ARGUMENTS", "FLEET_CONFIG_KEYS", "FleetOptions", "given_fleet"]

SYNC = Rule("sync", lambda v: isinstance(v, bool), "must be {True} or {False}")
MAX_WEIGHT_UPDATE_INTERVAL = Rule(
    "max_weight_update_interval",
    lambda v: isinstance(v, int) and not isinstance(v, bool) and (v == -1 or v > 0),
    "must be -1 (off) or an int > 0",
)
UPDATE_AFTER_EACH_BATCH = Rule(
    "update_after_each_batch", lambda v: isinstance(v, bool), "must be {True} or {False}"
)
PREEMPTION_NEEDS_SYNC = (
    "straggler preemption only applies to sync=True; leave it at 1.0 for sync=False"
)


@dataclass(frozen=True)
class FleetOptions:
    """How the fleet collects and is kept (see the module docstring); checked when made.

    Raises:
        ConfigError: every value out of its range at once, named as ``said_as`` says
            (a caller's arguments by default).
    """

    sync: bool = False
    """stack every collector's batch each round (True) or serve first ready (False)."""
    prefetch: int = 1
    """tasks each worker may run ahead."""
    max_served_lag: int | None = None
    """None (no bound) or k >= 0: a batch more than k versions behind is collected again."""
    max_restart_attempts: int = DEFAULT_MAX_RESTART_ATTEMPTS
    """replacements of a dead worker tried in a row before :class:`WorkerLostError`."""
    replacement_timeout_s: float = 120.0
    """how long a replacement waits for a node that can host it."""
    num_threads: int | None = 1
    """torch threads in each worker process (None: torch's default)."""
    fraction_samples: float = 1.0
    """sync: a preempted straggler stops once it holds this fraction of its share."""
    fraction_workers: float = 1.0
    """sync: once this fraction of the collectors finished a round, the others are preempted."""
    compress: str | None = None
    """None, ``"lz4"`` or ``"zstd"``: lossless compression of the workers' batches."""
    max_weight_update_interval: int = -1
    """a worker checks for newer weights at least every this many tasks (-1: off)."""
    update_after_each_batch: bool = False
    """publish the local policy's weights before collecting past each yielded batch."""
    said_as: Audience = field(default=Audience.ARGUMENTS, compare=False, repr=False)
    """whose words a problem is said in: a caller's arguments, or a config's keys."""

    def __post_init__(self) -> None:
        p = Problems()
        self.check(p)
        p.raise_if_any()

    def check(self, p: Problems) -> None:
        """Add every problem of these options to ``p``, in :attr:`said_as`'s words."""
        audience = self.said_as
        SYNC.check(p, self.sync, audience)
        for rule in (
            PREFETCH,
            MAX_SERVED_LAG,
            MAX_RESTART_ATTEMPTS,
            REPLACEMENT_TIMEOUT,
            NUM_THREADS,
            FRACTION_SAMPLES,
            FRACTION_WORKERS,
            COMPRESS,
        ):
            rule.check(p, getattr(self, rule.argument), audience)
        if audience is Audience.ARGUMENTS:  # a config's keys: the config's own rules say these
            MAX_WEIGHT_UPDATE_INTERVAL.check(p, self.max_weight_update_interval, audience)
            UPDATE_AFTER_EACH_BATCH.check(p, self.update_after_each_batch, audience)
            preempting = [
                (rule, getattr(self, rule.argument))
                for rule in (FRACTION_WORKERS, FRACTION_SAMPLES)
                if getattr(self, rule.argument) != 1.0 and not p.has(rule.argument)
            ]
            if self.sync is False and preempting:
                rule, value = preempting[0]
                p.add(rule.argument, value, PREEMPTION_NEEDS_SYNC)

    @property
    def preempts(self) -> bool:
        """Whether stacked rounds preempt stragglers."""
        return self.fraction_samples < 1.0 or self.fraction_workers < 1.0

    def arguments(self) -> dict[str, Any]:
        """The same options as ``RayCollector``'s separate keywords."""
        return {name: getattr(self, name) for name in FLEET_ARGUMENTS}

    @classmethod
    def from_config(cls, collector: CollectorConfig, *, sync: bool | None = None) -> FleetOptions:
        """The options a config's ``collector`` section holds (its keys of the same names),
        problems said in config keys. ``sync``: the run's, where it is not
        ``collector.sync`` (decoupled collection serves first ready)."""
        values = {name: getattr(collector, name) for name in FLEET_CONFIG_KEYS}
        if sync is not None:
            values["sync"] = sync
        return _from_config(tuple(values.items()))


@functools.lru_cache(maxsize=32)
def _from_config(values: tuple[tuple[str, Any], ...]) -> FleetOptions:
    """Options of these config values, made (and so checked) once per process: the config's
    verification makes them, and the run's collector takes the same object. A config
    changed since has other values, and is checked when its options are made. A refusal
    is not kept: the same values are refused again."""
    return FleetOptions(**dict(values), said_as=Audience.CONFIG)


#: RayCollector's keywords that :class:`FleetOptions` holds (the fields but ``said_as``)
FLEET_ARGUMENTS = tuple(f.name for f in dataclasses.fields(FleetOptions) if f.name != "said_as")
#: the fields a config's ``collector`` section holds under the same names
FLEET_CONFIG_KEYS = tuple(
    name
    for name in FLEET_ARGUMENTS
    if name in {f.name for f in dataclasses.fields(CollectorConfig)}
)
BOTH_MSG = (
    "is given twice: fleet=FleetOptions(...) holds the fleet's options; set "
    "FleetOptions({name}=...) there instead"
)


def given_fleet(p: Problems, fleet: Any, **keywords: Any) -> FleetOptions | None:
    """The options a collector was given: ``fleet=FleetOptions(...)``, or the separate
    keywords (:data:`FLEET_ARGUMENTS`); their problems are added to ``p`` (None where there
    are some). An options object and a separate keyword that is not its default are refused
    together, naming the field to set instead."""
    if fleet is None:
        try:
            return FleetOptions(**keywords)
        except ConfigError as err:
            p.items += err.details
            return None
    if not isinstance(fleet, FleetOptions):
        p.add("fleet", fleet, "must be None (the separate keywords) or a FleetOptions")
        return None
    defaults = {f.name: f.default for f in dataclasses.fields(FleetOptions)}
    for name, value in keywords.items():
        if value != defaults[name]:
            p.add(name, value, BOTH_MSG.format(name=name))
    return fleet

"""What each rollout collects, as one object validated once: the batch, the frame budget,
the envs stepped together, and where an episode is cut.

:class:`RolloutOptions` holds the sizes the batch-size rule (:mod:`fleetrl.batch_sizes`)
ties together, and checks them when it is made, in its reader's words (a caller's argument
names, or a config's keys: :class:`~fleetrl.collectors.rules.Audience`). What holds one is
valid: a :class:`~fleetrl.SyncDataCollector` and a :class:`~fleetrl.RayCollector` take it
as ``rollout=`` (their ``frames_per_batch``, ``total_frames``, ``num_envs`` and
``max_frames_per_traj`` keywords build the same object), and a RayCollector's workers get
their share of it (:meth:`RolloutOptions.share`) without checking it again.

A config's sections build it (:meth:`RolloutOptions.from_config`), once per process for the
same values: the config's verification makes it, and the run's collector takes the same
object.

``num_envs=None`` means "whatever the env has": an env factory that builds a vector env of
its own size. The count is then checked where it becomes known, once: by the collector that
builds the env (:meth:`RolloutOptions.env_problems`), or for a RayCollector's workers by the
driver when they report it (:func:`~fleetrl.collectors.remote.checks.check_env_counts`).

Examples:
    >>> RolloutOptions(frames_per_batch=64, total_frames=256, num_envs=4).num_envs
    4
    >>> try:
    ...     RolloutOptions(frames_per_batch=10, num_envs=4)
    ... except ConfigError as err:
    ...     print(err)
    frames_per_batch=10 is invalid: must be a multiple of the number of envs (4); use 8 or 12
    >>> RolloutOptions(frames_per_batch=64, num_envs=4, split=2).share(num_envs=4).frames_per_batch
    32
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any

from fleetrl.batch_sizes import PYTHON_NAMES, BatchSizeNames, batch_size_problems, is_unlimited
from fleetrl.collectors.rules import Audience
from fleetrl.errors import ConfigError, Problem, Problems

__all__ = ["CONFIG_NAMES", "ROLLOUT_ARGUMENTS", "RolloutOptions", "given_rollout"]

#: the batch-size rule in config keys
CONFIG_NAMES = BatchSizeNames(
    frames_per_batch="collector.frames_per_batch",
    total_frames="trainer.total_frames",
    num_collectors="collector.num_collectors",
    sync="collector.sync=true",
)
#: the collectors' keywords that :class:`RolloutOptions` holds, with their defaults
ROLLOUT_ARGUMENTS: dict[str, Any] = {
    "frames_per_batch": None,
    "total_frames": -1,
    "num_envs": None,
    "max_frames_per_traj": None,
}
GIVEN_TWICE_MSG = (
    "is given twice: rollout=RolloutOptions(...) holds the rollout's sizes; set "
    "RolloutOptions({name}=...) there instead"
)
REQUIRED_MSG = "is required (or rollout=RolloutOptions(...), which holds it)"


@dataclass(frozen=True)
class RolloutOptions:
    """What each rollout collects (see the module docstring); checked when made.

    Raises:
        ConfigError: every value out of its range at once, named as ``said_as`` says.
    """

    frames_per_batch: int
    """frames per batch, summed over the ``split`` collectors that share it."""
    total_frames: int = -1
    """the frame budget; -1 (or None): no limit."""
    num_envs: int | None = None
    """envs stepped together per collector (None: the env's own count)."""
    split: int = 1
    """collectors that share each batch evenly (a sync RayCollector's fixed fleet); 1 where
    each collector gathers whole batches."""
    max_frames_per_traj: int | None = None
    """steps after which an episode is cut (truncated); None (or -1): never."""
    said_as: Audience = field(default=Audience.ARGUMENTS, compare=False, repr=False)
    """whose words a problem is said in: a caller's arguments, or a config's keys."""
    fleet_checks_envs: bool = field(default=False, init=False, compare=False, repr=False)
    """a fleet worker's share (:meth:`share`): the driver checks its env count."""

    def __post_init__(self) -> None:
        p = Problems()
        self.check(p)
        p.raise_if_any()
        if is_unlimited(self.max_frames_per_traj):
            object.__setattr__(self, "max_frames_per_traj", None)
        if self.total_frames is None:
            object.__setattr__(self, "total_frames", -1)

    def check(self, p: Problems) -> None:
        """Add every problem of these options to ``p``, in :attr:`said_as`'s words."""
        config = self.said_as is Audience.CONFIG
        if not config:  # a config's keys are typed, and its ranges say these
            p.positive_int("frames_per_batch", self.frames_per_batch)
            if self.total_frames is not None:
                p.positive_int("total_frames", self.total_frames, allow_minus_one=True)
            if self.num_envs is not None:
                p.positive_int("num_envs", self.num_envs)
            if not is_unlimited(self.max_frames_per_traj):
                p.positive_int(
                    "max_frames_per_traj", self.max_frames_per_traj, allow_minus_one=True
                )
        if self.num_envs is None and self.split == 1:
            return  # nothing to check before the envs say their count (env_problems)
        p.items += batch_size_problems(
            frames_per_batch=self.frames_per_batch,
            total_frames=self.total_frames,
            num_envs=self.num_envs,
            split=self.split,
            names=self.names,
        )

    @property
    def names(self) -> BatchSizeNames:
        """How a batch-size problem names the sizes, for :attr:`said_as`."""
        return CONFIG_NAMES if self.said_as is Audience.CONFIG else PYTHON_NAMES

    def env_problems(self, num_envs: int) -> list[Problem]:
        """The batch-size problems of these sizes with ``num_envs`` envs, a count first known
        once the env is built (none where :attr:`num_envs` was given: checked then)."""
        if self.num_envs is not None or self.fleet_checks_envs:
            return []
        return batch_size_problems(
            frames_per_batch=self.frames_per_batch,
            total_frames=self.total_frames,
            num_envs=num_envs,
            split=self.split,
            names=self.names,
        )

    def share(
        self, *, num_envs: int | None, frames: int | None = None, max_frames_per_traj: Any = None
    ) -> RolloutOptions:
        """One collector's part of a fleet's options: its batch (``frames``, by default an
        even share of the whole) with ``num_envs`` envs, no budget of its own (the driver
        keeps the fleet's), episodes cut at ``max_frames_per_traj`` where that collector's
        own arguments say so (None: the fleet's; -1: never). Derived from values the driver
        checked, so not checked again: its env count is the driver's to check too, as the
        worker reports it (:meth:`env_problems` says nothing)."""
        part = copy.copy(self)
        changes = {
            "frames_per_batch": frames or self.frames_per_batch // self.split,
            "total_frames": -1,
            "num_envs": num_envs,
            "split": 1,
            "fleet_checks_envs": True,
        }
        if max_frames_per_traj is not None:
            changes["max_frames_per_traj"] = (
                None if is_unlimited(max_frames_per_traj) else max_frames_per_traj
            )
        for name, value in changes.items():
            object.__setattr__(part, name, value)
        return part

    @classmethod
    def from_config(cls, config: Any, total_frames: int | None = None) -> RolloutOptions:
        """The options a config holds (``collector.frames_per_batch``, ``env.num_envs``,
        ``env.max_episode_steps``; ``trainer.total_frames`` unless ``total_frames`` is given,
        a run's remaining budget), each batch split over the fleet where a sync RayCollector
        stacks a fixed fleet's rounds. Problems said in config keys; made once per process
        for the same values."""
        c, e = config.collector, config.env
        fleet = c.fleet
        sync_split = c.sync and fleet.min > 0 and not c.decoupled and not fleet.elastic
        values = (
            c.frames_per_batch,
            config.trainer.total_frames if total_frames is None else total_frames,
            e.num_envs if isinstance(e.num_envs, int) and e.num_envs > 0 else None,
            fleet.min if sync_split else 1,
            e.max_episode_steps,
        )
        try:
            hash(values)
        except TypeError:  # a YAML list where a number goes: refused, never kept
            return _from_config.__wrapped__(values)
        return _from_config(values)


@functools.lru_cache(maxsize=32)
def _from_config(values: tuple[Any, ...]) -> RolloutOptions:
    """Options of a config's values (see :meth:`RolloutOptions.from_config`); a refusal is
    not kept: the same values are refused again."""
    frames, total, num_envs, split, max_steps = values
    return RolloutOptions(
        frames_per_batch=frames,
        total_frames=total,
        num_envs=num_envs,
        split=split,
        max_frames_per_traj=max_steps,
        said_as=Audience.CONFIG,
    )


def _default(name: str, value: Any) -> bool:
    """Whether ``value`` is the keyword's default (-1 and None both mean "no limit")."""
    if name in ("total_frames", "max_frames_per_traj"):
        return is_unlimited(value)
    return value is ROLLOUT_ARGUMENTS[name]


def given_rollout(
    p: Problems, rollout: RolloutOptions | None, *, split: int = 1, **given: Any
) -> RolloutOptions | None:
    """The rollout's options from a collector's arguments: ``rollout`` as given, or made from
    the separate keywords ``given`` (:data:`ROLLOUT_ARGUMENTS`; each batch split over
    ``split`` collectors). A keyword set beside ``rollout``, or a problem of the keywords'
    options, goes into ``p``; None then."""
    if rollout is not None:
        if not isinstance(rollout, RolloutOptions):
            p.add("rollout", rollout, "must be a fleetrl RolloutOptions, or None")
            return None
        twice = [n for n, v in given.items() if not _default(n, v)]
        for name in twice:
            p.add(name, given[name], GIVEN_TWICE_MSG.format(name=name))
        return None if twice else rollout
    if given.get("frames_per_batch") is None:
        p.add("frames_per_batch", None, REQUIRED_MSG)
        return None
    try:
        return RolloutOptions(**given, split=split)
    except ConfigError as err:
        p.extend(err.details)
        return None

"""What every fleetrl collector shares: lifecycle, frame budget, iteration.

:class:`SyncDataCollector` (one process) and :class:`RayCollector` (remote
actors) both derive from :class:`DataCollectorBase`. A collector is an
iterable of TensorDict batches with a frame budget (``total_frames``; -1 is
endless). Iteration resumes where the last loop stopped: ``break`` out of a
``for`` loop and a second loop continues with the next batch; once the budget
is spent, further loops yield nothing.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torchrl  # noqa: F401 - its process settings (below)
from tensordict import TensorDictBase

# torchrl's ExplorationType is tensordict's InteractionType. Taken from tensordict: importing
# torchrl.envs.utils loads all of torchrl.envs, .data and .modules (and mujoco), 36 MB in
# each collector worker. torchrl itself is still imported, for what its import sets for the
# whole process (multiprocessing's "spawn" start method, its torch.distributions patch).
from tensordict.nn import InteractionType as ExplorationType

from fleetrl.batch_sizes import is_unlimited
from fleetrl.collectors.timing import CollectTimes
from fleetrl.errors import CollectorClosedError, Problems
from fleetrl.keys import (
    DONE_KEY,
    EPISODE_END_KEY,
    EPISODE_LENGTH_KEY,
    EPISODE_RETURN_KEY,
    GROUP_END_KEY,
    GROUP_RETURN_KEY,
    MASK_KEY,
)

__all__ = ["CollectorState", "DataCollectorBase", "EpisodeStats", "episode_stats", "frames_in"]

CLOSED_MSG = "{name} was shut down; build a new collector to collect again"

EXPLORATION_NAMES = {e.value: e for e in ExplorationType}


class CollectorState(enum.Enum):
    """Lifecycle of a collector."""

    READY = "ready"
    CLOSED = "closed"


def as_exploration_type(value: Any, problems: Problems) -> ExplorationType:
    """Accept an ``ExplorationType`` or its name (``"random"``, ``"deterministic"``, ...)."""
    if isinstance(value, ExplorationType):
        return value
    if isinstance(value, str) and value.lower() in EXPLORATION_NAMES:
        return EXPLORATION_NAMES[value.lower()]
    problems.add(
        "exploration_type",
        value,
        f"must be an ExplorationType or one of {sorted(EXPLORATION_NAMES)}",
    )
    return ExplorationType.RANDOM


def as_device(value: Any, arg: str, problems: Problems) -> torch.device | None:
    if value is None:
        return None
    try:
        return torch.device(value)
    except (RuntimeError, TypeError):
        problems.add(arg, value, "must be a torch device such as 'cpu' or 'cuda:0', or None")
        return None


def check_common_arguments(
    p: Problems, *, policy: Any, postproc: Any, init_random_frames: Any
) -> Any:
    """Checks every collector makes the same way; returns the acting policy (None: random).
    The sizes (``max_frames_per_traj`` among them) are the rollout options' to check
    (:class:`~fleetrl.collectors.rollout_options.RolloutOptions`)."""
    from fleetrl.errors import PolicyError
    from fleetrl.networks.policies import as_policy

    if init_random_frames not in (None, -1):
        p.check(
            isinstance(init_random_frames, int) and init_random_frames >= 0,
            "init_random_frames",
            init_random_frames,
            "must be an int >= 0, -1 or None",
        )
    p.check(
        postproc is None or callable(postproc), "postproc", postproc, "must be a callable or None"
    )
    try:
        return as_policy(policy)
    except PolicyError as err:
        p.items.append(str(err))
        return None


class DataCollectorBase(abc.ABC):
    """Lifecycle, frame budget and iteration shared by every collector.

    Examples:
        >>> from fleetrl import SyncDataCollector
        >>> with SyncDataCollector("CartPole-v1", None, frames_per_batch=8, total_frames=16,
        ...                        num_envs=2) as collector:
        ...     sizes = [batch.numel() for batch in collector]
        >>> isinstance(collector, DataCollectorBase), sizes, collector.frames
        (True, [8, 8], 16)"""

    frames_per_batch: int
    total_frames: int

    def __init__(self) -> None:
        self.state = CollectorState.READY
        self._frames = 0  # frames delivered to the caller so far
        self._batches = 0  # batches delivered to the caller so far

    @property
    def frames(self) -> int:
        """Frames delivered so far (what the iterator yielded, exactly)."""
        return self._frames

    @property
    def remaining_frames(self) -> int | None:
        """Frames left in the budget, or None when collection is endless."""
        if is_unlimited(self.total_frames):
            return None
        return self.total_frames - self._frames

    @property
    def frames_in_flight(self) -> int:
        """Frames of tasks issued and not yet delivered (0 for a collector in this process)."""
        return 0

    def acts_with(self, policy: Any) -> bool:
        """Whether this collector acts with ``policy`` itself, in this process: publishing
        then moves only the version its batches are tagged with (the weights are the
        caller's own). False for a collector that acts with a copy."""
        return False

    def stats(self) -> dict[str, Any]:
        """What the collector counts, with the keys torchrl 0.14's collectors give:
        ``frames`` (delivered so far), ``batches`` (delivered), ``requested_frames_per_batch``,
        ``total_frames`` and ``completed`` (where the budget is finite) and
        ``policy_version``."""
        out: dict[str, Any] = {
            "frames": self.frames,
            "batches": self._batches,
            "requested_frames_per_batch": self.frames_per_batch,
        }
        if not is_unlimited(self.total_frames):
            out["total_frames"] = self.total_frames
            out["completed"] = self.frames >= self.total_frames
        version = getattr(self, "policy_version", None)
        if version is not None:
            out["policy_version"] = version
        return out

    def take_times(self) -> CollectTimes | None:
        """Where collection's time went since the last call (reset), part by part
        (:class:`~fleetrl.collectors.timing.CollectTimes`); None: not measured."""
        return None

    def _check_open(self) -> None:
        if self.state is CollectorState.CLOSED:
            raise CollectorClosedError(CLOSED_MSG.format(name=type(self).__name__))

    @abc.abstractmethod
    def _next_batch(self) -> TensorDictBase | None:
        """Collect and return the next batch, or None when the budget is spent."""

    def next(self) -> TensorDictBase:
        """Return the next batch; raises ``StopIteration`` once the budget is spent."""
        self._check_open()
        batch = self._next_batch()
        if batch is None:
            raise StopIteration
        self._batches += 1
        return batch

    def __iter__(self) -> Iterator[TensorDictBase]:
        self._check_open()
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._batches += 1
            yield batch

    @abc.abstractmethod
    def _shutdown(self) -> None:
        """Release resources; called once."""

    def shutdown(self) -> None:
        """Release envs, actors and processes. Safe to call more than once."""
        if self.state is CollectorState.CLOSED:
            return
        self.state = CollectorState.CLOSED
        self._shutdown()

    def __enter__(self) -> DataCollectorBase:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            if getattr(self, "state", CollectorState.CLOSED) is CollectorState.READY:
                self.shutdown()
        except Exception:
            pass


@dataclass
class EpisodeStats:
    """Returns and lengths of the episodes that ended in a batch.

    For a multi-agent env (:mod:`fleetrl.collectors.local.grouped`), ``returns`` are the
    team's and ``group_returns`` each agent group's (its agents' mean return).

    Examples:
        >>> from fleetrl import SyncDataCollector
        >>> with SyncDataCollector("CartPole-v1", None, frames_per_batch=400,
        ...                        num_envs=2) as collector:
        ...     stats = episode_stats(collector.next())
        >>> stats.count > 0, bool((stats.lengths > 0).all())
        (True, True)
        >>> stats.mean_return() == float(stats.returns.float().mean())
        True
    """

    returns: torch.Tensor
    lengths: torch.Tensor
    #: agent groups: per group name, the returns of the group's episodes that ended
    group_returns: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return int(self.returns.numel())

    def mean_return(self) -> float:
        return float(self.returns.float().mean()) if self.count else float("nan")


def episode_stats(batch: TensorDictBase) -> EpisodeStats:
    """Returns and lengths of the episodes that ended inside ``batch``.

    The collector writes the running return and length of the current episode
    at every step (``("next", "episode_return")``, ``("next", "episode_length")``);
    at the step that ends an episode these are the episode's totals. Episodes
    that started in an earlier batch count whole. A multi-agent batch's episodes
    end at ``("next", "episode_end")`` (the team's) and ``("next", "group_end", group)``.

    Examples:
        >>> from fleetrl import SyncDataCollector
        >>> c = SyncDataCollector("CartPole-v1", None, frames_per_batch=400, num_envs=4)
        >>> stats = episode_stats(c.next())
        >>> bool((stats.lengths > 0).all())
        True
        >>> c.shutdown()
    """
    keys = set(batch.keys(include_nested=True))
    valid = batch.get(MASK_KEY) if MASK_KEY in keys else None

    def ends(key: Any) -> torch.Tensor:
        done = batch.get(key)
        mask = done.squeeze(-1) if done.shape[-1:] == (1,) else done
        return mask if valid is None else mask & valid

    mask = ends(EPISODE_END_KEY if EPISODE_END_KEY in keys else DONE_KEY)
    returns = batch.get(EPISODE_RETURN_KEY)[mask].reshape(-1)
    lengths = batch.get(EPISODE_LENGTH_KEY)[mask].reshape(-1)
    groups = {}
    if GROUP_RETURN_KEY in keys:
        for name in batch.get(GROUP_RETURN_KEY).keys():  # noqa: SIM118 (a TensorDict iterates rows)
            group_end = ends((*GROUP_END_KEY, name))
            groups[name] = batch.get((*GROUP_RETURN_KEY, name))[group_end].reshape(-1)
    return EpisodeStats(returns=returns, lengths=lengths, group_returns=groups)


def frames_in(batch: TensorDictBase) -> int:
    """Valid frames of a batch (a masked sync batch counts its mask)."""
    if MASK_KEY in batch.keys(include_nested=True):
        return int(batch.get(MASK_KEY).sum())
    return batch.numel()

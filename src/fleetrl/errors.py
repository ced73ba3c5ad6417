"""Errors raised by fleetrl.

Every error derives from :class:`FleetError`, and also from the builtin it
refines, so ``except ValueError`` keeps working for callers that do not know
fleetrl::

    FleetError
    ├── ConfigError (ValueError)        bad argument or config value, raised before work starts
    │   └── CheckpointError             a checkpoint file or folder that cannot be loaded
    ├── EnvError (ValueError)           an environment that cannot be built or used
    ├── PolicyError (ValueError)        a policy whose outputs do not fit the env
    ├── CollectorClosedError (RuntimeError)  use after shutdown()
    └── WorkerError (RuntimeError)      a remote worker raised; carries its id and traceback
        └── WorkerLostError             a worker died and its replacements died too

Messages name the argument, the bad value and what is allowed. The templates
are module constants so that tests can match them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CheckpointError",
    "CollectorClosedError",
    "ConfigError",
    "EnvError",
    "FleetError",
    "PolicyError",
    "Problem",
    "Problems",
    "WorkerError",
    "WorkerLostError",
]


class FleetError(Exception):
    """Root of every error raised by fleetrl.

    Examples:
        >>> from fleetrl import FleetError, load_config
        >>> try:
        ...     load_config("configs/ppo_cartpole.yaml", ["env.num_envs=0"])
        ... except FleetError as err:  # catches every error of fleetrl's own
        ...     print(type(err).__name__, err)
        ConfigError env.num_envs=0 is invalid: must be > 0
    """


class ConfigError(FleetError, ValueError):
    """An argument or config value is invalid. Lists every problem found.

    ``details`` holds each :class:`Problem` (key, value, what is allowed);
    ``problems`` their messages.

    Examples:
        >>> from fleetrl import ConfigError, load_config
        >>> try:
        ...     load_config("configs/ppo_cartpole.yaml", ["ppo.lr=-1", "env.num_envs=0"])
        ... except ConfigError as err:
        ...     [(p.key, p.value) for p in err.details], err.problems[1]
        ([('env.num_envs', 0), ('ppo.lr', -1.0)], 'ppo.lr=-1.0 is invalid: must be > 0')
    """

    def __init__(self, problems: Iterable[Problem | str] | str):
        # one message: also how a pickled error comes back (its args hold the message)
        items = [problems] if isinstance(problems, str) else list(problems)
        self.details = [p if isinstance(p, Problem) else Problem("", text=str(p)) for p in items]
        self.problems = [str(p) for p in items]
        if len(self.problems) == 1:
            msg = self.problems[0]
        else:
            msg = f"{len(self.problems)} problems:\n" + "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(msg)


class CheckpointError(ConfigError):
    """A checkpoint file is missing, damaged or not fleetrl's, or a folder has none that loads.

    A ConfigError because the file is an input to ``--resume`` or ``fleetrl eval``;
    its message is one line naming the file or folder.

    Examples:
        >>> from fleetrl.run.checkpoint import load_checkpoint
        >>> try:
        ...     load_checkpoint("no/such/checkpoint.pt")
        ... except CheckpointError as err:
        ...     "no/such/checkpoint.pt" in str(err), isinstance(err, ConfigError)
        (True, True)
    """

    def __init__(self, message: str):
        super().__init__([message])


class EnvError(FleetError, ValueError):
    """An environment cannot be built or does not fit the collector.

    Examples:
        >>> from fleetrl import EnvError, make_env
        >>> try:
        ...     make_env("NoSuchEnv-v0")
        ... except EnvError as err:
        ...     print(err)  # doctest: +ELLIPSIS
        create_env_fn='NoSuchEnv-v0' is not a registered gymnasium id (...); check the spelling or import the package that registers it
    """


class PolicyError(FleetError, ValueError):
    """A policy does not produce what the environment needs.

    Raised by the collectors' constructors, which run the policy once on the env's first
    observation, before any worker starts.

    Examples:
        >>> from torch import nn
        >>> from fleetrl import SyncDataCollector
        >>> try:  # CartPole has 2 discrete actions; this policy writes 3 floats
        ...     SyncDataCollector("CartPole-v1", nn.Linear(4, 3), frames_per_batch=8)
        ... except PolicyError as err:
        ...     print(str(err).split("; ")[1])
        the env needs integer actions of shape (1,) or one-hot actions of shape (1, 2)
    """


class CollectorClosedError(FleetError, RuntimeError):
    """The collector was used after ``shutdown()``.

    Examples:
        >>> from fleetrl import CollectorClosedError, SyncDataCollector
        >>> collector = SyncDataCollector("CartPole-v1", None, frames_per_batch=8, total_frames=8)
        >>> collector.shutdown()
        >>> try:
        ...     next(iter(collector))
        ... except CollectorClosedError as err:
        ...     print(type(err).__name__)
        CollectorClosedError
    """


class WorkerError(FleetError, RuntimeError):
    """A remote worker raised. Carries the worker id and the remote traceback.

    Examples:
        >>> err = WorkerError(3, "ZeroDivisionError: division by zero")
        >>> print(err)
        collector worker 3 raised:
        ZeroDivisionError: division by zero
    """

    def __init__(self, worker_id: int, cause: str, role: str = "collector worker"):
        self.worker_id = worker_id
        self.cause = cause
        self.role = role
        super().__init__(f"{role} {worker_id} raised:\n{cause}")


class WorkerLostError(WorkerError):
    """A remote worker died and could not be replaced: its replacements died too.

    ``attempts`` is how many replacements were tried in a row; ``cause`` ends
    with the last death's cause.

    Examples:
        >>> err = WorkerLostError(1, "killed by the OOM killer", attempts=3)
        >>> isinstance(err, WorkerError), err.worker_id, err.attempts
        (True, 1, 3)
    """

    def __init__(
        self, worker_id: int, cause: str, role: str = "collector worker", attempts: int = 0
    ):
        super().__init__(worker_id, cause, role)
        self.attempts = attempts
        self.args = (f"{role} {worker_id} was lost: {cause}",)


def shown(value: Any) -> Any:
    """What a message shows of a value: an Enum member by its value, as the YAML has it."""
    return value.value if isinstance(value, enum.Enum) else value


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an argument or a config key: the key, its value, what is allowed.

    ``str(problem)`` is the message: ``<key>=<value> is invalid: <allowed>``, or
    ``text`` where a problem is said whole (an unknown key, a file that cannot be read).

    Examples:
        >>> str(Problem("ppo.lr", -1.0, "must be > 0"))
        'ppo.lr=-1.0 is invalid: must be > 0'
    """

    key: str
    value: Any = None
    allowed: str = ""
    text: str | None = None

    def __str__(self) -> str:
        if self.text is not None:
            return self.text
        return f"{self.key}={shown(self.value)!r} is invalid: {self.allowed}"


def bad_value(arg: str, value: Any, allowed: str) -> str:
    """One problem's message: the argument, the value it got, and what is allowed."""
    return str(Problem(arg, value, allowed))


class Problems:
    """Gathers every problem with a set of arguments or a config, then raises them at once.

    The one problem gatherer of fleetrl: collectors check their Python arguments
    with it, and the config's checks (:mod:`fleetrl.setup.verify`) check keys
    with it, where :meth:`section` prefixes the keys (``ppo.`` + ``lr``). Called
    (or :meth:`check`), it records at most one problem per key: a ``.nan`` lr is
    not finite, and need not also be "not > 0".

    Examples:
        >>> p = Problems()
        >>> p.check(3 > 0, "frames_per_batch", 3, "must be > 0")
        >>> p.section("ppo")(-1 > 0, "lr", -1.0, "must be > 0")
        >>> [str(x) for x in p]
        ['ppo.lr=-1.0 is invalid: must be > 0']
        >>> p.raise_if_any()
        Traceback (most recent call last):
        ...
        fleetrl.errors.ConfigError: ppo.lr=-1.0 is invalid: must be > 0
    """

    def __init__(self, items: list[Problem] | None = None, prefix: str = "") -> None:
        self.items: list[Problem] = [] if items is None else items
        self.prefix = prefix

    def __call__(self, ok: bool, key: str, value: Any, allowed: str) -> None:
        """Record ``key=value`` as a problem unless ``ok`` (or ``key`` already has one)."""
        if not ok and not self.has(key):
            self.items.append(Problem(f"{self.prefix}{key}", value, allowed))

    check = __call__

    def add(self, key: str, value: Any, allowed: str) -> None:
        """Record a problem with ``key=value``."""
        self.items.append(Problem(f"{self.prefix}{key}", value, allowed))

    def say(self, key: str, text: str) -> None:
        """Record a problem with ``key``, said whole by ``text``."""
        self.items.append(Problem(f"{self.prefix}{key}", text=text))

    def extend(self, problems: Iterable[Problem]) -> None:
        """Record problems found elsewhere (each once)."""
        for problem in problems:
            if problem not in self.items:
                self.items.append(problem)

    def has(self, key: str) -> bool:
        """Whether ``key`` (under this section) has a problem already."""
        return any(p.key == f"{self.prefix}{key}" for p in self.items)

    def section(self, name: str) -> Problems:
        """The same problems, with keys under ``name.``."""
        return Problems(self.items, f"{self.prefix}{name}.")

    def positive_int(self, key: str, value: Any, *, allow_minus_one: bool = False) -> None:
        ok = isinstance(value, int) and not isinstance(value, bool)
        ok = ok and (value > 0 or (allow_minus_one and value == -1))
        allowed = "an int > 0" + (" or -1 (no limit)" if allow_minus_one else "")
        self.check(ok, key, value, f"must be {allowed}")

    def __iter__(self) -> Iterator[Problem]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def raise_if_any(self) -> None:
        if self.items:
            raise ConfigError(self.items)

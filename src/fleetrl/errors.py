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

from collections.abc import Iterable
from typing import Any

__all__ = [
    "CheckpointError",
    "CollectorClosedError",
    "ConfigError",
    "EnvError",
    "FleetError",
    "PolicyError",
    "Problems",
    "WorkerError",
    "WorkerLostError",
]


class FleetError(Exception):
    """Root of every error raised by fleetrl."""


class ConfigError(FleetError, ValueError):
    """An argument or config value is invalid. Lists every problem found."""

    def __init__(self, problems: Iterable[str]):
        self.problems = list(problems)
        if len(self.problems) == 1:
            msg = self.problems[0]
        else:
            msg = f"{len(self.problems)} problems:\n" + "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(msg)


class CheckpointError(ConfigError):
    """A checkpoint file is missing, damaged or not fleetrl's, or a folder has none that loads.

    A ConfigError because the file is an input to ``--resume`` or ``fleetrl eval``;
    its message is one line naming the file or folder.
    """

    def __init__(self, message: str):
        super().__init__([message])


class EnvError(FleetError, ValueError):
    """An environment cannot be built or does not fit the collector."""


class PolicyError(FleetError, ValueError):
    """A policy does not produce what the environment needs."""


class CollectorClosedError(FleetError, RuntimeError):
    """The collector was used after ``shutdown()``."""


class WorkerError(FleetError, RuntimeError):
    """A remote worker raised. Carries the worker id and the remote traceback."""

    def __init__(self, worker_id: int, cause: str, role: str = "collector worker"):
        self.worker_id = worker_id
        self.cause = cause
        self.role = role
        super().__init__(f"{role} {worker_id} raised:\n{cause}")


class WorkerLostError(WorkerError):
    """A remote worker died and could not be replaced: its replacements died too.

    ``attempts`` is how many replacements were tried in a row; ``cause`` ends
    with the last death's cause.
    """

    def __init__(
        self, worker_id: int, cause: str, role: str = "collector worker", attempts: int = 0
    ):
        super().__init__(worker_id, cause, role)
        self.attempts = attempts
        self.args = (f"{role} {worker_id} was lost: {cause}",)


def bad_value(arg: str, value: Any, allowed: str) -> str:
    """Format one problem: the argument, the value it got, and what is allowed."""
    return f"{arg}={value!r} is invalid: {allowed}"


class Problems:
    """Gathers every problem with a set of arguments, then raises them at once.

    Examples:
        >>> p = Problems()
        >>> p.check(3 > 0, "frames_per_batch", 3, "must be > 0")
        >>> p.check(-1 > 0, "num_envs", -1, "must be >= 1")
        >>> p.raise_if_any()
        Traceback (most recent call last):
        ...
        fleetrl.errors.ConfigError: num_envs=-1 is invalid: must be >= 1
    """

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, arg: str, value: Any, allowed: str) -> None:
        self.items.append(bad_value(arg, value, allowed))

    def check(self, ok: bool, arg: str, value: Any, allowed: str) -> None:
        if not ok:
            self.add(arg, value, allowed)

    def positive_int(self, arg: str, value: Any, *, allow_minus_one: bool = False) -> None:
        ok = isinstance(value, int) and not isinstance(value, bool)
        ok = ok and (value > 0 or (allow_minus_one and value == -1))
        allowed = "an int > 0" + (" or -1 (no limit)" if allow_minus_one else "")
        self.check(ok, arg, value, f"must be {allowed}")

    def raise_if_any(self) -> None:
        if self.items:
            raise ConfigError(self.items)

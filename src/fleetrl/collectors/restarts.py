"""How dead workers are replaced: attempts in a row, and the wait between them.

One rule for collector workers (:class:`~fleetrl.collectors.RayCollector`) and
gradient workers (:class:`~fleetrl.scheme.UpdateWorker`). A worker that dies
is replaced by a new actor with the same id. A replacement can die too, for
instance while it builds its envs; it is then replaced again, after a wait
that doubles with each attempt (none before the first: a single death costs
nothing), so a cause that passes (a node restarting, memory freed) has time
to pass. The deaths are counted in a row, until the worker completes a task;
after ``max_attempts`` replacements in a row have died the run gives up with a
:class:`~fleetrl.errors.WorkerError` that says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

__all__ = ["DEFAULT_MAX_RESTART_ATTEMPTS", "GAVE_UP_MSG", "RestartPolicy"]

#: replacements of one worker tried in a row before giving up
DEFAULT_MAX_RESTART_ATTEMPTS = 3

#: the wait before the second attempt; it doubles for each later one, up to BACKOFF_MAX_S
BACKOFF_BASE_S = 0.1
BACKOFF_MAX_S = 5.0

GAVE_UP_MSG = (
    "it died, and {attempts} replacement(s) in a row died too before completing a task "
    "(max_restart_attempts={max_attempts}); fix the cause or raise max_restart_attempts. "
    "Last cause:\n{cause}"
)


@dataclass(frozen=True)
class RestartPolicy:
    """How many replacements in a row, and the backoff between them.

    Examples:
        >>> policy = RestartPolicy(max_attempts=3)
        >>> [policy.delay(a) for a in (1, 2, 3, 4)]
        [0.0, 0.1, 0.2, 0.4]
        >>> policy.gives_up(deaths=4)
        True
    """

    max_attempts: int = DEFAULT_MAX_RESTART_ATTEMPTS
    base_s: float = BACKOFF_BASE_S
    max_s: float = BACKOFF_MAX_S

    def delay(self, attempt: int) -> float:
        """Seconds to wait before replacement ``attempt`` (1-based) of a series."""
        if attempt <= 1:
            return 0.0
        return min(self.max_s, self.base_s * 2 ** (attempt - 2))

    def gives_up(self, deaths: int) -> bool:
        """Whether ``deaths`` in a row (the first death and the replacements that died)
        exhaust the attempts."""
        return deaths > self.max_attempts

    def wait(self, attempt: int) -> None:
        time.sleep(self.delay(attempt))

    def gave_up(self, deaths: int, cause: str) -> str:
        """The message for giving up after ``deaths`` in a row."""
        return GAVE_UP_MSG.format(attempts=deaths - 1, max_attempts=self.max_attempts, cause=cause)

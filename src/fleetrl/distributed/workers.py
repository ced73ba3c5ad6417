"""WorkerGroup: workers of one kind on a backend, their tasks in flight, and their restarts.

One machinery serves collector workers (:mod:`fleetrl.collectors.remote.pool`) and
gradient workers (:mod:`fleetrl.learners.update_worker`):

- **Slots.** One :class:`WorkerSlot` per worker index: its :class:`~fleetrl.distributed.backends.Actor`,
  its incarnation (how many times it was replaced), its deaths in a row, its
  restarts, and the tasks it owes.
- **Tasks.** :meth:`WorkerGroup.submit` issues a task to a slot's worker (the
  owner's ``issue`` function makes the call) and returns a :class:`Pending`: the
  task and the reference to its result, which stays the same object when the
  task is issued again.
- **Restart and re-issue.** A worker that dies is replaced by a new one with
  the same index (the owner's ``start`` function builds it, its ``ready``
  function, if any, waits for it to be up); the tasks it owed are issued again
  to the new worker. A replacement that dies too is replaced again, after a
  wait that doubles with each attempt (:class:`RestartPolicy`), up to
  ``max_attempts`` in a row; then :class:`~fleetrl.errors.WorkerLostError`.
  The tasks owed stay on the books meanwhile (:attr:`WorkerSlot.lost`), so a
  caller that catches the error and goes on still gets every task done once.
- **Liveness.** Ray declares a worker dead once its node fails its health checks (about
  13 s after a node is lost, with Ray's defaults), and a result held in a lost node's
  object store fails to be got only then. With a ``probe`` (a call a live worker answers
  in milliseconds beside its task: a collector's ``ping``), a wait for results that lasts
  past :data:`LIVENESS_PERIOD_S` probes each worker it waits on; one that leaves its probe
  unanswered for :data:`LIVENESS_TIMEOUT_S` is taken for dead and replaced, its tasks
  issued again, as after any death. A worker that was alive after all (a network
  partition) is killed by its replacement: its results are not used.

A method that raises is not a death: :meth:`WorkerGroup.get` raises
:class:`~fleetrl.distributed.backends.WorkerRaised` for the owner to report in its own words.

Examples:
    >>> from fleetrl.distributed.backends import InProcessBackend, SimulatedDeath
    >>> class Doubler:
    ...     calls = 0
    ...     def run(self, x):
    ...         Doubler.calls += 1
    ...         if Doubler.calls == 2:
    ...             raise SimulatedDeath("killed")
    ...         return 2 * x
    >>> backend = InProcessBackend()
    >>> group = WorkerGroup(
    ...     backend, role="doubler", start=lambda slot: backend.start(Doubler),
    ...     issue=lambda slot, task: slot.actor.call("run", task))
    >>> slots = group.add([WorkerSlot(0)])
    >>> a, b = group.submit(slots[0], 1), group.submit(slots[0], 2)
    >>> group.get(a), group.get(b), group.get(b)  # b's worker died: replaced, b issued again
    (2, None, 4)
    >>> slots[0].incarnation, slots[0].restarts
    (1, 1)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetrl.distributed.backends import Actor, Backend, WorkerDied, WorkerRaised
from fleetrl.errors import WorkerLostError

__all__ = [
    "DEFAULT_MAX_RESTART_ATTEMPTS",
    "GAVE_UP_MSG",
    "LIVENESS_PERIOD_S",
    "LIVENESS_TIMEOUT_S",
    "NO_ANSWER_MSG",
    "Pending",
    "RestartPolicy",
    "Retire",
    "WorkerGroup",
    "WorkerSlot",
]

logger = logging.getLogger(__name__)

#: replacements of one worker tried in a row before giving up
DEFAULT_MAX_RESTART_ATTEMPTS = 3

#: a wait for results probes the workers it waits on every this many seconds
LIVENESS_PERIOD_S = 1.0
#: a probe unanswered for this long: the worker is taken for dead (its process answers a
#: probe in milliseconds, from a thread of its own, while it works on a task)
LIVENESS_TIMEOUT_S = 3.0

#: the wait before the second attempt; it doubles for each later one, up to BACKOFF_MAX_S
BACKOFF_BASE_S = 0.1
BACKOFF_MAX_S = 5.0

NO_ANSWER_MSG = (
    "no answer to a liveness probe for {seconds:.1f} s (its process or its node is gone, or "
    "cut off from this driver)"
)
GAVE_UP_MSG = (
    "it died, and {attempts} replacement(s) in a row died too before completing a task "
    "(max_restart_attempts={max_attempts}); fix the cause or raise max_restart_attempts. "
    "Last cause:\n{cause}"
)


@dataclass(frozen=True)
class RestartPolicy:
    """How many replacements in a row, and the backoff between them.

    A single death costs nothing (no wait before the first replacement); each
    later attempt of a series waits twice as long, so a cause that passes (a
    node restarting, memory freed) has time to pass.

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


@dataclass(eq=False)
class WorkerSlot:
    """One worker index: its actor and its books. Owners subclass it for what they keep
    per worker (a collector's env factory and arguments)."""

    index: int
    actor: Actor | None = None
    incarnation: int = 0  # replacements so far: 0 for the first actor
    deaths: int = 0  # in a row, since its last completed task
    restarts: int = 0
    #: tasks of a dead actor, still owed (issued again to its replacement)
    lost: list[Pending] = field(default_factory=list)
    #: the liveness probe in flight, and when it was sent (see :meth:`WorkerGroup.wait`)
    probe: Any = None
    probed_at: float = 0.0
    #: its last death looked like its node's loss (the owner starts the replacement elsewhere)
    node_lost: bool = False
    #: left the group for good (an elastic fleet shrank: no node could host a replacement)
    retired: bool = False


@dataclass(eq=False)
class Pending:
    """A task in flight: what was asked, of which slot, and the reference to its result
    (replaced when the task is issued again to a new worker)."""

    task: Any
    slot: WorkerSlot
    ref: Any = None


class Retire(Exception):
    """Raised by an owner's ``ready`` for a replacement that cannot be hosted while the group
    may shrink: the slot retires and its tasks go to the other workers (``rehome``)."""


class WorkerGroup:
    """Workers of one kind on one backend (see the module docstring).

    Args:
        backend: where the workers run.
        role: what a worker is called in messages ("collector worker", "gradient worker").
        start: builds the actor of a slot (a new one for each incarnation).
        issue: issues a task to a slot's actor; returns the reference to its result.
        ready: waits until a new actor is up (raise :class:`~fleetrl.distributed.backends.WorkerDied`
            if it died starting); None: not waited for (a death shows at its next task).
        max_attempts: replacements of one worker tried in a row.
        on_reissue: told of each task issued again (its ``ref`` is new).
        probe: sends a liveness probe to a slot's actor, returns the reference to its answer
            (None: no probes; a death shows when the backend reports it).
        rehome: the live slot that takes over a task of a retired one (:class:`Retire`).
        on_wait: called while a wait for results lasts, every :data:`LIVENESS_PERIOD_S`
            (an elastic fleet admits the workers that joined meanwhile).
    """

    def __init__(
        self,
        backend: Backend,
        *,
        role: str,
        start: Callable[[WorkerSlot], Actor],
        issue: Callable[[WorkerSlot, Any], Any],
        ready: Callable[[list[WorkerSlot]], None] | None = None,
        max_attempts: int = DEFAULT_MAX_RESTART_ATTEMPTS,
        on_reissue: Callable[[Pending], None] | None = None,
        probe: Callable[[WorkerSlot], Any] | None = None,
        rehome: Callable[[Pending], WorkerSlot] | None = None,
        on_wait: Callable[[], None] | None = None,
    ):
        self.backend = backend
        self.role = role
        self._start = start
        self._issue = issue
        self._ready = ready
        self.policy = RestartPolicy(max_attempts=max_attempts)
        self.on_reissue = on_reissue
        self._probe = probe
        self._rehome = rehome
        self.on_wait = on_wait
        self.slots: list[WorkerSlot] = []
        #: every task in flight, by the reference to its result
        self.pending: dict[Any, Pending] = {}

    # ------------------------------------------------------------- workers
    def add(self, slots: Iterable[WorkerSlot]) -> list[WorkerSlot]:
        """Start a worker for each slot (waiting for them with ``ready``); returns the slots."""
        slots = list(slots)
        self.slots.extend(slots)
        for slot in slots:
            slot.actor = self._start(slot)
        if self._ready is not None:
            self._ready(slots)
        return slots

    def replace(self, slot: WorkerSlot, cause: str, *, node_lost: bool = False) -> None:
        """Replace a dead worker with a new one of the same index; the tasks it owed are
        issued again to it (they stay owed while no replacement is up). ``node_lost``: the
        death looked like its node's loss (:attr:`WorkerSlot.node_lost`)."""
        mine = [p for p in self.pending.values() if p.slot is slot]
        for p in mine:
            del self.pending[p.ref]
        slot.lost.extend(mine)
        slot.node_lost = node_lost
        self._revive(slot, cause)

    def _revive(self, slot: WorkerSlot, cause: str) -> None:
        policy = self.policy
        while True:
            self.backend.kill(slot.actor)
            slot.actor, slot.probe = None, None
            slot.deaths += 1
            if policy.gives_up(slot.deaths):
                deaths, slot.deaths = slot.deaths, 0  # going on starts a new series
                raise WorkerLostError(
                    slot.index, policy.gave_up(deaths, cause), role=self.role, attempts=deaths - 1
                ) from None
            policy.wait(slot.deaths)
            slot.incarnation += 1
            slot.restarts += 1
            logger.warning(
                "%s %d died; starting incarnation %d (attempt %d of %d)",
                self.role,
                slot.index,
                slot.incarnation,
                slot.deaths,
                policy.max_attempts,
            )
            slot.actor = self._start(slot)
            if self._ready is None:
                break
            try:
                self._ready([slot])
            except WorkerDied as err:
                cause, slot.node_lost = err.cause, err.node_lost
                continue
            except Retire:
                self._retire(slot)
                return
            except BaseException:  # its start raised: not a death, but this actor is no use
                self.backend.kill(slot.actor)
                slot.actor = None  # the next revive_dead starts another; the tasks still owed
                slot.deaths = 0
                raise
            break
        lost, slot.lost = slot.lost, []
        for p in lost:
            self._submit(p)
            if self.on_reissue is not None:
                self.on_reissue(p)

    def _retire(self, slot: WorkerSlot) -> None:
        """The slot leaves the group: its actor ends, and each task it owed is issued to the
        live slot ``rehome`` picks."""
        self.backend.kill(slot.actor)
        slot.actor, slot.probe, slot.retired, slot.deaths = None, None, True, 0
        lost, slot.lost = slot.lost, []
        for p in lost:
            p.slot = self._rehome(p)  # type: ignore[misc]
            if p.slot.actor is None:  # its new slot awaits a replacement too: owed there
                p.slot.lost.append(p)
                continue
            self._submit(p)
            if self.on_reissue is not None:
                self.on_reissue(p)

    @property
    def active(self) -> list[WorkerSlot]:
        """The slots that have not retired (a dead one awaiting its replacement included)."""
        return [s for s in self.slots if not s.retired]

    def revive_dead(self) -> None:
        """Start the workers left dead by a WorkerLostError the caller caught."""
        for slot in self.slots:
            if slot.actor is None and not slot.retired:
                self._revive(slot, "(replacement after a WorkerLostError)")

    # --------------------------------------------------------------- tasks
    def _submit(self, pending: Pending) -> Pending:
        pending.ref = self._issue(pending.slot, pending.task)
        self.pending[pending.ref] = pending
        return pending

    def submit(self, slot: WorkerSlot, task: Any) -> Pending:
        """Issue ``task`` to ``slot``'s worker."""
        return self._submit(Pending(task, slot))

    def submit_again(self, pending: Pending) -> Pending:
        """Issue a task whose result was read (and not used) again, to the same slot."""
        return self._submit(pending)

    def wait(
        self, pendings: Sequence[Pending], num_returns: int = 1, timeout: float | None = None
    ) -> list[Pending]:
        """The tasks among ``pendings`` that are done (at least ``num_returns`` unless
        ``timeout`` passes first), first ready first.

        With a ``probe``, a wait that lasts probes the workers of ``pendings`` every
        :data:`LIVENESS_PERIOD_S`; one that does not answer within :data:`LIVENESS_TIMEOUT_S`
        is replaced (its tasks in ``pendings`` issued again: their refs change)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        want = min(num_returns, len(pendings))
        while True:
            by_ref = {p.ref: p for p in pendings}
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            step = left
            if self._probe is not None:
                step = LIVENESS_PERIOD_S if left is None else min(LIVENESS_PERIOD_S, left)
            ready, _ = self.backend.wait(list(by_ref), num_returns=num_returns, timeout=step)
            if len(ready) >= want or self._probe is None or (left is not None and left <= step):
                return [by_ref[r] for r in ready]
            self._check_liveness({p.slot for p in pendings})
            if self.on_wait is not None:
                self.on_wait()

    def _check_liveness(self, slots: Iterable[WorkerSlot]) -> None:
        """Probe each slot's worker; replace one whose probe went unanswered too long."""
        now = time.monotonic()
        for slot in slots:
            if slot.actor is None:
                continue
            if slot.probe is not None:
                answered, _ = self.backend.wait([slot.probe], timeout=0)
                if not answered and now - slot.probed_at < LIVENESS_TIMEOUT_S:
                    continue  # asked lately: its answer may still come
                if not answered:
                    cause = NO_ANSWER_MSG.format(seconds=now - slot.probed_at)
                    logger.warning("%s %d: %s", self.role, slot.index, cause)
                    self.replace(slot, cause, node_lost=True)
                    continue
                try:
                    self.backend.get(slot.probe)
                except WorkerDied as err:
                    self.replace(slot, err.cause, node_lost=err.node_lost)
                    continue
                except WorkerRaised:  # the probe raised: the worker lives
                    pass
            slot.probe, slot.probed_at = self._probe(slot), time.monotonic()

    def get(self, pending: Pending) -> Any:
        """The task's result; None when its worker died (the worker is then replaced and the
        task issued again, so ``pending`` can be waited for again)."""
        try:
            result = self.backend.get(pending.ref)
        except WorkerDied as err:
            if pending.ref in self.pending:  # not yet re-issued by another task's get
                self.replace(pending.slot, err.cause, node_lost=err.node_lost)
            return None
        self.pending.pop(pending.ref, None)
        pending.slot.deaths = 0
        return result

    def done(self, pending: Pending) -> None:
        """Forget a task whose result will not be read (its worker is being shut down)."""
        self.pending.pop(pending.ref, None)

    @property
    def owed(self) -> list[Pending]:
        """Tasks issued and not yet returned, those lost with a dead worker included."""
        return [*self.pending.values(), *(p for s in self.slots for p in s.lost)]

    def shutdown(self) -> None:
        """End every worker; the tasks in flight are dropped."""
        self.backend.kill_all([slot.actor for slot in self.slots])  # returns once freed
        for slot in self.slots:
            slot.actor = None
        self.pending = {}

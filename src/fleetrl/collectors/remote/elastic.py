"""ElasticFleet: the workers of a :class:`~fleetrl.collectors.RayCollector` follow the cluster.

With ``num_collectors`` a range (``"2-8"``) or ``"auto"``
(:class:`~fleetrl.fleet_size.FleetSize`), the fleet starts with its minimum and
then:

- **Grows.** At most every :data:`ROOM_CHECK_S` (each time the collector is iterated, and
  while it waits for results), the live nodes' free resources are read: as many workers
  as they hold, up to the maximum, are started with the first worker's env and arguments.
  Each joins once it is up (its collector built, seeded), and collects from its next task
  (first ready) or the next round (sync). A node that joins is used within a second or
  two of its resources showing, plus a worker's start (a process that imports torch).
- **Shrinks.** A worker whose node is lost is replaced, as in a fixed fleet
  (:mod:`fleetrl.collectors.remote.pool`); but where no live node has room for the replacement
  and the fleet is above its minimum, the worker leaves instead: its tasks go to the other
  workers, so no frame is lost. At the minimum, the replacement waits for a node
  (``replacement_timeout_s``), as in a fixed fleet.
- **Asks for its maximum.** A range's maximum is told to Ray's autoscaler
  (``ray.autoscaler.sdk.request_resources``: one bundle per worker, the worker's
  resources), so that a cloud or KubeRay cluster grows to hold it; the request is
  withdrawn at shutdown. ``"auto"`` asks for nothing: it uses what the cluster has.

Each change is logged with its worker and node, counted (:meth:`ElasticFleet.report`,
``RayCollector.stats()["fleet"]``, the training run's ``train/collectors*`` metrics) and kept in
:attr:`ElasticFleet.events`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from fleetrl.collectors.remote.pool import CollectorSlot, WorkerPool
from fleetrl.distributed.backends import WorkerDied, demand_of
from fleetrl.fleet_size import FleetSize

__all__ = ["JOIN_TIMEOUT_S", "ROOM_CHECK_S", "ElasticFleet", "FleetEvent"]

logger = logging.getLogger(__name__)

#: the cluster's free resources are read at most this often
ROOM_CHECK_S = 1.0
#: a started worker not up after this long is given up (its room was taken meanwhile)
JOIN_TIMEOUT_S = 60.0

JOINED_MSG = "collector worker %d joined on node %s (fleet: %d collectors, range %s)"
LEFT_MSG = (
    "collector worker %d left the fleet: its node %s is lost and no live node has room for "
    "a replacement (fleet: %d collectors, range %s)"
)


@dataclass(frozen=True)
class FleetEvent:
    """A worker that joined or left the fleet."""

    kind: str  # "joined" or "left"
    worker: int
    node: str | None
    size: int  # the fleet's size after it
    at: float = field(default_factory=time.time)


@dataclass(eq=False)
class _Joining:
    slot: CollectorSlot
    ref: Any
    since: float


class ElasticFleet:
    """Grows and shrinks a pool's workers within ``size`` (see the module docstring).

    Args:
        pool: the collector's workers (started with the minimum).
        size: the fleet's bounds.
    """

    def __init__(self, pool: WorkerPool, size: FleetSize):
        self.pool = pool
        self.size = size
        self.events: list[FleetEvent] = []
        self.joining: list[_Joining] = []
        #: the seed of the next worker that joins (None: unseeded; ``set_seed`` sets it)
        self.next_seed: int | None = None
        self._checked_at = float("-inf")
        pool.may_shrink = self._may_shrink
        pool.on_wait = self.tick

    # ---------------------------------------------------------------- demand
    def request(self) -> None:
        """Tell the autoscaler the maximum (one bundle per worker); nothing for ``auto``."""
        if self.size.max is not None and self.pool.slots:
            demand = demand_of(self._template().remote_config)
            if demand:
                self.pool.backend.request([demand] * self.size.max)

    # ----------------------------------------------------------------- growth
    def tick(self, force: bool = False) -> None:
        """Admit the workers that are up; start more where the cluster has room (at most
        every :data:`ROOM_CHECK_S`, unless ``force``)."""
        now = time.monotonic()
        if not force and now - self._checked_at < ROOM_CHECK_S:
            return
        self._checked_at = now
        self._admit(now)
        if self.joining:  # the free resources show the ones placed only once they are up
            return
        want = None if self.size.max is None else self.size.max - len(self.pool.active)
        if want is not None and want <= 0:
            return
        pool = self.pool
        room = pool.backend.room(self._template().remote_config, list(pool.suspect_nodes))
        count = want if room is None else room if want is None else min(room, want)
        for worker in self._free_ids(count or 0):
            self._launch(worker)
        self._admit(now)  # those up at once (in process: every one)

    def _template(self) -> CollectorSlot:
        return self.pool.active[0] if self.pool.active else self.pool.slots[0]

    def _free_ids(self, count: int) -> list[int]:
        """Ids for ``count`` new workers: retired ones first, then new ones."""
        taken = {j.slot.worker_id for j in self.joining}
        free = [s.worker_id for s in self.pool.slots if s.retired and s.worker_id not in taken]
        nxt = max([len(self.pool.slots) - 1, *taken]) + 1
        while len(free) < count:
            free.append(nxt)
            nxt += 1
        return free[:count]

    def _launch(self, worker: int) -> None:
        first = self._template()
        slot = CollectorSlot(
            worker, env_fn=first.env_fn, kwargs=first.kwargs, remote_config=first.remote_config
        )
        old = self.pool.slots[worker] if worker < len(self.pool.slots) else None
        if old is not None and old.node_id is not None:  # a retired worker's id: its next
            slot.incarnation, slot.restarts = old.incarnation + 1, old.restarts
        ref = self.pool.launch(slot)
        self.joining.append(_Joining(slot, ref, time.monotonic()))

    def _admit(self, now: float) -> None:
        pool, waiting = self.pool, []
        for joining in self.joining:
            slot = joining.slot
            if not pool.backend.wait([joining.ref], timeout=0)[0]:
                if now - joining.since < JOIN_TIMEOUT_S:
                    waiting.append(joining)
                else:  # its room went to another worker: given up
                    pool.backend.kill(slot.actor)
                continue
            try:
                self.next_seed = pool.admit(slot, joining.ref, self.next_seed)
            except WorkerDied as err:  # its node was lost while it started
                logger.info("collector worker %d died joining: %s", slot.worker_id, err.cause)
                pool.backend.kill(slot.actor)
                continue
            self._event("joined", slot)
            logger.info(
                JOINED_MSG, slot.worker_id, _short(slot.node_id), len(pool.active), self.size
            )
        self.joining = waiting

    # ---------------------------------------------------------------- shrink
    def _may_shrink(self, slot: CollectorSlot) -> bool:
        """Whether a worker no node can host leaves (the fleet stays at its minimum)."""
        if len(self.pool.active) - 1 < self.size.min:
            return False
        self._event("left", slot, len(self.pool.active) - 1)
        logger.warning(
            LEFT_MSG, slot.worker_id, _short(slot.node_id), len(self.pool.active) - 1, self.size
        )
        return True

    def _event(self, kind: str, slot: CollectorSlot, size: int | None = None) -> None:
        size = len(self.pool.active) if size is None else size
        self.events.append(FleetEvent(kind, slot.worker_id, slot.node_id, size))

    # ---------------------------------------------------------------- report
    def report(self) -> dict[str, Any]:
        """The fleet now: ``size`` (workers in it), ``min``, ``max`` (None: auto), ``joining``
        (started, not yet up), and the ``joined`` and ``left`` counts so far."""
        return {
            "size": len(self.pool.active),
            "min": self.size.min,
            "max": self.size.max,
            "joining": len(self.joining),
            "joined": sum(e.kind == "joined" for e in self.events),
            "left": sum(e.kind == "left" for e in self.events),
        }

    def shutdown(self) -> None:
        """End the workers still starting; withdraw the autoscaler request."""
        for joining in self.joining:
            self.pool.backend.kill(joining.slot.actor)
        self.joining = []
        if self.size.max is not None:
            self.pool.backend.request([])


def _short(node: str | None) -> str:
    return "?" if node is None else node[:8]

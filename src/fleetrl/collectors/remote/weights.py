"""Versioned policy weights for remote collectors.

The learner publishes a version with :meth:`WeightStore.publish`: one
``put`` of the weights with the workers' backend (:mod:`fleetrl.distributed.backends`) (in the format of :func:`fleetrl.distributed.wire.pack_weights`),
whatever the number of workers. Nothing
blocks: a worker receives the reference with its next task, and only when its
own version is older (:meth:`WeightStore.for_worker`), so weights cross the
wire once per worker per version, and never when they have not changed.

For a bound on staleness beyond that, the store also posts each version on a
:class:`VersionBoard`, a tiny actor that workers ask at the start of a task
(``max_weight_update_interval``): a task queued before the learner published
still starts with the newest weights.

A version is the caller's number, the tag of the batches collected with the
weights: a learner passes its optimizer-step count
(:mod:`fleetrl.learners.versions`); without one, the newest version + 1.
Versions never go back, but a learner may publish the same version again:
weights can change without an optimizer step (DQN's epsilon is a buffer of the
acting policy). So whether a worker must load is decided by publishes, which
the store counts (:attr:`WeightStore.publishes`), not by versions. A
same-version publish is not posted on the board; it reaches each worker with
its next task.

A publish can also target some workers only (torchrl's ``worker_ids=``): the
version still moves, but only the named workers receive that
version; the others keep theirs until the next publish that includes them. A
targeted version is not posted on the board.
"""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase

from fleetrl.distributed.backends import Actor, Backend, on_driver_node
from fleetrl.distributed.wire import pack_weights

__all__ = ["VersionBoard", "WeightStore"]


class VersionBoard:
    """Holds the latest (version, [weights ref]); the ref sits in a list so Ray does not resolve it."""

    def __init__(self) -> None:
        self.version = 0
        self.ref: list[Any] = [None]

    def post(self, version: int, ref: list[Any]) -> None:
        if version > self.version:
            self.version, self.ref = version, ref

    def newer_than(self, version: int) -> tuple[int, list[Any]] | None:
        if self.version > version and self.ref[0] is not None:
            return self.version, self.ref
        return None


class WeightStore:
    """The latest published weights, stored once per version with the workers' backend."""

    def __init__(self, backend: Backend, *, with_board: bool = False):
        self.backend = backend
        self.version = 0  # the newest version: what batches collected with it are tagged
        self.publishes = 0  # what a worker's copy is compared by (a version can be republished)
        self.ref: Any = None
        # worker id -> (publish, version, ref) of a targeted publish newer than the last broadcast
        self._targeted: dict[int, tuple[int, int, Any]] = {}
        self._broadcast = (0, 0)  # the newest (publish, version) every worker gets
        self.board: Actor | None = (
            backend.start(  # the driver's node: a lost node cannot take it
                VersionBoard,
                options=on_driver_node(backend, {"num_cpus": 0, "max_concurrency": 8}),
            )
            if with_board
            else None
        )

    def publish(
        self,
        weights: TensorDictBase | None,
        worker_ids: list[int] | None = None,
        version: int | None = None,
    ) -> int:
        """Store a new version (one ``ray.put``) and return its number. Does not wait for workers.

        ``version``: the new version's number, at least :attr:`version` (the
        caller checks; default: :attr:`version` + 1). With ``worker_ids``, only
        those workers get this version (see the module docstring).
        """
        self.version = self.version + 1 if version is None else int(version)
        self.publishes += 1
        if worker_ids is not None:
            ref = self.backend.put(pack_weights(weights)) if weights is not None else self.ref
            for worker_id in worker_ids:
                self._targeted[worker_id] = (self.publishes, self.version, ref)
            return self.version
        self._targeted.clear()
        self._broadcast = (self.publishes, self.version)
        if weights is not None:
            self.ref = self.backend.put(pack_weights(weights))
            if self.board is not None:
                self.board.fire("post", self.version, [self.ref])
        return self.version

    def for_worker(self, worker_publish: int, worker_id: int | None = None) -> tuple[int, int, Any]:
        """What a task for a worker last sent publish ``worker_publish`` should carry.

        Returns the publish the worker holds once the task starts, the version
        to tag its batches with, and the weights' ref only when it must load them.
        """
        publish, version, ref = self.publishes, self.version, self.ref
        if self._targeted:  # the newest version is not for everyone
            publish, version, ref = self._targeted.get(worker_id, (*self._broadcast, self.ref))
        if ref is not None and worker_publish < publish:
            return publish, version, ref
        return max(publish, worker_publish), version, None

    def close(self) -> None:
        if self.board is not None:
            self.backend.kill_all([self.board])
            self.board = None

"""The inference server: an actor that holds the policy and answers batched requests.

A request is one env group's step input (``(key, array)`` pairs); the server batches the
requests that are ready (see :mod:`fleetrl.collectors.inference`), runs the policy once on
the batch under ``torch.inference_mode()`` and answers each request with its rows and the
version of the weights that produced them. Requests come as Ray calls (:meth:`InferenceServer.infer`)
or through shared memory (:meth:`InferenceServer.endpoint`, :mod:`fleetrl.distributed.shm`).
:class:`WeightsBoard` holds the newest weights, which a restarted server loads first.
"""

from __future__ import annotations

import math
import os
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from torch import nn
from torchrl.envs.utils import ExplorationType, set_exploration_type

from fleetrl.distributed.backends import Actor
from fleetrl.distributed.runtime import pin_threads
from fleetrl.distributed.shm import ShmEndpoint, new_token
from fleetrl.distributed.wire import unpack_weights
from fleetrl.keys import NestedKey

__all__ = ["InferenceServer", "WeightsBoard"]


class WeightsBoard:
    """The newest weights published to the servers: what a restarted server loads first.
    The ref sits in a list so that Ray does not resolve it when it is passed around."""

    def __init__(self) -> None:
        self.publish = 0
        self.version = 0
        self.ref: list[Any] = [None]

    def post(self, publish: int, version: int, ref: list[Any]) -> None:
        if publish > self.publish:
            self.publish, self.version, self.ref = publish, version, ref

    def newest(self) -> tuple[int, int, list[Any]]:
        return self.publish, self.version, self.ref


@dataclass
class _Request:
    inputs: list[tuple[NestedKey, np.ndarray]]
    size: int
    arrived: float
    answer: Any = None
    error: BaseException | None = None


class InferenceServer:
    """An actor that holds the policy and answers batched requests (see the module docstring).

    Args:
        policy: the policy (a TensorDict -> TensorDict module).
        server_id: this server's index.
        device: where the policy runs (None: the CPU).
        max_batch: observations per policy call at most (None: no bound).
        max_wait_ms: how long the first request of a batch waits for more.
        exploration_type: set around every policy call, as in the workers.
        num_threads: torch threads in this process (None: torch's default).
        board: a :class:`WeightsBoard` actor to load the newest weights from at start
            (a restarted server), or None.
        concurrent: requests arrive from several threads (a Ray actor); in process, False:
            each request is served at once, as its own batch.
        clients: the env workers it serves (two requests in flight each at most).
    """

    def __init__(
        self,
        policy: Any,
        server_id: int = 0,
        *,
        device: Any = None,
        max_batch: int | None = None,
        max_wait_ms: float = 0.0,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        num_threads: int | None = 1,
        board: Actor | None = None,
        concurrent: bool = True,
        clients: int = 1,
    ):
        pin_threads(num_threads)
        self.server_id = server_id
        self.device = torch.device(device if device is not None else "cpu")
        self.policy = policy.to(self.device) if isinstance(policy, nn.Module) else policy
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000.0 if concurrent else 0.0
        self.exploration_type = exploration_type
        self.publish = 0
        self.version = 0
        self._cond = threading.Condition()
        self._weights_lock = threading.Lock()  # a load never lands in the middle of a batch
        self._queue: list[_Request] = []
        self._leading = False
        self._in_keys: set[NestedKey] | None = None
        self.counts = {"requests": 0, "batches": 0, "observations": 0, "compute_s": 0.0}
        self.restarted = _reconstructed()
        self._token = new_token()
        self._clients = clients
        self._endpoint: ShmEndpoint | None = None  # made on the first worker's ask
        self._endpoint_lock = threading.Lock()
        if board is not None:
            publish, version, (ref,) = board.ask("newest")
            if ref is not None:
                self.load_weights(board.backend.get(ref), version, publish)

    # --------------------------------------------------------------- weights
    def load_weights(self, wire: Any, version: int, publish: int) -> None:
        """Load a published version (older publishes, which may arrive late, are skipped)."""
        if publish <= self.publish:
            return
        weights = unpack_weights(wire).to(self.device)
        with self._weights_lock, torch.no_grad():
            TensorDict.from_module(self.policy).update_(weights)
            self.publish, self.version = publish, int(version)

    # --------------------------------------------------------------- requests
    def infer(self, inputs: list[tuple[NestedKey, np.ndarray]]) -> tuple[Any, int, float]:
        """Answer one request: ``(outputs, version, answered_at)``, outputs as ``(key, array)``
        pairs of the rows asked for, ``answered_at`` the wall-clock time they were ready."""
        return self._serve(inputs)

    def token(self) -> str:
        """This incarnation's token (a server restarted by Ray has a new one)."""
        return self._token

    def endpoint(self) -> dict[str, Any]:
        """Where workers on this node reach the server through shared memory
        (:mod:`fleetrl.distributed.shm`): its node, request FIFO and token."""
        from fleetrl.distributed.runtime import node_id

        with self._endpoint_lock:
            if self._endpoint is None:
                self._endpoint = ShmEndpoint(self._serve, self._clients)
        return {"node": node_id(), "path": self._endpoint.path, "token": self._token}

    def register(self, shm_name: str, inputs: Any, outputs: Any, rows: int, fifo: str) -> int:
        """A worker's shared-memory channel for one env group; returns its id."""
        self.endpoint()
        return self._endpoint.register(shm_name, inputs, outputs, rows, fifo)  # type: ignore[union-attr]

    def close(self) -> dict[str, Any]:
        """Release the shared-memory endpoint (its request FIFO and directory, the channels'
        mappings); returns this server's node and process id."""
        from fleetrl.distributed.runtime import node_id

        with self._endpoint_lock:
            if self._endpoint is not None:
                self._endpoint.close()
                self._endpoint = None
        return {"node": node_id(), "pid": os.getpid()}

    def _serve(self, inputs: list[tuple[NestedKey, np.ndarray]]) -> tuple[Any, int, float]:
        request = _Request(inputs, len(inputs[0][1]), time.perf_counter())
        with self._cond:
            self._queue.append(request)
            self._cond.notify_all()
            while request.answer is None and request.error is None:
                if self._leading:
                    self._cond.wait()
                    continue
                self._leading = True
                try:
                    self._lead()
                finally:
                    self._leading = False
                    self._cond.notify_all()
        if request.error is not None:
            raise request.error
        return request.answer

    def _queued(self) -> int:
        return sum(r.size for r in self._queue)

    def _lead(self) -> None:
        """Form a batch from the queue (waiting up to ``max_wait_ms`` for it to fill), run it
        without the lock, and answer its requests. Called holding the lock."""
        bound = math.inf if self.max_batch is None else self.max_batch
        deadline = self._queue[0].arrived + self.max_wait_s
        while self._queued() < bound and (left := deadline - time.perf_counter()) > 0:
            self._cond.wait(left)
        batch, size = [], 0
        while self._queue and (not batch or size + self._queue[0].size <= bound):
            request = self._queue.pop(0)
            batch.append(request)
            size += request.size
        self._cond.release()
        try:
            self._run(batch)
        finally:
            self._cond.acquire()

    def _run(self, batch: list[_Request]) -> None:
        started = time.perf_counter()
        try:
            keys = [key for key, _ in batch[0].inputs]
            td = TensorDict(batch_size=[sum(r.size for r in batch)])
            for i, key in enumerate(keys):
                td.set(key, torch.from_numpy(np.concatenate([r.inputs[i][1] for r in batch])))
            if self.device.type != "cpu":
                td = td.to(self.device, non_blocking=True)
            given = {key: td.get(key) for key in keys}  # what the policy did not write
            with (
                self._weights_lock,
                torch.inference_mode(),
                set_exploration_type(self.exploration_type),
            ):
                out = self.policy(td)
                version = self.version
            outputs = [
                (key, value.cpu().numpy())
                for key, value in out.items(include_nested=True, leaves_only=True)
                if given.get(key) is not value
            ]
        except Exception as err:
            for request in batch:
                request.error = err
            return
        answered_at = time.time()
        start = 0
        for request in batch:
            rows = slice(start, start + request.size)
            start += request.size
            request.answer = ([(k, v[rows]) for k, v in outputs], version, answered_at)
        c = self.counts
        c["requests"] += len(batch)
        c["batches"] += 1
        c["observations"] += start
        c["compute_s"] += time.perf_counter() - started

    def stats(self) -> dict[str, Any]:
        """Requests, batches, observations served and seconds computing, since this server
        (or its last restart) started; its version and device; the requests that came
        through shared memory (``shm_requests``; the others came as Ray calls)."""
        c = self.counts
        return {
            **c,
            "mean_batch": c["observations"] / c["batches"] if c["batches"] else 0.0,
            "version": self.version,
            "device": str(self.device),
            "restarted": self.restarted,
            "shm_requests": 0 if self._endpoint is None else self._endpoint.requests,
        }

    def ping(self) -> int:
        return self.server_id

    def pid(self) -> int:
        """This server's process id (fault-injection tests kill it)."""
        return os.getpid()


def _reconstructed() -> bool:
    """Whether this is a Ray actor restarted after a death."""
    from fleetrl.distributed.runtime import ray_running

    if not ray_running():
        return False
    import ray

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Ray's own deprecation notice inside the property
            return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # outside an actor
        return False

"""The driver's inference servers: :class:`InferenceServers` starts them with the policy,
gives them each published version, asks their statistics and shuts them down.

Servers are Ray actors with unlimited restarts and task retries; a restarted one loads
the newest weights from the :class:`~fleetrl.collectors.inference.WeightsBoard`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from torchrl.envs.utils import ExplorationType

from fleetrl.collectors.inference.options import InferenceOptions, server_options
from fleetrl.collectors.inference.server import InferenceServer, WeightsBoard
from fleetrl.distributed.backends import Actor, Backend, WorkerDied, WorkerRaised, on_driver_node
from fleetrl.errors import WorkerError

__all__ = ["CLOSE_WAIT_S", "SERVER_START_MSG", "InferenceServers", "latency_summary"]

SERVER_START_MSG = (
    "inference server {index} could not start (the policy could not be sent to it, or it "
    "could not be built there); the server's error:\n{cause}"
)
#: how long :meth:`InferenceServers.shutdown` waits for its servers to close (their request
#: FIFOs removed) before it kills them
CLOSE_WAIT_S = 5.0


class InferenceServers:
    """The driver's servers: started with the policy, given each published version, asked
    for their statistics.

    Args:
        backend: where they run (:mod:`fleetrl.distributed.backends`).
        policy_ref: the policy, stored once with the backend.
        count: how many servers.
        device, max_batch, max_wait_ms, exploration_type, num_threads: as
            :class:`InferenceServer` takes them.
        clients: workers per server (each has two requests in flight at most).
        remote_config: Ray actor options per server (:func:`server_options`).
        transport: how the workers reach the servers (``"auto"`` or ``"ray"``).
    """

    def __init__(
        self,
        backend: Backend,
        policy_ref: Any,
        *,
        count: int,
        device: Any,
        max_batch: int | None,
        max_wait_ms: float,
        exploration_type: ExplorationType,
        num_threads: int | None,
        clients: int,
        remote_config: dict[str, Any] | None = None,
        transport: str = "auto",
    ):
        self.backend = backend
        self.device = device
        #: how the workers reach the servers (:data:`~fleetrl.distributed.shm.TRANSPORTS`)
        self.transport = transport
        # on the driver's node: a server that Ray restarts elsewhere after its node is lost
        # loads the newest weights from it
        self.board: Actor = backend.start(
            WeightsBoard, options=on_driver_node(backend, {"num_cpus": 0})
        )
        self.servers: list[Actor] = []
        options = server_options(device, count, remote_config)
        options.update(
            max_restarts=-1,  # a killed server comes back, and Ray sends its requests again
            max_task_retries=-1,
            max_concurrency=2 * clients + 8,  # every request a thread, and room for loads
        )
        self._options = options
        self._publish = 0
        try:
            for i in range(count):
                self.servers.append(
                    backend.start(
                        InferenceServer,
                        policy_ref,
                        i,
                        device=device,
                        max_batch=max_batch,
                        max_wait_ms=max_wait_ms,
                        exploration_type=exploration_type,
                        num_threads=num_threads,
                        board=self.board,
                        concurrent=backend.name == "ray",
                        clients=2 * clients,
                        options=options,
                    )
                )
            for i, ref in enumerate([s.call("ping") for s in self.servers]):
                try:  # up before any worker
                    backend.get(ref)
                except (WorkerDied, WorkerRaised) as err:
                    text = err.cause if isinstance(err, WorkerDied) else err.text
                    raise WorkerError(SERVER_START_MSG.format(index=i, cause=text)) from None
        except BaseException:
            self.shutdown()
            raise

    @classmethod
    def start(
        cls,
        backend: Backend,
        policy_ref: Any,
        options: InferenceOptions,
        *,
        exploration_type: ExplorationType,
        num_threads: int | None,
        num_workers: int,
    ) -> InferenceServers:
        """The servers ``options`` asks for, serving ``num_workers`` workers."""
        return cls(
            backend,
            policy_ref,
            count=options.num_servers,
            device=options.device,
            max_batch=options.max_batch,
            max_wait_ms=float(options.max_wait_ms),
            exploration_type=exploration_type,
            num_threads=num_threads,
            clients=-(-num_workers // options.num_servers),
            remote_config=options.remote_config,
            transport=options.transport,
        )

    def for_worker(self, worker_id: int) -> Actor:
        return self.servers[worker_id % len(self.servers)]

    def publish(self, ref: Any, version: int) -> None:
        """Give every server a stored version (its ref from :class:`WeightStore`): posted on the
        board first, so a server restarting meanwhile starts from it; returns once every
        server holds it, so that every task issued after a publish acts with it (with local
        inference the weights travel with the next task: the same guarantee)."""
        self._publish += 1
        self.board.fire("post", self._publish, version, [ref])
        loads = [s.call("load_weights", ref, version, self._publish) for s in self.servers]
        for load in loads:
            with contextlib.suppress(WorkerDied):  # gone for good: nothing to serve with it
                self.backend.get(load)

    def stats(self, timeout: float | None = 10.0) -> list[dict[str, Any]]:
        refs = [s.call("stats") for s in self.servers]
        ready, _ = self.backend.wait(refs, num_returns=len(refs), timeout=timeout)
        out = []
        for i, ref in enumerate(refs):
            if ref in ready:
                try:
                    out.append({"server": i, **self.backend.get(ref)})
                    continue
                except (WorkerDied, WorkerRaised):
                    pass
            out.append({"server": i, "unavailable": True})
        return out

    def report(self, latencies: Sequence[float], timeout: float | None = 10.0) -> dict[str, Any]:
        """Per server (asked with ``timeout``) and in total: requests, batches, observations,
        ``mean_batch``; and ``latencies``' summary (:func:`latency_summary`)."""
        servers = self.stats(timeout)
        total = {
            k: sum(s.get(k, 0) for s in servers) for k in ("requests", "batches", "observations")
        }
        return {
            "servers": servers,
            **total,
            "mean_batch": total["observations"] / total["batches"] if total["batches"] else 0.0,
            "latency": latency_summary(latencies),
        }

    def shutdown(self) -> None:
        """End the servers and the board; returns once the servers' resources are free.

        Each server closes first (within :data:`CLOSE_WAIT_S`): a killed server would leave
        its request FIFO's directory behind. Then they end through
        :meth:`~fleetrl.distributed.backends.Backend.kill_all`, which on Ray waits until the cluster has
        their CPUs (and GPU shares) back, so a collector started right after finds them free.
        """
        servers, self.servers = self.servers, []
        closes = [s.call("close") for s in servers]
        ready, _ = self.backend.wait(closes, num_returns=len(closes), timeout=CLOSE_WAIT_S)
        for ref in ready:
            with contextlib.suppress(WorkerDied, WorkerRaised):  # gone already
                self.backend.get(ref)
        self.backend.kill_all([*servers, self.board])


def latency_summary(latencies: Sequence[float]) -> dict[str, Any]:
    """Median and 95th percentile of request latencies, in milliseconds."""
    if not latencies:
        return {"count": 0, "median_ms": math.nan, "p95_ms": math.nan}
    arr = np.asarray(latencies, dtype=np.float64) * 1000.0
    return {
        "count": len(arr),
        "median_ms": float(np.median(arr)),
        "p95_ms": float(np.percentile(arr, 95)),
    }

"""GradWorker: collects with its own collectors and computes gradients on a replica.

A gradient worker owns a replica of the algorithm and its collectors (a
RayCollector, or with ``collector.num_collectors: 0`` a SyncDataCollector in
its own process), which it collects through the central learner's path
(:class:`~fleetrl.learners.collection.Collection`: publishing, the random start, episode
statistics). Each :meth:`GradWorker.step` computes the gradient of one
minibatch and returns it in a :class:`~fleetrl.learners.records.StepReport` with the weights version it was
computed on (the master's optimizer-step count, :mod:`fleetrl.learners.versions`)
and the version its batch was collected with (the batch's tag); when the
current batch is used up it first collects a new one and prepares it (GAE with
the current critic). The sequence of minibatches is the
central learner's: :meth:`~fleetrl.algorithms.Algorithm.gradient_batches`.

The same class runs on any backend (:mod:`fleetrl.distributed.backends`): a Ray actor, or
an object in the driver's process.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from fleetrl.algorithms.base import InfoMean
from fleetrl.algorithms.replay import ReplayAlgorithm
from fleetrl.config import Config
from fleetrl.distributed.runtime import node_id, pin_threads
from fleetrl.envs.spec import EnvSpec
from fleetrl.learners.collection import Collection
from fleetrl.learners.records import StepReport
from fleetrl.learners.versions import batch_version
from fleetrl.setup.build import make_algorithm

__all__ = ["GradWorker"]


class GradWorker:
    """One gradient worker.

    Args:
        config: the run's config.
        index: this worker's index among the gradient workers.
        seed: seeds its torch RNG and its collectors.
        state: the master algorithm's ``state_dict`` to start from (weights,
            optimizer, hyperparameters), so every replica starts identical.
        version: the version (the master's optimizer-step count) ``state`` holds.
        modules: custom networks (``actor``, ``critic``), as for the Trainer.
        env_spec: the env's spaces, read once by the driver (None: read here).
    """

    def __init__(
        self,
        config: Config,
        index: int,
        seed: int,
        state: dict[str, Any] | None = None,
        version: int = 0,
        modules: dict[str, Any] | None = None,
        env_spec: EnvSpec | None = None,
    ):
        self.config = config
        pin_threads(self.config.scheme.num_threads_per_grad_worker)  # one by default
        self.index = index
        self.algorithm = make_algorithm(self.config, seed, env_spec=env_spec, **(modules or {}))
        if state is not None:
            self.algorithm.load_state_dict(state)
        # the replica's step count is the master's version of the weights it holds
        self.algorithm.num_updates = version
        world = self.config.scheme.num_grad_workers
        collected = 0
        if isinstance(self.algorithm, ReplayAlgorithm):  # its own buffer, 1/world of the frames
            self.algorithm.frame_scale = world
            collected = self.algorithm.frames_seen
        self.collection = Collection(
            self.config,
            self.algorithm,
            total_frames=-1,
            seed=seed,
            collected=collected,
            share=world,
            merge_moments=False,  # the master merges every worker's moments
        )
        #: the master's normalization statistics, loaded when the next batch starts
        self._statistics: dict[str, torch.Tensor] | None = None
        self._steps: Iterator[TensorDictBase] = iter(())
        self._steps_left = 0
        self._batch_version = version  # the tag of the batch being learned from
        self._world_size = 1

    @property
    def version(self) -> int:
        """The version of the weights this replica holds: the master's optimizer-step count
        (decentralized: its own, the same on every replica)."""
        return self.algorithm.num_updates

    # ------------------------------------------------------------- weights
    def set_weights(
        self,
        weights: TensorDictBase | np.ndarray,
        version: int,
        statistics: dict[str, torch.Tensor] | None = None,
    ) -> None:
        """Load the update worker's weights of ``version`` (a TensorDict, or flat as from
        :meth:`~fleetrl.algorithms.Algorithm.flat_weights`).

        ``statistics``: the master's normalization statistics, loaded when this
        replica starts its next batch (a batch is learned with the statistics it
        was collected with).
        """
        if statistics is not None:
            self._statistics = statistics
        if isinstance(weights, np.ndarray):
            self.algorithm.load_flat_weights(weights)
        else:
            self.algorithm.set_weights(weights)
        # the master ran after_update once per step: so do we (targets follow it exactly
        # when every version arrives, as in sync mode)
        for _ in range(max(0, int(version) - self.version)):
            self.algorithm.after_update()
        self.algorithm.num_updates = int(version)

    def get_weights(self) -> TensorDict:
        return self.algorithm.get_weights()

    def state_dict(self) -> dict[str, Any]:
        """The replica's algorithm state (a replay algorithm's buffer included) and version."""
        return {**self.algorithm.state_dict(), "version": self.version}

    def update_algorithm_parameter(self, name: str, value: float) -> float:
        self.algorithm.update_algorithm_parameter(name, value)
        return self.algorithm.parameter(name)

    def algorithm_parameter(self, name: str) -> float:
        return self.algorithm.parameter(name)

    # ---------------------------------------------------------- collection
    def _next_batch(self) -> None:
        if self._statistics is not None:
            self.algorithm.normalization.load_statistics(self._statistics)
            self._statistics = None
        batch = self.collection.next_batch()  # endless: never None
        self._batch_version = batch_version(batch)
        self._steps = self.algorithm.gradient_batches(batch)
        self._steps_left = self.algorithm.steps_per_batch

    def _report(self, **values: Any) -> StepReport:
        """A step's report: what this worker collected since its last one, and ``values``."""
        collected, _ = self.collection.take()  # publish time: part of collecting here
        report = StepReport(worker=self.index, collected=collected, **values)
        # sync/async (no gloo group): the master merges the moments of what was collected
        moments = self.collection.moments
        if self._world_size == 1 and moments is not None and moments.frames:
            report.moments = self.collection.take_moments()
        return report

    # ------------------------------------------------------------ gradients
    def step(
        self,
        weights: TensorDictBase | np.ndarray | None = None,
        version: int | None = None,
        *,
        packed: bool = False,
        statistics: dict[str, torch.Tensor] | None = None,
    ) -> StepReport:
        """Load ``weights`` if given, then compute the gradient of the next minibatch.

        Returns a :class:`~fleetrl.learners.records.StepReport`: ``grads`` (a TensorDict keyed like the trainable
        parameters; with ``packed=True``, as the update worker asks, one flat
        array from :meth:`~fleetrl.algorithms.Algorithm.flat_gradients`, which is 5x
        cheaper through Ray), ``version`` (the weights they were computed on),
        ``collection_version`` (the weights the data was collected with),
        ``batch_done`` (this was the last step on the current batch), the
        frames and finished episodes collected during this step, loss info and
        timings; with normalization (:mod:`fleetrl.networks.normalization`), ``moments``
        of the frames collected since the last report. ``statistics``: the
        master's, sent with the weights (:meth:`set_weights`).
        """
        if weights is not None:
            version = version if version is not None else self.version + 1
            self.set_weights(weights, version, statistics)
        prepared = self.algorithm.prepare_s
        while True:  # a replay algorithm yields nothing until its buffer holds learning_starts
            if self._steps_left == 0:
                self._next_batch()
            start = time.perf_counter()
            try:
                data = next(self._steps)  # the first draw prepares the batch (e.g. GAE)
                break
            except StopIteration:
                self._steps_left = 0
        if packed:
            grads, info = self.algorithm.flat_gradients(data)
        else:
            grads, info = self.algorithm.compute_gradients(data)
        self._steps_left -= 1
        return self._report(
            grads=grads,
            info={**self.collection.batch_info(), **info},
            version=self.version,
            collection_version=self._batch_version,
            batch_done=self._steps_left == 0,
            grad_s=time.perf_counter() - start,
            prepare_s=self.algorithm.prepare_s - prepared,
        )

    def gradients_for(self, data: TensorDictBase) -> np.ndarray:
        """The gradient of the loss on given (prepared) data, packed as the update worker gets it."""
        return self.algorithm.flat_gradients(data)[0]

    # ----------------------------------------------------- decentralized
    def node_address(self) -> tuple[str, int]:
        """This worker's node address and a free TCP port (rank 0 hosts the gloo rendezvous)."""
        import socket

        import ray

        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def init_process_group(
        self, address: str, port: int, rank: int, world_size: int, timeout_s: float
    ) -> int:
        """Join the gloo group of all gradient workers (torch.distributed)."""
        import torch.distributed as dist

        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{address}:{port}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout_s),
        )
        self._world_size = world_size
        return dist.get_rank()

    def train_batch(self) -> StepReport:
        """Decentralized update: every step of one batch, all-reducing the gradients.

        Each step's gradients are summed over the group in one flat all-reduce,
        divided by the group size, and applied by this replica's own optimizer;
        since every replica applies the same mean gradient to the same weights,
        the replicas stay identical without any weight broadcast.
        """
        import torch.distributed as dist

        timings = {"grad_s": 0.0, "reduce_s": 0.0, "update_s": 0.0}
        prepared = self.algorithm.prepare_s
        self._next_batch()
        mean_info = InfoMean()
        steps = 0
        for data in self._steps:  # the same count on every replica: same frames, same schedule
            start = time.perf_counter()
            flat, info = self.algorithm.flat_gradients(data)
            steps += 1
            reduced = time.perf_counter()
            summed = torch.from_numpy(flat)  # shares flat's memory: reduced in place
            dist.all_reduce(summed, op=dist.ReduceOp.SUM)
            summed /= self._world_size
            applied = time.perf_counter()
            norm = self.algorithm.apply_flat_gradients(flat)  # moves our version (num_updates) on
            self.algorithm.after_update()
            if norm is not None:
                info["grad_norm"] = norm
            mean_info.add(info)
            done = time.perf_counter()
            timings["grad_s"] += reduced - start
            timings["reduce_s"] += applied - reduced
            timings["update_s"] += done - applied
        self._steps_left = 0
        self._all_gather_moments()
        report = self._report(
            info={**self.collection.batch_info(), **mean_info.mean()},
            version=self.version,
            collection_version=self._batch_version,
            steps=steps,
            prepare_s=self.algorithm.prepare_s - prepared,
            **timings,
        )
        if self.index == 0:
            report.weights = self.algorithm.flat_weights()
            if self.algorithm.normalization is not None:
                report.statistics = self.algorithm.normalization.statistics()
        return report

    def _all_gather_moments(self) -> None:
        """Decentralized normalization: every replica merges every replica's moments of
        this batch, in rank order, so all hold the same statistics (gloo all-gather)."""
        moments = self.collection.take_moments()
        if moments is None:
            return
        import torch.distributed as dist

        gathered: list[Any] = [None] * self._world_size
        dist.all_gather_object(gathered, moments)
        for m in gathered:
            self.algorithm.normalization.merge(m)

    def collector_stats(self) -> dict[str, Any]:
        """The stats of this worker's collector (a RayCollector's: frames, lag, preemption,
        compression; a local one's: frames)."""
        return self.collection.stats()

    def get_version(self) -> int:
        return self.version

    # ------------------------------------------------------------- lifecycle
    def ping(self) -> int:
        return self.index

    def node_id(self) -> str:
        """The Ray node this worker runs on ("local" in process)."""
        return node_id()

    def shutdown(self) -> None:
        self.collection.shutdown()
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

"""UpdateWorker: owns the master algorithm, applies gradients, broadcasts weights.

Three ways to update, chosen by the ``scheme`` config, each a strategy of its
own (:mod:`fleetrl.scheme.update_modes`, chosen once at construction):

- **sync** (``grad_communication: sync``): every gradient worker computes the
  gradient of its next minibatch on the same weights; the update worker
  averages them, takes one optimizer step and broadcasts the new weights (one
  ``ray.put``, sent with each worker's next step). With equal minibatches this
  is the central step on their concatenation.
- **async** (``grad_communication: async``, A3C-like): gradients are applied
  first ready; the new weights go only to the worker whose gradient came back.
  A gradient computed on weights more than ``max_policy_lag`` versions old is
  dropped (counted in ``train/dropped_gradients``) and its worker gets the
  current weights.
- **decentralized** (``decentralized_update: true``, DD-PPO-like): the
  gradient workers all-reduce their gradients over a gloo group and each steps
  its own optimizer; the update worker only gathers reports, and mirrors rank
  0's weights for evaluation and checkpoints.

A gradient worker that dies (sync and async) is replaced by a new actor that
starts from the master's current state, and its lost step is issued again. A
replacement that dies too (e.g. while building its collectors) is replaced
again after a doubling wait, up to ``scheme.max_restart_attempts`` in a row
(the rule of :mod:`fleetrl.collectors.restarts`, shared with collector
workers); then :class:`~fleetrl.errors.WorkerLostError` says so, and the run
resumes from its last checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import numpy as np
import ray
from ray.exceptions import RayActorError, RayTaskError
from tensordict import TensorDictBase

from fleetrl.algorithms import Algorithm
from fleetrl.algorithms.replay import ReplayAlgorithm
from fleetrl.collectors.ray_checks import remote_traceback
from fleetrl.collectors.restarts import RestartPolicy
from fleetrl.config import Config, config_to_dict
from fleetrl.errors import ConfigError, WorkerError, WorkerLostError
from fleetrl.scheme.grad_worker import GradWorker, StepReport
from fleetrl.scheme.modes import update_mode
from fleetrl.scheme.report import IterationReport, IterationResult
from fleetrl.scheme.update_modes import update_strategy

__all__ = ["UpdateWorker", "average_flat"]

logger = logging.getLogger(__name__)

#: weights up to this size are sent inside each task rather than put in the object store once
INLINE_WEIGHTS_BYTES = 64 * 1024


def average_flat(grads: list[np.ndarray]) -> np.ndarray:
    """The element-wise mean of flat gradients (as from ``Algorithm.flat_gradients``)."""
    if len(grads) == 1:
        return grads[0]
    total = grads[0].astype(np.float32, copy=True)
    for g in grads[1:]:
        total += g
    total /= len(grads)
    return total


class UpdateWorker:
    """Drives ``config.scheme.num_grad_workers`` remote :class:`GradWorker` actors.

    Args:
        config: the run's config (its ``scheme`` section picks the mode).
        algorithm: the master algorithm (in this process); gradient workers
            start from its state, and its optimizer-step count is the version.
        seed: base seed; worker ``i`` and each of its replacements get their own.
        modules: custom networks (``actor``, ``critic``) for the replicas.
    """

    def __init__(
        self,
        config: Config,
        algorithm: Algorithm,
        *,
        seed: int = 0,
        modules: dict[str, Any] | None = None,
        replica_states: list[dict[str, Any]] | None = None,
    ):
        self.config = config
        self.scheme = config.scheme
        self.algorithm = algorithm
        self.seed = seed
        self.modules = modules or {}
        self.num_workers = self.scheme.num_grad_workers
        #: how it updates: sync, async or decentralized (``strategy.mode``), chosen once here
        self.strategy = update_strategy(update_mode(self.scheme), self)
        self._config_dict = config_to_dict(config)
        self._weights_ref: Any = None
        self._weights_ref_version = -1
        self._pending_calls: list[Any] = []
        self.restarts = [0] * self.num_workers
        self._failures = [0] * self.num_workers  # deaths in a row, since a completed step
        self._restart_policy = RestartPolicy(max_attempts=self.scheme.max_restart_attempts)
        self.dropped_gradients = 0
        self.applied_gradients = 0
        self._check_resources()
        remote = {"num_cpus": self.scheme.num_cpus_per_grad_worker, "max_restarts": 0}
        if self.scheme.grad_worker_resources:
            remote["resources"] = dict(self.scheme.grad_worker_resources)
        self._actor_class = ray.remote(GradWorker).options(**remote)
        self.workers: list[Any] = []
        if replica_states is not None and len(replica_states) != self.num_workers:
            raise ConfigError(
                [
                    f"scheme.num_grad_workers={self.num_workers} is invalid for this checkpoint: "
                    f"it holds {len(replica_states)} gradient workers' replay buffers, which "
                    "cannot be split or merged; resume with the same number"
                ]
            )
        try:
            if replica_states is None:
                state_ref = ray.put(algorithm.state_dict())
                self.workers = [self._start(i, state_ref) for i in range(self.num_workers)]
            else:  # resumed replay replicas: each its own buffer; caught up by the first step
                self.workers = [
                    self._start(i, ray.put(st), st["version"])
                    for i, st in enumerate(replica_states)
                ]
                self._current_weights()
            ray.get([w.ping.remote() for w in self.workers])
            self.strategy.start()
        except (RayTaskError, RayActorError) as err:  # a replica or its collectors failed to start
            self.shutdown()
            raise WorkerError(-1, remote_traceback(err), role="gradient worker") from None
        except BaseException:
            self.shutdown()
            raise

    @property
    def version(self) -> int:
        """The master's optimizer-step count: the version of its weights
        (:mod:`fleetrl.scheme.versions`)."""
        return self.algorithm.num_updates

    # ------------------------------------------------------------- workers
    def _check_resources(self) -> None:
        c, s = self.config.collector, self.scheme
        per_worker = s.num_cpus_per_grad_worker + c.num_collectors * c.num_cpus_per_collector
        cluster = ray.cluster_resources()
        problems = []
        have = cluster.get("CPU", 0)
        if per_worker * self.num_workers > have:
            problems.append(
                f"scheme.num_grad_workers={self.num_workers} is invalid: "
                f"{self.num_workers} gradient workers x {per_worker:g} CPUs "
                f"(scheme.num_cpus_per_grad_worker + collector.num_collectors x "
                f"collector.num_cpus_per_collector) need {per_worker * self.num_workers:g} "
                f"CPUs; the Ray cluster has {have:g}"
            )
        for name, amount in s.grad_worker_resources.items():
            if amount * self.num_workers > cluster.get(name, 0):
                problems.append(
                    f"scheme.grad_worker_resources={s.grad_worker_resources!r} is invalid: "
                    f"{self.num_workers} gradient workers x {amount:g} {name!r} need "
                    f"{amount * self.num_workers:g}; the Ray cluster has {cluster.get(name, 0):g}"
                )
        if problems:
            raise ConfigError(problems)

    def _worker_seed(self, index: int) -> int:
        return self.seed + 1009 * (index + 1) + 104_729 * self.restarts[index]

    def _start(self, index: int, state_ref: Any, version: int | None = None) -> Any:
        return self._actor_class.remote(
            self._config_dict,
            index,
            self._worker_seed(index),
            state_ref,
            self.version if version is None else version,
            self.modules or None,
        )

    def _replace(self, index: int, err: BaseException) -> None:
        """Start a new worker ``index`` from the master's current state.

        Not waited for: a replacement that dies while starting fails its next
        step, which brings it back here, after the policy's backoff.
        """
        self._failures[index] += 1
        deaths = self._failures[index]
        with contextlib.suppress(Exception):  # already gone
            ray.kill(self.workers[index])
        if self._restart_policy.gives_up(deaths):
            raise WorkerLostError(
                index,
                self._restart_policy.gave_up(deaths, remote_traceback(err)),
                role="gradient worker",
                attempts=deaths - 1,
            ) from None
        self._restart_policy.wait(deaths)
        self.restarts[index] += 1
        logger.warning(
            "gradient worker %d died (%s); replacing it (attempt %d of %d)",
            index,
            type(err).__name__,
            deaths,
            self._restart_policy.max_attempts,
        )
        self.workers[index] = self._start(index, ray.put(self.algorithm.state_dict()))

    def _current_weights(self) -> Any:
        """The current weights, flat, once per version: small ones travel inline with each
        task (cheaper than an object-store round trip), large ones as one shared ``ray.put``."""
        if self._weights_ref_version != self.version:
            flat = self.algorithm.flat_weights()
            self._weights_ref = flat if flat.nbytes <= INLINE_WEIGHTS_BYTES else ray.put(flat)
            self._weights_ref_version = self.version
        return self._weights_ref

    def _step(self, index: int, send_weights: bool) -> Any:
        worker = self.workers[index]
        if send_weights:
            # the normalization statistics (a few small tensors) travel with the weights
            norm = self.algorithm.normalization
            statistics = norm.statistics() if norm is not None else None
            return worker.step.remote(
                self._current_weights(), self.version, packed=True, statistics=statistics
            )
        return worker.step.remote(packed=True)

    def _get_step(self, index: int, ref: Any) -> StepReport | None:
        """The report of worker ``index``, or None when the worker died (it is then replaced)."""
        try:
            report = ray.get(ref)
        except RayTaskError as err:  # the worker's own code raised: not something to retry
            raise WorkerError(index, remote_traceback(err), role="gradient worker") from None
        except RayActorError as err:
            self._replace(index, err)
            return None
        self._failures[index] = 0
        moments = report.pop("moments", None)
        if moments is not None:  # every frame delivered counts, whether its gradient is used
            self.algorithm.normalization.merge(moments)
        return report

    # ------------------------------------------------------------ updating
    def _apply(self, flat_grads: np.ndarray, it: IterationReport) -> float | None:
        start = time.perf_counter()
        norm = self.algorithm.apply_flat_gradients(flat_grads)  # moves the version on
        self.algorithm.after_update()
        self.applied_gradients += 1
        mid = time.perf_counter()
        self._current_weights()
        it.update_s += mid - start
        it.broadcast_s += time.perf_counter() - mid
        return norm

    def apply_mean_gradients(
        self, grads: list[np.ndarray], it: IterationReport | None = None
    ) -> float | None:
        """One optimizer step with the mean of the workers' (flat) gradients; returns the norm.

        The new weights are put in the object store once, for every worker's next step.
        """
        return self._apply(average_flat(grads), it or IterationReport(self.num_workers))

    def _mirror(self, reports: list[StepReport]) -> None:
        """Take rank 0's weights and version (decentralized: the replicas are identical)."""
        # the master mirrors rank 0 (for evaluation and checkpoints)
        self.algorithm.load_flat_weights(reports[0]["weights"])
        self.algorithm.num_updates = reports[0]["version"]
        if "statistics" in reports[0]:
            self.algorithm.normalization.load_statistics(reports[0]["statistics"])

    def run_iteration(self) -> IterationResult:
        """Updates worth one collected batch per gradient worker; returns what happened.

        sync: ``steps_per_batch`` averaged steps; async: ``steps_per_batch x G``
        gradients received (applied or dropped); decentralized: one batch on
        every worker (``steps_per_batch`` all-reduced steps).
        """
        it = IterationReport(self.num_workers)
        self.strategy.run(it)
        self._check_pending_calls()
        return it.result(self.version, sum(self.restarts))

    # ------------------------------------------------------- parameters
    def update_algorithm_parameter(self, name: str, value: float) -> None:
        """Change a hyperparameter on the master and on every replica.

        Replicas receive it in order with their other calls (Ray keeps one
        caller's calls to an actor in order), without waiting; a failure is
        raised at the end of the current iteration.
        """
        self.algorithm.update_algorithm_parameter(name, value)
        self._pending_calls.extend(
            w.update_algorithm_parameter.remote(name, value) for w in self.workers
        )

    def replica_parameters(self, name: str) -> list[float]:
        """``name`` as each replica holds it now (after every call sent before)."""
        return ray.get([w.algorithm_parameter.remote(name) for w in self.workers])

    def replica_weights(self) -> list[TensorDictBase]:
        """Each replica's trainable weights (a replica mid-step answers once its step ends)."""
        return ray.get([w.get_weights.remote() for w in self.workers])

    def _check_pending_calls(self) -> None:
        if not self._pending_calls:
            return
        ready, self._pending_calls = ray.wait(
            self._pending_calls, num_returns=len(self._pending_calls), timeout=0
        )
        for ref in ready:
            try:
                ray.get(ref)
            except RayActorError:
                pass  # the worker died; its replacement starts from the master's parameters
            except RayTaskError as err:
                raise WorkerError(-1, remote_traceback(err), role="gradient worker") from None

    # --------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        """The master's state; decentralized: rank 0's (its optimizer state is the live one).

        For a replay algorithm it also holds every replica's state under
        ``"replicas"`` (their buffers), which resuming hands back to each worker.
        """
        state = self.strategy.master_state()
        if isinstance(self.algorithm, ReplayAlgorithm):
            state["replicas"] = ray.get([w.state_dict.remote() for w in self.workers])
        return state

    def collector_state(self) -> None:
        """None: the gradient workers' collectors are not saved (their envs are reseeded)."""
        return None

    def shutdown(self) -> None:
        """Kill the gradient workers; their collector actors share their fate (Ray ownership)."""
        if not ray.is_initialized():
            return
        for worker in self.workers:
            with contextlib.suppress(Exception):  # already gone
                ray.kill(worker)
        self.workers = []

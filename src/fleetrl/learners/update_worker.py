"""UpdateWorker: owns the master algorithm, applies gradients, broadcasts weights.

Three ways to update, chosen by the ``scheme`` config, each a strategy of its
own (:mod:`fleetrl.learners.update_modes`, chosen once at construction):

- **sync** (``scheme.update: sync``): every gradient worker computes the
  gradient of its next minibatch on the same weights; the update worker
  averages them, takes one optimizer step and broadcasts the new weights (one
  ``ray.put``, sent with each worker's next step). With equal minibatches this
  is the central step on their concatenation.
- **async** (``scheme.update: async``, A3C-like): gradients are applied
  first ready; the new weights go only to the worker whose gradient came back.
  A gradient computed on weights more than ``scheme.max_gradient_lag`` versions old is
  dropped (counted in ``train/dropped_gradients``) and its worker gets the
  current weights.
- **decentralized** (``scheme.update: decentralized``, DD-PPO-like): the
  gradient workers all-reduce their gradients over a gloo group and each steps
  its own optimizer; the update worker only gathers reports, and mirrors rank
  0's weights for evaluation and checkpoints.

The gradient workers run on the run's backend (``trainer.backend``,
:mod:`fleetrl.distributed.backends`): Ray actors, or objects in this process (sync and
async; the decentralized all-reduce needs worker processes). They are a
:class:`~fleetrl.distributed.workers.WorkerGroup`, the machinery the collector workers use
too: a gradient worker that dies (sync and async) is replaced by a new one that
starts from the master's current state, and its lost step is issued again. A
replacement that dies too (e.g. while building its collectors) is replaced
again after a doubling wait, up to ``scheme.max_restart_attempts`` in a row;
then :class:`~fleetrl.errors.WorkerLostError` says so, and the run resumes from
its last checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from tensordict import TensorDictBase

from fleetrl.algorithms import Algorithm
from fleetrl.algorithms.replay import ReplayAlgorithm
from fleetrl.config import Config
from fleetrl.distributed.backends import Actor, Backend, WorkerDied, WorkerRaised, make_backend
from fleetrl.distributed.runtime import ray_running, start_ray
from fleetrl.distributed.workers import Pending, WorkerGroup, WorkerSlot
from fleetrl.envs.spec import EnvSpec
from fleetrl.errors import ConfigError, WorkerError
from fleetrl.learners.base import Learner
from fleetrl.learners.grad_worker import GradWorker
from fleetrl.learners.records import IterationResult, StepReport
from fleetrl.learners.report import IterationReport
from fleetrl.learners.update_modes import update_strategy
from fleetrl.setup.verify import resource_problems

__all__ = ["UpdateWorker", "average_flat"]

logger = logging.getLogger(__name__)

#: weights up to this size are sent inside each task rather than stored once for every worker
INLINE_WEIGHTS_BYTES = 64 * 1024
ROLE = "gradient worker"
APPROX_GRAD_WORKERS_MSG = (
    "scheme.num_grad_workers={g}: the gradient workers collect in their own processes and their "
    "envs and episodes are not saved; only the central learner (scheme.num_grad_workers=1) with "
    "collector.num_collectors=0 resumes exactly"
)


def average_flat(grads: list[np.ndarray]) -> np.ndarray:
    """The element-wise mean of flat gradients (as from ``Algorithm.flat_gradients``)."""
    if len(grads) == 1:
        return grads[0]
    total = grads[0].astype(np.float32, copy=True)
    for g in grads[1:]:
        total += g
    total /= len(grads)
    return total


@dataclass
class Step:
    """A step asked of a gradient worker: with the master's current weights, or on those
    it holds."""

    send_weights: bool


@dataclass(eq=False)
class GradSlot(WorkerSlot):
    """A gradient worker: the state its first actor starts from (a resumed replica's own)."""

    start_state: Any = None
    start_version: int | None = None
    #: frames reported of the batch it is learning from (a batch lost with its worker before
    #: its last step is not counted: its replacement collects another in its place)
    open_frames: int = 0


class UpdateWorker(Learner):
    """Drives ``config.scheme.num_grad_workers`` :class:`GradWorker` s.

    Args:
        config: the run's config (its ``scheme`` section picks the mode).
        algorithm: the master algorithm (in this process); gradient workers
            start from its state, and its optimizer-step count is the version.
        seed: base seed; worker ``i`` and each of its replacements get their own.
        modules: custom networks (``actor``, ``critic``) for the replicas.
        env_spec: the env's spaces, read once by the driver.
        replica_states: the gradient workers' saved states (a resumed replay algorithm).
    """

    def __init__(
        self,
        config: Config,
        algorithm: Algorithm,
        *,
        seed: int = 0,
        modules: dict[str, Any] | None = None,
        env_spec: EnvSpec | None = None,
        replica_states: list[dict[str, Any]] | None = None,
    ):
        super().__init__(config, algorithm)
        self.scheme = config.scheme
        self.seed = seed
        self.modules = modules or {}
        self.env_spec = env_spec
        self.num_workers = self.scheme.num_grad_workers
        self.approximate_resume = APPROX_GRAD_WORKERS_MSG.format(g=self.num_workers)
        self.dropped_gradients = 0
        self.applied_gradients = 0
        self._lost_frames = 0  # frames of batches lost with their workers this iteration
        self._weights_ref: Any = None
        self._weights_ref_version = -1
        self._pending_calls: list[Any] = []
        self._started_ray = False
        if replica_states is not None and len(replica_states) != self.num_workers:
            raise ConfigError(
                [
                    f"scheme.num_grad_workers={self.num_workers} is invalid for this checkpoint: "
                    f"it holds {len(replica_states)} gradient workers' replay buffers, which "
                    "cannot be split or merged; resume with the same number"
                ]
            )
        #: where the gradient workers run (``trainer.backend``)
        self.backend: Backend = make_backend(config.trainer.backend)
        if self.backend.name == "ray":
            self._started_ray = start_ray({"address": config.collector.address})
        problems = resource_problems(config)
        if problems:
            self._stop_ray()
            raise ConfigError(problems)
        self._options: dict[str, Any] = {"num_cpus": self.scheme.num_cpus_per_grad_worker}
        if self.scheme.grad_worker_resources:
            self._options["resources"] = dict(self.scheme.grad_worker_resources)
        self.group = WorkerGroup(
            self.backend,
            role=ROLE,
            start=self._start_actor,
            issue=self._issue,
            max_attempts=self.scheme.max_restart_attempts,
        )
        #: how it updates: sync, async or decentralized (``strategy.mode``), chosen once here
        self.strategy = update_strategy(self.scheme.mode, self)
        try:
            if replica_states is None:
                state = self.backend.put(algorithm.state_dict())
                slots = [GradSlot(i, start_state=state) for i in range(self.num_workers)]
            else:  # resumed replay replicas: each its own buffer; caught up by the first step
                slots = [
                    GradSlot(i, start_state=self.backend.put(st), start_version=st["version"])
                    for i, st in enumerate(replica_states)
                ]
                self._current_weights()
            self.group.add(slots)
            self.ask_all("ping")
            self.strategy.start()
        except (WorkerRaised, WorkerDied) as err:  # a replica (or its collectors) failed to start
            self.shutdown()
            text = err.text if isinstance(err, WorkerRaised) else err.cause
            raise WorkerError(-1, text, role=ROLE) from None
        except BaseException:
            self.shutdown()
            raise

    # ------------------------------------------------------------- workers
    @property
    def workers(self) -> list[Actor | None]:
        """The gradient workers' actors, by index (None: dead)."""
        return [s.actor for s in self.group.slots]

    @property
    def restarts(self) -> list[int]:
        """Replacements of each gradient worker so far."""
        return [s.restarts for s in self.group.slots]

    def _worker_seed(self, slot: WorkerSlot) -> int:
        return self.seed + 1009 * (slot.index + 1) + 104_729 * slot.restarts

    def _start_actor(self, slot: WorkerSlot) -> Actor:
        """A gradient worker's actor: the first from its start state, a replacement from the
        master's current state."""
        assert isinstance(slot, GradSlot)
        state, version = slot.start_state, slot.start_version
        slot.start_state = slot.start_version = None
        if state is None:
            state = self.backend.put(self.algorithm.state_dict())
        return self.backend.start(
            GradWorker,
            self.config,
            slot.index,
            self._worker_seed(slot),
            state,
            self.version if version is None else version,
            self.modules or None,
            self.env_spec,
            options=self._options,
        )

    def _current_weights(self) -> Any:
        """The current weights, flat, once per version: small ones travel inline with each
        task (cheaper than an object-store round trip), large ones stored once."""
        if self._weights_ref_version != self.version:
            flat = self.algorithm.flat_weights()
            self._weights_ref = (
                flat if flat.nbytes <= INLINE_WEIGHTS_BYTES else self.backend.put(flat)
            )
            self._weights_ref_version = self.version
        return self._weights_ref

    @property
    def weights_sent(self) -> bool:
        """Whether the master's current weights are ready to send (a step since the last
        publish prepared them): a step asked now carries them."""
        return self._weights_ref_version == self.version

    def _issue(self, slot: WorkerSlot, task: Step) -> Any:
        actor = slot.actor
        assert actor is not None
        if task.send_weights:
            # the normalization statistics (a few small tensors) travel with the weights
            norm = self.algorithm.normalization
            statistics = norm.statistics() if norm is not None else None
            return actor.call(
                "step", self._current_weights(), self.version, packed=True, statistics=statistics
            )
        return actor.call("step", packed=True)

    def submit_step(self, index: int, send_weights: bool) -> Pending:
        """Ask gradient worker ``index`` for the gradient of its next minibatch."""
        return self.group.submit(self.group.slots[index], Step(send_weights))

    def wait_first(self, pendings: list[Pending]) -> Pending:
        """The first of ``pendings`` to finish."""
        return self.group.wait(pendings, num_returns=1)[0]

    def step_report(self, pending: Pending) -> StepReport | None:
        """A step's report, or None when its worker died (it is then replaced and the step
        issued again: wait for ``pending`` again)."""
        index = pending.slot.index
        try:
            report = self.group.get(pending)
        except WorkerRaised as err:  # the worker's own code raised: not something to retry
            raise WorkerError(index, err.text, role=ROLE) from None
        slot = pending.slot
        assert isinstance(slot, GradSlot)
        if report is None:  # its batch is collected again by the replacement: counted once
            self._lost_frames += slot.open_frames
            slot.open_frames = 0
            return None
        slot.open_frames += report.collected.frames
        if report.batch_done:
            slot.open_frames = 0
        if report.moments is not None:  # every frame delivered counts, its gradient used or not
            self.algorithm.normalization.merge(report.moments)
        return report

    def ask_all(self, method: str, args: list[tuple[Any, ...]] | None = None) -> list[Any]:
        """``method`` on every gradient worker (each with its own ``args``), waited for."""
        args = args or [()] * self.num_workers
        refs = [a.call(method, *x) for a, x in zip(self.workers, args)]  # type: ignore[union-attr]
        answers = []
        for index, ref in enumerate(refs):
            try:
                answers.append(self.backend.get(ref))
            except (WorkerRaised, WorkerDied) as err:
                text = err.text if isinstance(err, WorkerRaised) else err.cause
                raise WorkerError(index, text, role=ROLE) from None
        return answers

    # ------------------------------------------------------------ updating
    def apply(self, flat_grads: np.ndarray, it: IterationReport) -> float | None:
        """One optimizer step of the master with ``flat_grads``; the new weights are made
        ready for the workers' next steps. Returns the gradient norm."""
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
        """One optimizer step with the mean of the workers' (flat) gradients; returns the norm."""
        return self.apply(average_flat(grads), it or IterationReport(self.num_workers))

    def mirror(self, report: StepReport) -> None:
        """Take rank 0's weights and version (decentralized: the replicas are identical), for
        evaluation and checkpoints."""
        self.algorithm.load_flat_weights(report.weights)
        self.algorithm.num_updates = report.version
        if report.statistics is not None:
            self.algorithm.normalization.load_statistics(report.statistics)

    def run_iteration(self) -> IterationResult:
        """Updates worth one collected batch per gradient worker; returns what happened.

        sync: ``steps_per_batch`` averaged steps; async: ``steps_per_batch x G``
        gradients received (applied or dropped); decentralized: one batch on
        every worker (``steps_per_batch`` all-reduced steps).
        """
        it = IterationReport(self.num_workers)
        self.strategy.run(it)
        it.frames -= self._lost_frames  # batches lost with their workers, collected again
        self._lost_frames = 0
        self._check_pending_calls()
        return it.result(self.version, sum(self.restarts))

    # ------------------------------------------------------- parameters
    def update_algorithm_parameter(self, name: str, value: float) -> None:
        """Change a hyperparameter on the master and on every replica.

        Replicas receive it in order with their other calls (a worker runs one
        caller's calls in order), without waiting; a failure is raised at the
        end of the current iteration.
        """
        self.algorithm.update_algorithm_parameter(name, value)
        self._pending_calls.extend(
            w.call("update_algorithm_parameter", name, value) for w in self.workers if w
        )

    def replica_parameters(self, name: str) -> list[float]:
        """``name`` as each replica holds it now (after every call sent before)."""
        return self.ask_all("algorithm_parameter", [(name,)] * self.num_workers)

    def replica_weights(self) -> list[TensorDictBase]:
        """Each replica's trainable weights (a replica mid-step answers once its step ends)."""
        return self.ask_all("get_weights")

    def _check_pending_calls(self) -> None:
        if not self._pending_calls:
            return
        ready, self._pending_calls = self.backend.wait(
            self._pending_calls, num_returns=len(self._pending_calls), timeout=0
        )
        for ref in ready:
            try:
                self.backend.get(ref)
            except WorkerDied:
                pass  # the worker died; its replacement starts from the master's parameters
            except WorkerRaised as err:
                raise WorkerError(-1, err.text, role=ROLE) from None

    # --------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        """The master's state; decentralized: rank 0's (its optimizer state is the live one).

        For a replay algorithm it also holds every replica's state under
        ``"replicas"`` (their buffers), which resuming hands back to each worker.
        """
        state = self.strategy.master_state()
        if isinstance(self.algorithm, ReplayAlgorithm):
            state["replicas"] = self.ask_all("state_dict")
        return state

    def shutdown(self) -> None:
        """End the gradient workers (on Ray their collector actors share their fate), then a
        Ray instance this learner started."""
        if self.backend.name != "ray" or ray_running():
            for actor in self.workers:
                if actor is not None and self.backend.name != "ray":
                    # in process, nothing else ends a worker's collectors
                    with contextlib.suppress(WorkerDied, WorkerRaised):
                        actor.ask("shutdown")
            self.group.shutdown()
        self._stop_ray()

    def _stop_ray(self) -> None:
        if self._started_ray and ray_running():
            import ray

            ray.shutdown()
        self._started_ray = False

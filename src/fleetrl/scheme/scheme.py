"""Scheme: the training scheme composed from the ``scheme`` config section.

=====================  ==========================================================
``num_grad_workers``   1: the central learner, in the driver process
                       (:class:`CentralLearner`); G > 1: G remote
                       :class:`GradWorker` actors under an :class:`UpdateWorker`.
``grad_communication`` ``sync`` (average G gradients per step) or ``async``
                       (apply first ready, drop beyond ``max_policy_lag``).
``decentralized_update`` all-reduce among the gradient workers (gloo) instead of
                       a central update.
``collector``          each gradient worker's collectors (``num_collectors: 0``:
                       in the gradient worker's process; ``sync``,
                       ``fraction_samples``, ``fraction_workers``, ``compress``
                       pass through).
``collector.decoupled`` the central learner of DQN/SAC samples a replay buffer
                       actor that its collectors write into, while they collect
                       (:class:`~fleetrl.scheme.decoupled.DecoupledLearner`).
=====================  ==========================================================

The mode is decided once, here (:func:`~fleetrl.scheme.modes.learner_mode`),
by building the learner: a :class:`CentralLearner` or an
:class:`UpdateWorker` (which picks its update strategy). Both are a
:class:`Learner` (:attr:`Scheme.learner`) and answer the same calls, so the
:class:`~fleetrl.trainer.Trainer` loop does not depend on the mode:
:meth:`run_iteration` (updates worth one batch per gradient worker, with
frames, episodes, losses and timings), :meth:`update_algorithm_parameter`
(reaches every replica), :meth:`state_dict`, :meth:`collector_state` and
:meth:`shutdown`. (The Algorithm is what learns inside a learner:
:func:`~fleetrl.build.make_algorithm` builds it.)
"""

from __future__ import annotations

from typing import Any, Protocol

from fleetrl.algorithms import Algorithm
from fleetrl.config import Config
from fleetrl.errors import ConfigError
from fleetrl.scheme.central import CentralLearner
from fleetrl.scheme.modes import LearnerMode, learner_mode
from fleetrl.scheme.report import IterationResult

__all__ = ["Learner", "Scheme"]

APPROX_GRAD_WORKERS_MSG = (
    "scheme.num_grad_workers={g}: the gradient workers collect in their own processes and their "
    "envs and episodes are not saved; only the central learner (scheme.num_grad_workers=1) with "
    "collector.num_collectors=0 resumes exactly"
)


class Learner(Protocol):
    """What a scheme runs: the central learner or the update worker of gradient workers."""

    @property
    def version(self) -> int:
        """The learner's optimizer-step count: the version of its weights."""

    def run_iteration(self) -> IterationResult | None: ...

    def update_algorithm_parameter(self, name: str, value: float) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def collector_state(self) -> dict[str, Any] | None: ...

    def shutdown(self) -> None: ...


class Scheme:
    """Builds and runs the configured scheme.

    Args:
        config: the run's config.
        algorithm: the master algorithm (the central learner's, or the update
            worker's).
        frames: frames already trained on (a resumed run).
        seed: seeds collectors and gradient workers.
        modules: custom networks for the gradient workers' replicas.
        replica_states: the gradient workers' saved states (a resumed run).
        collector_state: the central learner's saved local collector (a resumed run).
    """

    def __init__(
        self,
        config: Config,
        algorithm: Algorithm,
        *,
        frames: int = 0,
        seed: int = 0,
        modules: dict[str, Any] | None = None,
        replica_states: list[dict[str, Any]] | None = None,
        collector_state: dict[str, Any] | None = None,
    ):
        self.config = config
        self._started_ray = False
        #: why resuming is approximate in this scheme; None where it is exact
        self.approximate_resume: str | None = APPROX_GRAD_WORKERS_MSG.format(
            g=config.scheme.num_grad_workers
        )
        #: the central learner, or the update worker of the gradient workers
        self.learner: Learner
        if learner_mode(config.scheme) is LearnerMode.CENTRAL and config.collector.decoupled:
            from fleetrl.scheme.decoupled import DecoupledLearner

            self.learner = DecoupledLearner(config, algorithm, frames=frames, seed=seed)
            self.approximate_resume = self.learner.approximate_resume
        elif learner_mode(config.scheme) is LearnerMode.CENTRAL:
            if replica_states:
                raise ConfigError(
                    [
                        "scheme.num_grad_workers=1 is invalid for this checkpoint: it holds "
                        f"{len(replica_states)} gradient workers' replay buffers; resume with "
                        f"scheme.num_grad_workers={len(replica_states)}"
                    ]
                )
            central = CentralLearner(
                config, algorithm, frames=frames, seed=seed, collector_state=collector_state
            )
            self.learner = central
            self.approximate_resume = central.approximate_resume
        else:
            from fleetrl.scheme.update_worker import UpdateWorker

            self._started_ray = _ensure_ray(config)
            try:
                self.learner = UpdateWorker(
                    config,
                    algorithm,
                    seed=seed,
                    modules=modules,
                    replica_states=replica_states,
                )
            except BaseException:
                self._stop_ray()
                raise

    @property
    def version(self) -> int:
        """The learner's optimizer-step count (:mod:`fleetrl.scheme.versions`)."""
        return self.learner.version

    def run_iteration(self) -> IterationResult | None:
        return self.learner.run_iteration()

    def update_algorithm_parameter(self, name: str, value: float) -> None:
        self.learner.update_algorithm_parameter(name, value)

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict()

    def collector_state(self) -> dict[str, Any] | None:
        """The central learner's local collector state; None for every other scheme."""
        return self.learner.collector_state()

    def shutdown(self) -> None:
        self.learner.shutdown()
        self._stop_ray()

    def _stop_ray(self) -> None:
        if self._started_ray:  # only an instance this scheme started (or attached to) itself
            import ray

            ray.shutdown()
            self._started_ray = False


def _ensure_ray(config: Config) -> bool:
    """Start (or attach to ``collector.address``) Ray unless it runs; True if this call did."""
    import ray

    if ray.is_initialized():
        return False
    if config.collector.address:
        ray.init(address=config.collector.address)
    else:
        ray.init(include_dashboard=False)
    return True

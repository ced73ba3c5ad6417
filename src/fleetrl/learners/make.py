"""make_learner: the learner of a config's mode, built once.

=========================  =====================================================
``scheme.num_grad_workers``  1: the central learner, in the driver process
                             (:class:`~fleetrl.learners.CentralLearner`); G > 1:
                             G :class:`~fleetrl.learners.GradWorker` s under an
                             :class:`~fleetrl.learners.UpdateWorker`.
``scheme.update``            ``sync`` (average G gradients per step), ``async``
                             (apply first ready, drop beyond ``max_gradient_lag``)
                             or ``decentralized`` (all-reduce among the gradient
                             workers, gloo, instead of a central update).
``collector``                each learner's collectors (``num_collectors: 0``:
                             in the learner's process).
``collector.decoupled``      the central learner of DQN/SAC samples a replay
                             buffer actor that its collectors write into
                             (:class:`~fleetrl.learners.DecoupledLearner`).
=========================  =====================================================

Every learner is a :class:`~fleetrl.learners.base.Learner`: the Trainer's loop
does not depend on the mode.
"""

from __future__ import annotations

from typing import Any

from fleetrl.algorithms import Algorithm
from fleetrl.config import Config, LearnerMode
from fleetrl.envs.spec import EnvSpec
from fleetrl.errors import ConfigError
from fleetrl.learners.base import Learner

__all__ = ["make_learner"]

REPLICAS_MSG = (
    "scheme.num_grad_workers=1 is invalid for this checkpoint: it holds {n} gradient workers' "
    "replay buffers; resume with scheme.num_grad_workers={n}"
)


def make_learner(
    config: Config,
    algorithm: Algorithm,
    *,
    frames: int = 0,
    seed: int = 0,
    modules: dict[str, Any] | None = None,
    env_spec: EnvSpec | None = None,
    replica_states: list[dict[str, Any]] | None = None,
    collector_state: dict[str, Any] | None = None,
) -> Learner:
    """The learner of ``config``'s mode (see the module docstring), starting from
    ``algorithm`` (the master) and ``frames`` frames already trained on.

    Args:
        config: the run's config.
        algorithm: the master algorithm.
        frames: frames already trained on (a resumed run).
        seed: seeds the collectors and gradient workers.
        modules: custom networks for the gradient workers' replicas.
        env_spec: the env's spaces, read once by the caller.
        replica_states: the gradient workers' saved states (a resumed run).
        collector_state: the central learner's saved local collector (a resumed run).
    """
    if config.scheme.mode is LearnerMode.CENTRAL:
        if config.collector.decoupled:
            from fleetrl.learners.decoupled import DecoupledLearner

            return DecoupledLearner(config, algorithm, frames=frames, seed=seed)
        if replica_states:
            raise ConfigError([REPLICAS_MSG.format(n=len(replica_states))])
        from fleetrl.learners.central import CentralLearner

        return CentralLearner(
            config, algorithm, frames=frames, seed=seed, collector_state=collector_state
        )
    from fleetrl.learners.update_worker import UpdateWorker

    return UpdateWorker(
        config,
        algorithm,
        seed=seed,
        modules=modules,
        env_spec=env_spec,
        replica_states=replica_states,
    )

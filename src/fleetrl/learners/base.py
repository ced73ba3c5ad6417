"""Learner: what the Trainer runs, whatever the mode.

A learner owns the master :class:`~fleetrl.algorithms.Algorithm` (whose
optimizer-step count is the version, :mod:`fleetrl.learners.versions`), its
collection, and what a checkpoint holds of it. Every learner answers the same
calls, so the Trainer's loop does not depend on the mode:

- :meth:`Learner.run_iteration`: updates worth one batch per gradient worker,
  with the frames, episodes, losses and timings (an
  :class:`~fleetrl.learners.records.IterationResult`), or None once the budget
  is spent;
- :meth:`Learner.update_algorithm_parameter`: a schedule's new value, on every
  replica;
- :meth:`Learner.state_dict` and :meth:`Learner.collector_state`: what a
  checkpoint holds; :attr:`Learner.approximate_resume` says why a resume from it
  is not exact (None where it is);
- :meth:`Learner.shutdown`.

:func:`fleetrl.learners.make_learner` builds the learner of a config's mode.
"""

from __future__ import annotations

import abc
from typing import Any

from fleetrl.algorithms import Algorithm
from fleetrl.config import Config
from fleetrl.learners.records import IterationResult

__all__ = ["Learner"]


class Learner(abc.ABC):
    """The master algorithm of a run and the way it is trained (see the module docstring).

    Args:
        config: the run's config.
        algorithm: the master algorithm.
    """

    def __init__(self, config: Config, algorithm: Algorithm):
        self.config = config
        self.algorithm = algorithm
        #: why resuming from this learner's checkpoint is approximate; None where it is exact
        self.approximate_resume: str | None = None

    @property
    def version(self) -> int:
        """The master's optimizer-step count: the version of its weights."""
        return self.algorithm.num_updates

    @abc.abstractmethod
    def run_iteration(self) -> IterationResult | None:
        """One iteration (a metrics row); None once nothing is left to collect."""

    def update_algorithm_parameter(self, name: str, value: float) -> None:
        """Set a hyperparameter (a schedule's value) wherever the algorithm has a replica."""
        self.algorithm.update_algorithm_parameter(name, value)

    def state_dict(self) -> dict[str, Any]:
        """The algorithm state a checkpoint holds."""
        return self.algorithm.state_dict()

    def collector_state(self) -> dict[str, Any] | None:
        """The collector state a checkpoint holds, where the resume can be exact; else None."""
        return None

    @abc.abstractmethod
    def shutdown(self) -> None:
        """Release the collectors and workers (and a Ray instance this learner started)."""

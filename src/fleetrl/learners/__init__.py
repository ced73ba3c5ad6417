"""The learners: the central one, the gradient workers under an update worker, the
decoupled one; :func:`make_learner` builds the one a config asks for."""

from fleetrl.learners.base import Learner
from fleetrl.learners.central import CentralLearner
from fleetrl.learners.decoupled import DecoupledLearner
from fleetrl.learners.grad_worker import GradWorker
from fleetrl.learners.make import make_learner
from fleetrl.learners.update_worker import UpdateWorker

__all__ = [
    "CentralLearner",
    "DecoupledLearner",
    "GradWorker",
    "Learner",
    "UpdateWorker",
    "make_learner",
]

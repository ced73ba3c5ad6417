"""The distributed training scheme: gradient workers, the update worker, their composition."""

from fleetrl.scheme.central import CentralLearner
from fleetrl.scheme.grad_worker import GradWorker
from fleetrl.scheme.scheme import Scheme
from fleetrl.scheme.update_worker import UpdateWorker

__all__ = ["CentralLearner", "GradWorker", "Scheme", "UpdateWorker"]

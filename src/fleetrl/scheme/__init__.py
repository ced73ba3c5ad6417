"""The distributed training scheme: gradient workers, the update worker, their composition."""

from fleetrl.scheme.central import CentralLearner
from fleetrl.scheme.grad_worker import GradWorker
from fleetrl.scheme.scheme import Scheme

__all__ = ["CentralLearner", "GradWorker", "Scheme", "UpdateWorker"]


def __getattr__(name: str):  # UpdateWorker imports ray: only when asked for
    if name == "UpdateWorker":
        from fleetrl.scheme.update_worker import UpdateWorker

        return UpdateWorker
    raise AttributeError(name)

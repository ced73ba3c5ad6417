"""A collected batch reaches the learner's device in one move (:func:`to_learner_device`):
on the CPU it is the same object, no copy; to CUDA it is pinned, then copied without blocking.
The GPU itself: tests/integration/test_cuda.py."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from fleetrl.algorithms.base import to_learner_device
from fleetrl.setup.build import make_algorithm
from fleetrl.setup.load import config_from_dict

CPU = torch.device("cpu")


def batch() -> TensorDict:
    return TensorDict({"observation": torch.zeros(4, 2), ("next", "reward"): torch.ones(4, 1)}, [4])


def test_on_the_cpu_the_batch_is_the_same_object():
    data = batch()
    assert to_learner_device(data, CPU) is data
    on_cpu = data.to(CPU)  # a TensorDict that says its device
    assert to_learner_device(on_cpu, CPU) is on_cpu


def test_to_cuda_the_batch_is_pinned_then_copied_without_blocking(monkeypatch):
    # no GPU here: the two calls are recorded, not run
    calls = []

    def pin_memory(self, *args, **kwargs):
        calls.append(("pin_memory", args, kwargs))
        return self

    def to(self, *args, **kwargs):
        calls.append(("to", args, kwargs))
        return self

    monkeypatch.setattr(TensorDict, "pin_memory", pin_memory)
    monkeypatch.setattr(TensorDict, "to", to)
    cuda = torch.device("cuda", 0)
    to_learner_device(batch(), cuda)
    assert calls == [
        ("pin_memory", (), {"num_threads": 0}),
        ("to", (cuda,), {"non_blocking": True}),
    ]


def test_a_cpu_learner_prepares_the_collected_batch_without_moving_it(monkeypatch):
    cfg = config_from_dict(
        {
            "algorithm": "ppo",
            "env": {"id": "CartPole-v1", "num_envs": 2},
            "collector": {"num_collectors": 0, "frames_per_batch": 8},
            "ppo": {"hidden_sizes": [8]},
        }
    )
    algorithm = make_algorithm(cfg, 0)
    assert algorithm.device == CPU
    moved = []
    monkeypatch.setattr(TensorDict, "pin_memory", lambda *a, **k: moved.append("pin"))
    monkeypatch.setattr(TensorDict, "to", lambda *a, **k: moved.append("to"))
    data = TensorDict({"observation": torch.zeros(2, 4, 4)}, [2, 4])
    assert algorithm.on_device(data) is data
    assert moved == []

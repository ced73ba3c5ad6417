"""Remote collectors of a learner on an accelerator act with a CPU copy of its policy
(:class:`~fleetrl.networks.policies.HostPolicy`), brought up to date by each publish; a CPU learner's
collectors get its own module, as before. The GPU itself: tests/integration/test_cuda.py."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

import fleetrl.learners.collection as collection_module
from fleetrl.learners.collection import Collection, host_policy
from fleetrl.learners.versions import batch_version
from fleetrl.networks.policies import HostPolicy
from fleetrl.setup.build import make_algorithm
from fleetrl.setup.load import config_from_dict

FPB = 32
SEED = 3


def config(num_collectors: int = 1):
    return config_from_dict(
        {
            "algorithm": "ppo",
            "env": {"id": "CartPole-v1", "num_envs": 2},
            "collector": {"num_collectors": num_collectors, "frames_per_batch": FPB},
            "trainer": {"total_frames": 4 * FPB, "seed": SEED, "backend": "inprocess"},
            "ppo": {"hidden_sizes": [8], "num_epochs": 1, "num_mini_batch": 1},
        }
    )


def weights_equal(a: nn.Module, b: nn.Module) -> bool:
    wa, wb = TensorDict.from_module(a), TensorDict.from_module(b)
    return all(torch.equal(wa.get(k), wb.get(k)) for k in wa.keys(True, True))


class Normalized(nn.Module):
    """float32 parameters and a float64 buffer: two dtypes, two copies."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))


def test_a_refresh_copies_the_policys_weights_in_place_one_group_per_dtype():
    policy = Normalized()
    host = HostPolicy(policy)
    assert host.module is not policy and weights_equal(host.module, policy)
    assert sorted(map(str, host.groups)) == ["torch.float32", "torch.float64"]
    pointers = [t.data_ptr() for t in host.targets]
    with torch.no_grad():
        policy.linear.weight.add_(1.0)
        policy.count.fill_(5.0)
    assert not weights_equal(host.module, policy)  # a copy, not the policy's own tensors
    host.refresh()
    assert weights_equal(host.module, policy)
    assert [t.data_ptr() for t in host.targets] == pointers  # in place: the same tensors
    assert all(t.device.type == "cpu" for t in host.targets)


@pytest.mark.parametrize("num_collectors", [0, 1])
def test_a_cpu_learners_collectors_get_its_own_module(num_collectors):
    cfg = config(num_collectors)
    algorithm = make_algorithm(cfg, SEED)
    assert host_policy(cfg, algorithm) is None
    collection = Collection(cfg, algorithm, total_frames=-1, seed=SEED)
    try:
        assert collection.host is None
        assert collection.collector.policy is algorithm.policy
    finally:
        collection.shutdown()


def test_a_local_collector_acts_with_an_accelerator_learners_own_module(monkeypatch):
    monkeypatch.setattr(collection_module, "module_device", lambda p: torch.device("cuda"))
    cfg = config(num_collectors=0)
    assert host_policy(cfg, make_algorithm(cfg, SEED)) is None


def test_remote_collectors_of_an_accelerator_learner_act_with_the_refreshed_cpu_copy(
    monkeypatch,
):
    # the CPU stands in for the accelerator: what is checked is who gets which module, when
    monkeypatch.setattr(collection_module, "module_device", lambda p: torch.device("cuda"))
    cfg = config(num_collectors=1)
    algorithm = make_algorithm(cfg, SEED)
    collection = Collection(cfg, algorithm, total_frames=-1, seed=SEED)
    try:
        host = collection.host
        assert host is not None and host.module is not algorithm.policy
        assert collection.collector.policy is host.module
        algorithm.learn(collection.next_batch())
        assert not weights_equal(host.module, algorithm.policy)  # learned, not published yet
        collection.publish()
        assert weights_equal(host.module, algorithm.policy)
        assert collection.published == algorithm.num_updates
        assert batch_version(collection.next_batch()) == algorithm.num_updates
    finally:
        collection.shutdown()

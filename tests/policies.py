"""Policies used across tests."""

from __future__ import annotations

import threading

import torch
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn
from torchrl.modules import ProbabilisticActor


def mlp(obs_dim: int = 4, out: int = 2, hidden: int = 32) -> nn.Module:
    return nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, out))


def categorical_actor(obs_dim: int = 4, num_actions: int = 2) -> ProbabilisticActor:
    return ProbabilisticActor(
        TensorDictModule(mlp(obs_dim, num_actions), in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )


def two_network_actor(obs_dim: int = 4, num_actions: int = 2) -> ProbabilisticActor:
    """A categorical actor whose logits come from two TensorDictModules in a sequence (a
    structure the learners' tensor path leaves to the actor itself; the collectors act
    on it on tensors, as on the multi-agent actors' chains)."""
    from tensordict.nn import TensorDictSequential

    return ProbabilisticActor(
        TensorDictSequential(
            TensorDictModule(nn.Linear(obs_dim, 8), in_keys=["observation"], out_keys=["hidden"]),
            TensorDictModule(nn.Linear(8, num_actions), in_keys=["hidden"], out_keys=["logits"]),
        ),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )


class ConstantAction(nn.Module):
    """Always action ``value``; carries one parameter so weight updates are visible."""

    def __init__(self, value: int = 1):
        super().__init__()
        self.value = nn.Parameter(torch.tensor(float(value)))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value.round().long().expand(obs.shape[0]).clone()


def constant_policy(value: int = 1) -> TensorDictModule:
    return TensorDictModule(ConstantAction(value), in_keys=["observation"], out_keys=["action"])


class CountingPolicy(TensorDictModuleBase):
    """torchrl's test policy for its CountingEnv: writes ``weight`` (1.0) as the action.

    It writes the action with the TensorDict's own shape, as torchrl's tests do, so
    an unbatched env gets a scalar: the shapes torchrl feeds such a policy.
    """

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.tensor(1.0))
        self.in_keys = []
        self.out_keys = ["action"]

    def forward(self, tensordict):
        tensordict.set("action", self.weight.expand(tensordict.shape).clone())
        return tensordict


class ShapeRecorder(TensorDictModuleBase):
    """Wraps a policy and records the batch size of every TensorDict it is fed."""

    def __init__(self, policy):
        super().__init__()
        self.policy = policy
        self.in_keys = list(getattr(policy, "in_keys", []))
        self.out_keys = list(getattr(policy, "out_keys", ["action"]))
        self.seen: list[tuple[int, ...]] = []

    def forward(self, tensordict):
        self.seen.append(tuple(tensordict.batch_size))
        return self.policy(tensordict)


class ThreadsProbe(nn.Module):
    """Action 0, and torch's thread count in the process that acts, written per env."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = obs.shape[0]
        threads = torch.full((n, 1), torch.get_num_threads(), dtype=torch.int64)
        return torch.zeros(n, dtype=torch.int64), threads


def threads_probe() -> TensorDictModule:
    return TensorDictModule(
        ThreadsProbe(), in_keys=["observation"], out_keys=["action", "num_threads"]
    )


def frame_hash(obs: torch.Tensor) -> torch.Tensor:
    """An integer per env row of Atari frame stacks: exact, whatever the batch it is computed in."""
    return obs[:, -1, ::6, ::6].to(torch.int64).sum((-1, -2)) * 40503 + obs[:, 0, 40, 40]


class RowActs(nn.Module):
    """Action (of 4), log-prob and value from each env's frame stack alone (an nn.Module, so
    it travels to Ray workers with the tests' helpers)."""

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = frame_hash(obs)
        return (h >> 3) % 4, -(h % 97).float() / 97, (h % 13).float()


def atari_row_policy() -> TensorDictModule:
    """A policy whose batches do not depend on how the envs are grouped in policy calls."""
    return TensorDictModule(
        RowActs(), in_keys=["observation"], out_keys=["action", "sample_log_prob", "state_value"]
    )


class LockedLinear(nn.Module):
    """A linear argmax policy holding a lock: it cannot be pickled, so it can reach a Ray
    worker only through ``policy_factory``."""

    def __init__(self, obs_dim: int = 4, num_actions: int = 2):
        super().__init__()
        self.lock = threading.Lock()
        self.linear = nn.Linear(obs_dim, num_actions)
        with torch.no_grad():  # action 1 everywhere until new weights arrive
            self.linear.weight.zero_()
            self.linear.bias.copy_(torch.tensor([0.0, 1.0]))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        with self.lock:
            return self.linear(obs).argmax(-1)


def locked_policy(obs_dim: int = 4) -> TensorDictModule:
    """A policy factory (picklable: a function) for an unpicklable policy."""
    return TensorDictModule(LockedLinear(obs_dim), in_keys=["observation"], out_keys=["action"])


class CompiledFlag(nn.Module):
    """Action 1 when run by torch.compile's graph, 0 when run eagerly: shows which one acted.

    ``forward`` reads no module globals: dynamo imports the module of the globals it
    traces, and this test module travels to Ray workers by value (it is not importable there).
    """

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))
        self.is_compiling, self.full, self.int64 = (
            torch.compiler.is_compiling,
            torch.full,
            torch.int64,
        )

    def forward(self, obs):
        flag = 1 if self.is_compiling() else 0
        return self.full((obs.shape[0],), flag, dtype=self.int64) + self.weight.long()


def compiled_flag() -> TensorDictModule:
    return TensorDictModule(CompiledFlag(), in_keys=["observation"], out_keys=["action"])


class WeightEcho(nn.Module):
    """Action from the observation's sign, and ``w``: the weight it acted with, per row, so a
    batch shows which weights produced each step (set ``w`` to the version to check tags)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(0.0))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        action = (obs[:, :1].sum(-1) > 0).long() if obs.shape[-1] > 0 else obs.new_zeros(0)
        return action, self.w.detach().expand(obs.shape[0]).clone()


def weight_echo() -> TensorDictModule:
    return TensorDictModule(WeightEcho(), in_keys=["observation"], out_keys=["action", "w"])

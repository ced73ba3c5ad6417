"""The networks inside TensorDict modules, called on tensors in the update's hot path.

A ``TensorDictModule`` call costs tens of microseconds of Python (reading its
in-keys, writing its out-keys, building a distribution from a TensorDict);
torchrl's loss modules add their own (a clone of the minibatch, swapping
parameters in and out of the modules, outputs nobody reads). On the 64-sample
minibatches of MuJoCo PPO that was more than half of an optimizer step. The
algorithms' updates therefore call the networks themselves, on tensors, when a
module has the plain structure that fleetrl's default networks have (and most
users' do):

- :class:`TensorNet`: a ``TensorDictModule`` (or ``ValueOperator``) of one
  ``nn.Module``: its in-keys' tensors in, its out-keys' tensors out;
- :class:`TensorChain`: a ``TensorDictSequential`` of such modules (the multi-agent
  networks: the group's observations stacked, then a ``MultiAgentMLP``), each fed the
  tensors of the keys it reads (both live in :mod:`fleetrl.networks.acting`, where
  the collectors act through them too);
- :class:`PolicyHead`: a ``ProbabilisticActor`` of one such module (or, asked for, one
  chain) and one ``ProbabilisticTensorDictModule``: observation in, distribution out;
- :class:`ActorCriticHeads`: a policy head and a critic, with the pixel torso
  they share (PPO's and A2C's default CNNs) run once for both;
- :class:`LogitsCategorical`: torch's ``Categorical`` as the loss reads it (the
  log-probability of the batch's actions and the entropy) in fewer operations, the
  policy head's distribution where the actor's is torch's ``Categorical``.

Each ``of(...)`` returns None for a module of another structure (a recurrent
policy, several heads, a module that reads more than one key): the algorithm
then calls the module as a TensorDict module, through its torchrl loss. The
parameters are the module's own (the same tensors the loss module and the
optimizer hold), so both ways compute the same function
(``tests/unit/algorithms/test_lean_losses.py``).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
)
from torch import nn

from fleetrl.networks.acting import TensorChain, TensorNet

__all__ = [
    "ActorCriticHeads",
    "LogitsCategorical",
    "PolicyHead",
    "StackedMLP",
    "TensorChain",
    "TensorNet",
    "next_values",
]


class LogitsCategorical(torch.distributions.Categorical):
    """torch's ``Categorical`` over logits, with what a loss reads in fewer operations.

    The same distribution (its samples, mode and probabilities are torch's), but the
    logits are normalized by one ``log_softmax`` (torch: ``logits - logsumexp``), the
    log-probability of actions of the batch's shape is one ``gather`` (torch: a broadcast
    first), and the entropy is ``-(p log p).sum()`` over the normalized logits. On the
    256-sample minibatches of A2C on CartPole, the log-probability and the entropy with
    their backward take 250 us instead of 380 us. The numbers agree with torch's to float
    rounding (``tests/unit/algorithms/test_lean_losses.py``).

    Examples:
        >>> logits = torch.tensor([[0.0, 1.0], [2.0, 2.0]])
        >>> fast = LogitsCategorical(logits=logits)
        >>> slow = torch.distributions.Categorical(logits=logits)
        >>> action = torch.tensor([1, 0])
        >>> torch.allclose(fast.log_prob(action), slow.log_prob(action))
        True
        >>> torch.allclose(fast.entropy(), slow.entropy())
        True
    """

    def __init__(self, logits: torch.Tensor, validate_args: bool | None = False) -> None:
        self.logits = torch.log_softmax(logits, dim=-1)
        self._param = self.logits
        self._num_events = self.logits.size(-1)
        torch.distributions.Distribution.__init__(
            self, self.logits.shape[:-1], validate_args=validate_args
        )

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if value.shape != self.batch_shape:  # another shape: torch's broadcasting rules
            return super().log_prob(value)
        return self.logits.gather(-1, value.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        # a -inf logit (a masked action) counts as the lowest float: its p log p is 0
        logits = self.logits.clamp(min=torch.finfo(self.logits.dtype).min)
        return -(logits.exp() * logits).sum(-1)


class PolicyHead:
    """A ``ProbabilisticActor`` of one plain module and its distribution, on tensors.

    ``dist(*inputs)`` builds the same distribution the actor's ``get_dist``
    builds from a TensorDict holding ``inputs`` at :attr:`in_keys`.
    """

    def __init__(self, net: TensorNet | TensorChain, prob: ProbabilisticTensorDictModule):
        self.net = net
        self.in_keys = net.in_keys
        keys = [k[-1] if isinstance(k, tuple) else k for k in prob.dist_keys]
        self.dist_keys = keys
        self.dist_class = prob.distribution_class
        self.dist_kwargs = dict(prob.distribution_kwargs or {})
        if self.dist_class is torch.distributions.Categorical and keys == ["logits"]:
            self.dist_class = LogitsCategorical  # the same distribution, its loss reads faster
        if _takes_validate_args(self.dist_class) and "validate_args" not in self.dist_kwargs:
            # torch's argument checks (a sync and a few ops per call) once per minibatch are
            # half of a Categorical's cost; the collectors' calls validate what enters a batch
            self.dist_kwargs["validate_args"] = False

    @classmethod
    def of(cls, actor: Any, chains: bool = False) -> PolicyHead | None:
        """The tensor view of ``actor``, or None when it has another structure (with
        ``chains``, its network may also be a :class:`TensorChain`)."""
        if not isinstance(actor, ProbabilisticTensorDictSequential):
            return None
        modules = list(actor.module)
        if len(modules) != 2 or getattr(actor, "return_composite", False):
            return None
        first, prob = modules
        if not isinstance(prob, ProbabilisticTensorDictModule):
            return None
        net: TensorNet | TensorChain | None = TensorNet.of(first)
        if net is None and chains:
            net = TensorChain.of(first, out_keys=list(prob.in_keys))
        if net is None:
            return None
        if list(prob.in_keys) != net.out_keys:  # the distribution reads exactly what the net wrote
            return None
        return cls(net, prob)

    def params(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The network's outputs: the distribution's parameters."""
        return self.net(*inputs)

    def dist_from(self, params: Sequence[torch.Tensor]) -> torch.distributions.Distribution:
        return self.dist_class(**dict(zip(self.dist_keys, params)), **self.dist_kwargs)

    def dist(self, *inputs: torch.Tensor) -> torch.distributions.Distribution:
        return self.dist_from(self.params(*inputs))

    def to(self, device: torch.device) -> None:
        """Move tensor distribution arguments (a TanhNormal's bounds) to ``device`` once."""
        self.dist_kwargs = {
            k: v.to(device) if isinstance(v, torch.Tensor) else v
            for k, v in self.dist_kwargs.items()
        }


def _takes_validate_args(dist_class: Any) -> bool:
    try:
        return "validate_args" in inspect.signature(dist_class).parameters
    except (TypeError, ValueError):
        return False


class ActorCriticHeads:
    """A policy head and a critic on tensors; a torso they share runs once for both.

    PPO's and A2C's default pixel networks are ``Sequential(torso, head)`` for
    the actor and the critic with the same torso module (CleanRL's
    ``ppo_atari.py`` network): the loss needs both outputs of the same
    minibatch, so the torso's forward (~99% of the compute) and backward run
    once instead of twice. Any other pair runs each network whole.
    """

    def __init__(self, policy: PolicyHead, critic: TensorNet):
        self.policy = policy
        self.critic = critic
        self.in_keys = policy.in_keys
        self.torso: nn.Module | None = None
        a, c = policy.net.net, critic.net
        if (
            isinstance(a, nn.Sequential)
            and isinstance(c, nn.Sequential)
            and len(a) == len(c) == 2
            and a[0] is c[0]
            and policy.in_keys == critic.in_keys
        ):
            self.torso, self._actor_head, self._critic_head = a[0], a[1], c[1]

    @classmethod
    def of(cls, actor: Any, critic: Any) -> ActorCriticHeads | None:
        policy, value = PolicyHead.of(actor), TensorNet.of(critic)
        if policy is None or value is None or len(value.out_keys) != 1:
            return None
        return cls(policy, value)

    def __call__(
        self, *inputs: torch.Tensor
    ) -> tuple[torch.distributions.Distribution, torch.Tensor]:
        """The policy's distribution and the critic's value on the same inputs."""
        if self.torso is not None:
            hidden = self.torso(*inputs)
            params = self._actor_head(hidden)
            params = params if isinstance(params, tuple) else (params,)
            return self.policy.dist_from(params), self._critic_head(hidden)
        return self.policy.dist(*inputs), self.critic(*inputs)[0]

    def value(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.critic(*inputs)[0]


def next_values(
    value: torch.Tensor,
    observations: Sequence[torch.Tensor],
    next_observations: Sequence[torch.Tensor],
    critic: Any,
) -> torch.Tensor:
    """The critic's values of a batch's next observations, given ``value``, its values of the
    observations (``[*rows, time, 1]``; the observations ``[*rows, time, ...]``).

    A step's next observation is, within an episode, the next step's observation: its value
    is that step's, already computed. Only the steps where the two differ (the last of each
    row, an episode's end) go through ``critic`` (``critic(*next_observations[need])``). The
    two are compared element by element, so the reuse holds for any batch: in a row of 128
    steps the critic sees 1 next observation instead of 128 (a pixel critic's forward pass is
    nearly all of the cost).
    """
    time = value.dim() - 2
    steps = value.shape[time]
    reused = torch.zeros(value.shape[:-1], dtype=torch.bool, device=value.device)
    if steps > 1:
        same = reused.narrow(time, 0, steps - 1)
        same.fill_(True)
        for obs, nxt in zip(observations, next_observations):
            equal = nxt.narrow(time, 0, steps - 1) == obs.narrow(time, 1, steps - 1)
            same &= equal.flatten(time + 1).all(-1) if equal.dim() > time + 1 else equal
    out = torch.empty_like(value)
    if steps > 1:
        out.narrow(time, 0, steps - 1).copy_(value.narrow(time, 1, steps - 1))
    need = ~reused
    out[need] = critic(*(nxt[need] for nxt in next_observations)).to(out.dtype)
    return out


class StackedMLP:
    """``k`` MLPs of one architecture with stacked parameters, evaluated in one batched pass.

    torchrl's SAC keeps its Q networks' parameters stacked (``[k, ...]`` per
    leaf) and evaluates them with ``vmap``; for a ``Sequential`` of ``Linear``
    layers and parameter-free activations the same function is one
    ``baddbmm`` per layer, without vmap's per-call cost.

    Args:
        mlp: the network whose structure the stacked parameters follow.
        params: ``name -> [k, ...]`` tensors, keyed as ``mlp.named_parameters()``.
    """

    def __init__(self, mlp: nn.Sequential, params: dict[str, torch.Tensor]):
        self.layers: list[Any] = []
        for i, layer in enumerate(mlp):
            if isinstance(layer, nn.Linear):
                weight = params[f"{i}.weight"]
                bias = params.get(f"{i}.bias")
                self.layers.append((weight.transpose(1, 2), bias))
            else:
                self.layers.append(layer)

    @classmethod
    def of(cls, mlp: Any, params: dict[str, torch.Tensor]) -> StackedMLP | None:
        if not isinstance(mlp, nn.Sequential):
            return None
        for layer in mlp:
            if isinstance(layer, nn.Linear):
                continue
            if any(True for _ in layer.parameters()) or isinstance(layer, nn.Sequential):
                return None
        return cls(mlp, params)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``[batch, in]`` shared by every network, or ``[k, batch, in]``; out ``[k, batch, out]``."""
        for layer in self.layers:
            if isinstance(layer, tuple):
                weight_t, bias = layer
                if x.dim() == 2:
                    x = x.unsqueeze(0).expand(weight_t.shape[0], *x.shape)
                x = (
                    torch.bmm(x, weight_t)
                    if bias is None
                    else torch.baddbmm(bias.unsqueeze(1), x, weight_t)
                )
            else:
                x = layer(x)
        return x

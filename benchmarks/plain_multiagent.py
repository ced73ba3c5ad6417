"""MAPPO's and IPPO's update written in plain PyTorch: the limit fleetrl's multi-agent learner
is measured against in ``learner_throughput.py``.

Written from the equations (Yu et al. 2022; de Witt et al. 2020) on plain tensors of one
agent group, ``[envs, time, n_agents, ...]``: no TensorDict, no torchrl loss or value
module. It gets copies of fleetrl's networks (the group's ``MultiAgentMLP`` actor and
critic: the same layers and initial weights), the same data, schedule, optimizer (Adam,
``eps=1e-5``) and gradient-norm clipping:

- GAE per agent, once per batch, with the current critic (a team reward and done are
  broadcast over the agents by the env; a done step cuts the trace, a terminated one
  stops the bootstrap);
- epochs x shuffled minibatches of env steps (every agent of a step in the same
  minibatch), advantages standardized per agent over the minibatch (the agent dim left
  out of the mean and std, as torchrl's ``MAPPOLoss`` does by default);
- the clipped surrogate, the squared value error (clipped with ``clip_value``) times
  ``critic_coef``, minus ``entropy_coef`` x the Categorical entropy, each averaged over
  steps and agents.

Discrete (Categorical) actions only: the shipped MAPPO/IPPO configs' MPE actions.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from plain_learners import (
    PPO_KEYS,
    LossStep,
    categorical_logp_entropy,
    clipped_surrogate,
    gae,
    grad_norm,
    parity_record,
    shuffled_epochs,
    value_loss,
)

#: the minibatch tensors :meth:`PlainMAPPO.step` takes, in order (PPO's)
KEYS = PPO_KEYS


def standardized_per_agent(adv: torch.Tensor) -> torch.Tensor:
    """``adv`` ``[steps, n_agents]`` standardized over the steps, each agent on its own."""
    eps = torch.finfo(torch.float).resolution
    return (adv - adv.mean(0)) / adv.std(0).clamp_min(eps)


class PlainMAPPO(LossStep):
    """MAPPO (a centralised critic) or IPPO (each agent's own): the critic module decides.

    Args:
        actor: the group's actor network, ``[*B, n_agents, obs] -> [*B, n_agents, actions]``
            logits (copied).
        critic: the group's critic network, ``[*B, n_agents, obs] -> [*B, n_agents, 1]``
            (copied).
        cfg: the ``mappo`` / ``ippo`` config section.
    """

    KEYS = KEYS

    def __init__(self, actor: nn.Module, critic: nn.Module, cfg: Any, device: str = "cpu"):
        self.device = torch.device(device)
        self.actor, self.critic = (m.to(self.device) for m in copy.deepcopy((actor, critic)))
        self.cfg = cfg
        self.params = [*self.actor.parameters(), *self.critic.parameters()]
        self.opt = torch.optim.Adam(self.params, lr=cfg.lr, eps=1e-5)

    def to_device(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device, non_blocking=True) for k, v in data.items()}

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def prepare(self, d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """GAE per agent over ``[envs, time, n_agents]``, then the env steps flat."""
        c = self.cfg
        with torch.no_grad():
            value = self.value(d["obs"])
            next_value = self.value(d["next_obs"])
        adv, ret = gae(
            value, next_value, d["reward"], d["terminated"], d["done"], c.gamma, c.gae_lambda
        )
        flat = {"adv": adv, "ret": ret, "value": value}
        flat.update((k, d[k]) for k in ("obs", "action", "logp"))
        return {k: v.flatten(0, 1) for k, v in flat.items()}

    def loss(self, obs, action, logp_old, adv, ret, value_old) -> torch.Tensor:
        c = self.cfg
        logp, entropy = categorical_logp_entropy(self.actor(obs), action)
        value = self.value(obs)
        if c.normalize_advantage:
            adv = standardized_per_agent(adv)
        objective = clipped_surrogate(logp, logp_old, adv, c.clip_epsilon)
        loss = objective + c.critic_coef * value_loss(value, ret, value_old, c.clip_value)
        if c.entropy_coef > 0:
            loss = loss - c.entropy_coef * entropy.mean()
        return loss

    def learn(self, data: dict[str, torch.Tensor], step: Callable[..., Any] | None = None) -> int:
        return shuffled_epochs(
            self.prepare(self.to_device(data)), KEYS, self.cfg, step or self.step
        )


def group_data(batch: Any, group: str) -> dict[str, torch.Tensor]:
    """One stacked agent group of a grouped batch as plain tensors over ``[envs, time,
    n_agents]`` (the env's rewards and dones per agent)."""
    flat = batch.reshape(-1, batch.shape[-1]) if batch.batch_dims > 2 else batch
    nxt = flat["next", group]
    data = {
        "obs": flat[group, "observation"],
        "next_obs": nxt["observation"],
        "action": flat[group, "action"],
        "logp": flat[group, "action_log_prob"],
        "reward": nxt["reward"].squeeze(-1),
        "terminated": nxt["terminated"].squeeze(-1),
        "done": nxt["done"].squeeze(-1),
    }
    return {k: v.contiguous().clone() for k, v in data.items()}


def group_networks(algorithm: Any) -> tuple[nn.Module, nn.Module]:
    """The ``MultiAgentMLP`` actor and critic of a one-group fleetrl MAPPO / IPPO whose
    group stacks its agents (its observation stacker is then a reshape)."""
    if len(algorithm.layouts) != 1 or algorithm.layout.agents is not None:
        raise ValueError("the plain MAPPO takes one group that stacks its agents on a dim")
    actor = algorithm.actor.module[0].module[1].module
    critic = algorithm.critic.module[1].module
    return actor, critic


def parity(algorithm: Any, plain: PlainMAPPO, batch: Any) -> dict[str, float]:
    """fleetrl's loss on one minibatch against plain's, before either updates: both prepare
    the whole batch (GAE) with the same weights and read the first of ``num_mini_batch``
    unshuffled parts of the env steps. Returns the two losses, their gradient norms, and
    the largest difference of the advantages; the timed rounds mean something only where
    these agree."""
    group = algorithm.layout.group
    data = algorithm.prepare(batch.clone())
    flat = plain.prepare(plain.to_device(group_data(batch, group)))
    idx = torch.arange(data.shape[0]).tensor_split(algorithm.num_mini_batch)[0]
    fleet_loss, _ = algorithm.loss(data[idx])
    plain_loss = plain.loss(*(flat[k][idx] for k in KEYS))
    norms = [
        grad_norm(fleet_loss, algorithm.optimizer.param_groups[0]["params"]),
        grad_norm(plain_loss, plain.params),
    ]
    fleet_adv = data.get((group, "advantage")).squeeze(-1)
    return parity_record(fleet_loss, plain_loss, norms, fleet_adv - flat["adv"])

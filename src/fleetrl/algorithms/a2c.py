"""A2C: torchrl's A2CLoss with GAE (lambda 1: n-step returns), one step per batch.

Reads top to bottom: config (``fleetrl.config.A2CConfig``), networks, loss and
value estimator, update.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import A2CLoss
from torchrl.objectives.value import GAE

from fleetrl.algorithms.base import Algorithm, end_padded_rows, flatten_valid
from fleetrl.algorithms.models import EnvInfo, make_actor, make_critic
from fleetrl.config import A2CConfig

__all__ = ["A2C"]


class A2C(Algorithm):
    """Advantage Actor-Critic (synchronous): one gradient step on each whole batch.

    Args:
        config: hyperparameters (``A2CConfig``).
        info: the env's spaces, for the default networks.
        actor: a ProbabilisticActor writing ``action`` (default: MLP).
        critic: a module writing ``state_value`` (default: MLP).
    """

    name = "a2c"
    tunable: ClassVar[tuple[str, ...]] = ("entropy_coef", "critic_coef")

    def __init__(
        self,
        config: A2CConfig,
        info: EnvInfo,
        *,
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
    ):
        actor = actor if actor is not None else make_actor(info, config.hidden_sizes)
        critic = critic if critic is not None else make_critic(info, config.hidden_sizes)
        loss = A2CLoss(
            actor,
            critic,
            entropy_bonus=config.entropy_coef > 0,
            entropy_coeff=config.entropy_coef,
            critic_coeff=config.critic_coef,
            loss_critic_type="l2",
        )
        self.gae = GAE(
            gamma=config.gamma, lmbda=config.gae_lambda, value_network=critic, average_gae=False
        )
        optimizer = torch.optim.Adam(loss.parameters(), lr=config.lr, eps=1e-5)
        super().__init__(
            loss,
            actor,
            optimizer,
            gamma=config.gamma,
            num_epochs=1,
            num_mini_batch=1,
            max_grad_norm=config.max_grad_norm,
        )
        self.critic = critic
        self.config = config

    @property
    def entropy_coef(self) -> float:
        return (
            float(self.loss_module.entropy_coeff)
            if self.loss_module.entropy_coeff is not None
            else 0.0
        )

    @property
    def critic_coef(self) -> float:
        return float(self.loss_module.critic_coeff)

    def _set_parameter(self, name: str, value: float) -> None:
        getattr(
            self.loss_module, {"entropy_coef": "entropy_coeff", "critic_coef": "critic_coeff"}[name]
        ).fill_(float(value))

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        batch = end_padded_rows(batch)
        with torch.no_grad():
            self.gae(batch)
        data = flatten_valid(batch)
        if self.config.normalize_advantage:
            adv = data.get("advantage")
            data.set("advantage", (adv - adv.mean()) / (adv.std() + 1e-8))
        return data

    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, float]]:
        out = self.loss_module(data)
        total = out["loss_objective"] + out["loss_critic"]
        info = {
            "loss/objective": float(out["loss_objective"].detach()),
            "loss/critic": float(out["loss_critic"].detach()),
        }
        if "loss_entropy" in out:
            total = total + out["loss_entropy"]
            info["loss/entropy"] = (
                float(out["entropy"].detach()) if "entropy" in out else float(-out["loss_entropy"])
            )
        return total, info

"""A2C: torchrl's A2CLoss with GAE, one gradient step per collected batch.

Reads top to bottom: config (``fleetrl.config.A2CConfig``), networks, loss and
value estimator, update.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import A2CLoss

from fleetrl.algorithms.actor_critic import ActorCritic
from fleetrl.algorithms.models import EnvInfo, make_actor_critic
from fleetrl.config import A2CConfig

__all__ = ["A2C"]


class A2C(ActorCritic):
    """Advantage Actor-Critic (synchronous): one gradient step on each whole batch.

    Args:
        config: hyperparameters (``A2CConfig``).
        info: the env's spaces, for the default networks.
        actor: a ProbabilisticActor writing ``action`` (default: by ``config.model``).
        critic: a module writing ``state_value`` (default: by ``config.model``).
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
        # the user's modules win; only what is missing is built (by config.model)
        actor, critic = make_actor_critic(
            config.model, info, config.hidden_sizes, actor=actor, critic=critic
        )
        loss = A2CLoss(
            actor,
            critic,
            entropy_bonus=config.entropy_coef > 0,
            entropy_coeff=config.entropy_coef,
            critic_coeff=config.critic_coef,
            loss_critic_type="l2",
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
        self.init_gae(critic, config.gamma, config.gae_lambda)
        self.config = config

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        data = super().prepare(batch)
        if self.config.normalize_advantage:
            adv = data.get("advantage")
            data.set("advantage", (adv - adv.mean()) / (adv.std() + 1e-8))
        return data

    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, float]]:
        return self.loss_info(self.loss_module(data))

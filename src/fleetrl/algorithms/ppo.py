"""PPO: torchrl's ClipPPOLoss with GAE, epochs x minibatches, advantage normalisation.

Reads top to bottom: the config (``fleetrl.config.PPOConfig``), the networks
(default MLPs, or the user's actor and critic), the loss and value estimator,
and one update (:meth:`ActorCritic.prepare` computes GAE on the whole batch once
with the current critic; :meth:`PPO.loss` is one minibatch).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import ClipPPOLoss

from fleetrl.algorithms.actor_critic import ActorCritic
from fleetrl.algorithms.models import EnvInfo, make_actor_critic
from fleetrl.config import PPOConfig

__all__ = ["PPO"]


class PPO(ActorCritic):
    """Proximal Policy Optimization (clipped objective).

    Args:
        config: hyperparameters (``PPOConfig``).
        info: the env's spaces, for the default networks.
        actor: a ProbabilisticActor writing ``action`` and ``action_log_prob``
            (default: by ``config.model``, see
            :func:`~fleetrl.algorithms.models.make_actor_critic`).
        critic: a module writing ``state_value`` (default: by ``config.model``).

    Examples:
        >>> from fleetrl.algorithms.models import env_info
        >>> ppo = PPO(PPOConfig(), env_info("CartPole-v1"))
        >>> ppo.update_algorithm_parameter("clip_epsilon", 0.1)
        >>> round(ppo.clip_epsilon, 3)
        0.1
    """

    name = "ppo"
    tunable: ClassVar[tuple[str, ...]] = ("clip_epsilon", "entropy_coef", "critic_coef")
    loss_buffers: ClassVar[dict[str, str]] = {
        **ActorCritic.loss_buffers,
        "clip_epsilon": "clip_epsilon",
    }

    def __init__(
        self,
        config: PPOConfig,
        info: EnvInfo,
        *,
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
    ):
        # the user's modules win; only what is missing is built (by config.model)
        actor, critic = make_actor_critic(
            config.model, info, config.hidden_sizes, actor=actor, critic=critic
        )
        loss = ClipPPOLoss(
            actor,
            critic,
            clip_epsilon=config.clip_epsilon,
            entropy_bonus=config.entropy_coef > 0,
            entropy_coeff=config.entropy_coef,
            critic_coeff=config.critic_coef,
            loss_critic_type="l2",
            normalize_advantage=config.normalize_advantage,
            clip_value=config.clip_value,
        )
        optimizer = torch.optim.Adam(loss.parameters(), lr=config.lr, eps=1e-5)
        super().__init__(
            loss,
            actor,
            optimizer,
            gamma=config.gamma,
            num_epochs=config.num_epochs,
            num_mini_batch=config.num_mini_batch,
            max_grad_norm=config.max_grad_norm,
        )
        self.init_gae(critic, config.gamma, config.gae_lambda)
        self.config = config

    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, float]]:
        return self.loss_info(self.loss_module(data))

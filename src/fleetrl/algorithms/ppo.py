"""PPO: the clipped objective on GAE advantages, epochs x minibatches of each batch.

Reads top to bottom (the config section, :class:`PPOConfig`, is in
:mod:`fleetrl.algorithms.sections`): the algorithm (networks and torchrl's ``ClipPPOLoss``), its schedule (the clip
epsilon, besides the learning rate every algorithm has), GAE once per batch,
and the loss of one minibatch: the clipped surrogate, the (clipped) value
loss and the entropy bonus, on the networks' outputs.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import ClipPPOLoss

from fleetrl.algorithms.actor_critic import (
    ActorCritic,
    ClipEpsilon,
)
from fleetrl.algorithms.sections import PPOConfig
from fleetrl.envs.spec import EnvSpec

__all__ = ["PPO", "PPOConfig"]


class PPO(ClipEpsilon, ActorCritic):
    """Proximal Policy Optimization (clipped objective).

    Args:
        config: hyperparameters (``PPOConfig``).
        spec: the env's spaces, for the default networks.
        actor: a ProbabilisticActor writing ``action`` and ``action_log_prob``
            (default: by ``config.model``, see
            :func:`~fleetrl.networks.models.make_actor_critic`).
        critic: a module writing ``state_value`` (default: by ``config.model``).
        device: the learner's device (default: the CPU).

    Examples:
        Build PPO for CartPole and learn from one collected batch:

        >>> from fleetrl import PPO, PPOConfig, SyncDataCollector
        >>> from fleetrl.envs import env_spec
        >>> ppo = PPO(PPOConfig(num_epochs=2, num_mini_batch=4), env_spec("CartPole-v1"))
        >>> with SyncDataCollector("CartPole-v1", ppo.policy, frames_per_batch=256,
        ...                        num_envs=4) as collector:
        ...     info = ppo.learn(collector.next())
        >>> ppo.num_updates, sorted(info)[:2]
        (8, ['grad_norm', 'loss/clip_fraction'])
        >>> ppo.update_algorithm_parameter("clip_epsilon", 0.1)
        >>> round(ppo.clip_epsilon, 3)
        0.1
    """

    name = "ppo"
    config_class = PPOConfig

    def __init__(
        self,
        config: PPOConfig,
        spec: EnvSpec,
        *,
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
        device: Any = None,
    ):
        super().__init__(
            config,
            spec,
            ClipPPOLoss,
            actor=actor,
            critic=critic,
            device=device,
            num_epochs=config.num_epochs,
            num_mini_batch=config.num_mini_batch,
            loss_kwargs={
                "clip_epsilon": config.clip_epsilon,
                "normalize_advantage": config.normalize_advantage,
                "clip_value": config.clip_value,
            },
        )
        self.init_gae(config.gamma, config.gae_lambda)
        self.init_clip_epsilon()

    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The clipped surrogate + ``critic_coef`` x the (clipped) value loss - the entropy
        bonus (:meth:`~fleetrl.algorithms.actor_critic.ActorCritic.clipped_loss`)."""
        return self.clipped_loss(data)

"""PPO: the clipped objective on GAE advantages, epochs x minibatches of each batch.

Reads top to bottom: the config (:class:`PPOConfig`, with its checks), the
algorithm (networks and torchrl's ``ClipPPOLoss``), its schedule (the clip
epsilon, besides the learning rate every algorithm has), GAE once per batch,
and the loss of one minibatch: the clipped surrogate, the (clipped) value
loss and the entropy bonus, on the networks' outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import ClipPPOLoss

from fleetrl.algorithms.actor_critic import (
    ActorCritic,
    ActorCriticConfig,
    ClipEpsilon,
    PPOFields,
    check_clipped_objective,
)
from fleetrl.algorithms.models import ActionDistribution, ModelKind
from fleetrl.config import Config
from fleetrl.envs.spec import EnvSpec
from fleetrl.errors import Problems

__all__ = ["PPO", "PPOConfig"]


@dataclass
class PPOConfig(PPOFields, ActorCriticConfig):
    """The ``ppo`` section of a config.

    Examples:
        >>> from fleetrl.envs.spec import env_spec
        >>> ppo = PPO(PPOConfig(num_epochs=2, num_mini_batch=4), env_spec("CartPole-v1"))
        >>> ppo.steps_per_batch, ppo.config.clip_epsilon
        (8, 0.2)"""

    # lr to max_grad_norm (the clip and epoch keys): PPOFields's
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    """hidden layers of the actor and critic MLPs."""
    distribution: ActionDistribution = ActionDistribution.TANH_NORMAL
    """continuous actions: 'tanh_normal' (mean and std from the MLP, squashed into the
    bounds) or 'normal' (CleanRL's ppo_continuous_action.py: state-independent log-std,
    the Gaussian sample clipped to the bounds at the env, CleanRL's orthogonal init);
    discrete actions always use a Categorical."""
    model: ModelKind = ModelKind.AUTO
    """default network: 'auto' (cnn for 3-D uint8 observations, else mlp), 'mlp', 'cnn'
    (Nature CNN), 'impala' (IMPALA ResNet), or 'lstm' / 'gru' (a recurrent core of
    recurrent_size units on a torso (torso), trained through time on sequences of seq_len
    steps); modules passed in code win."""

    def validate(self, config: Config, check: Problems) -> None:
        super().validate(config, check)
        check_clipped_objective(self, config, check)


class PPO(ClipEpsilon, ActorCritic):
    """Proximal Policy Optimization (clipped objective).

    Args:
        config: hyperparameters (``PPOConfig``).
        info: the env's spaces, for the default networks.
        actor: a ProbabilisticActor writing ``action`` and ``action_log_prob``
            (default: by ``config.model``, see
            :func:`~fleetrl.algorithms.models.make_actor_critic`).
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
        info: EnvSpec,
        *,
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
        device: Any = None,
    ):
        super().__init__(
            config,
            info,
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

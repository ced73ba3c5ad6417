"""PPO: torchrl's ClipPPOLoss with GAE, epochs x minibatches, advantage normalisation.

Reads top to bottom: the config (:class:`PPOConfig`, with its checks), the networks
(default MLPs, or the user's actor and critic), the loss and value estimator,
and one update (:meth:`ActorCritic.prepare` computes GAE on the whole batch once
with the current critic; :meth:`PPO.loss` is one minibatch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import ClipPPOLoss

from fleetrl.algorithms.actor_critic import ActorCritic, ActorCriticConfig
from fleetrl.algorithms.models import ActionDistribution, EnvInfo, ModelKind
from fleetrl.config import Checks, Config, Schedule

__all__ = ["PPO", "PPOConfig"]


@dataclass
class PPOConfig(ActorCriticConfig):
    """The ``ppo`` section of a config."""

    lr: float = 3e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_epsilon: float = 0.2
    """PPO ratio clipping."""
    clip_schedule: Schedule = Schedule.CONSTANT
    """'constant' or 'linear' decay of clip_epsilon (to 0 at trainer.total_frames; it was
    trainer.clip_schedule)."""
    entropy_coef: float = 0.0
    """entropy bonus coefficient."""
    critic_coef: float = 0.5
    """value loss coefficient."""
    num_epochs: int = 4
    """passes over each batch."""
    num_mini_batch: int = 4
    """minibatches per epoch."""
    normalize_advantage: bool = True
    """normalize advantages per minibatch."""
    clip_value: float | None = None
    """clip the value update to this range around the old value (None: off)."""
    max_grad_norm: float | None = 0.5
    """clip the gradient norm (None: off)."""
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    """hidden layers of the actor and critic MLPs."""
    distribution: ActionDistribution = ActionDistribution.TANH_NORMAL
    """continuous actions: 'tanh_normal' (mean and std from the MLP, squashed into the
    bounds) or 'normal' (CleanRL's ppo_continuous_action.py: state-independent log-std,
    the Gaussian sample clipped to the bounds at the env, CleanRL's orthogonal init);
    discrete actions always use a Categorical."""
    model: ModelKind = ModelKind.AUTO
    """default network: 'auto' (cnn for 3-D uint8 observations, else mlp), 'mlp', 'cnn'
    (Nature CNN) or 'impala' (IMPALA ResNet); modules passed in code win."""

    def validate(self, config: Config, check: Checks) -> None:
        super().validate(config, check)
        check(self.clip_epsilon > 0, "clip_epsilon", self.clip_epsilon, "must be > 0")
        check(
            self.clip_value is None or self.clip_value > 0,
            "clip_value",
            self.clip_value,
            "must be > 0, or null: off",
        )
        check(self.num_epochs > 0, "num_epochs", self.num_epochs, "must be > 0")
        frames = config.collector.frames_per_batch
        check(
            self.num_mini_batch > 0 and frames % self.num_mini_batch == 0,
            "num_mini_batch",
            self.num_mini_batch,
            f"must be > 0 and divide collector.frames_per_batch ({frames})",
        )


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
    config_class = PPOConfig
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
        critic = self.build(
            ClipPPOLoss,
            config,
            info,
            actor=actor,
            critic=critic,
            num_epochs=config.num_epochs,
            num_mini_batch=config.num_mini_batch,
            clip_epsilon=config.clip_epsilon,
            normalize_advantage=config.normalize_advantage,
            clip_value=config.clip_value,
        )
        self.init_gae(critic, config.gamma, config.gae_lambda)
        self.config = config

    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, float]]:
        return self.loss_info(self.loss_module(data))

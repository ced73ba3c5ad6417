"""A2C: the policy gradient on GAE advantages, one optimizer step per collected batch.

Reads top to bottom: the config (:class:`A2CConfig`, with its checks), the
algorithm (networks and torchrl's ``A2CLoss``), GAE once per batch (advantages
optionally standardized over the batch), and the loss: the policy gradient,
the value loss and the entropy bonus, on the networks' outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import A2CLoss

from fleetrl.algorithms.actor_critic import ActorCritic, ActorCriticConfig
from fleetrl.algorithms.models import ModelKind
from fleetrl.envs.spec import EnvSpec

__all__ = ["A2C", "A2CConfig"]


@dataclass
class A2CConfig(ActorCriticConfig):
    """The ``a2c`` section of a config (checks: :class:`ActorCriticConfig`'s).

    Examples:
        >>> from fleetrl.envs.spec import env_spec
        >>> a2c = A2C(A2CConfig(lr=1e-3, hidden_sizes=[32]), env_spec("CartPole-v1"))
        >>> a2c.steps_per_batch, a2c.optimizer.param_groups[0]["lr"]
        (1, 0.001)"""

    lr: float = 7e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """discount factor."""
    gae_lambda: float = 1.0
    """GAE lambda (1.0: n-step returns)."""
    entropy_coef: float = 0.01
    """entropy bonus coefficient."""
    critic_coef: float = 0.5
    """value loss coefficient."""
    max_grad_norm: float | None = 0.5
    """clip the gradient norm (None: off)."""
    normalize_advantage: bool = False
    """normalize advantages per batch."""
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    """hidden layers of the actor and critic MLPs."""
    model: ModelKind = ModelKind.AUTO
    """default network: 'auto' (cnn for 3-D uint8 observations, else mlp), 'mlp', 'cnn'
    (Nature CNN), 'impala' (IMPALA ResNet), or 'lstm' / 'gru' (a recurrent core of
    recurrent_size units on a torso (torso), trained through time on sequences of seq_len
    steps); modules passed in code win."""


class A2C(ActorCritic):
    """Advantage Actor-Critic (synchronous): one gradient step on each whole batch.

    Args:
        config: hyperparameters (``A2CConfig``).
        info: the env's spaces, for the default networks.
        actor: a ProbabilisticActor writing ``action`` (default: by ``config.model``).
        critic: a module writing ``state_value`` (default: by ``config.model``).
        device: the learner's device (default: the CPU).

    Examples:
        >>> from fleetrl import A2C, A2CConfig, SyncDataCollector
        >>> from fleetrl.envs import env_spec
        >>> a2c = A2C(A2CConfig(), env_spec("CartPole-v1"))
        >>> with SyncDataCollector("CartPole-v1", a2c.policy, frames_per_batch=64,
        ...                        num_envs=4) as collector:
        ...     info = a2c.learn(collector.next())
        >>> a2c.num_updates, "loss/entropy" in info
        (1, True)
    """

    name = "a2c"
    config_class = A2CConfig

    def __init__(
        self,
        config: A2CConfig,
        info: EnvSpec,
        *,
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
        device: Any = None,
    ):
        super().__init__(config, info, A2CLoss, actor=actor, critic=critic, device=device)
        self.init_gae(config.gamma, config.gae_lambda)

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        data = super().prepare(batch)
        return self.normalized_advantage(data) if self.config.normalize_advantage else data

    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The policy gradient + ``critic_coef`` x the value loss - the entropy bonus
        (:meth:`~fleetrl.algorithms.actor_critic.ActorCritic.policy_gradient_loss`)."""
        return self.policy_gradient_loss(data)

"""A2C: the policy gradient on GAE advantages, one optimizer step per collected batch.

Reads top to bottom (the config section, :class:`A2CConfig`, is in
:mod:`fleetrl.algorithms.sections`): the algorithm (networks and torchrl's ``A2CLoss``), GAE once per batch (advantages
optionally standardized over the batch), and the loss: the policy gradient,
the value loss and the entropy bonus, on the networks' outputs.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import A2CLoss

from fleetrl.algorithms.actor_critic import ActorCritic
from fleetrl.algorithms.sections import A2CConfig
from fleetrl.envs.spec import EnvSpec

__all__ = ["A2C", "A2CConfig"]


class A2C(ActorCritic):
    """Advantage Actor-Critic (synchronous): one gradient step on each whole batch.

    Args:
        config: hyperparameters (``A2CConfig``).
        spec: the env's spaces, for the default networks.
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
        spec: EnvSpec,
        *,
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
        device: Any = None,
    ):
        super().__init__(config, spec, A2CLoss, actor=actor, critic=critic, device=device)
        self.init_gae(config.gamma, config.gae_lambda)

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        data = super().prepare(batch)
        return self.normalized_advantage(data) if self.config.normalize_advantage else data

    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The policy gradient + ``critic_coef`` x the value loss - the entropy bonus
        (:meth:`~fleetrl.algorithms.actor_critic.ActorCritic.policy_gradient_loss`)."""
        return self.policy_gradient_loss(data)

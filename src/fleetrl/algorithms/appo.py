"""APPO (Sample Factory's asynchronous PPO): the clipped objective on V-trace targets.

Reads top to bottom: the config (:class:`APPOConfig`: V-trace's, see
:mod:`fleetrl.algorithms.vtrace`, with PPO's clipping and minibatches), the
algorithm (networks and torchrl's ``ClipPPOLoss``), its schedule (the clip
epsilon), the V-trace targets once per batch, and the loss of one minibatch:
the clipped surrogate, whose ratio is the current policy over the behaviour
policy that collected the batch, whatever version that was; V-trace's
truncated weights correct the advantages and value targets for the same lag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import ClipPPOLoss

from fleetrl.algorithms.actor_critic import ClipEpsilon, check_clipped_objective
from fleetrl.algorithms.vtrace import VTraceActorCritic, VTraceConfig
from fleetrl.config import Config, Schedule
from fleetrl.envs.spec import EnvSpec
from fleetrl.errors import Problems

__all__ = ["APPO", "APPOConfig"]


@dataclass
class APPOConfig(VTraceConfig):
    """The ``appo`` section of a config (Sample Factory's APPO defaults where they apply).

    Examples:
        >>> from fleetrl.envs.spec import env_spec
        >>> appo = APPO(APPOConfig(num_epochs=2, num_mini_batch=4), env_spec("CartPole-v1"))
        >>> appo.steps_per_batch, appo.config.clip_epsilon
        (8, 0.1)"""

    lr: float = 3e-4
    """Adam learning rate."""
    clip_epsilon: float = 0.1
    """PPO ratio clipping (of the current over the behaviour policy)."""
    clip_schedule: Schedule = Schedule.CONSTANT
    """'constant' or 'linear' decay of clip_epsilon (to 0 at trainer.total_frames)."""
    clip_value: float | None = None
    """clip the value update to this range around the critic's value of the batch before
    the update (None: off)."""
    num_epochs: int = 1
    """passes over each batch (V-trace targets computed once, at the first)."""
    num_mini_batch: int = 1
    """minibatches per epoch."""
    normalize_advantage: bool = True
    """normalize advantages per minibatch."""
    max_grad_norm: float | None = 0.5
    """clip the gradient norm (None: off)."""

    @property
    def steps_per_batch(self) -> int:
        return self.num_epochs * self.num_mini_batch

    def validate(self, config: Config, check: Problems) -> None:
        super().validate(config, check)
        check_clipped_objective(self, config, check)


class APPO(ClipEpsilon, VTraceActorCritic):
    """Asynchronous PPO (Sample Factory's): the clipped PPO objective on V-trace targets.

    Args:
        config: hyperparameters (``APPOConfig``).
        info: the env's spaces, for the default networks.
        actor: a ProbabilisticActor writing ``action`` and ``action_log_prob``
            (default: by ``config.model``).
        critic: a module writing ``state_value`` (default: by ``config.model``).
        device: the learner's device (default: the CPU).

    Examples:
        >>> from fleetrl import APPO, APPOConfig
        >>> from fleetrl.envs import env_spec
        >>> appo = APPO(APPOConfig(num_epochs=2, num_mini_batch=4), env_spec("CartPole-v1"))
        >>> appo.steps_per_batch, round(appo.clip_epsilon, 3)
        (8, 0.1)
    """

    name = "appo"
    config_class = APPOConfig

    def __init__(
        self,
        config: APPOConfig,
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
        self.init_vtrace(config)
        self.init_clip_epsilon()

    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The clipped surrogate + ``critic_coef`` x the (clipped) value loss - the entropy
        bonus (:meth:`~fleetrl.algorithms.actor_critic.ActorCritic.clipped_loss`)."""
        return self.clipped_loss(data)

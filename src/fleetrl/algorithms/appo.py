"""APPO (Sample Factory's asynchronous PPO): the clipped objective on V-trace targets.

Reads top to bottom: the config (:class:`APPOConfig`: V-trace's, see
:mod:`fleetrl.algorithms.vtrace`, with PPO's clipping and minibatches), the
algorithm (networks and torchrl's ``ClipPPOLoss``), its schedule (the clip
epsilon), the V-trace targets once per batch, and the loss of one minibatch:
the clipped surrogate, whose ratio is the current policy over the behaviour
policy that collected the batch, whatever version that was; V-trace's
truncated weights correct the advantages and value targets for the same lag.
With ``appo.advantage: gae`` the advantages and targets are GAE's from the current
critic, as PPO's, and the lag is left to the clip and ``max_learn_lag`` (Sample
Factory's default: its ``with_vtrace`` is off).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import ClipPPOLoss

from fleetrl.algorithms.actor_critic import ActorCritic, ClipEpsilon
from fleetrl.algorithms.sections import Advantage, APPOConfig
from fleetrl.algorithms.vtrace import VTraceActorCritic
from fleetrl.envs.spec import EnvSpec

__all__ = ["APPO", "APPOConfig"]


class APPO(ClipEpsilon, VTraceActorCritic):
    """Asynchronous PPO (Sample Factory's): the clipped PPO objective on V-trace targets.

    Args:
        config: hyperparameters (``APPOConfig``).
        spec: the env's spaces, for the default networks.
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
        self.init_vtrace(config)
        if config.advantage == Advantage.GAE:
            self.init_gae(config.gamma, config.gae_lambda)
        self.init_clip_epsilon()

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        """The batch's advantages and value targets, by ``appo.advantage``: V-trace's
        (:meth:`VTraceActorCritic.prepare`) or GAE's (:meth:`ActorCritic.prepare`, as PPO)."""
        if self.config.advantage == Advantage.GAE:
            return ActorCritic.prepare(self, batch)
        return super().prepare(batch)

    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The clipped surrogate + ``critic_coef`` x the (clipped) value loss - the entropy
        bonus (:meth:`~fleetrl.algorithms.actor_critic.ActorCritic.clipped_loss`)."""
        return self.clipped_loss(data)

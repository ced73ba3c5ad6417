"""IMPALA (Espeholt et al. 2018): the A2C loss on V-trace targets, one step per batch.

Reads top to bottom: the config (:class:`IMPALAConfig`: V-trace's, see
:mod:`fleetrl.algorithms.vtrace`), the algorithm (networks and torchrl's
``A2CLoss``), the V-trace targets once per batch (advantages optionally
standardized over the batch), and the loss: the policy gradient on the
V-trace advantages, the value loss towards the V-trace targets and the
entropy bonus.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import A2CLoss

from fleetrl.algorithms.sections import IMPALAConfig
from fleetrl.algorithms.vtrace import VTraceActorCritic
from fleetrl.envs.spec import EnvSpec

__all__ = ["IMPALA", "IMPALAConfig"]


class IMPALA(VTraceActorCritic):
    """IMPALA's learner: the A2C loss on V-trace targets, one gradient step per batch.

    Args:
        config: hyperparameters (``IMPALAConfig``).
        spec: the env's spaces, for the default networks.
        actor: a ProbabilisticActor writing ``action`` and ``action_log_prob``
            (default: by ``config.model``).
        critic: a module writing ``state_value`` (default: by ``config.model``).
        device: the learner's device (default: the CPU).

    Examples:
        >>> from fleetrl import IMPALA, IMPALAConfig
        >>> from fleetrl.envs import env_spec
        >>> impala = IMPALA(IMPALAConfig(rho_bar=2.0), env_spec("CartPole-v1"))
        >>> impala.vtrace.rho_bar, impala.vtrace.c_bar, impala.steps_per_batch
        (2.0, 1.0, 1)
    """

    name = "impala"
    config_class = IMPALAConfig

    def __init__(
        self,
        config: IMPALAConfig,
        spec: EnvSpec,
        *,
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
        device: Any = None,
    ):
        super().__init__(config, spec, A2CLoss, actor=actor, critic=critic, device=device)
        self.init_vtrace(config)

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        data = super().prepare(batch)
        return self.normalized_advantage(data) if self.config.normalize_advantage else data

    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The policy gradient + ``critic_coef`` x the value loss - the entropy bonus
        (:meth:`~fleetrl.algorithms.actor_critic.ActorCritic.policy_gradient_loss`)."""
        return self.policy_gradient_loss(data)

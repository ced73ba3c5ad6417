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
Factory's default: its ``with_vtrace`` is off). With ``appo.decoupled`` the ratio is
taken over the proximal policy instead (:meth:`APPO.decouple`), the lag corrected by a
truncated importance weight.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import ClipPPOLoss

from fleetrl.algorithms.actor_critic import ActorCritic, ClipEpsilon
from fleetrl.algorithms.sections import Advantage, APPOConfig
from fleetrl.algorithms.vtrace import VTraceActorCritic, values_and_log_prob
from fleetrl.envs.spec import EnvSpec

__all__ = ["APPO", "APPOConfig"]

#: where the targets' pass keeps the current policy's log-probabilities for ``decouple``
PROXIMAL_LOG_PROB_KEY = "proximal_log_prob"


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
        # the decoupled objective's proximal log-probs, kept from the targets' pass
        proximal = PROXIMAL_LOG_PROB_KEY if config.decoupled else None
        self.init_vtrace(config, log_pi_key=proximal)
        if config.advantage == Advantage.GAE:
            self.init_gae(config.gamma, config.gae_lambda)
        if proximal is not None and self.keys is not None:
            self.keys.append(proximal)
        self.init_clip_epsilon()

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        """The batch's advantages and value targets, by ``appo.advantage``: V-trace's
        (:meth:`VTraceActorCritic.prepare`) or GAE's (:meth:`ActorCritic.prepare`, as PPO)."""
        if self.config.advantage == Advantage.GAE:
            data = ActorCritic.prepare(self, batch)
        else:
            data = super().prepare(batch)
        if self.config.decoupled:
            self.decouple(data)
        return data

    @torch.no_grad()
    def values(self, batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE's values (:meth:`ActorCritic.values`); with ``appo.decoupled`` and flat
        networks on tensors, the policy's log-probabilities from the same pass too, kept for
        :meth:`decouple` (the torso runs once over the batch, not twice)."""
        if not self.config.decoupled or self.heads is None or self.sequences is not None:
            return super().values(batch)
        value, next_value, log_pi = values_and_log_prob(self.heads, batch)
        batch.set(PROXIMAL_LOG_PROB_KEY, log_pi)
        return value, next_value

    @torch.no_grad()
    def decouple(self, data: TensorDictBase) -> None:
        """Hilton et al.'s decoupled objective (``appo.decoupled``): the clipped ratio's
        denominator becomes the proximal policy's log-probability of each action (the
        current policy's, before the batch's first step), so a lagged batch starts at ratio
        1 as PPO's fresh one does; its lag is corrected by the truncated weight
        min(rho_bar, proximal / behaviour) on the advantages (V-trace's carry it already)."""
        t = self.loss_module.tensor_keys
        log_mu = data.get(t.sample_log_prob)
        if PROXIMAL_LOG_PROB_KEY in data.keys(include_nested=True):  # kept by the targets' pass
            log_prox = data.pop(PROXIMAL_LOG_PROB_KEY).reshape(log_mu.shape)
        else:
            log_prox = self._log_prob_of_actions(data).reshape(log_mu.shape)
        if self.config.advantage == Advantage.GAE:
            advantage = data.get(t.advantage)
            weight = (log_prox - log_mu).exp().clamp(max=self.config.rho_bar)
            data.set(t.advantage, advantage * weight.reshape(advantage.shape))
        data.set(t.sample_log_prob, log_prox)

    def _log_prob_of_actions(self, data: TensorDictBase) -> torch.Tensor:
        """The current policy's log-probability of each action in prepared data (flat, or
        sequences: every step, those outside the loss mask kept as they were)."""
        t = self.loss_module.tensor_keys
        if self.sequences is not None:
            _, _, log_prob, _, mask = self.forward_heads(data)
            full = data.get(t.sample_log_prob).clone()
            full[mask] = log_prob.reshape(full[mask].shape)
            return full
        if self.heads is not None:
            return self.forward_heads(data)[2]
        dist = self.actor.get_dist(data.select(*self.actor.in_keys).clone(False))
        return dist.log_prob(data.get(t.action))

    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The clipped surrogate + ``critic_coef`` x the (clipped) value loss - the entropy
        bonus (:meth:`~fleetrl.algorithms.actor_critic.ActorCritic.clipped_loss`)."""
        return self.clipped_loss(data)

"""PPO: torchrl's ClipPPOLoss with GAE, epochs x minibatches, advantage normalisation.

Reads top to bottom: the config (``fleetrl.config.PPOConfig``), the networks
(default MLPs, or the user's actor and critic), the loss and value estimator,
and one update (:meth:`PPO.prepare` computes GAE on the whole batch once with
the current critic; :meth:`PPO.loss` is one minibatch).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from fleetrl.algorithms.base import Algorithm, end_padded_rows, flatten_valid
from fleetrl.algorithms.models import EnvInfo, make_actor, make_critic
from fleetrl.config import PPOConfig

__all__ = ["PPO"]


class PPO(Algorithm):
    """Proximal Policy Optimization (clipped objective).

    Args:
        config: hyperparameters (``PPOConfig``).
        info: the env's spaces, for the default networks.
        actor: a ProbabilisticActor writing ``action`` and ``action_log_prob``
            (default: an MLP Categorical or TanhNormal policy).
        critic: a module writing ``state_value`` (default: an MLP).

    Examples:
        >>> from fleetrl.algorithms.models import env_info
        >>> ppo = PPO(PPOConfig(), env_info("CartPole-v1"))
        >>> ppo.update_algorithm_parameter("clip_epsilon", 0.1)
        >>> round(ppo.clip_epsilon, 3)
        0.1
    """

    name = "ppo"
    tunable: ClassVar[tuple[str, ...]] = ("clip_epsilon", "entropy_coef", "critic_coef")

    def __init__(
        self,
        config: PPOConfig,
        info: EnvInfo,
        *,
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
    ):
        actor = actor if actor is not None else make_actor(info, config.hidden_sizes)
        critic = critic if critic is not None else make_critic(info, config.hidden_sizes)
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
        self.gae = GAE(
            gamma=config.gamma, lmbda=config.gae_lambda, value_network=critic, average_gae=False
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
        self.critic = critic
        self.config = config

    @property
    def clip_epsilon(self) -> float:
        return float(self.loss_module.clip_epsilon)

    @property
    def entropy_coef(self) -> float:
        return (
            float(self.loss_module.entropy_coeff)
            if self.loss_module.entropy_coeff is not None
            else 0.0
        )

    @property
    def critic_coef(self) -> float:
        return float(self.loss_module.critic_coeff)

    def _set_parameter(self, name: str, value: float) -> None:
        buffer = {
            "clip_epsilon": "clip_epsilon",
            "entropy_coef": "entropy_coeff",
            "critic_coef": "critic_coeff",
        }[name]
        getattr(self.loss_module, buffer).fill_(float(value))

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        """GAE advantages and value targets for the whole batch, then its valid frames, flat."""
        batch = end_padded_rows(batch)
        with torch.no_grad():
            self.gae(batch)
        return flatten_valid(batch)

    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, float]]:
        out = self.loss_module(data)
        total = out["loss_objective"] + out["loss_critic"]
        info = {
            "loss/objective": float(out["loss_objective"].detach()),
            "loss/critic": float(out["loss_critic"].detach()),
        }
        if "loss_entropy" in out:
            total = total + out["loss_entropy"]
            info["loss/entropy"] = float(out["entropy"].detach())
        if "kl_approx" in out:
            info["loss/kl_approx"] = float(out["kl_approx"].detach())
        if "clip_fraction" in out:
            info["loss/clip_fraction"] = float(out["clip_fraction"].detach())
        return total, info

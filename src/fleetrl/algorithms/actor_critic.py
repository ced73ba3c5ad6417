"""ActorCritic: what PPO and A2C share. GAE on the whole batch, loss coefficients as tunables.

:meth:`ActorCritic.prepare` computes advantages and value targets with the
current critic once per collected batch, then keeps its valid frames.
Coefficients that live in the loss module as buffers (``clip_epsilon``,
``entropy_coef``, ``critic_coef``) read and change there, so
``update_algorithm_parameter`` acts on the loss itself.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives.value import GAE

from fleetrl.algorithms.base import Algorithm, end_padded_rows, flatten_valid
from fleetrl.algorithms.models import ActionDistribution, EnvInfo, make_actor_critic
from fleetrl.config import AlgorithmConfig, Checks, Config

__all__ = ["ActorCritic", "ActorCriticConfig"]


class ActorCriticConfig(AlgorithmConfig):
    """What PPO's and A2C's sections share: GAE and the loss coefficients (checked here)."""

    def validate(self, config: Config, check: Checks) -> None:
        super().validate(config, check)
        check(0 <= self.gae_lambda <= 1, "gae_lambda", self.gae_lambda, "must be in [0, 1]")
        for name in ("entropy_coef", "critic_coef"):
            check(getattr(self, name) >= 0, name, getattr(self, name), "must be >= 0")


class ActorCritic(Algorithm):
    """On-policy base: subclasses build the loss and call :meth:`init_gae`."""

    on_policy = True

    #: tunable name -> the loss module's buffer holding it
    loss_buffers: ClassVar[dict[str, str]] = {
        "entropy_coef": "entropy_coeff",
        "critic_coef": "critic_coeff",
    }

    def build(
        self,
        loss_class: type[nn.Module],
        config: Any,
        info: EnvInfo,
        *,
        actor: nn.Module | None,
        critic: nn.Module | None,
        num_epochs: int = 1,
        num_mini_batch: int = 1,
        **loss_kwargs: Any,
    ) -> nn.Module:
        """Build the networks, the torchrl loss, Adam and the Algorithm from a config section;
        returns the critic.

        The user's modules win; only what is missing is built (by ``config.model``). The
        loss gets the section's entropy and critic coefficients and an L2 critic loss, plus
        ``loss_kwargs`` (PPO's and APPO's clipping); Adam uses ``eps=1e-5``, as CleanRL's.
        """
        actor, critic = make_actor_critic(
            config.model,
            info,
            config.hidden_sizes,
            actor=actor,
            critic=critic,
            # PPO's section has it; A2C's and IMPALA's keep the TanhNormal
            distribution=getattr(config, "distribution", ActionDistribution.TANH_NORMAL),
        )
        loss = loss_class(
            actor,
            critic,
            entropy_bonus=config.entropy_coef > 0,
            entropy_coeff=config.entropy_coef,
            critic_coeff=config.critic_coef,
            loss_critic_type="l2",
            **loss_kwargs,
        )
        optimizer = torch.optim.Adam(loss.parameters(), lr=config.lr, eps=1e-5)
        super().__init__(
            loss,
            actor,
            optimizer,
            gamma=config.gamma,
            num_epochs=num_epochs,
            num_mini_batch=num_mini_batch,
            max_grad_norm=config.max_grad_norm,
        )
        return critic

    @staticmethod
    def normalized_advantage(data: TensorDictBase) -> TensorDictBase:
        """``data`` with its advantages standardized over the whole batch (A2C, IMPALA)."""
        adv = data.get("advantage")
        data.set("advantage", (adv - adv.mean()) / (adv.std() + 1e-8))
        return data

    def init_gae(self, critic: torch.nn.Module, gamma: float, gae_lambda: float) -> None:
        self.critic = critic
        self.gae = GAE(gamma=gamma, lmbda=gae_lambda, value_network=critic, average_gae=False)

    def __getattr__(self, name: str) -> float:
        # called only when normal lookup fails: the loss-module coefficients
        if name in type(self).loss_buffers and "loss_module" in self.__dict__:
            value = getattr(self.loss_module, type(self).loss_buffers[name])
            return float(value) if value is not None else 0.0
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _set_parameter(self, name: str, value: float) -> None:
        getattr(self.loss_module, type(self).loss_buffers[name]).fill_(float(value))

    def scaled_rewards(self, batch: TensorDictBase) -> TensorDictBase:
        """The batch with its rewards scaled by :attr:`reward_scaler` (as it is without one)."""
        return batch if self.reward_scaler is None else self.reward_scaler.scale(batch)

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        """GAE advantages and value targets for the whole batch, then its valid frames, flat."""
        batch = self.scaled_rewards(end_padded_rows(batch))
        with torch.no_grad():
            self.gae(batch)
        return flatten_valid(batch)

    @staticmethod
    def loss_info(out: TensorDictBase) -> tuple[torch.Tensor, dict[str, float]]:
        """Sum a torchrl actor-critic loss output and name what to log."""
        total = out["loss_objective"] + out["loss_critic"]
        info = {
            "loss/objective": float(out["loss_objective"].detach()),
            "loss/critic": float(out["loss_critic"].detach()),
        }
        if "loss_entropy" in out:
            total = total + out["loss_entropy"]
            info["loss/entropy"] = (
                float(out["entropy"].detach())
                if "entropy" in out
                else float(-out["loss_entropy"].detach())
            )
        for key in ("kl_approx", "clip_fraction"):
            if key in out:
                info[f"loss/{key}"] = float(out[key].detach())
        return total, info

"""SAC: torchrl's SACLoss (two Q networks, learned temperature), soft target updates, replay buffer.

Reads top to bottom: config (:class:`SACConfig`, with its checks), the TanhNormal
actor and the Q networks, loss and target updater; learning is
:class:`~fleetrl.algorithms.replay.ReplayAlgorithm`'s. ``start_steps`` frames of
uniform random actions come first (the collectors' ``init_random_frames``);
learning starts after them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.modules import MLP, ValueOperator
from torchrl.objectives import SACLoss, SoftUpdate

from fleetrl.algorithms.models import EnvInfo, make_actor
from fleetrl.algorithms.replay import ReplayAlgorithm, ReplayConfig
from fleetrl.config import Checks, Config
from fleetrl.errors import ConfigError

__all__ = ["SAC", "SACConfig"]


@dataclass
class SACConfig(ReplayConfig):
    """The ``sac`` section of a config."""

    lr: float = 3e-4
    """Adam learning rate (actor, Q networks, temperature)."""
    gamma: float = 0.99
    """discount factor."""
    tau: float = 0.005
    """soft target-update rate."""
    alpha_init: float = 1.0
    """initial entropy temperature (learned)."""
    buffer_size: int = 100_000
    """replay buffer capacity (frames)."""
    batch_size: int = 256
    """transitions per gradient step."""
    start_steps: int = 5_000
    """frames of uniform random actions before the policy acts and learning starts."""
    updates_per_batch: int = 64
    """gradient steps after each collected batch."""
    max_grad_norm: float | None = None
    """clip the gradient norm (None: off)."""
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    """hidden layers of the actor and Q networks."""

    def validate(self, config: Config, check: Checks) -> None:
        super().validate(config, check)
        check(self.start_steps >= 0, "start_steps", self.start_steps, "must be >= 0")
        check(self.alpha_init > 0, "alpha_init", self.alpha_init, "must be > 0")
        check(0 < self.tau <= 1, "tau", self.tau, "must be in (0, 1]")


class SAC(ReplayAlgorithm):
    """Soft Actor-Critic for continuous actions.

    Args:
        config: hyperparameters (``SACConfig``).
        info: the env's spaces.
        actor: a ProbabilisticActor with a TanhNormal (default: MLP).
        qvalue: a module reading ``observation`` and ``action``, writing ``state_action_value``.
    """

    name = "sac"
    config_class = SACConfig
    random_start = True
    tunable: ClassVar[tuple[str, ...]] = ("tau",)

    def __init__(
        self,
        config: SACConfig,
        info: EnvInfo,
        *,
        actor: nn.Module | None = None,
        qvalue: nn.Module | None = None,
    ):
        if info.discrete:
            raise ConfigError(
                [
                    f"info.num_actions={info.num_actions} is invalid: SAC needs an env with "
                    "continuous (Box) actions and this one has discrete actions; use DQN, PPO "
                    "or A2C for it"
                ]
            )
        actor = (
            actor
            if actor is not None
            else make_actor(info, config.hidden_sizes, activation=nn.ReLU)
        )
        if qvalue is None:
            net = MLP(
                in_features=info.obs_dim + info.action_dim,
                out_features=1,
                num_cells=config.hidden_sizes,
                activation_class=nn.ReLU,
            )
            qvalue = ValueOperator(
                net, in_keys=["observation", "action"], out_keys=["state_action_value"]
            )
        loss = SACLoss(
            actor,
            qvalue,
            num_qvalue_nets=2,
            loss_function="l2",
            alpha_init=config.alpha_init,
            target_entropy=-float(info.action_dim),
            delay_qvalue=True,
        )
        loss.make_value_estimator(gamma=config.gamma)
        self.tau = config.tau
        self.target_updater = SoftUpdate(loss, tau=config.tau)
        optimizer = torch.optim.Adam(loss.parameters(), lr=config.lr)
        super().__init__(
            loss,
            actor,
            optimizer,
            gamma=config.gamma,
            max_grad_norm=config.max_grad_norm,
            update_every=config.updates_per_batch,
            start_steps=config.start_steps,
        )
        self.init_replay(config.buffer_size, config.batch_size)
        self.config = config

    def _set_parameter(self, name: str, value: float) -> None:
        self.tau = float(value)
        self.target_updater = SoftUpdate(self.loss_module, tau=self.tau)

    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, float]]:
        out = self.loss_module(data)
        total = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
        return total, {
            "loss/actor": float(out["loss_actor"].detach()),
            "loss/qvalue": float(out["loss_qvalue"].detach()),
            "loss/alpha": float(out["loss_alpha"].detach()),
            "train/alpha": float(out["alpha"].detach()),
        }

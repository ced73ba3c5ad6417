"""DQN: torchrl's DQNLoss (double DQN), hard target updates, epsilon-greedy annealing, replay buffer.

Reads top to bottom: config (``fleetrl.config.DQNConfig``), the Q network and
its epsilon-greedy acting policy, loss and target updater; learning is
:class:`~fleetrl.algorithms.replay.ReplayAlgorithm`'s (store the batch, then
``updates_per_batch`` sampled steps). Epsilon is a buffer of the acting policy,
so it travels to the collectors with the weights and is annealed here, on the
learner, by frames collected.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictSequential
from torch import nn
from torchrl.data import Categorical
from torchrl.modules import EGreedyModule, QValueActor
from torchrl.objectives import DQNLoss, HardUpdate

from fleetrl.algorithms.models import EnvInfo, make_qnet
from fleetrl.algorithms.replay import ReplayAlgorithm
from fleetrl.config import DQNConfig
from fleetrl.errors import ConfigError

__all__ = ["DQN"]


class DQN(ReplayAlgorithm):
    """Deep Q-Network with double-DQN targets and a replay buffer (discrete actions).

    Args:
        config: hyperparameters (``DQNConfig``).
        info: the env's spaces.
        qnet: a module mapping ``observation`` to action values (default: by
            ``config.model``, a CNN for pixels and an MLP otherwise).
    """

    name = "dqn"
    tunable: ClassVar[tuple[str, ...]] = ("epsilon",)

    def __init__(self, config: DQNConfig, info: EnvInfo, *, qnet: nn.Module | None = None):
        if not info.discrete:
            raise ConfigError(
                [
                    f"info.num_actions={info.num_actions} is invalid: DQN needs an env with "
                    f"discrete actions and this one has {info.action_dim}-dimensional continuous "
                    "actions; use SAC, PPO or A2C for it"
                ]
            )
        spec = Categorical(info.num_actions)
        qnet = qnet if qnet is not None else make_qnet(config.model, info, config.hidden_sizes)
        self.qvalue = QValueActor(qnet, in_keys=["observation"], spec=spec)
        self.egreedy = EGreedyModule(
            spec,
            eps_init=config.eps_init,
            eps_end=config.eps_end,
            annealing_num_steps=config.eps_anneal_frames,
        )
        loss = DQNLoss(
            self.qvalue,
            delay_value=True,
            double_dqn=config.double_dqn,
            action_space="categorical",
            loss_function="l2",
        )
        loss.make_value_estimator(gamma=config.gamma)
        self.target_updater = HardUpdate(
            loss, value_network_update_interval=config.target_update_interval
        )
        optimizer = torch.optim.Adam(loss.parameters(), lr=config.lr)
        super().__init__(
            loss,
            TensorDictSequential(self.qvalue, self.egreedy),
            optimizer,
            gamma=config.gamma,
            max_grad_norm=config.max_grad_norm,
            update_every=config.updates_per_batch,
            start_steps=config.learning_starts,
        )
        self.init_replay(config.buffer_size, config.batch_size)
        self.config = config

    @property
    def epsilon(self) -> float:
        return float(self.egreedy.eps)

    def _set_parameter(self, name: str, value: float) -> None:
        self.egreedy.eps.fill_(float(value))

    def on_frames(self, frames: int) -> dict[str, float]:
        self.egreedy.step(frames)
        return {"train/epsilon": self.epsilon}

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["target_update_counter"] = int(
            self.target_updater.counter
        )  # resume keeps the schedule
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.target_updater.counter = int(state["target_update_counter"])

    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, float]]:
        out = self.loss_module(data)
        return out["loss"], {"loss/td": float(out["loss"].detach())}

"""DQN: torchrl's DQNLoss (double DQN), hard target updates, epsilon-greedy annealing, replay buffer.

Reads top to bottom: config (``fleetrl.config.DQNConfig``), the Q network and
its epsilon-greedy acting policy, loss and target updater, replay buffer, and
:meth:`DQN.learn` (store the batch, then ``updates_per_batch`` sampled steps).
Epsilon is a buffer of the acting policy, so it travels to the collectors
with the weights and is annealed here, on the learner, by frames collected.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictSequential
from torch import nn
from torchrl.data import Categorical, LazyTensorStorage, TensorDictReplayBuffer
from torchrl.modules import EGreedyModule, QValueActor
from torchrl.objectives import DQNLoss, HardUpdate

from fleetrl.algorithms.base import Algorithm, flatten_valid
from fleetrl.algorithms.models import EnvInfo, mlp
from fleetrl.config import DQNConfig
from fleetrl.errors import ConfigError

__all__ = ["DQN"]


class DQN(Algorithm):
    """Deep Q-Network with double-DQN targets and a replay buffer (discrete actions).

    Args:
        config: hyperparameters (``DQNConfig``).
        info: the env's spaces.
        qnet: a module mapping ``observation`` to action values (default: MLP).
    """

    name = "dqn"
    tunable: ClassVar[tuple[str, ...]] = ("epsilon",)

    def __init__(self, config: DQNConfig, info: EnvInfo, *, qnet: nn.Module | None = None):
        if not info.discrete:
            raise ConfigError(
                [f"algorithm='dqn' is invalid for an env with continuous actions ({info}); use sac"]
            )
        spec = Categorical(info.num_actions)
        qnet = (
            qnet
            if qnet is not None
            else mlp(info.obs_dim, info.num_actions, config.hidden_sizes, nn.ReLU)
        )
        self.qvalue = QValueActor(qnet, in_keys=["observation"], spec=spec)
        self.egreedy = EGreedyModule(
            spec,
            eps_init=config.eps_init,
            eps_end=config.eps_end,
            annealing_num_steps=config.eps_anneal_frames,
        )
        actor = TensorDictSequential(self.qvalue, self.egreedy)
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
            actor,
            optimizer,
            gamma=config.gamma,
            max_grad_norm=config.max_grad_norm,
            update_every=config.updates_per_batch,
            start_steps=config.learning_starts,
        )
        self.buffer = TensorDictReplayBuffer(
            storage=LazyTensorStorage(config.buffer_size), batch_size=config.batch_size
        )
        self.config = config
        self.frames_seen = 0

    @property
    def epsilon(self) -> float:
        return float(self.egreedy.eps)

    def _set_parameter(self, name: str, value: float) -> None:
        self.egreedy.eps.fill_(float(value))

    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, float]]:
        out = self.loss_module(data)
        return out["loss"], {"loss/td": float(out["loss"].detach())}

    def learn(self, batch: TensorDictBase) -> dict[str, float]:
        data = flatten_valid(batch)
        self.buffer.extend(data.select(*_TRANSITION_KEYS, strict=False))
        self.frames_seen += data.numel()
        self.egreedy.step(data.numel())
        info: dict[str, float] = {
            "train/epsilon": self.epsilon,
            "train/buffer_size": float(len(self.buffer)),
        }
        if self.frames_seen < self.start_steps:
            return info
        totals: dict[str, float] = {}
        for _ in range(self.update_every):
            grads, step_info = self.compute_gradients(self.buffer.sample())
            self.apply_gradients(grads)
            self.target_updater.step()
            for k, v in step_info.items():
                totals[k] = totals.get(k, 0.0) + v / self.update_every
        return {**info, **totals}

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["buffer"] = self.buffer.state_dict()
        state["frames_seen"] = self.frames_seen
        state["target_updater"] = {"counter": int(getattr(self.target_updater, "_steps", 0))}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if state.get("buffer") is not None:
            self.buffer.load_state_dict(state["buffer"])
        self.frames_seen = int(state["frames_seen"])


_TRANSITION_KEYS = (
    "observation",
    "action",
    ("next", "observation"),
    ("next", "reward"),
    ("next", "done"),
    ("next", "terminated"),
    ("next", "truncated"),
)

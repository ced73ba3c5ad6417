"""DQN: (double) Q-learning targets, hard target updates, epsilon-greedy annealing, replay buffer.

Reads top to bottom: the config (:class:`DQNConfig`, with its checks), the
algorithm (the Q network, its epsilon-greedy acting policy, torchrl's
``DQNLoss`` and ``HardUpdate``), epsilon's annealing, and the loss of one
sampled minibatch: the squared TD error of the Q value of the action taken
against ``r + gamma (1 - terminated) Q_target(s', a*)``, where ``a*`` is the
online network's best action (double DQN) or the target network's. Learning is
:class:`~fleetrl.algorithms.replay.ReplayAlgorithm`'s (store the batch, then
``updates_per_batch`` sampled steps). Epsilon is a buffer of the acting
policy, so it travels to the collectors with the weights and is annealed
here, on the learner, by frames collected.
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

from fleetrl.algorithms.batches import as_device
from fleetrl.algorithms.replay import ReplayAlgorithm
from fleetrl.algorithms.sections import DQNConfig
from fleetrl.algorithms.sequences import refuse_recurrent
from fleetrl.config import EvalActions
from fleetrl.envs.spec import EnvSpec
from fleetrl.errors import ConfigError
from fleetrl.keys import (
    ACTION_KEY,
    NEXT_OBSERVATION_KEY,
    OBSERVATION_KEY,
    REWARD_KEY,
    TERMINATED_KEY,
)
from fleetrl.networks.heads import TensorNet
from fleetrl.networks.models import make_qnet

__all__ = ["DQN", "DQNConfig"]


class DQN(ReplayAlgorithm):
    """Deep Q-Network with (double) DQN targets and a replay buffer (discrete actions).

    Args:
        config: hyperparameters (``DQNConfig``).
        spec: the env's spaces.
        qnet: a module mapping ``observation`` to action values (default: by
            ``config.model``, a CNN for pixels and an MLP otherwise).
        device: the learner's device (default: the CPU).

    Examples:
        >>> from fleetrl import DQN, DQNConfig, SyncDataCollector
        >>> from fleetrl.envs import env_spec
        >>> dqn = DQN(DQNConfig(learning_starts=64, updates_per_batch=4, batch_size=32),
        ...           env_spec("CartPole-v1"))
        >>> with SyncDataCollector("CartPole-v1", dqn.policy, frames_per_batch=64,
        ...                        num_envs=2) as collector:
        ...     info = dqn.learn(collector.next())
        >>> dqn.num_updates, info["train/buffer_size"]
        (4, 64.0)
    """

    name = "dqn"
    config_class = DQNConfig
    tunable: ClassVar[tuple[str, ...]] = ("epsilon",)
    #: the greedy policy is the one learned; epsilon is the collectors' exploration
    eval_actions: ClassVar[EvalActions] = EvalActions.DETERMINISTIC

    def __init__(
        self,
        config: DQNConfig,
        spec: EnvSpec,
        *,
        qnet: nn.Module | None = None,
        device: Any = None,
    ):
        refuse_recurrent("dqn", qnet=qnet)
        if not spec.discrete:
            raise ConfigError(
                [
                    f"spec.num_actions={spec.num_actions} is invalid: DQN needs an env with "
                    f"discrete actions and this one has {spec.action_dim}-dimensional continuous "
                    "actions; use SAC, PPO or A2C for it"
                ]
            )
        device = as_device(device)
        action_spec = Categorical(spec.num_actions, device=device)
        qnet = qnet if qnet is not None else make_qnet(config.model, spec, config.hidden_sizes)
        self.qvalue = QValueActor(qnet.to(device), in_keys=[OBSERVATION_KEY], spec=action_spec)
        self.egreedy = EGreedyModule(
            action_spec,
            eps_init=config.eps_init,
            eps_end=config.eps_end,
            annealing_num_steps=config.eps_anneal_frames,
        ).to(device)
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
        #: the Q network on tensors, online and target (None: the torchrl loss's own forward)
        self.q = TensorNet.of(self.qvalue.module[0]) if len(self.qvalue.module) == 2 else None
        self._target: dict[str, torch.Tensor] = {}
        if self.q is not None:
            # the target network's parameters, keyed like the Q network's own: HardUpdate
            # copies into these tensors in place, so the dict stays current
            target = loss.target_value_network_params["module", "0", "module"]
            self._target = dict(target.flatten_keys(".").items())
        super().__init__(
            config,
            loss,
            TensorDictSequential(self.qvalue, self.egreedy),
            update_every=config.updates_per_batch,
            learning_starts=config.learning_starts,
            device=device,
        )
        self.init_replay(config.buffer_size, config.batch_size)

    # ------------------------------------------------------------ epsilon
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
        state["target_update_counter"] = int(self.target_updater.counter)  # the schedule
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.target_updater.counter = int(state["target_update_counter"])

    # ------------------------------------------------------------ the loss
    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The squared TD error of the chosen actions' values, averaged."""
        if self.q is None:
            return self.torchrl_loss(data)
        obs, next_obs = data.get(OBSERVATION_KEY), data.get(NEXT_OBSERVATION_KEY)
        (q,) = self.q(obs)
        chosen = q.gather(-1, data.get(ACTION_KEY).long().unsqueeze(-1))
        with torch.no_grad():
            target_q = torch.func.functional_call(self.q.net, self._target, (next_obs,))
            if self.config.double_dqn:
                (online_next,) = self.q(next_obs)
                next_value = target_q.gather(-1, online_next.argmax(-1, keepdim=True))
            else:
                next_value = target_q.max(-1, keepdim=True).values
            not_terminated = ~data.get(TERMINATED_KEY)
            target = data.get(REWARD_KEY) + self.gamma * not_terminated * next_value
        loss = ((chosen - target) ** 2).mean()
        return loss, {"loss/td": loss.detach()}

    def torchrl_loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The torchrl loss module's own forward, for a Q network of another structure."""
        out = self.loss_module(data)
        return out["loss"], {"loss/td": out["loss"].detach()}

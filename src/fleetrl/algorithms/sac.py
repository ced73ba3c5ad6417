"""SAC: two Q networks with soft targets, a tanh-squashed Gaussian actor, a learned temperature.

Reads top to bottom: the config (:class:`SACConfig`, with its checks), the
algorithm (the actor, the Q network, torchrl's ``SACLoss`` with two stacked
copies of it and ``SoftUpdate``), and the loss of one sampled minibatch (SAC
v2, Haarnoja et al. 2018):

- Q: ``sum_i (Q_i(s, a) - y)^2`` with ``y = r + gamma (1 - terminated)
  (min_i Q'_i(s', a') - alpha log pi(a'|s'))``, ``a' ~ pi(s')``;
- actor: ``alpha log pi(a|s) - min_i Q_i(s, a)``, ``a ~ pi(s)`` reparameterized,
  through the Q networks but not into their parameters;
- temperature: ``-log(alpha) (log pi(a|s) + target_entropy)``.

Learning is :class:`~fleetrl.algorithms.replay.ReplayAlgorithm`'s;
``learning_starts`` frames of uniform random actions come first (the
collectors' ``init_random_frames``), and learning starts after them.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.modules import MLP, ValueOperator
from torchrl.objectives import SACLoss, SoftUpdate

from fleetrl.algorithms.batches import as_device
from fleetrl.algorithms.replay import ReplayAlgorithm
from fleetrl.algorithms.sections import SAC_CUDAGRAPHS_MSG, SACConfig
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
from fleetrl.networks.heads import PolicyHead, StackedMLP, TensorNet
from fleetrl.networks.models import make_actor
from fleetrl.networks.policies import to_device

__all__ = ["SAC", "SACConfig"]


class SAC(ReplayAlgorithm):
    """Soft Actor-Critic for continuous actions.

    Args:
        config: hyperparameters (``SACConfig``).
        spec: the env's spaces.
        actor: a ProbabilisticActor with a TanhNormal (default: MLP).
        qvalue: a module reading ``observation`` and ``action``, writing ``state_action_value``.
        device: the learner's device (default: the CPU).

    Examples:
        >>> from fleetrl import SAC, SACConfig, SyncDataCollector
        >>> from fleetrl.envs import env_spec
        >>> sac = SAC(SACConfig(learning_starts=64, updates_per_batch=2, batch_size=32,
        ...                     hidden_sizes=[32, 32]), env_spec("Pendulum-v1"))
        >>> with SyncDataCollector("Pendulum-v1", sac.policy, frames_per_batch=64,
        ...                        num_envs=2) as collector:
        ...     info = sac.learn(collector.next())
        >>> sac.num_updates, sorted(k for k in info if k.startswith("loss/"))
        (2, ['loss/actor', 'loss/alpha', 'loss/qvalue'])
    """

    name = "sac"
    config_class = SACConfig
    random_start = True
    tunable: ClassVar[tuple[str, ...]] = ("tau",)
    #: the SAC paper's evaluation: the squashed mean (4,461 against a training score of
    #: 4,104 on HalfCheetah-v5 at 100k steps, benchmarks/results/mujoco_learning.json)
    eval_actions: ClassVar[EvalActions] = EvalActions.DETERMINISTIC

    def __init__(
        self,
        config: SACConfig,
        spec: EnvSpec,
        *,
        actor: nn.Module | None = None,
        qvalue: nn.Module | None = None,
        device: Any = None,
    ):
        refuse_recurrent("sac", actor=actor, qvalue=qvalue)
        if spec.discrete:
            raise ConfigError(
                [
                    f"spec.num_actions={spec.num_actions} is invalid: SAC needs an env with "
                    "continuous (Box) actions and this one has discrete actions; use DQN, PPO "
                    "or A2C for it"
                ]
            )
        if config.cudagraphs:
            raise ConfigError([f"sac.cudagraphs=True is invalid: {SAC_CUDAGRAPHS_MSG}"])
        device = as_device(device)
        if actor is None:
            actor = make_actor(spec, config.hidden_sizes, activation=nn.ReLU)
        if qvalue is None:
            net = MLP(
                in_features=spec.obs_dim + spec.action_dim,
                out_features=1,
                num_cells=config.hidden_sizes,
                activation_class=nn.ReLU,
            )
            qvalue = ValueOperator(
                net, in_keys=[OBSERVATION_KEY, ACTION_KEY], out_keys=["state_action_value"]
            )
        to_device(actor, device)
        qvalue.to(device)
        loss = SACLoss(
            actor,
            qvalue,
            num_qvalue_nets=2,
            loss_function="l2",
            alpha_init=config.alpha_init,
            target_entropy=-float(spec.action_dim),
            delay_qvalue=True,
        )
        loss.make_value_estimator(gamma=config.gamma)
        self.target_updater = SoftUpdate(loss, tau=config.tau)
        self.tau = config.tau
        super().__init__(
            config,
            loss,
            actor,
            update_every=config.updates_per_batch,
            learning_starts=config.learning_starts,
            device=device,
        )
        self.init_replay(config.buffer_size, config.batch_size)
        self._tensor_paths(qvalue)

    def _tensor_paths(self, qvalue: nn.Module) -> None:
        """The actor and the two Q networks (online, target) on tensors, where their
        structure allows; otherwise the torchrl loss's own forward."""
        self.head = PolicyHead.of(self.actor)
        self.q = self.q_target = None
        net = TensorNet.of(qvalue)
        if self.head is None or net is None:
            return
        if net.in_keys != [OBSERVATION_KEY, ACTION_KEY] or len(net.out_keys) != 1:
            return
        loss = self.loss_module
        # the stacked parameters of the Q networks, keyed like the MLP's own (the loss's
        # leaves themselves: the optimizer and SoftUpdate change them in place)
        online = dict(loss.qvalue_network_params["module"].flatten_keys(".").items())
        target = dict(loss.target_qvalue_network_params["module"].flatten_keys(".").items())
        self.q = StackedMLP.of(net.net, online)
        self.q_target = StackedMLP.of(net.net, target)
        self._detached = {k: v.detach() for k, v in online.items()}
        self.q_detached = StackedMLP.of(net.net, self._detached)

    def _set_parameter(self, name: str, value: float) -> None:
        self.tau = float(value)
        self.target_updater = SoftUpdate(self.loss_module, tau=self.tau)

    # ------------------------------------------------------------ the loss
    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The Q, actor and temperature losses of SAC v2, summed (one optimizer steps all)."""
        if self.q is None or self.q_detached is None or self.q_target is None:
            return self.torchrl_loss(data)
        loss_module = self.loss_module
        obs, action = data.get(OBSERVATION_KEY), data.get(ACTION_KEY)
        next_obs = data.get(NEXT_OBSERVATION_KEY)
        alpha = loss_module.log_alpha.detach().exp()
        with torch.no_grad():
            next_action, next_log_prob = _sample(self.head.dist(next_obs))
            next_q = self.q_target(torch.cat([next_obs, next_action], -1)).min(0).values
            next_value = next_q - alpha * next_log_prob.unsqueeze(-1)
            not_terminated = ~data.get(TERMINATED_KEY)
            target = data.get(REWARD_KEY) + self.gamma * not_terminated * next_value
        q = self.q(torch.cat([obs, action], -1))  # [2, batch, 1]
        loss_qvalue = ((q - target.unsqueeze(0)) ** 2).sum(0).mean()
        new_action, log_prob = _sample(self.head.dist(obs))
        q_new = self.q_detached(torch.cat([obs, new_action], -1)).min(0).values.squeeze(-1)
        loss_actor = (alpha * log_prob - q_new).mean()
        loss_alpha = (
            -loss_module.log_alpha * (log_prob.detach() + loss_module.target_entropy)
        ).mean()
        info = {
            "loss/actor": loss_actor.detach(),
            "loss/qvalue": loss_qvalue.detach(),
            "loss/alpha": loss_alpha.detach(),
            "train/alpha": alpha,
        }
        return loss_actor + loss_qvalue + loss_alpha, info

    def torchrl_loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The torchrl loss module's own forward, for networks of another structure."""
        out = self.loss_module(data)
        total = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
        return total, {
            "loss/actor": out["loss_actor"].detach(),
            "loss/qvalue": out["loss_qvalue"].detach(),
            "loss/alpha": out["loss_alpha"].detach(),
            "train/alpha": out["alpha"].detach(),
        }


def _sample(dist: torch.distributions.Distribution) -> tuple[torch.Tensor, torch.Tensor]:
    """A reparameterized sample and its log-probability (one pass where the distribution
    has it, as torchrl's TanhNormal does)."""
    if hasattr(dist, "rsample_and_log_prob"):
        return dist.rsample_and_log_prob()
    sample = dist.rsample()
    return sample, dist.log_prob(sample)

"""IMPALA and APPO: actor-critic learning from batches of older policies, corrected by V-trace.

Reads top to bottom: the shared config (:class:`VTraceConfig`, with its checks),
the V-trace targets (:class:`VTraceTargets`), the shared learner
(:class:`VTraceActorCritic`), then the two algorithms:

- ``impala`` (:class:`IMPALA`, Espeholt et al. 2018): torchrl's ``A2CLoss`` on
  V-trace advantages and value targets, one gradient step per batch;
- ``appo`` (:class:`APPO`, as Sample Factory's APPO): the same V-trace targets
  with torchrl's clipped PPO objective, whose ratio is the current policy over
  the behaviour policy that collected the batch.

The behaviour policy's log-probabilities come from the batch: the acting
``ProbabilisticActor`` writes them (``return_log_prob=True``, key
``action_log_prob``) when the collector steps the envs; the importance weights
use the current policy's log-probabilities of the same actions.

Why not torchrl's ``VTrace`` estimator class: in torchrl 0.14.1 it takes the
current policy's log-probability of a *new* action (the distribution's mode
under the actor's default deterministic interaction, a fresh sample under
random interaction), not of the action in the batch, so its importance
weights are not pi(a|x) / mu(a|x) and are not 1 on-policy. The V-trace
recursion itself is torchrl's (:func:`torchrl.objectives.value.functional.
vtrace_advantage_estimate`); what is ours is the log-probability of the taken
action and the values it is given.

Stale batches: ``max_policy_lag`` bounds how many optimizer steps behind the
learner a batch may be when it arrives (:class:`~fleetrl.scheme.versions.
StaleBatchFilter` drops and counts the older ones, in ``train/dropped_batches``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import A2CLoss, ClipPPOLoss
from torchrl.objectives.value.functional import vtrace_advantage_estimate

from fleetrl.algorithms.actor_critic import ActorCritic
from fleetrl.algorithms.base import end_padded_rows, flatten_valid
from fleetrl.algorithms.models import EnvInfo, ModelKind
from fleetrl.config import AlgorithmConfig, Checks, Config, Schedule
from fleetrl.errors import PolicyError

__all__ = ["APPO", "IMPALA", "APPOConfig", "IMPALAConfig", "VTraceTargets"]

NO_BEHAVIOUR_LOG_PROB_MSG = (
    "V-trace needs the behaviour policy's log-probabilities in the batch at key {key!r}, and "
    "the batch has none: the acting policy must write them (a ProbabilisticActor with "
    "return_log_prob=True, as fleetrl's default actors are)"
)


@dataclass
class VTraceConfig(AlgorithmConfig):
    """What the ``impala`` and ``appo`` sections share: V-trace truncation and the lag bound."""

    lr: float = 5e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """discount factor."""
    rho_bar: float = 1.0
    """truncation of the importance weights in the V-trace temporal differences and the
    policy-gradient advantage (the paper's rho-bar); > 0 and >= c_bar."""
    c_bar: float = 1.0
    """truncation of the importance weights that carry corrections back in time (the
    paper's c-bar, the 'trace cutting'); > 0 and <= rho_bar."""
    max_policy_lag: int | None = 32
    """drop a batch that arrives more than this many optimizer steps behind the learner
    (counted in train/dropped_batches; null: no bound). Must be at least the lag that
    trainer.weight_update_interval alone gives: (interval - 1) x steps per batch."""
    entropy_coef: float = 0.01
    """entropy bonus coefficient."""
    critic_coef: float = 0.5
    """value loss coefficient."""
    max_grad_norm: float | None = 40.0
    """clip the gradient norm (None: off; the IMPALA paper's 40)."""
    normalize_advantage: bool = False
    """normalize advantages per minibatch."""
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    """hidden layers of the actor and critic MLPs."""
    model: ModelKind = ModelKind.AUTO
    """default network: 'auto' (cnn for 3-D uint8 observations, else mlp), 'mlp', 'cnn'
    (Nature CNN) or 'impala' (IMPALA ResNet); modules passed in code win."""

    @property
    def steps_per_batch(self) -> int:
        """Optimizer steps on each collected batch."""
        return 1

    def validate(self, config: Config, check: Checks) -> None:
        super().validate(config, check)
        check(self.rho_bar > 0, "rho_bar", self.rho_bar, "must be > 0 (1.0: the paper's)")
        check(
            0 < self.c_bar <= max(self.rho_bar, 0),
            "c_bar",
            self.c_bar,
            f"must be > 0 and <= rho_bar ({self.rho_bar}) (1.0: the paper's)",
        )
        for name in ("entropy_coef", "critic_coef"):
            check(getattr(self, name) >= 0, name, getattr(self, name), "must be >= 0")
        interval = config.trainer.weight_update_interval
        least = max(0, interval - 1) * self.steps_per_batch
        check(
            self.max_policy_lag is None or self.max_policy_lag >= least,
            "max_policy_lag",
            self.max_policy_lag,
            f"must be null (no bound) or >= {least}: with trainer.weight_update_interval="
            f"{interval} and {self.steps_per_batch} optimizer steps per batch, batches arrive "
            f"up to {least} steps behind even without asynchrony, and every one would be dropped",
        )


@dataclass
class IMPALAConfig(VTraceConfig):
    """The ``impala`` section of a config (checks: :class:`VTraceConfig`'s)."""


@dataclass
class APPOConfig(VTraceConfig):
    """The ``appo`` section of a config (Sample Factory's APPO defaults where they apply)."""

    lr: float = 3e-4
    """Adam learning rate."""
    clip_epsilon: float = 0.1
    """PPO ratio clipping (of the current over the behaviour policy)."""
    clip_schedule: Schedule = Schedule.CONSTANT
    """'constant' or 'linear' decay of clip_epsilon (to 0 at trainer.total_frames)."""
    clip_value: float | None = None
    """clip the value update to this range around the old value (None: off)."""
    num_epochs: int = 1
    """passes over each batch (V-trace targets computed once, at the first)."""
    num_mini_batch: int = 1
    """minibatches per epoch."""
    normalize_advantage: bool = True
    """normalize advantages per minibatch."""
    max_grad_norm: float | None = 0.5
    """clip the gradient norm (None: off)."""

    @property
    def steps_per_batch(self) -> int:
        return self.num_epochs * self.num_mini_batch

    def validate(self, config: Config, check: Checks) -> None:
        super().validate(config, check)
        check(self.clip_epsilon > 0, "clip_epsilon", self.clip_epsilon, "must be > 0")
        check(
            self.clip_value is None or self.clip_value > 0,
            "clip_value",
            self.clip_value,
            "must be > 0, or null: off",
        )
        check(self.num_epochs > 0, "num_epochs", self.num_epochs, "must be > 0")
        frames = config.collector.frames_per_batch
        check(
            self.num_mini_batch > 0 and frames % self.num_mini_batch == 0,
            "num_mini_batch",
            self.num_mini_batch,
            f"must be > 0 and divide collector.frames_per_batch ({frames})",
        )


class VTraceTargets:
    """V-trace advantages and value targets of a batch laid out ``[*batch, time]``.

    Args:
        actor: the current policy (a ``ProbabilisticActor``): its log-probability of
            each action taken in the batch is log pi.
        critic: the current critic, writing ``state_value``.
        gamma: discount factor.
        rho_bar: truncation of the importance weights in the temporal differences.
        c_bar: truncation of the importance weights in the traces.
        log_prob_key: where the batch holds the behaviour policy's log-probabilities
            (log mu), as the acting policy wrote them.

    Writes ``advantage`` (``clip(rho, rho_bar) * (r + gamma * v_{s+1} - V(x_s))``)
    and ``value_target`` (``v_s``) into the batch, shaped like ``state_value``.
    """

    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module,
        *,
        gamma: float,
        rho_bar: float,
        c_bar: float,
        log_prob_key: str | tuple[str, ...] = "action_log_prob",
    ):
        self.actor = actor
        self.critic = critic
        self.gamma = gamma
        self.rho_bar = rho_bar
        self.c_bar = c_bar
        self.log_prob_key = log_prob_key

    def _value(self, data: TensorDictBase) -> torch.Tensor:
        return self.critic(data.select(*self.critic.in_keys).clone(False)).get("state_value")

    @torch.no_grad()
    def __call__(self, batch: TensorDictBase) -> TensorDictBase:
        if self.log_prob_key not in batch.keys(include_nested=True):
            raise PolicyError(NO_BEHAVIOUR_LOG_PROB_MSG.format(key=self.log_prob_key))
        value = self._value(batch)
        next_value = self._value(batch.get("next"))
        dist = self.actor.get_dist(batch.select(*self.actor.in_keys).clone(False))
        log_pi = dist.log_prob(batch.get("action")).reshape(value.shape)
        log_mu = batch.get(self.log_prob_key).reshape(value.shape)
        reward = batch.get(("next", "reward")).reshape(value.shape).to(value.dtype)
        done = batch.get(("next", "done")).reshape(value.shape)
        terminated = batch.get(("next", "terminated")).reshape(value.shape)
        advantage, value_target = vtrace_advantage_estimate(
            self.gamma,
            log_pi,
            log_mu,
            value,
            next_value,
            reward,
            done,
            terminated,
            rho_thresh=self.rho_bar,
            c_thresh=self.c_bar,
            time_dim=value.dim() - 2,  # [*batch, time, 1]
        )
        batch.set("advantage", advantage)
        batch.set("value_target", value_target)
        return batch


class VTraceActorCritic(ActorCritic):
    """What IMPALA and APPO share: V-trace targets on the whole batch, then the loss."""

    config: VTraceConfig

    def init_vtrace(self, critic: nn.Module, config: VTraceConfig) -> None:
        self.critic = critic
        self.config = config
        self.vtrace = VTraceTargets(
            self.actor,
            critic,
            gamma=config.gamma,
            rho_bar=config.rho_bar,
            c_bar=config.c_bar,
            log_prob_key=self.loss_module.tensor_keys.sample_log_prob,
        )

    @property
    def max_policy_lag(self) -> int | None:
        """Batches arriving more than this many optimizer steps behind are dropped (None: none)."""
        return self.config.max_policy_lag

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        """V-trace targets for the whole batch with the current actor and critic, then its
        valid frames, flat."""
        batch = self.scaled_rewards(end_padded_rows(batch))
        self.vtrace(batch)
        return flatten_valid(batch)

    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, float]]:
        return self.loss_info(self.loss_module(data))


class IMPALA(VTraceActorCritic):
    """IMPALA's learner: the A2C loss on V-trace targets, one gradient step per batch.

    Args:
        config: hyperparameters (``IMPALAConfig``).
        info: the env's spaces, for the default networks.
        actor: a ProbabilisticActor writing ``action`` and ``action_log_prob``
            (default: by ``config.model``).
        critic: a module writing ``state_value`` (default: by ``config.model``).

    Examples:
        >>> from fleetrl.algorithms.models import env_info
        >>> impala = IMPALA(IMPALAConfig(rho_bar=2.0), env_info("CartPole-v1"))
        >>> impala.vtrace.rho_bar, impala.vtrace.c_bar, impala.steps_per_batch
        (2.0, 1.0, 1)
    """

    name = "impala"
    config_class = IMPALAConfig
    tunable: ClassVar[tuple[str, ...]] = ("entropy_coef", "critic_coef")

    def __init__(
        self,
        config: IMPALAConfig,
        info: EnvInfo,
        *,
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
    ):
        critic = self.build(
            A2CLoss,
            config,
            info,
            actor=actor,
            critic=critic,
        )
        self.init_vtrace(critic, config)

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        data = super().prepare(batch)
        return self.normalized_advantage(data) if self.config.normalize_advantage else data


class APPO(VTraceActorCritic):
    """Asynchronous PPO (Sample Factory's): the clipped PPO objective on V-trace targets.

    The ratio is the current policy over the behaviour policy whose log-probabilities
    the batch holds, whatever version collected it; V-trace's truncated weights correct
    the value targets and advantages for the same lag.

    Args:
        config: hyperparameters (``APPOConfig``).
        info: the env's spaces, for the default networks.
        actor: a ProbabilisticActor writing ``action`` and ``action_log_prob``
            (default: by ``config.model``).
        critic: a module writing ``state_value`` (default: by ``config.model``).

    Examples:
        >>> from fleetrl.algorithms.models import env_info
        >>> appo = APPO(APPOConfig(num_epochs=2, num_mini_batch=4), env_info("CartPole-v1"))
        >>> appo.steps_per_batch, round(appo.clip_epsilon, 3)
        (8, 0.1)
    """

    name = "appo"
    config_class = APPOConfig
    tunable: ClassVar[tuple[str, ...]] = ("clip_epsilon", "entropy_coef", "critic_coef")
    loss_buffers: ClassVar[dict[str, str]] = {
        **ActorCritic.loss_buffers,
        "clip_epsilon": "clip_epsilon",
    }

    def __init__(
        self,
        config: APPOConfig,
        info: EnvInfo,
        *,
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
    ):
        critic = self.build(
            ClipPPOLoss,
            config,
            info,
            actor=actor,
            critic=critic,
            num_epochs=config.num_epochs,
            num_mini_batch=config.num_mini_batch,
            clip_epsilon=config.clip_epsilon,
            normalize_advantage=config.normalize_advantage,
            clip_value=config.clip_value,
        )
        self.init_vtrace(critic, config)

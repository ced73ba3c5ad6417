"""V-trace: what IMPALA and APPO share, for learning from batches of older policies.

Reads top to bottom: the shared config (:class:`VTraceConfig`, with its
checks: the truncation levels and the lag bound), the V-trace targets
(:class:`VTraceTargets`) and the shared learner (:class:`VTraceActorCritic`),
which computes the targets once per collected batch with the current actor
and critic. The two algorithms are in their own files:
:mod:`fleetrl.algorithms.impala` (the A2C loss on V-trace targets) and
:mod:`fleetrl.algorithms.appo` (PPO's clipped objective on them).

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
action and the values it is given (``tests/unit/algorithms/test_loss_parity.py``
compares the targets with torchrl's ``VTrace`` given an actor whose "sample" is the
batch's action).

The targets also store the critic's values of the batch (``state_value``), as
GAE does for PPO: a clipped value loss (``appo.clip_value``) keeps the new
value within the clip of those.

Stale batches: ``max_learn_lag`` bounds how many optimizer steps behind the
learner a batch may be when it arrives (:class:`~fleetrl.learners.versions.
StaleBatchFilter` drops and counts the older ones, in ``train/dropped_batches``).
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives.value.functional import vtrace_advantage_estimate

from fleetrl.algorithms.actor_critic import ActorCritic
from fleetrl.algorithms.batches import end_padded_rows, flatten_valid
from fleetrl.algorithms.sections import VTraceConfig
from fleetrl.algorithms.sequences import sequence_log_prob, step_values
from fleetrl.errors import PolicyError
from fleetrl.keys import ACTION_KEY, ACTION_LOG_PROB_KEY, DONE_KEY, REWARD_KEY, TERMINATED_KEY
from fleetrl.networks.heads import ActorCriticHeads, next_values

__all__ = ["VTraceActorCritic", "VTraceConfig", "VTraceTargets", "values_and_log_prob"]

NO_BEHAVIOUR_LOG_PROB_MSG = (
    "V-trace needs the behaviour policy's log-probabilities in the batch at key {key!r}, and "
    "the batch has none: the acting policy must write them (a ProbabilisticActor with "
    "return_log_prob=True, as fleetrl's default actors are)"
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
        heads: the same actor and critic on tensors (None: called as TensorDict modules).
        recurrent: the networks hold a recurrent core: the values come from the stored
            states (:func:`~fleetrl.algorithms.sequences.step_values`), log pi from the
            actor run over each whole row in recurrent mode.
        log_pi_key: where to keep log pi in the batch, for a reader after the targets
            (APPO's decoupled objective: its proximal policy), so the policy is not run
            again (None: not kept; with a recurrent core it never is, as the sequences'
            log-probabilities come from a burn-in this one does not have).

    Writes ``advantage`` (``clip(rho, rho_bar) * (r + gamma * v_{s+1} - V(x_s))``),
    ``value_target`` (``v_s``) and ``state_value`` (``V(x_s)``, the critic's value
    before the update) into the batch, shaped like the critic's output.
    """

    def __init__(
        self,
        actor: nn.Module,
        critic: nn.Module,
        *,
        gamma: float,
        rho_bar: float,
        c_bar: float,
        log_prob_key: str | tuple[str, ...] = ACTION_LOG_PROB_KEY,
        heads: ActorCriticHeads | None = None,
        recurrent: bool = False,
        log_pi_key: str | None = None,
    ):
        self.heads = heads
        self.log_pi_key = log_pi_key
        self.recurrent = recurrent
        self.actor = actor
        self.critic = critic
        self.gamma = gamma
        self.rho_bar = rho_bar
        self.c_bar = c_bar
        self.log_prob_key = log_prob_key

    def _value(self, data: TensorDictBase) -> torch.Tensor:
        return self.critic(data.select(*self.critic.in_keys).clone(False)).get("state_value")

    def _values_and_log_pi(self, batch: TensorDictBase) -> tuple[torch.Tensor, ...]:
        """V(x_s), V(x_{s+1}) and log pi(a_s|x_s): on tensors through ``heads`` (the values
        of both in one call), else through the TensorDict modules."""
        action = batch.get(ACTION_KEY)
        if self.recurrent:
            value, next_value = step_values(self.critic, batch)
            log_pi = sequence_log_prob(self.actor, batch, ACTION_KEY)
            return value, next_value, log_pi.reshape(value.shape)
        if self.heads is None:
            value = self._value(batch)
            next_value = self._value(batch.get("next"))
            dist = self.actor.get_dist(batch.select(*self.actor.in_keys).clone(False))
            return value, next_value, dist.log_prob(action).reshape(value.shape)
        return values_and_log_prob(self.heads, batch)

    @torch.no_grad()
    def __call__(self, batch: TensorDictBase) -> TensorDictBase:
        if self.log_prob_key not in batch.keys(include_nested=True):
            raise PolicyError(NO_BEHAVIOUR_LOG_PROB_MSG.format(key=self.log_prob_key))
        value, next_value, log_pi = self._values_and_log_pi(batch)
        if self.log_pi_key is not None and not self.recurrent:
            batch.set(self.log_pi_key, log_pi)
        log_mu = batch.get(self.log_prob_key).reshape(value.shape)
        reward = batch.get(REWARD_KEY).reshape(value.shape).to(value.dtype)
        done = batch.get(DONE_KEY).reshape(value.shape)
        terminated = batch.get(TERMINATED_KEY).reshape(value.shape)
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
        batch.set("state_value", value)
        return batch


@torch.no_grad()
def values_and_log_prob(
    heads: ActorCriticHeads, batch: TensorDictBase
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """V(x_s), V(x_{s+1}) and log pi(a_s|x_s) of a batch laid out ``[*batch, time]``, through
    ``heads``: the policy and the value of the observations in one call (a shared torso
    once), the next observations' values reused from them where they are the next step's
    (:func:`~fleetrl.networks.heads.next_values`). Each is shaped ``[*batch, time, 1]``."""
    keys, lead = heads.in_keys, batch.batch_size
    observations = [batch.get(k) for k in keys]
    dist, value = heads(*(o.reshape(-1, *o.shape[len(lead) :]) for o in observations))
    value = value.reshape(*lead, -1)
    action = batch.get(ACTION_KEY)
    log_pi = dist.log_prob(action.reshape(-1, *action.shape[len(lead) :]))
    nxt = [batch.get(("next", k)) for k in keys]
    next_value = next_values(value, observations, nxt, heads.value)
    return value, next_value, log_pi.reshape(value.shape)


class VTraceActorCritic(ActorCritic):
    """What IMPALA and APPO share: V-trace targets on the whole batch, then the loss."""

    config: VTraceConfig

    def init_vtrace(self, config: VTraceConfig, log_pi_key: str | None = None) -> None:
        """The V-trace targets of ``config``; ``log_pi_key``: :class:`VTraceTargets`'."""
        self.vtrace = VTraceTargets(
            self.actor,
            self.critic,
            gamma=config.gamma,
            rho_bar=config.rho_bar,
            c_bar=config.c_bar,
            log_prob_key=self.loss_module.tensor_keys.sample_log_prob,
            heads=self.heads,
            recurrent=self.sequences is not None,
            log_pi_key=log_pi_key,
        )

    @property
    def max_learn_lag(self) -> int | None:
        """Batches arriving more than this many optimizer steps behind are dropped (None: none)."""
        return self.config.max_learn_lag

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        """V-trace targets for the whole batch with the current actor and critic, then its
        valid frames, flat (with recurrent networks: its rows cut into sequences)."""
        batch = self.scaled_rewards(end_padded_rows(self.to_learner(batch)))
        self.vtrace(batch)
        if self.sequences is not None:
            return self.on_device(self.sequences.split(batch, self.sequence_keys()))
        return self.on_device(flatten_valid(batch, self.keys))

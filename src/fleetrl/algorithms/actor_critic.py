"""ActorCritic: what PPO, A2C, IMPALA and APPO share.

- The networks: the user's actor and critic, or the default ones for the
  section's ``model`` (:func:`~fleetrl.networks.models.make_actor_critic`),
  on the learner's device, inside a torchrl loss module.
- The loss coefficients as explicit properties that read and change the loss
  module's buffers (``entropy_coef``, ``critic_coef``; PPO and APPO add
  ``clip_epsilon``), so ``update_algorithm_parameter`` acts on the loss itself
  and a compiled step reads the new value without recompiling.
- The loss terms, written once on tensors: :func:`clipped_objective` (PPO,
  APPO), :func:`policy_gradient` (A2C, IMPALA), :func:`critic_loss` (value
  clipping included) and :func:`entropy_of`. An algorithm's :meth:`loss` puts
  them together on the networks' outputs
  (:class:`~fleetrl.networks.heads.ActorCriticHeads`); an actor or critic of
  another structure (a recurrent policy...) goes through the torchrl loss
  module's own forward instead (:meth:`ActorCritic.torchrl_loss`). Both give the
  same numbers: ``tests/unit/algorithms/test_loss_parity.py`` holds each term and
  every gradient to torchrl's GAE, VTrace and loss modules alone.
- GAE: advantages and value targets with the current critic, once per
  collected batch (:meth:`ActorCritic.prepare`).
- Recurrent networks (an ``LSTMModule`` or ``GRUModule`` in the actor or the critic,
  ``model: lstm``/``gru``): the batch is cut into sequences after GAE, minibatches
  shuffle sequences, and the loss runs the networks over each sequence in recurrent
  mode, averaging the same terms over the steps under the loss mask
  (:mod:`fleetrl.algorithms.sequences`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.modules import set_recurrent_mode
from torchrl.objectives.value import GAE

from fleetrl.algorithms.base import Algorithm
from fleetrl.algorithms.batches import as_device, end_padded_rows, flatten_valid, on
from fleetrl.algorithms.gae import generalized_advantage_estimate
from fleetrl.algorithms.sections import (
    ActorCriticConfig,
    PPOFields,
    check_clipping,
)
from fleetrl.algorithms.sequences import (
    LOSS_MASK_KEY,
    Sequences,
    SharedTrunk,
    is_recurrent,
    step_values,
)
from fleetrl.config import Schedule
from fleetrl.envs.spec import EnvSpec
from fleetrl.errors import ConfigError
from fleetrl.keys import DONE_KEY, MASK_KEY, REWARD_KEY, TERMINATED_KEY
from fleetrl.networks.heads import ActorCriticHeads, next_values
from fleetrl.networks.models import (
    ActionDistribution,
    make_actor_critic,
)
from fleetrl.networks.policies import to_device

__all__ = [
    "ActorCritic",
    "ActorCriticConfig",
    "ClipEpsilon",
    "LossCoefficients",
    "PPOFields",
    "check_clipping",
    "clipped_objective",
    "critic_loss",
    "entropy_of",
    "policy_gradient",
    "torchrl_loss_terms",
]

RECURRENT_COMPILE_MSG = (
    "{algo}.{key}=True is invalid with a recurrent policy or critic: sequence "
    "minibatches (padding, burn-in) have data-dependent shapes; set {algo}.compile=false "
    "and {algo}.cudagraphs=false"
)

#: what GAE reads besides the critic's inputs (and the mask of a padded batch)
GAE_KEYS = (
    REWARD_KEY,
    DONE_KEY,
    TERMINATED_KEY,
    MASK_KEY,
)


def standardized(advantage: torch.Tensor) -> torch.Tensor:
    """Zero mean, unit std over the minibatch (torchrl's ``_standardize``: std floored at 1e-6)."""
    return (advantage - advantage.mean()) / advantage.std().clamp_min(1e-6)


def clipped_objective(
    log_prob: torch.Tensor,
    behaviour_log_prob: torch.Tensor,
    advantage: torch.Tensor,
    clip_epsilon: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped surrogate, ``-min(r A, clip(r, 1 - eps, 1 + eps) A)``, averaged.

    ``r`` is the ratio of the current policy to the one that collected the data
    (its log-probability in the batch); the clip is applied to ``log r`` within
    ``[log(1 - eps), log(1 + eps)]``, as torchrl's ``ClipPPOLoss`` does. Logs the
    approximate KL and the fraction of clipped ratios.
    """
    log_weight = (log_prob - behaviour_log_prob).unsqueeze(-1)
    clipped = log_weight.clamp((-clip_epsilon).log1p(), clip_epsilon.log1p())
    gain = torch.min(log_weight.exp() * advantage, clipped.exp() * advantage)
    info = {
        "loss/kl_approx": (-log_weight).detach().mean(),
        "loss/clip_fraction": (clipped != log_weight).detach().to(log_weight.dtype).mean(),
    }
    return -gain.mean(), info


def policy_gradient(log_prob: torch.Tensor, advantage: torch.Tensor) -> torch.Tensor:
    """The plain policy-gradient loss ``-log pi(a|s) A``, averaged (A2C, IMPALA)."""
    return -(log_prob.unsqueeze(-1) * advantage).mean()


def critic_loss(
    value: torch.Tensor,
    target: torch.Tensor,
    old_value: torch.Tensor | None,
    clip_value: Any,
) -> torch.Tensor:
    """The squared error of the value, averaged; with ``clip_value``, the larger of the
    clipped and unclipped errors, the clipped value kept within ``clip_value`` of
    ``old_value`` (the critic's value when the update on this batch began)."""
    loss = (target - value) ** 2
    if clip_value is not None and old_value is not None:
        clipped = old_value + (value - old_value).clamp(-clip_value, clip_value)
        loss = torch.maximum(loss, (target - clipped) ** 2)
    return loss.mean()


def entropy_of(dist: torch.distributions.Distribution) -> torch.Tensor:
    """The distribution's entropy; a one-sample estimate where it has no closed form
    (a tanh-squashed Gaussian), as torchrl's losses make (the same draw for the same
    generator state). torchrl's PPO also falls back to the sample where the closed form is
    not finite; this keeps the closed form (inf or nan then shows in ``loss/entropy``)."""
    try:
        return dist.entropy()
    except NotImplementedError:
        if hasattr(dist, "rsample_and_log_prob"):
            _, log_prob = dist.rsample_and_log_prob()
        else:
            log_prob = dist.log_prob(dist.rsample())
        return -log_prob


# ------------------------------------------------------------------ the base class


class LossCoefficients:
    """The entropy and value-loss coefficients as tunables in the torchrl loss module's
    buffers (``entropy_coef``, ``critic_coef``), so a change acts on the loss itself; an
    ``entropy_coef`` > 0 turns on an entropy term that was off at construction.

    Mixed in before :class:`~fleetrl.algorithms.base.Algorithm` (:class:`ActorCritic`,
    :class:`~fleetrl.algorithms.mappo.MultiAgentPPO`).
    """

    tunable: ClassVar[tuple[str, ...]] = ("entropy_coef", "critic_coef")
    loss_module: Any

    @property
    def entropy_coef(self) -> float:
        return float(self.loss_module.entropy_coeff)

    @property
    def critic_coef(self) -> float:
        return float(self.loss_module.critic_coeff)

    def _set_parameter(self, name: str, value: float) -> None:
        buffers = {"entropy_coef": "entropy_coeff", "critic_coef": "critic_coeff"}
        getattr(self.loss_module, buffers[name]).fill_(float(value))
        if name == "entropy_coef":
            self.loss_module.entropy_bonus = float(value) > 0


class ActorCritic(LossCoefficients, Algorithm):
    """On-policy base: builds the networks and the torchrl loss, and holds the coefficients.

    Args:
        config: the section (``model``, ``hidden_sizes``, ``entropy_coef``,
            ``critic_coef``, ``lr``, ``max_grad_norm``...).
        spec: the env's spaces, for the default networks.
        loss_class: the torchrl loss (``ClipPPOLoss``, ``A2CLoss``).

    Keyword Args:
        actor, critic: the user's modules (None: the defaults for ``config.model``).
        device: the learner's device.
        num_epochs, num_mini_batch: passes over each batch and minibatches per pass.
        loss_kwargs: the loss class's own arguments (clipping).
    """

    def __init__(
        self,
        config: Any,
        spec: EnvSpec,
        loss_class: type[nn.Module],
        *,
        actor: nn.Module | None,
        critic: nn.Module | None,
        device: Any = None,
        num_epochs: int = 1,
        num_mini_batch: int = 1,
        loss_kwargs: dict[str, Any] | None = None,
    ):
        device = as_device(device)
        actor, critic = make_actor_critic(
            config.model,
            spec,
            config.hidden_sizes,
            actor=actor,
            critic=critic,
            # PPO's section has it; A2C's, IMPALA's and APPO's keep the TanhNormal
            distribution=getattr(config, "distribution", ActionDistribution.TANH_NORMAL),
            recurrent_size=config.recurrent_size,
            torso=config.torso,
            head_sizes=config.head_sizes,
        )
        to_device(actor, device)
        critic.to(device)
        loss = loss_class(
            actor,
            critic,
            entropy_bonus=config.entropy_coef > 0,
            entropy_coeff=config.entropy_coef,
            critic_coeff=config.critic_coef,
            loss_critic_type="l2",
            **(loss_kwargs or {}),
        )
        self.critic = critic
        #: how batches are cut into sequences (None: feed-forward networks, flat minibatches)
        self.sequences: Sequences | None = None
        #: the torso and core the actor and critic share (None: separate networks)
        self.trunk: SharedTrunk | None = None
        if is_recurrent(actor) or is_recurrent(critic):
            self.sequences = Sequences(config.seq_len, config.burn_in, algo=self.name)
            self.trunk = SharedTrunk.of(actor, critic)
            if config.compile or config.cudagraphs:
                key = "compile" if config.compile else "cudagraphs"
                raise ConfigError([RECURRENT_COMPILE_MSG.format(algo=self.name, key=key)])
        #: the networks on tensors (None: the torchrl loss's own forward, see torchrl_loss)
        self.heads = ActorCriticHeads.of(actor, critic)
        keys = None
        if self.heads is not None:
            t = loss.tensor_keys
            keys = [*self.heads.in_keys, t.action, t.sample_log_prob, t.advantage]
            keys += [t.value_target, t.value]
        super().__init__(
            config,
            loss,
            actor,
            adam_eps=1e-5,  # CleanRL's
            num_epochs=num_epochs,
            num_mini_batch=num_mini_batch,
            device=device,
            keys=keys,
        )
        self._entropy_on = config.entropy_coef > 0

    # ------------------------------------------------------------ coefficients
    def _set_parameter(self, name: str, value: float) -> None:
        super()._set_parameter(name, value)
        if name == "entropy_coef":  # an entropy term that was off at construction turns on
            self._entropy_on = float(value) > 0

    # ------------------------------------------------------------ data
    def scaled_rewards(self, batch: TensorDictBase) -> TensorDictBase:
        """The batch with its rewards scaled by :attr:`reward_scaler` (as it is without one)."""
        return batch if self.reward_scaler is None else self.reward_scaler.scale(batch)

    def init_gae(self, gamma: float, gae_lambda: float) -> None:
        self.gae = GAE(gamma=gamma, lmbda=gae_lambda, value_network=self.critic, average_gae=False)

    def to_learner(self, batch: TensorDictBase) -> TensorDictBase:
        """A collected batch on the learner's device, with only what the update reads
        (every key, for networks called through the torchrl loss): the one move of the
        batch per update (:meth:`~fleetrl.algorithms.Algorithm.on_device`); what follows
        (GAE, flattening, the minibatches) runs on the device."""
        if on(batch, self.device):
            return batch
        if self.keys is not None:
            keys = [*self.keys, *GAE_KEYS, *(("next", k) for k in self.heads.in_keys)]
            batch = batch.select(*keys, strict=False)
        return self.on_device(batch)

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        """GAE advantages and value targets for the whole batch, then its valid frames, flat
        (with recurrent networks: its rows cut into sequences, :meth:`Sequences.split`)."""
        batch = self.scaled_rewards(end_padded_rows(self.to_learner(batch)))
        if self.heads is None and self.sequences is None:
            with torch.no_grad():
                self.gae(batch)
        else:
            value, next_value = self.values(batch)
            advantage, value_target = generalized_advantage_estimate(
                self.gae.gamma,
                self.gae.lmbda,
                value,
                next_value,
                batch.get(REWARD_KEY).to(value.dtype),
                batch.get(DONE_KEY),
                batch.get(TERMINATED_KEY),
                time_dim=batch.batch_dims - 1,
            )
            t = self.loss_module.tensor_keys
            batch.set(t.advantage, advantage)
            batch.set(t.value_target, value_target)
            batch.set(t.value, value)
        if self.sequences is not None:
            return self.on_device(self.sequences.split(batch, self.sequence_keys()))
        return self.on_device(flatten_valid(batch, self.keys))

    def sequence_keys(self) -> list[Any]:
        """What a sequence minibatch keeps: what the networks and the loss read."""
        t = self.loss_module.tensor_keys
        keys = [*self.actor.in_keys, *self.critic.in_keys, t.action, t.sample_log_prob]
        return [*dict.fromkeys(keys), t.advantage, t.value_target, t.value]

    def minibatches(self, data: TensorDictBase) -> Iterator[TensorDictBase]:
        """Flat minibatches (:meth:`Algorithm.minibatches`), or with recurrent networks
        shuffled sequences (:meth:`Sequences.minibatches`)."""
        if self.sequences is None:
            yield from super().minibatches(data)
            return
        yield from self.sequences.minibatches(data, self.num_mini_batch)

    @torch.no_grad()
    def values(self, batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """The critic's values of a batch's observations and next observations (what torchrl's
        GAE module computes through the TensorDict critic), a next observation that is the
        next step's observation not computed twice (:func:`~fleetrl.networks.heads.next_values`);
        a recurrent critic's from the stored states (:func:`step_values`)."""
        if self.sequences is not None:
            return step_values(self.critic, batch)
        keys = self.heads.in_keys
        observations = [batch.get(k) for k in keys]
        value = self.heads.value(*observations)
        nxt = [batch.get(("next", k)) for k in keys]
        return value, next_values(value, observations, nxt, self.heads.value)

    @staticmethod
    def normalized_advantage(data: TensorDictBase) -> TensorDictBase:
        """``data`` with its advantages standardized over the whole batch (A2C, IMPALA):
        :func:`standardized`, as PPO's minibatches are (torchrl's ``GAE(average_gae=True)``
        and ``VTrace(average_adv=True)`` give the same numbers; they floor the std at 1e-4
        and 1e-5 instead of 1e-6, ``tests/unit/algorithms/test_loss_parity.py``)."""
        advantage = data.get("advantage")
        if LOSS_MASK_KEY in data.keys(include_nested=True):  # sequences: over real steps only
            mask = data.get(LOSS_MASK_KEY)
            advantage = advantage.clone()
            advantage[mask] = standardized(advantage[mask])
            data.set("advantage", advantage)
            return data
        data.set("advantage", standardized(advantage))
        return data

    # ------------------------------------------------------------ the loss
    def forward_heads(
        self, data: TensorDictBase
    ) -> tuple[TensorDictBase, torch.distributions.Distribution, torch.Tensor, torch.Tensor, Any]:
        """The data the loss reads, the policy's distribution, the log-probability of the
        batch's actions, the value, and the mask of the distribution's entries in the loss.

        Flat data: the data itself, and no mask. Sequences: the networks run over each
        sequence in recurrent mode (gradients through time), after the burn-in
        (:meth:`Sequences.refresh_states`); the data, log-probabilities and values are those of
        the steps under the loss mask, flat, so each loss term is their mean.
        """
        t = self.loss_module.tensor_keys
        if self.sequences is None:
            dist, value = self.heads(*(data.get(k) for k in self.heads.in_keys))
            return data, dist, dist.log_prob(data.get(t.action)), value, None
        data = self.sequences.refresh_states(data, [self.critic, self.actor])
        mask = data.get(LOSS_MASK_KEY)
        with set_recurrent_mode(True):
            if self.trunk is not None:  # one torso and core for both: run them once
                keys = {*self.actor.in_keys, *self.critic.in_keys}
                dist, out = self.trunk(data.select(*keys).clone(False))
                value = out.get(t.value)
            else:
                dist = self.actor.get_dist(data.select(*self.actor.in_keys).clone(False))
                value = self.critic(data.select(*self.critic.in_keys).clone(False)).get(t.value)
        log_prob = dist.log_prob(data.get(t.action))
        return data[mask], dist, log_prob[mask], value[mask], mask

    def with_entropy(
        self, loss: torch.Tensor, info: dict[str, torch.Tensor], dist: Any, mask: Any = None
    ) -> torch.Tensor:
        """``loss`` minus ``entropy_coef`` x the entropy, when the bonus is on (the mean over
        the entries under ``mask``, when given)."""
        if not self._entropy_on:
            return loss
        entropy = entropy_of(dist)
        entropy = (entropy if mask is None else entropy[mask]).mean()
        info["loss/entropy"] = entropy.detach()
        return loss - self.loss_module.entropy_coeff * entropy

    def clipped_loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """PPO's and APPO's loss: the clipped surrogate (advantages standardized per
        minibatch with ``normalize_advantage``) + ``critic_coef`` x the value loss (clipped
        with ``clip_value``) - ``entropy_coef`` x the entropy."""
        if self.heads is None and self.sequences is None:
            return self.torchrl_loss(data)
        t, loss_module = self.loss_module.tensor_keys, self.loss_module
        data, dist, log_prob, value, mask = self.forward_heads(data)
        advantage = data.get(t.advantage)
        if self.config.normalize_advantage:
            advantage = standardized(advantage)
        objective, info = clipped_objective(
            log_prob, data.get(t.sample_log_prob), advantage, loss_module.clip_epsilon
        )
        clip_value = loss_module.clip_value
        old_value = data.get(t.value) if clip_value is not None else None
        value_loss = loss_module.critic_coeff * critic_loss(
            value, data.get(t.value_target), old_value, clip_value
        )
        info.update({"loss/objective": objective.detach(), "loss/critic": value_loss.detach()})
        return self.with_entropy(objective + value_loss, info, dist, mask), info

    def policy_gradient_loss(
        self, data: TensorDictBase
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """A2C's and IMPALA's loss: the policy gradient + ``critic_coef`` x the value loss
        - ``entropy_coef`` x the entropy."""
        if self.heads is None and self.sequences is None:
            return self.torchrl_loss(data)
        t = self.loss_module.tensor_keys
        data, dist, log_prob, value, mask = self.forward_heads(data)
        objective = policy_gradient(log_prob, data.get(t.advantage))
        value_loss = self.loss_module.critic_coeff * critic_loss(
            value, data.get(t.value_target), None, None
        )
        info = {"loss/objective": objective.detach(), "loss/critic": value_loss.detach()}
        return self.with_entropy(objective + value_loss, info, dist, mask), info

    def torchrl_loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The torchrl loss module's own forward, for networks of another structure."""
        return torchrl_loss_terms(self.loss_module, data)


def torchrl_loss_terms(
    loss_module: nn.Module, data: TensorDictBase
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """A torchrl loss module's own forward on ``data``: the sum of its loss terms, and what is
    logged of them (:meth:`ActorCritic.torchrl_loss`, the multi-agent PPOs' loss)."""
    out = loss_module(data)
    total = out["loss_objective"] + out["loss_critic"]
    info = {
        "loss/objective": out["loss_objective"].detach(),
        "loss/critic": out["loss_critic"].detach(),
    }
    if "loss_entropy" in out:
        total = total + out["loss_entropy"]
        info["loss/entropy"] = (
            out["entropy"].detach() if "entropy" in out else -out["loss_entropy"].detach()
        )
    for key in ("kl_approx", "clip_fraction"):
        if key in out:
            info[f"loss/{key}"] = out[key].detach()
    return total, info


class ClipEpsilon:
    """PPO's and APPO's clip epsilon: a tunable in the loss module's buffer, and its schedule
    (``clip_schedule: linear`` decays it to 1e-3 at ``trainer.total_frames``).

    Mixed in before :class:`ActorCritic`; the algorithm calls :meth:`init_clip_epsilon`.
    """

    tunable: ClassVar[tuple[str, ...]] = ("clip_epsilon", "entropy_coef", "critic_coef")
    loss_module: Any
    config: Any

    def init_clip_epsilon(self) -> None:
        self._base_clip = float(self.config.clip_epsilon)

    @property
    def clip_epsilon(self) -> float:
        return float(self.loss_module.clip_epsilon)

    def _set_parameter(self, name: str, value: float) -> None:
        if name == "clip_epsilon":
            self.loss_module.clip_epsilon.fill_(float(value))
            return
        super()._set_parameter(name, value)  # type: ignore[misc]

    def scheduled(self, progress: float) -> dict[str, float]:
        values = super().scheduled(progress)  # type: ignore[misc]
        if self.config.clip_schedule == Schedule.LINEAR:
            values["clip_epsilon"] = max(1e-3, self._base_clip * (1.0 - min(1.0, progress)))
        return values

    def logged_parameters(self) -> dict[str, float]:
        return {**super().logged_parameters(), "train/clip_epsilon": self.clip_epsilon}  # type: ignore[misc]

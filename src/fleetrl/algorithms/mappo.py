"""MAPPO and IPPO: PPO for the agent groups of a torchrl multi-agent env, on grouped batches.

Reads top to bottom: the config (:class:`MAPPOConfig`, :class:`IPPOConfig`, with their
checks), the agent group read from the env (:class:`AgentGroupLayout`), the networks
(torchrl's ``MultiAgentMLP``: a decentralised actor, and a critic that is centralised for
MAPPO, reading every agent's observation, and decentralised for IPPO), and the update:
``MultiAgentGAE`` once per batch, then torchrl's ``MAPPOLoss`` / ``IPPOLoss`` on epochs of
minibatches.

Layouts. A group either stacks its agents on a dim (``("agents", "observation")`` of shape
``[*B, n_agents, ...]``, as VMAS and PettingZoo envs do) or keeps one sub-TensorDict per
agent (``("agents", "agent_0", "observation")``, as torchrl's ``MultiAgentCountingEnv``).
The networks always see the stacked form: for a per-agent group the policy stacks the
observations in front of the networks and writes each agent's action back to its own key,
and :meth:`MultiAgentPPO.prepare` stacks the rewards and dones for GAE.

Advantage normalization (``normalize_advantage``): per minibatch, over the batch dims,
separately for each agent (the agent dim left out of the mean and std: torchrl's
``MAPPOLoss`` default, ``normalize_advantage_exclude_dims=(-2,)``), so one agent's larger
returns do not drown another's signal. torchrl's MAPPO tutorial instead normalizes over
batch, time and agents together.

From a config (``algorithm: mappo`` / ``ippo``, ``fleetrl train``): the run's
:class:`~fleetrl.envs.EnvSpec` carries the env's torchrl specs (``EnvSpec.groups``, read when
the run describes its env), and the networks are sized from them.

MAPPO's critic reads every agent's observation, or with ``critic_input="state"`` the env's
global ``"state"`` (:class:`StateCritic`: one MLP, a value per agent).

Actions: discrete (``Categorical``, a Categorical policy), ``Binary`` with one entry (a
Bernoulli policy) and bounded continuous (``Bounded`` floats, a PettingZoo ``Box``: a
TanhNormal policy within the bounds, each agent's mean and scale from the actor's MLP).

Several groups (two teams, as MPE's ``simple_tag``: ``"adversary"`` and ``"agent"``): each
group gets its own networks, GAE and torchrl loss, built as for one group; the policy runs
every group's actor, and each optimizer step takes the sum of the groups' losses on the same
env steps (:class:`GroupLosses`). The groups share nothing but the optimizer and the
schedules (a group's gradients touch only its own parameters; ``max_grad_norm`` clips each
group's gradients on their own). ``group=`` trains one group alone.

The loss runs on tensors (:meth:`MultiAgentPPO.loss`): each group's networks are called
on the minibatch's tensors (:class:`~fleetrl.networks.heads.TensorChain`) and the terms are
PPO's (``clipped_objective``, ``critic_loss``, ``entropy_of``), with the advantages
standardized per agent; torchrl's ``MAPPOLoss`` / ``IPPOLoss`` hold the coefficients and keys
and are the reference it matches (``tests/unit/algorithms/test_multiagent_loss_parity.py``).
On the minibatches of ``configs/mappo_simple_spread.yaml`` the loss module's own forward
(which swaps the parameters in, clones the minibatch and builds the distribution from a
TensorDict) was most of an optimizer step. Networks of another structure (or
another distribution) go through torchrl's forward.

Not here (yet): unbounded continuous and one-hot actions, and ``compile``/``cudagraphs``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictSequential
from torch import nn
from torchrl.modules import TanhNormal
from torchrl.objectives.multiagent import IPPOLoss, MAPPOLoss
from torchrl.objectives.value import MultiAgentGAE

from fleetrl.algorithms.actor_critic import (
    ClipEpsilon,
    LossCoefficients,
    clipped_objective,
    critic_loss,
    entropy_of,
    torchrl_loss_terms,
)
from fleetrl.algorithms.agent_groups import (
    AgentGroupLayout,
    make_networks,
)
from fleetrl.algorithms.base import Algorithm
from fleetrl.algorithms.batches import as_device, flatten_valid
from fleetrl.algorithms.sections import IPPOConfig, MAPPOConfig, MultiAgentPPOConfig
from fleetrl.envs.spec import EnvSpec
from fleetrl.errors import ConfigError, Problems
from fleetrl.keys import (
    ACTION_KEY,
    ACTION_LOG_PROB_KEY,
    NestedKey,
)
from fleetrl.networks.heads import LogitsCategorical, PolicyHead, TensorChain
from fleetrl.networks.policies import to_device

__all__ = [
    "IPPO",
    "MAPPO",
    "SINGLE_AGENT_MSG",
    "AgentGroupLayout",
    "GroupLosses",
    "IPPOConfig",
    "MAPPOConfig",
    "MultiAgentPPO",
]

SINGLE_AGENT_MSG = (
    "algorithm={algo!r} is invalid with env.id={env_id!r}: {algo} trains an agent group of a "
    "multi-agent env and {env_id} has one agent; use algorithm=ppo, or a multi-agent env "
    "(e.g. env.id='mpe2:simple_spread_v3')"
)


# ------------------------------------------------------------------ the config


class GroupLosses(nn.Module):
    """One torchrl loss per agent group, as one loss module: the sum of the groups' loss
    terms on the same minibatch of env steps.

    The groups' clip epsilon and coefficient buffers are one tensor each (the first
    group's), so a schedule or ``update_algorithm_parameter`` changes every group's. What
    is logged (the entropy, the KL estimate, the clipped fraction) is the mean over the
    groups.
    """

    #: the buffers every group's loss shares
    SHARED = ("clip_epsilon", "entropy_coeff", "critic_coeff")

    def __init__(self, losses: dict[str, nn.Module]):
        super().__init__()
        self.losses = nn.ModuleDict(losses)
        first, *others = self.losses.values()
        for loss in others:
            for name in self.SHARED:  # registered again: the same tensor as the first's
                shared = getattr(first, name, None)
                if isinstance(shared, torch.Tensor) and getattr(loss, name, None) is not None:
                    loss.register_buffer(name, shared)

    def _first(self) -> nn.Module:
        return next(iter(self.losses.values()))

    def __getattr__(self, name: str) -> Any:
        if name in GroupLosses.SHARED:  # the shared buffers, read through the first group
            return getattr(self._first(), name)
        return super().__getattr__(name)

    @property
    def entropy_bonus(self) -> bool:
        return bool(self._first().entropy_bonus)

    @entropy_bonus.setter
    def entropy_bonus(self, on: bool) -> None:
        for loss in self.losses.values():
            loss.entropy_bonus = on

    def forward(self, data: TensorDictBase) -> TensorDict:
        outs = [loss(data) for loss in self.losses.values()]
        out = {}
        for key in ("loss_objective", "loss_critic", "loss_entropy"):
            if all(key in o for o in outs):
                out[key] = torch.stack([o.get(key) for o in outs]).sum()
        for key in ("entropy", "kl_approx", "clip_fraction"):
            if all(key in o for o in outs):
                out[key] = torch.stack([o.get(key).detach().float().mean() for o in outs]).mean()
        return TensorDict(out)


class MultiAgentPPO(ClipEpsilon, LossCoefficients, Algorithm):
    """PPO on the agent groups of a multi-agent env (base of :class:`MAPPO` and :class:`IPPO`).

    Args:
        config: hyperparameters (a :class:`MAPPOConfig` or :class:`IPPOConfig`).
        env: the torchrl multi-agent env (or one like it) whose groups are trained, or a run's
            :class:`~fleetrl.envs.EnvSpec` of one (its ``groups``: the env's torchrl specs).

    Keyword Args:
        group: the one agent group to train (None: every group of the env, each with its
            own networks).
        device: the learner's device (default: the CPU).
    """

    loss_class: ClassVar[type[MAPPOLoss]] = MAPPOLoss
    centralised: ClassVar[bool] = True

    def __init__(
        self,
        config: MultiAgentPPOConfig,
        env: Any,
        *,
        group: str | None = None,
        device: Any = None,
    ):
        problems = Problems(prefix=f"{self.name}.")
        config.check(problems)
        problems.raise_if_any()
        device = as_device(device)
        if isinstance(env, EnvSpec):  # a run's: the specs it read when it described the env
            if env.groups is None:
                raise ConfigError([SINGLE_AGENT_MSG.format(algo=self.name, env_id=env.env_id)])
            env = env.groups
        #: every trained group's layout, in the env's order
        self.layouts = AgentGroupLayout.every(env, group, algo=self.name)
        #: the first group's (the only one's, for an env of one group)
        self.layout = self.layouts[0]
        actors, critics, policies, losses, self.gaes = [], [], [], {}, []
        for layout in self.layouts:
            actor, critic, policy = make_networks(layout, config, centralised=self.centralised)
            to_device(actor, device)  # a TanhNormal's bounds too (continuous actions)
            critic.to(device)
            loss, gae = self._group_loss(layout, config, actor, critic)
            actors.append(actor)
            critics.append(critic)
            policies.append(policy)
            losses[layout.group] = loss
            self.gaes.append(gae)
        if len(self.layouts) == 1:
            actor, self.critic, self._policy = actors[0], critics[0], policies[0]
            loss_module: nn.Module = losses[self.layout.group]
        else:
            actor = TensorDictSequential(*actors)
            self.critic = TensorDictSequential(*critics)
            self._policy = TensorDictSequential(*policies)
            loss_module = GroupLosses(losses)
        #: each group's trainable parameters (``max_grad_norm`` clips each group's alone)
        self._group_params = [
            [p for p in loss.parameters() if p.requires_grad] for loss in losses.values()
        ]
        super().__init__(
            config,
            loss_module,
            actor,
            adam_eps=1e-5,
            num_epochs=config.num_epochs,
            num_mini_batch=config.num_mini_batch,
            device=device,
        )
        self.init_clip_epsilon()
        #: each group's torchrl loss (holding its coefficients and keys), in the env's order
        self.group_losses = list(losses.values())
        #: each group's policy and critic on tensors (None: torchrl's forward for every group)
        self.heads = group_heads(actors, critics, self.device)

    def _group_loss(
        self, layout: AgentGroupLayout, config: MultiAgentPPOConfig, actor: Any, critic: Any
    ) -> tuple[nn.Module, MultiAgentGAE]:
        """One group's torchrl loss and GAE, reading that group's keys."""
        loss = self.loss_class(
            actor,
            critic,
            clip_epsilon=config.clip_epsilon,
            entropy_bonus=config.entropy_coef > 0,
            entropy_coeff=config.entropy_coef,
            critic_coeff=config.critic_coef,
            normalize_advantage=config.normalize_advantage,
            clip_value=config.clip_value,
            loss_critic_type="l2",
        )
        keys = {
            "action": layout.key(ACTION_KEY),
            "sample_log_prob": layout.key(ACTION_LOG_PROB_KEY),
            "value": layout.key("state_value"),
            "advantage": layout.key("advantage"),
            "value_target": layout.key("value_target"),
            "reward": layout.reward,
            "done": layout.done,
            "terminated": layout.terminated,
        }
        loss.set_keys(**keys)
        gae = MultiAgentGAE(
            gamma=config.gamma, lmbda=config.gae_lambda, value_network=critic, average_gae=False
        )
        gae.set_keys(**{k: v for k, v in keys.items() if k not in ("action", "sample_log_prob")})
        return loss, gae

    @property
    def groups(self) -> list[str]:
        """The agent groups trained, in the env's order."""
        return [layout.group for layout in self.layouts]

    @property
    def gae(self) -> MultiAgentGAE:
        """The first group's GAE (the only one's, for an env of one group)."""
        return self.gaes[0]

    def step(self) -> torch.Tensor | None:
        """Clip each group's gradients on their own (``max_grad_norm``), then step the
        optimizer; returns the largest group norm before clipping."""
        if len(self._group_params) == 1 or self.max_grad_norm is None:
            return super().step()
        norms = [
            nn.utils.clip_grad_norm_(params, self.max_grad_norm, foreach=True)
            for params in self._group_params
        ]
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return torch.stack(norms).max()

    @property
    def policy(self) -> nn.Module:
        """The acting module: the actor (with the per-agent actions written back where the
        group keeps one sub-TensorDict per agent)."""
        return self._policy

    # ------------------------------------------------------------ data
    def stack_signals(self, batch: TensorDictBase) -> TensorDictBase:
        """Each per-agent group's rewards and dones stacked under ``("next", group, ...)`` (a
        stacked group's, and the root's, are read as they are)."""
        nxt = None
        for layout in self.layouts:
            if layout.agents is None:
                continue
            nxt = batch.get("next") if nxt is None else nxt
            for key in (layout.reward, layout.done, layout.terminated):
                if isinstance(key, tuple):
                    layout.stack(nxt, key[-1])
        return batch

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        """MultiAgentGAE advantages and value targets for the whole batch, each group's
        (``[*B, T, n_agents, 1]``, team rewards and dones broadcast over the agents), then
        its valid frames, flat."""
        batch = self.on_device(self.stack_signals(batch))
        losses = (
            list(self.loss_module.losses.values())
            if isinstance(self.loss_module, GroupLosses)
            else [self.loss_module]
        )
        reads = dict.fromkeys([*self.policy.in_keys, *self.critic.in_keys])
        with torch.no_grad():
            for gae, loss in zip(self.gaes, losses):
                gae(batch)
                t = loss.tensor_keys
                reads.update(dict.fromkeys([t.action, t.sample_log_prob, t.advantage]))
                reads.update(dict.fromkeys([t.value_target, t.value]))
        return self.on_device(flatten_valid(batch, list(reads)))

    def env_keys_read(self) -> set[NestedKey]:
        """What the actor and the critic read: a PettingZoo env from a config leaves its
        global state out unless the critic reads it (``mappo.critic_input: state``)."""
        return {*self.policy.in_keys, *self.critic.in_keys}

    # ------------------------------------------------------------ the loss
    def torchrl_loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The groups' torchrl losses' own forward: what :meth:`loss` computes on tensors."""
        return torchrl_loss_terms(self.loss_module, data)

    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The sum over the groups of MAPPO's / IPPO's loss: the clipped surrogate +
        ``critic_coef`` x the value loss (clipped with ``clip_value``) - ``entropy_coef`` x
        the entropy, advantages standardized per agent. What is logged: the objective and
        critic terms summed over the groups, the entropy, KL and clip fraction averaged.
        On tensors (the module docstring), or through torchrl's forward."""
        if self.heads is None:
            return self.torchrl_loss(data)
        totals, terms = [], []
        for (policy, critic), loss in zip(self.heads, self.group_losses):
            total, info = self._group_terms(policy, critic, loss, data)
            totals.append(total)
            terms.append(info)
        info = {}
        for key in terms[0]:
            stacked = torch.stack([t[key] for t in terms])
            summed = key in ("loss/objective", "loss/critic")
            info[key] = stacked.sum() if summed else stacked.mean()
        return torch.stack(totals).sum() if len(totals) > 1 else totals[0], info

    def _group_terms(
        self, policy: PolicyHead, critic: TensorChain, loss: nn.Module, data: TensorDictBase
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One group's loss and logged terms, as its torchrl loss computes them."""
        t = loss.tensor_keys
        dist = policy.dist(*(data.get(k) for k in policy.in_keys))
        log_prob = dist.log_prob(data.get(t.action))
        value = critic(*(data.get(k) for k in critic.in_keys))[0]
        advantage = data.get(t.advantage)
        if self.config.normalize_advantage and advantage.numel() > 1:
            advantage = standardized_per_agent(advantage)
        behaviour = data.get(t.sample_log_prob)
        if log_prob.dim() == advantage.dim():  # a Bernoulli's keeps the action's dim of 1
            log_prob, behaviour = log_prob.squeeze(-1), behaviour.squeeze(-1)
        objective, info = clipped_objective(log_prob, behaviour, advantage, loss.clip_epsilon)
        clip_value = loss.clip_value
        old_value = data.get(t.value) if clip_value is not None else None
        value_loss = loss.critic_coeff * critic_loss(
            value, data.get(t.value_target), old_value, clip_value
        )
        info.update({"loss/objective": objective.detach(), "loss/critic": value_loss.detach()})
        total = objective + value_loss
        if loss.entropy_bonus:
            entropy = entropy_of(dist).mean()
            info["loss/entropy"] = entropy.detach()
            total = total - loss.entropy_coeff * entropy
        return total, info


def standardized_per_agent(advantage: torch.Tensor) -> torch.Tensor:
    """``advantage`` ``[*B, n_agents, 1]`` at zero mean and unit std over every dim but the
    agent dim (torchrl's ``_standardize`` with ``exclude_dims=(-2,)``: std floored at 1e-6)."""
    agent_dim = advantage.dim() - 2
    dims = tuple(d for d in range(advantage.dim()) if d != agent_dim)
    mean = advantage.mean(dim=dims, keepdim=True)
    std = advantage.std(dim=dims, keepdim=True)
    return (advantage - mean) / std.clamp_min(torch.finfo(torch.float).resolution)


#: the distributions the tensor loss reads (a log-probability per agent; a Bernoulli's keeps
#: the action's last dim of 1, dropped before the ratio)
TENSOR_LOSS_DISTRIBUTIONS = (LogitsCategorical, torch.distributions.Bernoulli, TanhNormal)


def group_heads(
    actors: list[Any], critics: list[Any], device: torch.device
) -> list[tuple[PolicyHead, TensorChain]] | None:
    """Each group's policy and critic on tensors, or None when any group's networks have
    another structure or another distribution (then torchrl's forward runs every group)."""
    heads = []
    for actor, critic in zip(actors, critics):
        policy = PolicyHead.of(actor, chains=True)
        value = TensorChain.of(critic)
        if policy is None or value is None or len(value.out_keys) != 1:
            return None
        if policy.dist_class not in TENSOR_LOSS_DISTRIBUTIONS:
            return None
        policy.to(device)
        heads.append((policy, value))
    return heads


class MAPPO(MultiAgentPPO):
    """Multi-Agent PPO (Yu et al. 2022): decentralised actors, a centralised critic.

    Examples:
        >>> from torchrl.testing.mocking_classes import MultiAgentCountingEnv
        >>> from fleetrl import SyncDataCollector
        >>> make_env = lambda: MultiAgentCountingEnv(n_agents=2, max_steps=3)
        >>> mappo = MAPPO(MAPPOConfig(num_epochs=1, num_mini_batch=2), make_env())
        >>> with SyncDataCollector(make_env, mappo.policy, frames_per_batch=16,
        ...                        num_envs=2) as collector:
        ...     info = mappo.learn(collector.next())
        >>> mappo.num_updates, "loss/objective" in info
        (2, True)
    """

    name = "mappo"
    config_class = MAPPOConfig
    loss_class = MAPPOLoss
    centralised = True


class IPPO(MultiAgentPPO):
    """Independent PPO (de Witt et al. 2020): each agent's critic reads its own observation.

    Examples:
        >>> from torchrl.testing.mocking_classes import MultiAgentCountingEnv
        >>> ippo = IPPO(IPPOConfig(share_params=False), MultiAgentCountingEnv(n_agents=2))
        >>> ippo.layout.group, ippo.layout.n_agents
        ('agents', 2)
    """

    name = "ippo"
    config_class = IPPOConfig
    loss_class = IPPOLoss
    centralised = False

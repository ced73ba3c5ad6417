"""One agent group of a torchrl multi-agent env, and the networks that act and judge for it.

:class:`AgentGroupLayout` reads where a group's data lives in the env's TensorDicts (its
agents stacked on a dim, or one sub-TensorDict per agent) and what its actions are;
:func:`make_networks` builds the group's actor, critic and acting policy on torchrl's
``MultiAgentMLP`` (:mod:`fleetrl.algorithms.mappo` trains them).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.data import Binary, Bounded, Categorical, OneHot
from torchrl.modules import MLP, MultiAgentMLP, ProbabilisticActor, TanhNormal

from fleetrl.errors import ConfigError
from fleetrl.keys import (
    ACTION_KEY,
    DONE_NAME,
    REWARD_NAME,
    STATE_KEY,
    TERMINATED_NAME,
    NestedKey,
)

__all__ = [
    "ACTION_MSG",
    "NO_GROUPS_MSG",
    "OBSERVATION_MSG",
    "STATE_MSG",
    "UNKNOWN_GROUP_MSG",
    "AgentGroupLayout",
    "StackObservations",
    "StateCritic",
    "UnstackActions",
    "make_networks",
]

NO_GROUPS_MSG = (
    "{algo}: the env has no agent groups (no nested action keys, such as ('agents', "
    "'action')); {algo} trains the agent groups of a multi-agent env: use PPO for this one"
)
UNKNOWN_GROUP_MSG = "{algo}: group={group!r} is not an agent group of the env; its groups: {groups}"
OBSERVATION_MSG = (
    "{algo}: group {group!r} has observation keys {keys}; exactly one per agent is supported: "
    "concatenate them with a torchrl transform (CatTensors) first"
)
STATE_MSG = (
    "mappo.critic_input='state' is invalid with this env: it has no global 'state' "
    "observation (its observations: {keys}); use critic_input='observations', or an env "
    "with a state (a PettingZoo env with a state_space, e.g. mpe2:simple_spread_v3)"
)
ACTION_MSG = (
    "{algo}: the action spec of group {group!r} is {spec}; supported: Categorical, Binary "
    "(n=1) and Bounded continuous actions of one dim per agent (a Box) (unbounded continuous "
    "and OneHot actions are not built yet: bound them, e.g. with torchrl's ActionScaling or a "
    "clipping wrapper)"
)


# ------------------------------------------------------------------ the agent group


def _leaf(key: NestedKey) -> str:
    return key if isinstance(key, str) else key[-1]


def _agent_bounds(
    env: Any, actions: list[NestedKey], per_agent: bool, batch: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each agent's action bounds, ``[n_agents, n_actions]``, from a Bounded action spec (of
    the first env of a batched env: its copies share their spaces)."""
    first = (0,) * batch
    if per_agent:
        specs = [env.full_action_spec[k].space for k in actions]
        low = torch.stack([s.low[first] for s in specs])
        high = torch.stack([s.high[first] for s in specs])
    else:
        space = env.full_action_spec[actions[0]].space
        low, high = space.low[first], space.high[first]
    return low.detach().clone().float(), high.detach().clone().float()


@dataclass
class AgentGroupLayout:
    """Where one agent group's data lives in the env's TensorDicts, and the stacked keys the
    networks and the loss read.

    ``agents`` is None for a stacked group (its keys hold an agent dim), else the names of
    its per-agent sub-TensorDicts (stacked by the policy and :meth:`stack_next`).
    """

    group: str
    n_agents: int
    agents: list[str] | None
    #: the observation's leaf name and its shape for one agent
    observation: str
    observation_shape: tuple[int, ...]
    #: the action's leaf name, the number of actions (continuous: the action's size), and
    #: whether it is Binary (Bernoulli)
    action: str
    n_actions: int
    binary: bool
    action_dtype: torch.dtype
    #: where the team's or the agents' reward and dones are (stacked, or at the root)
    reward: NestedKey
    done: NestedKey
    terminated: NestedKey
    #: the shape of the env's global ``"state"`` (None: the env has none)
    state_shape: tuple[int, ...] | None = None
    #: continuous actions: each agent's bounds, ``[n_agents, n_actions]`` (None: discrete)
    action_low: torch.Tensor | None = None
    action_high: torch.Tensor | None = None

    @property
    def continuous(self) -> bool:
        """Bounded continuous actions (a TanhNormal policy)."""
        return self.action_low is not None

    @staticmethod
    def groups_of(env: Any) -> list[str]:
        """The env's agent groups (those its nested action keys name), in the env's order."""
        return list(dict.fromkeys(k[0] for k in env.action_keys if isinstance(k, tuple)))

    @classmethod
    def every(
        cls, env: Any, group: str | None = None, *, algo: str = "mappo"
    ) -> list[AgentGroupLayout]:
        """The layouts of every agent group of ``env`` (or of ``group`` alone), each group's
        problems named together."""
        groups = [group] if group is not None else cls.groups_of(env)
        if not groups:
            raise ConfigError([NO_GROUPS_MSG.format(algo=algo)])
        layouts, problems = [], []
        for name in groups:
            try:
                layouts.append(cls.of(env, name, algo=algo))
            except ConfigError as err:
                problems += err.problems
        if problems:
            raise ConfigError(problems)
        return layouts

    @classmethod
    def of(cls, env: Any, group: str | None = None, *, algo: str = "mappo") -> AgentGroupLayout:
        """Read the layout of ``group`` (None: the env's first group) from a torchrl env."""
        groups = cls.groups_of(env)
        if group is None:
            group = groups[0]
        if group not in groups:
            raise ConfigError([UNKNOWN_GROUP_MSG.format(algo=algo, group=group, groups=groups)])
        actions = [k for k in env.action_keys if isinstance(k, tuple) and k[0] == group]
        per_agent = len(actions[0]) == 3
        agents = [k[1] for k in actions] if per_agent else None
        first = (group, agents[0]) if per_agent else (group,)
        obs_keys = [
            k
            for k in env.observation_keys
            if isinstance(k, tuple) and k[: len(first)] == first and len(k) == len(first) + 1
        ]
        if len(obs_keys) != 1:
            raise ConfigError([OBSERVATION_MSG.format(algo=algo, group=group, keys=obs_keys)])
        batch = len(env.batch_size)
        obs_spec = env.observation_spec[obs_keys[0]]
        action_spec = env.full_action_spec[actions[0]]
        if per_agent:
            n_agents = len(agents)
            obs_shape = tuple(obs_spec.shape[batch:])
        else:
            n_agents = int(obs_spec.shape[batch])
            obs_shape = tuple(obs_spec.shape[batch + 1 :])
        low = high = None
        # one agent's action shape: after the env's batch dims, and the agent dim if stacked
        agent_action_shape = tuple(action_spec.shape[batch + (0 if per_agent else 1) :])
        if isinstance(action_spec, Binary) and action_spec.shape[-1] == 1:
            n_actions, binary = 1, True
        elif isinstance(action_spec, (Categorical, OneHot)) and not isinstance(action_spec, Binary):
            n_actions, binary = int(action_spec.space.n), False
        elif (
            isinstance(action_spec, Bounded)
            and action_spec.dtype.is_floating_point
            and len(agent_action_shape) == 1
        ):
            n_actions, binary = agent_action_shape[0], False
            low, high = _agent_bounds(env, actions, per_agent, batch)
        else:
            raise ConfigError(
                [ACTION_MSG.format(algo=algo, group=group, spec=type(action_spec).__name__)]
            )
        if isinstance(action_spec, OneHot):
            raise ConfigError([ACTION_MSG.format(algo=algo, group=group, spec="OneHot")])

        def team_or_group(leaf: str, keys: list[NestedKey]) -> NestedKey:
            # the group's own (stacked here when per agent), else the root's (the team's)
            if any(isinstance(k, tuple) and k[0] == group for k in keys):
                return (group, leaf)
            root = [k for k in keys if isinstance(k, str)]
            return leaf if leaf in root else root[0]

        reward = team_or_group(REWARD_NAME, list(env.reward_keys))
        done_keys = list(env.done_keys)
        dones = [k for k in done_keys if _leaf(k) == DONE_NAME or _leaf(k).endswith(DONE_NAME)]
        terminated = [k for k in done_keys if _leaf(k) == TERMINATED_NAME] or dones
        return cls(
            group=group,
            n_agents=n_agents,
            agents=agents,
            observation=_leaf(obs_keys[0]),
            observation_shape=obs_shape,
            action=_leaf(actions[0]),
            n_actions=n_actions,
            binary=binary,
            action_dtype=action_spec.dtype,
            reward=reward,
            done=team_or_group(DONE_NAME, dones),
            terminated=team_or_group(TERMINATED_NAME, terminated),
            state_shape=(
                tuple(env.observation_spec[STATE_KEY].shape[batch:])
                if STATE_KEY in env.observation_keys
                else None
            ),
            action_low=low,
            action_high=high,
        )

    # ---------------------------------------------------------------- the keys
    @property
    def obs_size(self) -> int:
        return prod(self.observation_shape)

    def key(self, leaf: str) -> tuple[str, str]:
        """A stacked key of the group: ``(group, leaf)``."""
        return (self.group, leaf)

    def raw_observation_keys(self) -> list[NestedKey]:
        """The env's own observation key(s) of the group (one per agent when per agent)."""
        if self.agents is None:
            return [self.key(self.observation)]
        return [(self.group, a, self.observation) for a in self.agents]

    def stack(self, td: TensorDictBase, leaf: str, dtype: torch.dtype | None = None) -> None:
        """Write ``(group, leaf)`` stacked over the agents (dim -2 of ``[..., 1]`` signals)
        from a per-agent group's ``(group, agent, leaf)`` in ``td``."""
        value = torch.stack([td.get((self.group, a, leaf)) for a in self.agents], dim=-2)
        td.set(self.key(leaf), value if dtype is None else value.to(dtype))


class StackObservations(nn.Module):
    """The group's observations as one float tensor ``[*B, n_agents, obs_size]``: the
    MultiAgentMLP's input (stacked from the per-agent keys where the group has no agent dim)."""

    def __init__(self, layout: AgentGroupLayout):
        super().__init__()
        self.n_agents, self.obs_size = layout.n_agents, layout.obs_size
        self.obs_dims = len(layout.observation_shape)
        self.stacked = layout.agents is None

    def forward(self, *observations: torch.Tensor) -> torch.Tensor:
        obs = observations[0] if self.stacked else torch.stack(observations, dim=-self.obs_dims - 1)
        lead = obs.shape[: obs.ndim - self.obs_dims - 1]
        return obs.reshape(*lead, self.n_agents, self.obs_size).float()


class StateCritic(nn.Module):
    """A centralised critic on the env's global state: an MLP from the flat state to one
    value per agent, ``[*B, n_agents, 1]``."""

    def __init__(self, layout: AgentGroupLayout, hidden_sizes: list[int]):
        super().__init__()
        assert layout.state_shape is not None
        self.state_dims = len(layout.state_shape)
        self.n_agents = layout.n_agents
        self.mlp = MLP(
            in_features=prod(layout.state_shape),
            out_features=layout.n_agents,
            num_cells=list(hidden_sizes),
            activation_class=nn.Tanh,
        )

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        flat = state.flatten(-self.state_dims) if self.state_dims else state.unsqueeze(-1)
        return self.mlp(flat.float()).unsqueeze(-1)


class UnstackActions(nn.Module):
    """Each agent's action (of a per-agent group) from the stacked ``(group, action)``, in
    the env's dtype."""

    def __init__(self, layout: AgentGroupLayout):
        super().__init__()
        self.n_agents, self.dtype = layout.n_agents, layout.action_dtype

    def forward(self, action: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(a.to(self.dtype) for a in action.unbind(-2))


# ------------------------------------------------------------------ the networks


def make_networks(
    layout: AgentGroupLayout, config: Any, *, centralised: bool
) -> tuple[ProbabilisticActor, TensorDictModule, nn.Module]:
    """The actor (for the loss), the critic, and the policy the collectors run.

    Both networks are MultiAgentMLPs on the stacked observation: the actor decentralised
    (each agent's action from its own observation), the critic centralised (MAPPO: each
    agent's value from every agent's observation) or not (IPPO); ``share_params`` shares one
    network's parameters across the agents.
    """
    inputs = layout.key("mlp_input")
    stack = TensorDictModule(
        StackObservations(layout), in_keys=layout.raw_observation_keys(), out_keys=[inputs]
    )

    def mlp(outputs: int, centralized: bool) -> MultiAgentMLP:
        return MultiAgentMLP(
            n_agent_inputs=layout.obs_size,
            n_agent_outputs=outputs,
            n_agents=layout.n_agents,
            centralized=centralized,
            share_params=config.share_params,
            num_cells=list(config.hidden_sizes),
        )

    if layout.continuous:  # each agent's mean and scale, squashed into its bounds
        params = TensorDictModule(
            nn.Sequential(mlp(2 * layout.n_actions, False), NormalParamExtractor()),
            in_keys=[inputs],
            out_keys=[layout.key("loc"), layout.key("scale")],
        )
        actor = ProbabilisticActor(
            TensorDictSequential(stack, params),
            in_keys={"loc": layout.key("loc"), "scale": layout.key("scale")},
            out_keys=[layout.key(ACTION_KEY)],
            distribution_class=TanhNormal,
            distribution_kwargs={"low": layout.action_low, "high": layout.action_high},
            return_log_prob=True,
        )
    else:
        logits = TensorDictModule(
            mlp(layout.n_actions, False), in_keys=[inputs], out_keys=[layout.key("logits")]
        )
        dist = torch.distributions.Bernoulli if layout.binary else torch.distributions.Categorical
        actor = ProbabilisticActor(
            TensorDictSequential(stack, logits),
            in_keys={"logits": layout.key("logits")},
            out_keys=[layout.key(ACTION_KEY)],
            distribution_class=dist,
            return_log_prob=True,
        )
    if getattr(config, "critic_input", "observations") == "state":
        if layout.state_shape is None:
            raise ConfigError([STATE_MSG.format(keys=layout.raw_observation_keys())])
        critic: nn.Module = TensorDictModule(
            StateCritic(layout, list(config.hidden_sizes)),
            in_keys=[STATE_KEY],
            out_keys=[layout.key("state_value")],
        )
    else:
        critic = TensorDictSequential(
            stack,
            TensorDictModule(
                mlp(1, centralised), in_keys=[inputs], out_keys=[layout.key("state_value")]
            ),
        )
    policy: nn.Module = actor
    if layout.agents is not None:
        unstack = TensorDictModule(
            UnstackActions(layout),
            in_keys=[layout.key(ACTION_KEY)],
            out_keys=[(layout.group, a, layout.action) for a in layout.agents],
        )
        policy = TensorDictSequential(actor, unstack)
    return actor, critic, policy

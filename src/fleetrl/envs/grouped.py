"""Multi-agent torchrl envs in torchrl's grouped layout, stepped with TensorDicts.

A torchrl env whose actions, rewards or dones live under nested keys (agent
groups: ``("agents", "action")`` of shape ``[*batch, n_agents, ...]``, or one
sub-TensorDict per agent as in ``MultiAgentCountingEnv``) does not fit
:class:`~fleetrl.envs.base.StepResult`'s one reward and one done per env.
:class:`GroupedEnv` keeps such an env in torchrl's own terms: it is stepped
with ``step_and_maybe_reset``, so torchrl's reset rules for grouped dones (a
``_reset`` next to each done) apply unchanged, and the collector stores what
torchrl's ``Collector`` stores. :func:`is_grouped` decides, once, which path
an env takes; single-agent torchrl envs keep :class:`~fleetrl.envs.TorchRLEnv`.

Each reward and done key belongs to a *group*: the first name of a nested key
(``("agents", "agent_0", "reward")`` is in ``"agents"``); a root key is its own
group. A root done (``"done"``, ``"env_done"``) ends every group's episode.

Examples:
    >>> from torchrl.testing.mocking_classes import MultiAgentCountingEnv
    >>> env = GroupedEnv(MultiAgentCountingEnv(n_agents=2))
    >>> env.num_envs, list(env.groups)
    (1, ['agents'])
    >>> env.groups["agents"].reward_keys
    [('agents', 'agent_0', 'reward'), ('agents', 'agent_1', 'reward')]
    >>> env.close()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDictBase

from fleetrl.errors import EnvError
from fleetrl.keys import NestedKey

__all__ = ["AgentGroup", "GroupedEnv", "GroupedSpecs", "is_grouped"]


def is_grouped(env: Any) -> bool:
    """Whether a torchrl env has nested (agent-group) action, reward or done keys, or more
    than one action or reward key: what :class:`GroupedEnv` steps."""
    keys = [*env.action_keys, *env.reward_keys, *env.done_keys]
    return (
        len(env.action_keys) > 1
        or len(env.reward_keys) > 1
        or any(isinstance(k, tuple) and len(k) > 1 for k in keys)
    )


@dataclass
class AgentGroup:
    """The reward and done keys of one agent group (see the module docstring)."""

    name: str
    reward_keys: list[NestedKey] = field(default_factory=list)
    #: the group's own done keys (root dones, which end every group, are not listed)
    done_keys: list[NestedKey] = field(default_factory=list)


@dataclass
class GroupedSpecs:
    """The torchrl specs of one grouped env, read once where a run describes its env
    (:func:`fleetrl.envs.env_spec`): what a multi-agent algorithm sizes its networks from
    (:meth:`fleetrl.algorithms.agent_groups.AgentGroupLayout.of` reads these attributes as it reads a
    torchrl env's), without building an env again. Picklable, so it travels with a run's
    :class:`~fleetrl.envs.EnvSpec` to gradient workers.

    Examples:
        >>> from torchrl.testing.mocking_classes import MultiAgentCountingEnv
        >>> specs = GroupedSpecs.of(MultiAgentCountingEnv(n_agents=2))
        >>> specs.groups, specs.batch_size
        (['agents'], torch.Size([]))
    """

    batch_size: torch.Size
    action_keys: list[NestedKey]
    observation_keys: list[NestedKey]
    reward_keys: list[NestedKey]
    done_keys: list[NestedKey]
    #: torchrl ``Composite`` specs of the observations and of the actions
    observation_spec: Any
    full_action_spec: Any

    @classmethod
    def of(cls, env: Any) -> GroupedSpecs:
        """The specs of a torchrl env (one env: its batch dims are its own)."""
        return cls(
            torch.Size(env.batch_size),
            list(env.action_keys),
            list(env.observation_keys),
            list(env.reward_keys),
            list(env.done_keys),
            env.observation_spec.clone(),
            env.full_action_spec.clone(),
        )

    @property
    def groups(self) -> list[str]:
        """The agent groups (the first names of the nested action keys), in key order."""
        return list(dict.fromkeys(k[0] for k in self.action_keys if isinstance(k, tuple)))


def _tuple(key: NestedKey) -> tuple[str, ...]:
    return key if isinstance(key, tuple) else (key,)


def _group_of(key: NestedKey) -> str:
    return key[0] if isinstance(key, tuple) else key


class GroupedEnv:
    """A torchrl env with agent groups, stepped as torchrl's collectors step it.

    Not a :class:`~fleetrl.envs.base.BatchedEnv`: it speaks TensorDicts, not
    numpy, and its rollout is :mod:`fleetrl.collectors.local.grouped`.

    Args:
        env: a torchrl ``EnvBase`` for which :func:`is_grouped` holds.
    """

    def __init__(self, env: Any):
        self.env = env
        self.batch_shape = torch.Size(env.batch_size)
        self.num_envs = max(1, self.batch_shape.numel())
        self.action_keys: list[NestedKey] = list(env.action_keys)
        #: done keys at the root: they end every group's episode
        self.root_done_keys: list[NestedKey] = [k for k in env.done_keys if isinstance(k, str)]
        self.groups: dict[str, AgentGroup] = {}
        for key in env.reward_keys:
            name = _group_of(key)
            self.groups.setdefault(name, AgentGroup(name)).reward_keys.append(key)
        for key in env.done_keys:
            if isinstance(key, tuple):
                name = key[0]
                self.groups.setdefault(name, AgentGroup(name)).done_keys.append(key)
        self._random = None

    def reset(self, seed: int | None = None) -> TensorDictBase:
        """Reset every env; with a seed, as torchrl's ``set_seed(seed)`` seeds them."""
        if seed is not None:
            self.env.set_seed(seed)
        return self.env.reset()

    def reset_static(self, seed: int) -> TensorDictBase:
        """Reset every env after torchrl's ``set_seed(seed, static_seed=True)``."""
        self.env.set_seed(seed, static_seed=True)
        return self.env.reset()

    def step(self, td: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """One step of every env: ``td`` with its ``"next"`` (the transition, whose terminal
        observations are the episodes' last), and what the policy reads next (reset
        where torchrl's ``_reset`` rules say)."""
        return self.env.step_and_maybe_reset(td)

    def transition_keys(self) -> list[NestedKey]:
        """What a replay buffer keeps of a step: the env's observations and actions, and
        under ``"next"`` its observations, rewards and done flags (every group's; what
        :data:`fleetrl.keys.TRANSITION_KEYS` is for a single agent)."""
        env = self.env
        obs = list(env.observation_keys)
        after = [*obs, *env.reward_keys, *env.done_keys]
        return [*obs, *env.action_keys, *(("next", *_tuple(k)) for k in after)]

    def random_policy(self) -> Any:
        """torchrl's ``RandomPolicy`` over the full action spec: a random action per agent of
        every group, as torchrl's ``Collector`` acts with ``policy=None``."""
        if self._random is None:
            from torchrl.envs.utils import RandomPolicy

            self._random = RandomPolicy(self.env.full_action_spec)
        return self._random

    def seed_actions(self, seed: int) -> None:
        """Seed the random actions: torchrl's specs sample from torch's global generator."""
        torch.manual_seed(seed)

    def state_dict(self) -> dict[str, Any] | None:
        """The env's own saved state where it has one (fleetrl's PettingZoo adapter on MPE's
        saved scenarios: :meth:`~fleetrl.envs.pettingzoo.PettingZooEnv.saved_state`); None
        for any other torchrl env (its episodes start afresh on resume)."""
        saved_state = getattr(self.env, "saved_state", None)
        return saved_state() if callable(saved_state) else None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (only called with a saved state)."""
        load = getattr(self.env, "load_saved_state", None)
        if not callable(load):
            raise EnvError(f"{type(self.env).__name__} cannot restore a saved env state")
        load(state)

    def close(self) -> None:
        if not self.env.is_closed:
            self.env.close()

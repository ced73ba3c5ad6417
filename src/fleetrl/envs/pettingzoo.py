"""PettingZoo's parallel API as a torchrl env in the grouped layout: fleetrl's own adapter.

:class:`PettingZooEnv` steps a PettingZoo ``ParallelEnv`` (numpy in and out, one
dict entry per agent, as MPE's ``mpe2.simple_spread_v3.parallel_env()``) and
speaks torchrl's multi-agent layout, so :func:`~fleetrl.envs.make_env` keeps it
as a :class:`~fleetrl.envs.GroupedEnv` and a
:class:`~fleetrl.collectors.SyncDataCollector` collects it as torchrl's
``Collector`` would:

- agents that share their observation and action spaces form one group,
  ``"agents"``; agents whose spaces differ are grouped by the name before their
  last ``_`` (``adversary_0`` and ``adversary_1`` in ``"adversary"``, ``agent_0``
  in ``"agent"``), torchrl's convention for PettingZoo's team names;
- each group has ``(group, "observation")`` and ``(group, "action")`` of shape
  ``[n_agents, ...]`` (a ``Discrete`` action space is a ``Categorical`` index),
  and ``(group, key)`` of shape ``[n_agents, 1]`` for ``reward``, ``terminated``,
  ``truncated`` and ``done``;
- the root ``done``, ``terminated`` and ``truncated`` (shape ``[1]``) are set
  where every agent's are: the episode ends for all agents at once;
- the global ``"state"`` (PettingZoo's ``state()``) is a root observation where
  the env has a ``state_space``: what a centralised critic reads.

What it refuses, when built and so before any actor starts: a turn-based
(AEC) env, and a ``ParallelEnv`` whose agents after a reset are not all of its
``possible_agents``. An agent that leaves mid-episode (done while others go on,
or missing from a step's dicts) is refused at that step, with the same advice:
torchrl's grouped layout has no mask for absent agents here.

Cost: one dict of numpy arrays per step turned into stacked tensors (one copy
per group and key); the env itself steps in Python, one agent dict at a time.

Examples:
    >>> from mpe2 import simple_spread_v3
    >>> env = PettingZooEnv(simple_spread_v3.parallel_env, max_cycles=5)
    >>> env.group_map
    {'agents': ['agent_0', 'agent_1', 'agent_2']}
    >>> td = env.rollout(5)
    >>> td["next", "agents", "reward"].shape, bool(td["next", "done"][-1])
    (torch.Size([5, 3, 1]), True)
    >>> env.close()
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from fleetrl.errors import EnvError
from fleetrl.keys import ACTION_KEY, DONE_FLAGS, DONE_NAME, TERMINATED_NAME, TRUNCATED_NAME

__all__ = [
    "AEC_MSG",
    "AGENTS_LEFT_MSG",
    "NOT_PARALLEL_MSG",
    "SPACE_MSG",
    "PettingZooEnv",
    "PettingZooId",
    "default_group_map",
]

#: what works instead of what is refused, said by each refusal
_WHAT_WORKS = (
    "fleetrl steps PettingZoo parallel envs whose agents all act at every step and end their "
    "episodes together (e.g. MPE's mpe2.simple_spread_v3.parallel_env)"
)
AEC_MSG = (
    "env={env!r} is a turn-based (AEC) PettingZoo env, which fleetrl does not step: "
    + _WHAT_WORKS
    + "; build the env's parallel_env() instead, or convert it with "
    "pettingzoo.utils.conversions.aec_to_parallel where its agents act at every step"
)
NOT_PARALLEL_MSG = (
    "env={env!r} is not a PettingZoo ParallelEnv: pass a ParallelEnv or a callable returning "
    "one (e.g. mpe2.simple_spread_v3.parallel_env)"
)
AGENTS_LEFT_MSG = (
    "env={env!r}: agents {agents} left the episode while others went on ({when}): "
    + _WHAT_WORKS
    + "; for agents that leave mid-episode, use torchrl's PettingZooWrapper(use_mask=True) "
    "with torchrl's own collector"
)
SPACE_MSG = (
    "env={env!r}: agent {agent!r} has the {kind} space {space!r}, which fleetrl's PettingZoo "
    "adapter does not map: use Box or Discrete spaces (e.g. flatten the others with a "
    "PettingZoo wrapper)"
)
MODULE_MSG = (
    "env id {env_id!r} names no PettingZoo env: {err}; write 'package:module' with a module "
    "that has parallel_env(), e.g. 'mpe2:simple_spread_v3' (install the extra: "
    "pip install 'fleetrl[marl]')"
)
GROUP_SPACE_MSG = (
    "env={env!r}: group {group!r} holds agents {agents} whose spaces differ; pass "
    "group_map={{name: [agents]}} grouping agents that share their spaces"
)


def _is_aec(env: Any) -> bool:
    from pettingzoo.utils.env import AECEnv

    return isinstance(env, AECEnv)


def _is_parallel(env: Any) -> bool:
    from pettingzoo.utils.env import ParallelEnv

    return isinstance(env, ParallelEnv)


def _same_space(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def default_group_map(env: Any) -> dict[str, list[str]]:
    """One group ``"agents"`` where every agent shares its observation and action spaces;
    else agents grouped by the name before their last ``_`` (torchrl's PettingZoo convention:
    ``adversary_0`` is in ``"adversary"``)."""
    agents = list(env.possible_agents)
    first = agents[0]
    shared = all(
        _same_space(env.observation_space(a), env.observation_space(first))
        and _same_space(env.action_space(a), env.action_space(first))
        for a in agents
    )
    if shared:
        return {"agents": agents}
    groups: dict[str, list[str]] = {}
    for agent in agents:
        groups.setdefault(agent.rsplit("_", 1)[0], []).append(agent)
    return groups


class PettingZooEnv(EnvBase):
    """A PettingZoo ``ParallelEnv`` as a torchrl env with agent groups (see the module docstring).

    Args:
        env: a PettingZoo ``ParallelEnv``, or a callable returning one (called with
            ``env_kwargs``), e.g. ``mpe2.simple_spread_v3.parallel_env``.
        group_map: group name to the agents in it; default :func:`default_group_map`.
            Agents in one group must share their spaces (their entries are stacked).
        device: where the TensorDicts live (the env itself steps numpy on the CPU).
        **env_kwargs: the arguments of ``env`` when it is a callable (``max_cycles=25``).

    Raises:
        EnvError: a turn-based (AEC) env, something that is not a ParallelEnv, a space
            other than Box or Discrete, a group whose agents' spaces differ, or agents
            missing after a reset.
    """

    def __init__(
        self,
        env: Any,
        *,
        group_map: dict[str, list[str]] | None = None,
        device: torch.device | str = "cpu",
        **env_kwargs: Any,
    ):
        if _is_aec(env):
            raise EnvError(AEC_MSG.format(env=env))
        if callable(env) and not _is_parallel(env):
            env = env(**env_kwargs)
        if _is_aec(env):
            raise EnvError(AEC_MSG.format(env=env))
        if not _is_parallel(env):
            raise EnvError(NOT_PARALLEL_MSG.format(env=env))
        super().__init__(device=device, batch_size=torch.Size([]))
        self._env = env
        self.group_map = {k: list(v) for k, v in (group_map or default_group_map(env)).items()}
        self._has_state = getattr(env, "state_space", None) is not None
        self._seed: int | None = None
        self._make_specs()
        # a reset here shows, before any actor starts, whether every agent is present
        self._env.reset()
        self._check_agents(list(self._env.agents), "after a reset")

    @property
    def pz_env(self) -> Any:
        """The PettingZoo env stepped (its ``render()`` draws MPE's ``rgb_array`` frames)."""
        return self._env

    # --- specs ------------------------------------------------------------------------------

    def _space_spec(self, agent: str, space: Any, kind: str, n: int) -> Any:
        from gymnasium import spaces

        if isinstance(space, spaces.Discrete):
            return Categorical(int(space.n), shape=(n,), dtype=torch.int64, device=self.device)
        if isinstance(space, spaces.Box):
            dtype = torch.from_numpy(np.zeros((), dtype=space.dtype)).dtype
            shape = (n, *space.shape)
            if np.isfinite(space.low).all() and np.isfinite(space.high).all():
                low = torch.as_tensor(np.broadcast_to(space.low, shape).copy(), dtype=dtype)
                high = torch.as_tensor(np.broadcast_to(space.high, shape).copy(), dtype=dtype)
                return Bounded(low, high, shape=shape, dtype=dtype, device=self.device)
            return Unbounded(shape=shape, dtype=dtype, device=self.device)
        raise EnvError(SPACE_MSG.format(env=self._env, agent=agent, kind=kind, space=space))

    def _make_specs(self) -> None:
        obs, act, rew, done = {}, {}, {}, {}
        for group, agents in self.group_map.items():
            first = agents[0]
            for agent in agents[1:]:
                if not (
                    _same_space(
                        self._env.observation_space(agent), self._env.observation_space(first)
                    )
                    and _same_space(self._env.action_space(agent), self._env.action_space(first))
                ):
                    raise EnvError(
                        GROUP_SPACE_MSG.format(env=self._env, group=group, agents=agents)
                    )
            n, shape = len(agents), torch.Size([len(agents)])
            obs_spec = self._space_spec(first, self._env.observation_space(first), "observation", n)
            act_spec = self._space_spec(first, self._env.action_space(first), "action", n)
            obs[group] = Composite(observation=obs_spec, shape=shape, device=self.device)
            act[group] = Composite(action=act_spec, shape=shape, device=self.device)
            rew[group] = Composite(
                reward=Unbounded(shape=(n, 1), dtype=torch.float32, device=self.device),
                shape=shape,
                device=self.device,
            )
            flags = {
                key: Categorical(2, shape=(n, 1), dtype=torch.bool, device=self.device)
                for key in DONE_FLAGS
            }
            done[group] = Composite(flags, shape=shape, device=self.device)
        if self._has_state:
            state = self._env.state_space
            obs["state"] = self._space_spec("state", state, "state", 1)[0]
        self.observation_spec = Composite(obs, device=self.device)
        self.action_spec = Composite(act, device=self.device)
        self.reward_spec = Composite(rew, device=self.device)
        root = {
            key: Categorical(2, shape=(1,), dtype=torch.bool, device=self.device)
            for key in DONE_FLAGS
        }
        self.done_spec = Composite({**done, **root}, device=self.device)

    # --- stepping ---------------------------------------------------------------------------

    def _check_agents(self, present: list[str], when: str) -> None:
        missing = [a for a in self._env.possible_agents if a not in present]
        if missing:
            raise EnvError(AGENTS_LEFT_MSG.format(env=self._env, agents=missing, when=when))

    def _observations(self, obs: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for group, agents in self.group_map.items():
            values = np.stack([np.asarray(obs[a]) for a in agents])
            out[group] = TensorDict(
                observation=torch.as_tensor(values, device=self.device),
                batch_size=[len(agents)],
                device=self.device,
            )
        if self._has_state:
            out["state"] = torch.as_tensor(np.asarray(self._env.state()), device=self.device)
        return out

    def _flags(self, group: str, terminated: dict, truncated: dict) -> dict[str, torch.Tensor]:
        agents = self.group_map[group]
        term = torch.tensor([[bool(terminated[a])] for a in agents], device=self.device)
        trunc = torch.tensor([[bool(truncated[a])] for a in agents], device=self.device)
        return {TERMINATED_NAME: term, TRUNCATED_NAME: trunc, DONE_NAME: term | trunc}

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        # the seed set by set_seed applies to the next reset only: later episodes go on from
        # the env's own generator, as gymnasium's seeded resets do
        obs, _ = self._env.reset(seed=self._seed)
        self._seed = None
        self._check_agents(list(obs), "after a reset")
        out = self._observations(obs)
        for group, agents in self.group_map.items():
            zeros = torch.zeros((len(agents), 1), dtype=torch.bool, device=self.device)
            out[group].update(done=zeros, terminated=zeros.clone(), truncated=zeros.clone())
        root = torch.zeros(1, dtype=torch.bool, device=self.device)
        out.update(done=root, terminated=root.clone(), truncated=root.clone())
        return TensorDict(out, batch_size=self.batch_size, device=self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions: dict[str, Any] = {}
        for group, agents in self.group_map.items():
            values = tensordict.get((group, ACTION_KEY)).cpu().numpy()
            actions.update(zip(agents, values))
        obs, rewards, terminated, truncated, _ = self._env.step(actions)
        self._check_agents(list(obs), "missing from a step's observations")
        out = self._observations(obs)
        every_term, every_trunc = [], []
        for group, agents in self.group_map.items():
            flags = self._flags(group, terminated, truncated)
            reward = [[float(rewards[a])] for a in agents]
            out[group].update(
                reward=torch.tensor(reward, dtype=torch.float32, device=self.device), **flags
            )
            every_term.append(flags[TERMINATED_NAME])
            every_trunc.append(flags[DONE_NAME])
        done = torch.cat(every_trunc)
        if done.any() and not done.all():
            left = [a for a in self._env.possible_agents if terminated[a] or truncated[a]]
            self._check_agents([a for a in obs if a not in left], "done while others go on")
        term = torch.cat(every_term).all().reshape(1)
        all_done = done.all().reshape(1)
        out.update(done=all_done, terminated=term, truncated=all_done & ~term)
        return TensorDict(out, batch_size=self.batch_size, device=self.device)

    def _set_seed(self, seed: int | None) -> None:
        self._seed = seed

    def render(self) -> Any:
        """The env's ``render()``: an ``rgb_array`` frame where it was built with that mode."""
        return self._env.render()

    def close(self, *, raise_if_closed: bool = True) -> None:
        self._env.close()
        super().close(raise_if_closed=raise_if_closed)


@dataclass(frozen=True)
class PettingZooId:
    """A PettingZoo env named by id, ``package:module`` (``mpe2:simple_spread_v3``): what
    :func:`~fleetrl.envs.make_env` builds for such an id, and what a config's ``env.id``
    resolves to (picklable: a Ray collector builds its own).

    Examples:
        >>> env = PettingZooId("mpe2:simple_spread_v3", {"max_cycles": 5}).make(2)
        >>> env.num_envs, list(env.groups)
        (2, ['agents'])
        >>> env.close()
    """

    #: ``package:module``; the module's ``parallel_env`` builds the env
    env_id: str
    #: the arguments of ``parallel_env`` (``max_cycles``, ``N``, ...)
    kwargs: dict[str, Any] = field(default_factory=dict)

    def factory(self) -> Callable[..., Any]:
        """The module's ``parallel_env``; EnvError where the module or the function is missing."""
        package, _, module = self.env_id.partition(":")
        try:
            return importlib.import_module(f"{package}.{module}").parallel_env
        except (ImportError, AttributeError) as err:
            raise EnvError(MODULE_MSG.format(env_id=self.env_id, err=err)) from err

    def build(self) -> PettingZooEnv:
        """One :class:`PettingZooEnv`."""
        return PettingZooEnv(self.factory(), **self.kwargs)

    def make(self, num_envs: int = 1) -> Any:
        """A :class:`~fleetrl.envs.GroupedEnv` of ``num_envs`` copies (a torchrl ``SerialEnv``
        of batch ``[num_envs]`` for more than one, stepped in-process)."""
        from fleetrl.envs.grouped import GroupedEnv

        if num_envs == 1:
            return GroupedEnv(self.build())
        from torchrl.envs import SerialEnv

        return GroupedEnv(SerialEnv(num_envs, self.build))

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

Several copies (``num_envs``, what a collector's ``env.num_envs`` asks for) are one
adapter of batch ``[num_envs]``, not a torchrl ``SerialEnv`` of single ones: each step
writes every copy's agent dicts into one numpy array per group and key, wrapped as
tensors without a copy, so one TensorDict is built per step, and a copy whose episode
ended is reset alone (torchrl's ``_reset`` mask). On MPE simple_spread with 8 copies, and
without the global state, a collector runs at 0.89x (local) and 0.94x (one Ray collector)
of a raw Python loop over the same envs, where the ``SerialEnv`` of single adapters ran at
about half of it (``benchmarks/marl.py``). The envs themselves step in Python, one agent
dict at a time; the global ``"state"`` costs a ``state()`` call per copy and step (MPE
computes every agent's observation again), which ``state=False`` saves.

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
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from fleetrl.errors import EnvError
from fleetrl.extras import pip_install
from fleetrl.keys import (
    ACTION_KEY,
    DONE_FLAGS,
    DONE_NAME,
    REWARD_NAME,
    STATE_KEY,
    TERMINATED_NAME,
    TRUNCATED_NAME,
)

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
    f"{pip_install('marl')})"
)
NUM_ENVS_BUILT_MSG = (
    "num_envs={n} copies need a callable building one env, not the built env {env!r}: pass "
    "e.g. mpe2.simple_spread_v3.parallel_env with its arguments"
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
    """PettingZoo ``ParallelEnv`` copies as one torchrl env with agent groups (see the module
    docstring).

    With ``num_envs`` the adapter steps that many copies of the env as one torchrl env of
    batch ``[num_envs]``: one TensorDict per step for all of them (``(group, "observation")``
    is ``[num_envs, n_agents, ...]``), where a ``SerialEnv`` of single adapters builds, checks
    and stacks one per copy. A copy whose episode ends is reset alone (torchrl's ``_reset``).

    Args:
        env: a PettingZoo ``ParallelEnv``, or a callable returning one (called with
            ``env_kwargs``), e.g. ``mpe2.simple_spread_v3.parallel_env``.
        num_envs: None for one env of batch ``[]``; a count for that many copies of batch
            ``[num_envs]`` (``env`` is then the callable building each).
        state: add the global ``"state"`` (PettingZoo's ``state()``) where the env has a
            ``state_space``; False leaves it out, and its cost (MPE computes every agent's
            observation again for it) with it, where nothing reads it.
        group_map: group name to the agents in it; default :func:`default_group_map`.
            Agents in one group must share their spaces (their entries are stacked).
        device: where the TensorDicts live (the env itself steps numpy on the CPU).
        **env_kwargs: the arguments of ``env`` when it is a callable (``max_cycles=25``).

    Raises:
        EnvError: a turn-based (AEC) env, something that is not a ParallelEnv, a space
            other than Box or Discrete, a group whose agents' spaces differ, agents
            missing after a reset, or ``num_envs`` that is not a count of at least 1 or
            comes with a built env instead of a callable.

    Examples:
        >>> from mpe2 import simple_spread_v3
        >>> env = PettingZooEnv(simple_spread_v3.parallel_env, num_envs=4, max_cycles=5)
        >>> env.batch_size, env.observation_spec["agents", "observation"].shape
        (torch.Size([4]), torch.Size([4, 3, 18]))
        >>> env.rollout(5)["next", "agents", "reward"].shape
        torch.Size([4, 5, 3, 1])
        >>> env.close()
    """

    def __init__(
        self,
        env: Any,
        *,
        num_envs: int | None = None,
        state: bool = True,
        group_map: dict[str, list[str]] | None = None,
        device: torch.device | str = "cpu",
        **env_kwargs: Any,
    ):
        if num_envs is None:
            envs = [_parallel_env(env, env_kwargs)]
        else:
            if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
                raise EnvError(
                    f"num_envs={num_envs!r} is invalid: a count of env copies, at least 1 "
                    "(or None for one env of batch [])"
                )
            if _is_parallel(env) or _is_aec(env) or not callable(env):
                raise EnvError(NUM_ENVS_BUILT_MSG.format(env=env, n=num_envs))
            envs = [_parallel_env(env, env_kwargs) for _ in range(num_envs)]
        self._setup(envs, num_envs is not None, group_map, device, state)

    @classmethod
    def stack(cls, envs: list[PettingZooEnv]) -> PettingZooEnv:
        """Unbatched adapters as one of batch ``[len(envs)]`` stepping their PettingZoo envs
        (what a factory of single adapters becomes where a collector asks for several
        envs). The adapters given are taken over: close the result, not them.

        Raises:
            EnvError: an adapter that is batched already, or whose groups or spaces differ
                from the first's.
        """
        first = envs[0]
        for other in envs:
            problem = None
            if other.batch_size != torch.Size([]):
                problem = f"{other!r} is batched already ({other.batch_size}): stack single envs"
            elif (
                other.group_map != first.group_map
                or other.observation_spec != first.observation_spec
            ):
                problem = (
                    f"the env copies differ: {other.group_map} against {first.group_map}, or "
                    "their spaces; a factory must build the same env each time"
                )
            if problem is not None:  # the adapters were handed over: none is left open
                for env in envs:
                    env.close(raise_if_closed=False)
                raise EnvError(problem)
        out = cls.__new__(cls)
        out._setup([e.pz_env for e in envs], True, first.group_map, first.device, first.has_state)
        return out

    def _setup(
        self,
        envs: list[Any],
        batched: bool,
        group_map: dict[str, list[str]] | None,
        device: torch.device | str,
        state: bool = True,
    ) -> None:
        n = len(envs)
        self._lead = (n,) if batched else ()
        super().__init__(device=device, batch_size=torch.Size(self._lead))
        self._envs = envs
        first = envs[0]
        self.group_map = {k: list(v) for k, v in (group_map or default_group_map(first)).items()}
        self._has_state = state and getattr(first, "state_space", None) is not None
        self._seeds: list[int | None] = [None] * n
        self._make_specs()
        self._state_shape = tuple(first.state_space.shape) if self._has_state else ()
        #: the latest observations (what a partial reset leaves for the envs not reset)
        self._last: dict[str, np.ndarray] = {}
        # a reset here shows, before any actor starts, whether every agent is present
        for pz in envs:
            pz.reset()
            self._check_agents(list(pz.agents), "after a reset")

    @property
    def pz_env(self) -> Any:
        """The (first) PettingZoo env stepped (its ``render()`` draws MPE's ``rgb_array``
        frames)."""
        return self._envs[0]

    @property
    def has_state(self) -> bool:
        """Whether the TensorDicts hold the global ``"state"``."""
        return self._has_state

    @property
    def pz_envs(self) -> list[Any]:
        """Every PettingZoo env stepped, one per entry of the batch."""
        return list(self._envs)

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
        raise EnvError(SPACE_MSG.format(env=self.pz_env, agent=agent, kind=kind, space=space))

    def _make_specs(self) -> None:
        pz = self.pz_env
        obs, act, rew, done = {}, {}, {}, {}
        #: per group: the observation's numpy dtype and shape (one agent)
        self._obs_layout: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
        #: per group: the action's shape ``[n_agents, ...]``
        self._act_shape: dict[str, tuple[int, ...]] = {}
        for group, agents in self.group_map.items():
            first = agents[0]
            for agent in agents[1:]:
                if not (
                    _same_space(pz.observation_space(agent), pz.observation_space(first))
                    and _same_space(pz.action_space(agent), pz.action_space(first))
                ):
                    raise EnvError(GROUP_SPACE_MSG.format(env=pz, group=group, agents=agents))
            n, shape = len(agents), torch.Size([len(agents)])
            space = pz.observation_space(first)
            obs_spec = self._space_spec(first, space, "observation", n)
            self._obs_layout[group] = (np.dtype(space.dtype), tuple(obs_spec.shape[1:]))
            act_spec = self._space_spec(first, pz.action_space(first), "action", n)
            self._act_shape[group] = tuple(act_spec.shape)
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
            obs[STATE_KEY] = self._space_spec("state", pz.state_space, "state", 1)[0]
        root = {
            key: Categorical(2, shape=(1,), dtype=torch.bool, device=self.device)
            for key in DONE_FLAGS
        }
        specs = [Composite(s, device=self.device) for s in (obs, act, rew, {**done, **root})]
        if self._lead:
            specs = [s.expand(*self._lead, *s.shape) for s in specs]
        self.observation_spec, self.action_spec, self.reward_spec, self.done_spec = specs

    # --- stepping ---------------------------------------------------------------------------

    def _check_agents(self, present: list[str], when: str, pz: Any = None) -> None:
        pz = self.pz_env if pz is None else pz
        missing = [a for a in pz.possible_agents if a not in present]
        if missing:
            raise EnvError(AGENTS_LEFT_MSG.format(env=pz, agents=missing, when=when))

    def _empty_observations(self) -> dict[str, np.ndarray]:
        n = len(self._envs)
        out = {
            group: np.empty(
                (n, len(agents), *self._obs_layout[group][1]), self._obs_layout[group][0]
            )
            for group, agents in self.group_map.items()
        }
        if self._has_state:
            out[STATE_KEY] = np.empty((n, *self._state_shape), self.pz_env.state_space.dtype)
        return out

    def _write_observations(self, out: dict[str, np.ndarray], i: int, obs: dict, pz: Any) -> None:
        for group, agents in self.group_map.items():
            out[group][i] = [obs[a] for a in agents]
        if self._has_state:
            out[STATE_KEY][i] = pz.state()

    def _tensordict(self, arrays: dict[str, np.ndarray], flags: dict[str, Any]) -> TensorDictBase:
        """One TensorDict of batch ``[*lead]`` from ``[n, ...]`` arrays (no copy)."""
        lead, device = self._lead, self.device

        def tensor(a: np.ndarray) -> torch.Tensor:
            t = torch.from_numpy(a)
            return (t if lead else t[0]).to(device)

        out: dict[str, Any] = {}
        for group, agents in self.group_map.items():
            entries = {"observation": tensor(arrays[group])}
            entries.update({k: tensor(v) for k, v in flags[group].items()})  # reward with them
            out[group] = TensorDict(entries, batch_size=[*lead, len(agents)], device=device)
        if self._has_state:
            out[STATE_KEY] = tensor(arrays[STATE_KEY])
        out.update({k: tensor(v) for k, v in flags["root"].items()})
        return TensorDict(out, batch_size=self.batch_size, device=device)

    def _zero_flags(self) -> dict[str, dict[str, np.ndarray]]:
        n = len(self._envs)
        flags = {
            group: {k: np.zeros((n, len(agents), 1), bool) for k in DONE_FLAGS}
            for group, agents in self.group_map.items()
        }
        flags["root"] = {k: np.zeros((n, 1), bool) for k in DONE_FLAGS}
        return flags

    def _reset_mask(self, tensordict: TensorDictBase | None) -> np.ndarray:
        """Which envs to reset: torchrl's root ``_reset``, else any group's, else all."""
        n = len(self._envs)
        if tensordict is None:
            return np.ones(n, bool)
        mask = tensordict.get("_reset", None)
        if mask is not None:
            return mask.reshape(n, -1).any(-1).cpu().numpy()
        masks = [tensordict.get((g, "_reset"), None) for g in self.group_map]
        masks = [m.reshape(n, -1).any(-1) for m in masks if m is not None]
        if not masks:
            return np.ones(n, bool)
        return torch.stack(masks).any(0).cpu().numpy()

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        # a seed set by set_seed applies to each env's next reset only: later episodes go on
        # from the env's own generator, as gymnasium's seeded resets do
        mask = self._reset_mask(tensordict) if self._last else np.ones(len(self._envs), bool)
        # the envs not reset keep their latest observations (copied: the step's TensorDict
        # holds those arrays); a reset of every env writes all of them anew
        if mask.all():
            arrays = self._empty_observations()
        else:
            arrays = {k: v.copy() for k, v in self._last.items()}
        for i in np.flatnonzero(mask):
            pz = self._envs[i]
            obs, _ = pz.reset(seed=self._seeds[i])
            self._seeds[i] = None
            self._check_agents(list(obs), "after a reset", pz)
            self._write_observations(arrays, i, obs, pz)
        self._last = arrays
        return self._tensordict(arrays, self._zero_flags())

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        n = len(self._envs)
        actions = {
            group: tensordict.get((group, ACTION_KEY)).cpu().numpy().reshape(n, *shape)
            for group, shape in self._act_shape.items()
        }
        arrays = self._empty_observations()
        flags = self._zero_flags()
        for group, agents in self.group_map.items():
            flags[group][REWARD_NAME] = np.empty((n, len(agents), 1), np.float32)
        every = flags["root"]
        for i, pz in enumerate(self._envs):
            act: dict[str, Any] = {}
            for group, agents in self.group_map.items():
                act.update(zip(agents, actions[group][i]))
            obs, reward, terminated, truncated, _ = pz.step(act)
            self._check_agents(list(obs), "missing from a step's observations", pz)
            self._write_observations(arrays, i, obs, pz)
            any_done, all_done, all_term = False, True, True
            for group, agents in self.group_map.items():
                term = [bool(terminated[a]) for a in agents]
                trunc = [bool(truncated[a]) for a in agents]
                f = flags[group]
                f[REWARD_NAME][i, :, 0] = [reward[a] for a in agents]
                f[TERMINATED_NAME][i, :, 0] = term
                f[TRUNCATED_NAME][i, :, 0] = trunc
                done = [t or u for t, u in zip(term, trunc)]
                f[DONE_NAME][i, :, 0] = done
                any_done |= any(done)
                all_done &= all(done)
                all_term &= all(term)
            if any_done and not all_done:
                left = [a for a in pz.possible_agents if terminated[a] or truncated[a]]
                self._check_agents([a for a in obs if a not in left], "done while others go on", pz)
            every[DONE_NAME][i] = all_done
            every[TERMINATED_NAME][i] = all_done and all_term
            every[TRUNCATED_NAME][i] = all_done and not all_term
        self._last = arrays
        return self._tensordict(arrays, flags)

    def _set_seed(self, seed: int | None) -> None:
        # env i of the batch takes seed + i at its next reset
        self._seeds = [None if seed is None else seed + i for i in range(len(self._envs))]

    def saved_state(self) -> dict[str, Any] | None:
        """Every copy's state (:func:`~fleetrl.envs.mpe_state.mpe_state`), the latest
        observations and the pending seeds, as tensors and plain values; None where a copy
        cannot be saved (another env than MPE's saved scenarios)."""
        from fleetrl.envs.mpe_state import mpe_state

        envs = [mpe_state(pz) for pz in self._envs]
        if any(state is None for state in envs):
            return None
        return {
            "envs": envs,
            "last": {k: torch.from_numpy(v.copy()) for k, v in self._last.items()},
            "seeds": list(self._seeds),
        }

    def load_saved_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`saved_state` into an adapter built the same way."""
        from fleetrl.envs.mpe_state import load_mpe_state

        if len(state["envs"]) != len(self._envs):
            raise EnvError(
                f"env state of {len(state['envs'])} env copies from the checkpoint does not fit "
                f"the env built now ({len(self._envs)}); resume with the run's env.num_envs"
            )
        for pz, saved in zip(self._envs, state["envs"]):
            load_mpe_state(pz, saved)
        self._last = {k: v.numpy().copy() for k, v in state["last"].items()}
        self._seeds = list(state["seeds"])

    def render(self) -> Any:
        """The (first) env's ``render()``: an ``rgb_array`` frame where it was built with that
        mode."""
        return self.pz_env.render()

    def close(self, *, raise_if_closed: bool = True) -> None:
        for pz in self._envs:
            pz.close()
        super().close(raise_if_closed=raise_if_closed)


def _parallel_env(env: Any, env_kwargs: dict[str, Any]) -> Any:
    """``env`` built (where a callable) and checked to be a PettingZoo ParallelEnv."""
    if _is_aec(env):
        raise EnvError(AEC_MSG.format(env=env))
    if callable(env) and not _is_parallel(env):
        env = env(**env_kwargs)
    if _is_aec(env):
        raise EnvError(AEC_MSG.format(env=env))
    if not _is_parallel(env):
        raise EnvError(NOT_PARALLEL_MSG.format(env=env))
    return env


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
    #: add the global ``"state"`` where the env has one (:class:`PettingZooEnv`'s ``state``)
    state: bool = True

    def reading(self, keys: Any) -> PettingZooId:
        """This env for a run whose modules read only ``keys``: without the global
        ``"state"`` where they do not read it (see :class:`PettingZooEnv`)."""
        return replace(self, state=self.state and STATE_KEY in set(keys))

    def factory(self) -> Callable[..., Any]:
        """The module's ``parallel_env``; EnvError where the module or the function is missing."""
        package, _, module = self.env_id.partition(":")
        try:
            return importlib.import_module(f"{package}.{module}").parallel_env
        except (ImportError, AttributeError) as err:
            raise EnvError(MODULE_MSG.format(env_id=self.env_id, err=err)) from err

    def build(self) -> PettingZooEnv:
        """One :class:`PettingZooEnv`."""
        return PettingZooEnv(self.factory(), state=self.state, **self.kwargs)

    def make(self, num_envs: int = 1) -> Any:
        """A :class:`~fleetrl.envs.GroupedEnv` of ``num_envs`` copies (one adapter of batch
        ``[num_envs]`` for more than one, stepped in-process)."""
        from fleetrl.envs.grouped import GroupedEnv

        if num_envs == 1:
            return GroupedEnv(self.build())
        return GroupedEnv(
            PettingZooEnv(self.factory(), num_envs=num_envs, state=self.state, **self.kwargs)
        )

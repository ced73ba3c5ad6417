"""Gymnasium ids as picklable specs: with the env's own arguments (:class:`GymId`), and
POMDPs by name, whose observation keeps only chosen entries (:class:`PartialEnv`).

A task that needs memory is most easily made from one that does not: CartPole
with its two velocities removed (``observation_indices=(0, 2)``: cart position
and pole angle) can only be balanced by a policy that infers the velocities
from what it saw before, which is what a recurrent policy (``ppo.model: lstm``)
learns and a feed-forward one cannot.

:class:`KeepEntries` is the gymnasium wrapper (one env, e.g. the video env);
:class:`PartialEnv` the picklable spec that :func:`~fleetrl.envs.make_env`, the
collectors and the Ray workers build (``env.observation_indices`` in a config:
:func:`fleetrl.envs.engine.resolve_env`). The wrapper holds no state, so a
classic-control env under it still saves and loads for exact resume
(:mod:`fleetrl.envs.state`). Only the gymnasium engine applies it: the C++
engines (``ale_vector``, ``envpool``) return their observations from C++, and
an Atari frame stack has no entries to name.

Examples:
    >>> from fleetrl.envs import make_env
    >>> env = make_env(PartialEnv("CartPole-v1", (0, 2)), num_envs=2)
    >>> env.observation_spec["observation"][0]
    (2,)
    >>> env.close()
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from fleetrl.errors import ConfigError

__all__ = [
    "INDICES_ENGINE_MSG",
    "INDICES_MSG",
    "INDICES_RANGE_MSG",
    "INDICES_SPACE_MSG",
    "GymId",
    "KeepEntries",
    "PartialEnv",
    "index_problems",
    "space_problems",
]

INDICES_MSG = (
    "{key}={value!r} is invalid: {why}; give distinct entry indices of the observation vector, "
    "e.g. [0, 2] for CartPole's cart position and pole angle (null keeps the whole observation)"
)
INDICES_ENGINE_MSG = (
    "{key}={value!r} is invalid with env.id={env_id!r} and env.engine={engine!r}: it keeps "
    "entries of a flat observation vector, in the gymnasium engine only (e.g. CartPole-v1 with "
    "[0, 2]); {fix}"
)
INDICES_RANGE_MSG = (
    "{key}={value!r} is invalid with {env_id}: its observation has {n} entries (shape {shape}), so "
    "each index must be in [0, {n}); e.g. {key}=[0, 2] for CartPole's cart position and pole angle"
)
INDICES_SPACE_MSG = (
    "{key}={value!r} is invalid with {env_id}: it keeps entries of a flat (1-D Box) "
    "observation, and {env_id}'s is {space}; remove the key (null)"
)


def index_problems(indices: Any, key: str) -> list[str]:
    """What is wrong with ``indices`` alone (before any env is built): not a non-empty
    sequence of distinct integers >= 0."""
    if isinstance(indices, (str, bytes)) or not isinstance(indices, Sequence):
        return [INDICES_MSG.format(key=key, value=indices, why="not a list of integers")]
    values = list(indices)
    why = None
    if not values:
        why = "it keeps no entry"
    elif not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in values):
        why = "not a list of integers"
    elif any(i < 0 for i in values):
        why = "negative indices are not accepted"
    elif len(set(values)) != len(values):
        why = "an index is repeated"
    return [] if why is None else [INDICES_MSG.format(key=key, value=values, why=why)]


def space_problems(indices: Sequence[int], space: gym.Space, env_id: str, key: str) -> list[str]:
    """What keeps ``indices`` from selecting entries of ``space``: a space that is no flat
    Box, or an index past its last entry."""
    value = list(indices)
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        return [INDICES_SPACE_MSG.format(key=key, value=value, env_id=env_id, space=space)]
    n = int(space.shape[0])
    if max(value) < n:
        return []
    return [INDICES_RANGE_MSG.format(key=key, value=value, env_id=env_id, n=n, shape=space.shape)]


class KeepEntries(gym.ObservationWrapper):
    """A gymnasium env whose observations keep the entries at ``indices``, in that order.

    Stateless: the kept entries are ``obs[indices]`` of the env's own observation, and the
    observation space is the Box of those entries' bounds.

    Raises:
        ConfigError: indices that are not distinct integers >= 0, an observation that is
            no 1-D Box, or an index past its last entry.

    Examples:
        >>> env = KeepEntries(gym.make("CartPole-v1"), [0, 2])
        >>> env.observation_space.shape
        (2,)
        >>> env.reset(seed=0)[0].shape
        (2,)
    """

    #: no state of its own: a classic-control env under it saves for exact resume
    #: (:mod:`fleetrl.envs.state` reads this flag)
    stateless = True

    def __init__(self, env: gym.Env, indices: Sequence[int], key: str = "indices"):
        super().__init__(env)
        env_id = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
        problems = index_problems(indices, key) or space_problems(
            indices, env.observation_space, env_id, key
        )
        if problems:
            raise ConfigError(problems)
        self.indices = np.asarray(indices, dtype=np.intp)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(
            space.low[self.indices], space.high[self.indices], dtype=space.dtype
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        # one small gather per env step: a copy of len(indices) entries
        return observation[self.indices]


@dataclass(frozen=True)
class GymId:
    """A picklable spec of a gymnasium id built with the env's own arguments,
    ``gymnasium.make(env_id, **env_kwargs)``: what a config's ``env.kwargs`` builds for a
    gymnasium id (``env.id: LunarLander-v3`` with ``env.kwargs: {continuous: true}``). Pass it
    as ``create_env_fn`` anywhere an id goes; each worker builds its own envs from it.

    Examples:
        >>> from fleetrl.envs import make_env
        >>> env = make_env(GymId("CartPole-v1", {"sutton_barto_reward": True}), num_envs=2)
        >>> env.num_envs, env.num_actions
        (2, 2)
        >>> env.close()
    """

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def engine(self) -> Any:
        """The engine that steps it: gymnasium."""
        from fleetrl.config import EnvEngine

        return EnvEngine.GYMNASIUM

    def make(self, num_envs: int) -> Any:
        """``num_envs`` envs as one :class:`~fleetrl.envs.gymnasium.GymVectorEnv`."""
        from fleetrl.envs.gymnasium import GymVectorEnv, make_gym_vector_env

        return GymVectorEnv(make_gym_vector_env(self.env_id, num_envs, **self.env_kwargs))

    def __hash__(self) -> int:  # a dict field: hashed by its repr
        return hash(repr(self))


@dataclass(frozen=True)
class PartialEnv:
    """A picklable spec of a gymnasium id whose observation keeps the entries at
    ``observation_indices``: pass it as ``create_env_fn`` (to
    :func:`~fleetrl.envs.make_env`, ``SyncDataCollector``, ``RayCollector``, ``evaluate``,
    ``record_video``); each worker builds its own envs from it.

    A config says the same with ``env.observation_indices`` (the gymnasium engine only).

    Args:
        env_id: a registered gymnasium id with a flat (1-D Box) observation.
        observation_indices: the entries kept, in this order (distinct, each in
            ``[0, n)`` for an observation of ``n`` entries).
        env_kwargs: the env's own arguments, ``gymnasium.make(env_id, **env_kwargs)``.

    Raises:
        ConfigError: indices that are not distinct integers >= 0 (at once); one past the
            observation's last entry when the env is built.

    Examples:
        >>> PartialEnv("CartPole-v1", [0, 2])
        PartialEnv(env_id='CartPole-v1', observation_indices=(0, 2), env_kwargs={})
    """

    env_id: str
    observation_indices: tuple[int, ...]
    env_kwargs: dict[str, Any] = field(default_factory=dict)

    def __hash__(self) -> int:  # a dict field: hashed by its repr
        return hash(repr(self))

    def __post_init__(self) -> None:
        problems = index_problems(self.observation_indices, "observation_indices")
        if problems:
            raise ConfigError(problems)
        indices = tuple(int(i) for i in self.observation_indices)
        object.__setattr__(self, "observation_indices", indices)  # a list becomes a tuple

    @property
    def engine(self) -> Any:
        """The engine that steps it: always gymnasium (what :class:`~fleetrl.envs.EnvSpec`
        records)."""
        from fleetrl.config import EnvEngine

        return EnvEngine.GYMNASIUM

    def space_problems(self, key: str = "observation_indices") -> list[str]:
        """What keeps the indices from selecting entries of :attr:`env_id`'s observation
        (one env built, then closed), said with ``key``: a config's checks name
        ``env.observation_indices`` before any worker builds the env."""
        env = gym.make(self.env_id, **self.env_kwargs)
        try:
            return space_problems(self.observation_indices, env.observation_space, self.env_id, key)
        finally:
            env.close()

    def wrap(self, env: gym.Env) -> gym.Env:
        """``env`` (one env of :attr:`env_id`) with the entries kept."""
        return KeepEntries(env, self.observation_indices, "observation_indices")

    def make(self, num_envs: int) -> Any:
        """``num_envs`` envs as one :class:`~fleetrl.envs.gymnasium.GymVectorEnv`
        (a SyncVectorEnv in same-step autoreset, each env wrapped)."""
        from fleetrl.envs.gymnasium import GymVectorEnv, make_gym_vector_env

        vector = make_gym_vector_env(self.env_id, num_envs, wrappers=[self.wrap], **self.env_kwargs)
        return GymVectorEnv(vector)

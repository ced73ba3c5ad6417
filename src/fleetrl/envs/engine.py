"""A config's env, resolved once: what kind of env it is, what builds it, and its engine's problems.

:func:`resolve_env` turns an ``env`` section into a :class:`ResolvedEnv`: the
kind of env its id names (:class:`~fleetrl.envs.registry.EnvKind`: an ALE game,
a MuJoCo env, another gymnasium id), whether anything is registered under the
id, what the collectors build for it (:attr:`ResolvedEnv.create_env_fn`) and
every problem of stepping it in ``env.engine`` with ``env.atari`` (and
``env.observation_indices``: a :class:`~fleetrl.envs.partial.PartialEnv`), in
config keys. A run resolves its env once, when its config is verified
(:func:`fleetrl.setup.verify.check`), and passes the result down: the checks,
:func:`fleetrl.setup.verify.describe` and :func:`fleetrl.envs.create_env_fn`
read it.

``env.engine`` (an :class:`~fleetrl.config.EnvEngine`) names what steps the
envs: ``gymnasium`` for any env; ``ale_vector`` and ``envpool`` for Atari games
(:mod:`fleetrl.envs.atari`); ``envpool`` for gymnasium's MuJoCo ids too
(:mod:`fleetrl.envs.mujoco`). :func:`env_kind` says the kind of anything
:func:`~fleetrl.envs.make_env` takes.

Examples:
    >>> from fleetrl.config import EnvConfig
    >>> env = resolve_env(EnvConfig(id="CartPole-v1"))
    >>> env.kind, env.registered, env.create_env_fn, env.problems
    (<EnvKind.GYMNASIUM: 'gymnasium'>, True, 'CartPole-v1', ())
    >>> resolve_env(EnvConfig(id="ALE/Pong-v5", engine="envpool")).create_env_fn.engine
    <EnvEngine.ENVPOOL: 'envpool'>
    >>> engine_problems(EnvConfig(id="CartPole-v1", engine="envpool"))  # doctest: +ELLIPSIS
    ["env.engine='envpool' is invalid with env.id='CartPole-v1': the envpool engine steps ..."]
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from fleetrl.config import EnvConfig, EnvEngine
from fleetrl.envs.atari import AtariEnv, check_atari_engine
from fleetrl.envs.cpp import is_envpool
from fleetrl.envs.mujoco import MujocoEnv, check_mujoco_engine
from fleetrl.envs.partial import INDICES_ENGINE_MSG, GymId, PartialEnv, index_problems
from fleetrl.envs.registry import EnvKind, lookup_id
from fleetrl.envs.torchrl_env import is_torchrl_env
from fleetrl.errors import ConfigError

__all__ = ["EnvKind", "ResolvedEnv", "engine_problems", "env_kind", "resolve_env"]


@dataclass(frozen=True)
class ResolvedEnv:
    """An ``env`` section, resolved (:func:`resolve_env`): computed once per run, passed down.

    Its problems are those of the engine; an id nothing is registered under has none
    (which engines could step it is not known, and the unknown id is the problem to name:
    :func:`fleetrl.setup.verify.describe` names it, with the closest ids).
    """

    #: the section it was resolved from
    env: EnvConfig
    #: what kind of env ``env.id`` names
    kind: EnvKind
    #: whether gymnasium has an env under ``env.id`` (ALE ids: once ale-py registered them)
    registered: bool
    #: every problem of stepping it in ``env.engine`` with ``env.atari``, in config keys
    problems: tuple[str, ...]
    #: what the collectors build (:func:`fleetrl.envs.make_env`): an AtariEnv, a MujocoEnv
    #: (the envpool engine) or the id; None where the engine has problems
    built_by: Any

    @property
    def create_env_fn(self) -> Any:
        """What the collectors build; ConfigError naming the engine's problems, if any."""
        if self.problems:
            raise ConfigError(list(self.problems))
        return self.built_by

    @property
    def key(self) -> str:
        """Equal for sections that build the same env (an env section's other keys, such as
        ``env.num_envs``, do not change what one env is)."""
        return repr(self.built_by) if not self.problems else repr(self.env)


def resolve_env(env: EnvConfig) -> ResolvedEnv:
    """The :class:`ResolvedEnv` of a config's ``env`` section: one registry look-up
    (:func:`~fleetrl.envs.registry.lookup_id`, which registers ale-py's ids first), the
    engine's checks, and what builds it."""
    kind, registered = lookup_id(env.id)
    problems: list[str] = []
    kwargs = dict(env.kwargs or {})
    if kwargs and kind is EnvKind.ATARI:
        problems.append(ATARI_KWARGS_MSG.format(value=kwargs, env_id=env.id))
    if kind in (EnvKind.PETTINGZOO, EnvKind.VMAS):
        problems.extend(_pettingzoo_problems(env, kind))
        if kind is EnvKind.VMAS:
            from fleetrl.envs.vmas import vmas_problems

            problems.extend(vmas_problems(env.id, kwargs))
    elif registered and kind is EnvKind.MUJOCO:  # envpool steps MuJoCo ids too
        check_mujoco_engine(env.id, env.engine, "env.", problems)
    elif registered:
        atari = kind is EnvKind.ATARI
        check_atari_engine(env.id, env.engine, env.atari, "env.", problems, is_atari=atari)
    if env.observation_indices is not None and kind not in (EnvKind.PETTINGZOO, EnvKind.VMAS):
        problems.extend(_indices_problems(env, kind, registered))
    built_by: Any = env.id  # another id stays an id: make_env builds it with gymnasium
    if problems:
        built_by = None
    elif kind is EnvKind.PETTINGZOO and registered:
        from fleetrl.envs.pettingzoo import PettingZooId

        built_by = PettingZooId(env.id, kwargs)
    elif kind is EnvKind.VMAS:
        from fleetrl.envs.vmas import VmasId

        built_by = VmasId(env.id, kwargs)
    elif kind is EnvKind.ATARI:
        built_by = AtariEnv.checked(env.id, env.engine, env.atari)
    elif kind is EnvKind.MUJOCO and env.engine != EnvEngine.GYMNASIUM:
        built_by = MujocoEnv(env.id, env.engine, env.max_episode_steps, env_kwargs=kwargs)
    elif env.observation_indices is not None:
        built_by = PartialEnv(env.id, tuple(env.observation_indices), kwargs)
    elif kwargs:
        built_by = GymId(env.id, kwargs)
    # a copy: the section a caller changes later is not the one resolved
    return ResolvedEnv(copy.deepcopy(env), kind, registered, tuple(problems), built_by)


ATARI_KWARGS_MSG = (
    "env.kwargs={value!r} is invalid with env.id={env_id!r}: an ALE game is built with the "
    "Atari preprocessing of env.atari (frame_skip, repeat_action_probability, "
    "full_action_space, ...): set those keys there, and remove env.kwargs"
)
PETTINGZOO_ENGINE_MSG = "env.{key}={value!r} is invalid with env.id={env_id!r}: {stepped}, {fix}"
#: who steps a multi-agent id's env, for the message above
STEPPED_BY = {
    EnvKind.PETTINGZOO: "a PettingZoo env is stepped by fleetrl's own adapter "
    "(fleetrl.envs.pettingzoo)",
    EnvKind.VMAS: "a VMAS env is stepped by torchrl's VmasEnv, in torch",
}


def _pettingzoo_problems(env: EnvConfig, kind: EnvKind = EnvKind.PETTINGZOO) -> list[str]:
    """The keys a multi-agent id (``mpe2:simple_spread_v3``, ``vmas:balance``) cannot take:
    another engine than ``gymnasium`` (the default), and ``env.observation_indices``."""
    problems = []
    stepped = STEPPED_BY[kind]
    if EnvEngine(env.engine) is not EnvEngine.GYMNASIUM:
        value = EnvEngine(env.engine).value
        fix = "so leave env.engine unset (gymnasium)"
        problems.append(
            PETTINGZOO_ENGINE_MSG.format(
                key="engine", value=value, env_id=env.id, stepped=stepped, fix=fix
            )
        )
    if env.observation_indices is not None:
        fix = "which keeps every agent's observation: remove the key (null)"
        key, value = "observation_indices", env.observation_indices
        problems.append(
            PETTINGZOO_ENGINE_MSG.format(
                key=key, value=value, env_id=env.id, stepped=stepped, fix=fix
            )
        )
    return problems


def _indices_problems(env: EnvConfig, kind: EnvKind, registered: bool) -> list[str]:
    """``env.observation_indices`` that no engine could apply: not distinct integers >= 0,
    an ALE game (a frame stack has no entries to name), or a C++ engine. Whether each index
    is in range is known once an env is built (:func:`fleetrl.setup.verify.describe`)."""
    key, value = "env.observation_indices", env.observation_indices
    problems = index_problems(value, key)
    if not registered:  # the unknown id is the problem to name
        return problems
    engine = EnvEngine(env.engine).value
    if kind is EnvKind.ATARI:
        fix = "an ALE game's observation is a stack of frames: remove the key (null)"
    elif engine != EnvEngine.GYMNASIUM.value:
        fix = "use env.engine='gymnasium', or remove the key (null)"
    else:
        return problems
    text = INDICES_ENGINE_MSG.format(key=key, value=value, env_id=env.id, engine=engine, fix=fix)
    return [*problems, text]


def engine_problems(env: EnvConfig) -> list[str]:
    """Every problem of stepping ``env.id`` in ``env.engine`` with ``env.atari``
    (:attr:`ResolvedEnv.problems` of :func:`resolve_env`)."""
    return list(resolve_env(env).problems)


def env_kind(create_env_fn: Any) -> EnvKind | None:
    """The kind of anything :func:`~fleetrl.envs.make_env` takes: an id (one registry
    look-up), an AtariEnv or MujocoEnv, an env built already, a torchrl env, a factory
    (None: none of these)."""
    if isinstance(create_env_fn, str):
        return lookup_id(create_env_fn)[0]
    if isinstance(create_env_fn, AtariEnv):
        return EnvKind.ATARI
    if isinstance(create_env_fn, MujocoEnv):
        return EnvKind.MUJOCO
    if is_envpool(create_env_fn) or isinstance(create_env_fn, (gym.Env, gym.vector.VectorEnv)):
        return EnvKind.BUILT
    if is_torchrl_env(create_env_fn):
        return EnvKind.TORCHRL
    return EnvKind.CALLABLE if callable(create_env_fn) else None

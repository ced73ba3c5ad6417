"""MuJoCo env engines: gymnasium's MuJoCo envs, or envpool's C++ ones, one boundary contract.

A :class:`MujocoEnv` names a gymnasium MuJoCo id (``HalfCheetah-v5``,
``Hopper-v5``, ``Walker2d-v5``, ``Ant-v5``, ``Humanoid-v5``, ...), an
:class:`~fleetrl.envs.EnvEngine` and the env's own arguments;
:func:`fleetrl.envs.make_env` builds it into a :class:`~fleetrl.envs.BatchedEnv`.
Like :class:`~fleetrl.envs.AtariEnv` it is a plain picklable spec, so a
``RayCollector`` ships it to its workers.

- ``gymnasium``: ``gymnasium.make_vec`` of the id (``gymnasium[mujoco]``), in a
  ``SyncVectorEnv`` with same-step autoreset (what a plain MuJoCo id in a
  config builds too).
- ``envpool``: ``envpool.make(id, env_type="gymnasium")`` in sync mode. envpool
  1.2.5 has the v3, v4 and v5 tasks of the gymnasium ids under the same names;
  its v5 physics is gymnasium's: with the reset noise off, the same actions give
  the same observations to float rounding (the MuJoCo engine tests).

Episode boundaries are those of every engine: ``terminated`` when the robot
fell (the env's health check), ``truncated`` at the time limit (1,000 steps,
or ``max_episode_steps``), never both, and the terminal transition's next
observation is the episode's real last state. envpool resets an env on the
step after its episode ended (next-step autoreset); the engine resets the
finished envs right after the step that ended them, as the Atari engines do
(:class:`fleetrl.envs.cpp.NextStepEnv`), so no transition spans two episodes.

Observations are handed on as ``float32`` (both engines' are ``float64``), and
actions are clipped to the action bounds at the env: the batch keeps the
policy's unclipped sample.

Examples:
    >>> from fleetrl.envs import make_env
    >>> env = make_env(MujocoEnv("Hopper-v5", engine="envpool"), num_envs=2)
    >>> env.observation_spec["observation"], env.action_shape
    (((11,), dtype('float32')), (3,))
    >>> env.close()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from fleetrl.config import EnvEngine
from fleetrl.envs.base import ENGINE_MSG, BatchedEnv
from fleetrl.envs.cpp import EnvPoolEnv
from fleetrl.envs.gymnasium import GymVectorEnv, gym_spec, make_gym_vector_env
from fleetrl.errors import ConfigError
from fleetrl.extras import pip_install

__all__ = ["MujocoEnv", "check_mujoco_engine", "is_mujoco_id"]

NOT_MUJOCO_ID_MSG = (
    "env_id={value!r} is invalid: MujocoEnv takes a registered gymnasium MuJoCo id, e.g. "
    f"'HalfCheetah-v5' ({pip_install('mujoco')} installs gymnasium[mujoco]); pass other "
    "ids to make_env directly"
)
MUJOCO_ENGINE_MSG = (
    "{prefix}engine={engine!r} is invalid with {id_key}={env_id!r}: MuJoCo envs run in "
    "{allowed}; ale_vector steps ALE (Atari) games only"
)
ENVPOOL_MUJOCO_MSG = (
    "{prefix}engine='envpool' is invalid with {id_key}={env_id!r}: envpool {version} has no "
    "{env_id!r} task (its MuJoCo tasks: {tasks}); use {prefix}engine='gymnasium'"
)
ENVPOOL_MISSING_MSG = (
    "{prefix}engine='envpool' is invalid here: envpool is not installed ({err}); "
    f"{pip_install('mujoco')} (envpool has wheels for Linux x86_64 only), or use "
    "{prefix}engine='gymnasium'"
)
MUJOCO_KWARGS_MSG = (
    "create_env_kwargs={value!r} is invalid for the MuJoCo id {env_id!r} with engine "
    "'envpool': it takes 'engine', 'num_threads', 'max_episode_steps' and the env's own "
    "arguments (e.g. reset_noise_scale)"
)

#: gymnasium's MuJoCo envs are served by entry points under this module
_MUJOCO_ENTRY_POINT = "gymnasium.envs.mujoco"
#: the engines that step MuJoCo envs
MUJOCO_ENGINES = (EnvEngine.GYMNASIUM, EnvEngine.ENVPOOL)


def is_mujoco_id(env_id: str) -> bool:
    """Whether ``env_id`` is a registered gymnasium MuJoCo env (``Hopper-v5``, ...)."""
    try:
        spec = gym_spec(env_id)
    except gym.error.Error:
        return False
    entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
    return entry.startswith(_MUJOCO_ENTRY_POINT)


@dataclass
class MujocoEnv:
    """A picklable spec of MuJoCo envs: id, engine and the env's arguments.

    Pass it as ``create_env_fn`` (to :func:`~fleetrl.envs.make_env`,
    ``SyncDataCollector``, ``RayCollector``); the same can be said with a MuJoCo
    id and ``create_env_kwargs={"engine": "envpool"}``.

    Args:
        env_id: a gymnasium MuJoCo id, e.g. ``"HalfCheetah-v5"``.
        engine: ``gymnasium`` or ``envpool`` (an :class:`~fleetrl.envs.EnvEngine` or its value).
        max_episode_steps: the env's time limit (None: its own, 1,000 for the locomotion tasks).
        num_threads: envpool's threads (0: one per core).
        env_kwargs: the env's own arguments, the same names in both engines
            (``reset_noise_scale``, ``ctrl_cost_weight``, ...).

    Raises:
        ConfigError: an id that is no MuJoCo env, or an engine that cannot step it.

    Examples:
        >>> MujocoEnv("HalfCheetah-v5", engine="envpool").engine
        <EnvEngine.ENVPOOL: 'envpool'>
    """

    env_id: str
    engine: EnvEngine | str = EnvEngine.GYMNASIUM
    max_episode_steps: int | None = None
    num_threads: int = 0
    env_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems: list[str] = []
        if not is_mujoco_id(self.env_id):
            problems.append(NOT_MUJOCO_ID_MSG.format(value=self.env_id))
        else:
            check_mujoco_engine(self.env_id, self.engine, "", problems)
        if problems:
            raise ConfigError(problems)
        self.engine = EnvEngine(self.engine)
        self.env_kwargs = dict(self.env_kwargs)  # never share the caller's dict

    def make(self, num_envs: int, *, seed_offset: int = 0) -> BatchedEnv:
        """Build ``num_envs`` envs in this engine (envpool: env i seeded as env
        ``seed_offset + i`` of a larger batch)."""
        if self.engine == EnvEngine.ENVPOOL:
            return EnvPoolMujocoEnv(self, num_envs, seed_offset)
        kwargs = dict(self.env_kwargs)
        if self.max_episode_steps is not None:
            kwargs["max_episode_steps"] = self.max_episode_steps
        return GymVectorEnv(make_gym_vector_env(self.env_id, num_envs, **kwargs))

    @classmethod
    def from_kwargs(cls, env_id: str, kwargs: dict[str, Any]) -> MujocoEnv:
        """The spec a MuJoCo id and ``create_env_kwargs`` (with an ``engine``) describe."""
        kwargs = dict(kwargs)
        engine = kwargs.pop("engine", EnvEngine.GYMNASIUM)
        num_threads = kwargs.pop("num_threads", 0)
        max_steps = kwargs.pop("max_episode_steps", None)
        return cls(env_id, engine, max_steps, num_threads, kwargs)


def check_mujoco_engine(env_id: str, engine: Any, prefix: str, problems: list[str]) -> None:
    """Append the problems of stepping the MuJoCo id ``env_id`` in ``engine`` (``prefix``:
    ``"env."`` to name config keys)."""
    id_key = "env.id" if prefix else "env_id"
    allowed = [e.value for e in EnvEngine]
    if engine not in allowed:  # a str Enum compares equal to its value
        problems.append(ENGINE_MSG.format(prefix=prefix, value=engine, allowed=allowed))
        return
    engine = EnvEngine(engine)
    if engine not in MUJOCO_ENGINES:
        problems.append(
            MUJOCO_ENGINE_MSG.format(
                prefix=prefix,
                engine=engine.value,
                id_key=id_key,
                env_id=env_id,
                allowed=" or ".join(repr(e.value) for e in MUJOCO_ENGINES),
            )
        )
        return
    if engine == EnvEngine.GYMNASIUM:
        return
    try:
        import envpool
    except ImportError as err:
        problems.append(ENVPOOL_MISSING_MSG.format(prefix=prefix, err=err))
        return
    if env_id not in envpool.list_all_envs():
        tasks = _envpool_mujoco_tasks(envpool)  # only for the message: a registry walk
        problems.append(
            ENVPOOL_MUJOCO_MSG.format(
                prefix=prefix,
                id_key=id_key,
                env_id=env_id,
                version=envpool.__version__,
                tasks=", ".join(tasks),
            )
        )


def _envpool_mujoco_tasks(envpool: Any) -> list[str]:
    """envpool's tasks that are gymnasium MuJoCo ids (same name, same env)."""
    return [t for t in envpool.list_all_envs() if "/" not in t and is_mujoco_id(t)]


def _make_envpool(spec: MujocoEnv, num_envs: int, seed: int) -> Any:
    import envpool

    kwargs = dict(spec.env_kwargs)
    if spec.max_episode_steps is not None:
        kwargs["max_episode_steps"] = spec.max_episode_steps
    try:
        return envpool.make(
            spec.env_id,
            env_type="gymnasium",
            num_envs=num_envs,
            batch_size=num_envs,  # sync mode: every env answers each step
            num_threads=spec.num_threads,
            seed=seed,  # env i is seeded with seed + i
            **kwargs,
        )
    except (TypeError, ValueError) as err:  # envpool refuses an unknown argument so
        raise ConfigError([MUJOCO_KWARGS_MSG.format(value=kwargs, env_id=spec.env_id)]) from err


class EnvPoolMujocoEnv(EnvPoolEnv):
    """envpool's MuJoCo envs in sync mode, reset right after each episode end.

    Stepping, the next-step autoreset handling, the partial resets and the continuous
    spaces (float32 observations, actions clipped to the bounds) are
    :class:`~fleetrl.envs.cpp.EnvPoolEnv`'s; this class builds the engine from the spec.
    Cost per step beyond envpool's: a float64 -> float32 copy of the observations and a
    clip of the actions ([N, action_dim]).
    """

    def __init__(self, spec: MujocoEnv, num_envs: int, seed_offset: int = 0):
        self.spec, self.num_envs, self.seed_offset = spec, num_envs, seed_offset
        self.env = self._make(seed_offset)
        self._init_spaces(num_envs)

    def _make(self, seed: int) -> Any:
        return _make_envpool(self.spec, self.num_envs, seed)

"""Atari env engines: three ways to step ALE games, one preprocessing meaning.

An :class:`AtariEnv` names a game, an :class:`EnvEngine` and the preprocessing
(:class:`~fleetrl.config.AtariConfig`); :func:`fleetrl.envs.make_env` builds it
into a :class:`~fleetrl.envs.BatchedEnv`. It is a plain picklable spec, so a
``RayCollector`` ships it to its workers and each builds its own envs.

- ``gymnasium``: gymnasium's ALE envs made with ``frameskip=1`` (the
  preprocessing skips, as CleanRL and SB3 do), ``AtariPreprocessing``,
  ``FrameStackObservation`` and a ``TimeLimit``, in fleetrl's ``SyncVectorEnv``
  with same-step autoreset.
- ``ale_vector``: ale-py's ``AtariVectorEnv`` (C++ threads, preprocessing in C++).
- ``envpool``: ``envpool.make(..., env_type="gymnasium")`` in sync mode.

The two C++ engines reset an env on the step *after* its episode ended;
:class:`~fleetrl.envs.cpp.NextStepEnv` turns that into a same-step reset, so
the terminal transition keeps the episode's last frame stack (and the engines
step asynchronously too, which the overlapped collector uses).

Examples:
    >>> from fleetrl.envs import make_env
    >>> env = make_env(AtariEnv("ALE/Pong-v5", engine="envpool"), num_envs=2)
    >>> env.observation_spec["observation"]
    ((4, 84, 84), dtype('uint8'))
    >>> env.close()
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from fleetrl.config import AtariConfig, EnvEngine
from fleetrl.envs.base import ENGINE_MSG, BatchedEnv
from fleetrl.envs.cpp import EnvPoolEnv, NextStepEnv
from fleetrl.envs.gymnasium import GymVectorEnv, gym_spec
from fleetrl.envs.registry import EnvKind, lookup_id, register_ale
from fleetrl.errors import ConfigError, EnvError
from fleetrl.extras import pip_install
from fleetrl.keys import OBSERVATION_KEY, NestedKey

__all__ = [
    "ATARI_RANGES",
    "AleVectorEnv",
    "AtariEnv",
    "EnvPoolAtariEnv",
    "check_atari_engine",
    "gym_atari",
    "is_atari_id",
    "make_cpp_engine",
]

ATARI_RANGE_MSG = "{prefix}atari.{key}={value!r} is invalid: {allowed}"
#: what each number of AtariConfig allows (the config reference shows the same words)
ATARI_RANGES = {
    "frame_skip": "must be >= 1",
    "frame_stack": "must be >= 1",
    "screen_size": "must be >= 1",
    "noop_max": "must be >= 0 (0: no no-op starts)",
    "repeat_action_probability": "must be in [0, 1]",
    "max_episode_frames": "must be a positive multiple of atari.frame_skip",
}
LIFE_LOSS_MSG = (
    "{prefix}atari.terminal_on_life_loss=True is invalid with {prefix}engine={engine!r}: "
    "{engine}'s episodic life goes on with the same game after a life loss, while the "
    "gymnasium engine starts a new game, so results would not compare; use "
    "{prefix}engine='gymnasium', or terminal_on_life_loss=false"
)
NOT_ATARI_MSG = (
    "{prefix}engine={engine!r} is invalid with {id_key}={env_id!r}: the {engine} engine "
    "steps ALE (Atari) games only; use an ALE id (e.g. ALE/Pong-v5) or {prefix}engine='gymnasium'"
)
NOT_ENVPOOL_ID_MSG = (
    "{prefix}engine='envpool' is invalid with {id_key}={env_id!r}: the envpool engine steps "
    "ALE (Atari) games and gymnasium MuJoCo envs (e.g. HalfCheetah-v5) only; use "
    "{prefix}engine='gymnasium'"
)
NOT_INSTALLED_MSG = (
    "{prefix}engine={engine!r} is invalid here: {package} is not installed ({err}); "
    f"{pip_install('atari')} (envpool has wheels for Linux x86_64 only), or use "
    "{prefix}engine='gymnasium'"
)
ENVPOOL_GAME_MSG = (
    "{prefix}engine='envpool' is invalid with {id_key}={env_id!r}: envpool has no {task!r} "
    "task; use {prefix}engine='ale_vector' or 'gymnasium'"
)
NOT_ALE_ID_MSG = (
    "env_id={value!r} is invalid: AtariEnv takes a registered ALE id, e.g. 'ALE/Pong-v5' "
    f"({pip_install('atari')} installs ale-py, which registers them); pass other ids "
    "to make_env directly"
)
ATARI_KWARGS_MSG = (
    "create_env_kwargs={value!r} is invalid for the Atari id {env_id!r}: it takes 'engine' "
    "and AtariConfig fields {fields}"
)


def is_atari_id(env_id: str) -> bool:
    """Whether ``env_id`` is a registered ALE game (ALE/Pong-v5, PongNoFrameskip-v4, ...):
    :func:`~fleetrl.envs.registry.lookup_id`, which registers ale-py's ids first.

    For code that holds a bare id; a config's env section is resolved once
    (:func:`fleetrl.envs.engine.resolve_env`) and its kind read from there.
    """
    return lookup_id(env_id)[0] is EnvKind.ATARI


@dataclass
class AtariEnv:
    """A picklable spec of Atari envs: game, engine and preprocessing.

    Pass it as ``create_env_fn`` (to :func:`~fleetrl.envs.make_env`,
    ``SyncDataCollector``, ``RayCollector``); the same can be said with an ALE id
    and ``create_env_kwargs={"engine": "envpool", "frame_stack": 4, ...}``.

    Args:
        env_id: a gymnasium ALE id, e.g. ``"ALE/Pong-v5"``.
        engine: an :class:`EnvEngine` or its value.
        atari: the preprocessing (defaults: :class:`~fleetrl.config.AtariConfig`).
        num_threads: threads of the C++ engines (0: the engine's default, one per core).

    Raises:
        ConfigError: every option the engine cannot honour, at once.

    Examples:
        >>> spec = AtariEnv("ALE/Breakout-v5", engine="ale_vector")
        >>> spec.engine, spec.atari.frame_stack
        (<EnvEngine.ALE_VECTOR: 'ale_vector'>, 4)
    """

    env_id: str
    engine: EnvEngine | str = EnvEngine.GYMNASIUM
    atari: AtariConfig = field(default_factory=AtariConfig)
    num_threads: int = 0

    def __post_init__(self) -> None:
        problems: list[str] = []
        atari = is_atari_id(self.env_id)
        if not atari:
            problems.append(NOT_ALE_ID_MSG.format(value=self.env_id))
        check_atari_engine(self.env_id, self.engine, self.atari, "", problems, is_atari=atari)
        if problems:
            raise ConfigError(problems)
        self.engine = EnvEngine(self.engine)
        self.atari = dataclasses.replace(self.atari)  # never share the caller's section

    @classmethod
    def checked(cls, env_id: str, engine: EnvEngine, atari: AtariConfig) -> AtariEnv:
        """The spec of an env section whose id and engine were checked already
        (:func:`fleetrl.envs.engine.resolve_env`): built without checking them again."""
        spec = cls.__new__(cls)
        spec.env_id, spec.engine, spec.num_threads = env_id, EnvEngine(engine), 0
        spec.atari = dataclasses.replace(atari)  # never share the caller's section
        return spec

    def make(self, num_envs: int, *, seed_offset: int = 0) -> BatchedEnv:
        """Build ``num_envs`` envs in this engine (C++ engines: env i seeded as env
        ``seed_offset + i`` of a larger batch)."""
        register_ale()  # an unpickled spec (a Ray worker) skipped __post_init__
        if self.engine == EnvEngine.GYMNASIUM:
            return GymVectorEnv(_gym_vector(self.env_id, self.atari, num_envs))
        if self.engine == EnvEngine.ALE_VECTOR:
            return AleVectorEnv(self, num_envs, seed_offset)
        return EnvPoolAtariEnv(self, num_envs, seed_offset)

    @classmethod
    def from_kwargs(cls, env_id: str, kwargs: dict[str, Any]) -> AtariEnv:
        """The spec an ALE id and ``create_env_kwargs`` describe."""
        kwargs = dict(kwargs)
        engine = kwargs.pop("engine", EnvEngine.GYMNASIUM)
        num_threads = kwargs.pop("num_threads", 0)
        names = [f.name for f in dataclasses.fields(AtariConfig)]
        if set(kwargs) - set(names):
            raise EnvError(ATARI_KWARGS_MSG.format(value=kwargs, env_id=env_id, fields=names))
        return cls(env_id, engine, AtariConfig(**kwargs), num_threads)


def check_atari_engine(
    env_id: str,
    engine: Any,
    atari: AtariConfig,
    prefix: str,
    problems: list[str],
    *,
    is_atari: bool | None = None,
) -> None:
    """Append every problem of stepping the ALE id ``env_id`` in ``engine`` with ``atari``
    (``prefix``: ``"env."`` to name config keys, ``""`` for AtariEnv's arguments;
    ``is_atari``: whether ``env_id`` is an ALE game, where the caller looked it up)."""

    def check(ok: bool, key: str, allowed: str) -> None:
        if not ok:
            value = getattr(atari, key)
            problems.append(
                ATARI_RANGE_MSG.format(prefix=prefix, key=key, value=value, allowed=allowed)
            )

    a, rule = atari, ATARI_RANGES
    check(a.frame_skip >= 1, "frame_skip", rule["frame_skip"])
    check(a.frame_stack >= 1, "frame_stack", rule["frame_stack"])
    check(a.screen_size >= 1, "screen_size", rule["screen_size"])
    check(a.noop_max >= 0, "noop_max", rule["noop_max"])
    check(
        0 <= a.repeat_action_probability <= 1,
        "repeat_action_probability",
        rule["repeat_action_probability"],
    )
    check(
        a.max_episode_frames >= a.frame_skip and a.max_episode_frames % max(1, a.frame_skip) == 0,
        "max_episode_frames",
        f"{rule['max_episode_frames']} ({a.frame_skip})",
    )
    allowed = [e.value for e in EnvEngine]
    if engine not in allowed:  # a str Enum compares equal to its value
        problems.append(ENGINE_MSG.format(prefix=prefix, value=engine, allowed=allowed))
        return
    engine = EnvEngine(engine)
    if engine == EnvEngine.GYMNASIUM:
        return
    id_key = "env.id" if prefix else "env_id"  # the config key, or AtariEnv's argument
    if not (is_atari_id(env_id) if is_atari is None else is_atari):
        msg = NOT_ENVPOOL_ID_MSG if prefix and engine == EnvEngine.ENVPOOL else NOT_ATARI_MSG
        problems.append(
            msg.format(prefix=prefix, engine=engine.value, id_key=id_key, env_id=env_id)
        )
        return
    if a.terminal_on_life_loss:
        problems.append(LIFE_LOSS_MSG.format(prefix=prefix, engine=engine.value))
    package = "ale_py" if engine == EnvEngine.ALE_VECTOR else "envpool"
    try:
        module = __import__(package)
    except ImportError as err:
        problems.append(
            NOT_INSTALLED_MSG.format(prefix=prefix, engine=engine.value, package=package, err=err)
        )
        return
    if engine == EnvEngine.ENVPOOL:
        task = _envpool_task(env_id)
        if task not in module.list_all_envs():
            problems.append(
                ENVPOOL_GAME_MSG.format(prefix=prefix, id_key=id_key, env_id=env_id, task=task)
            )


def _game(env_id: str) -> str:
    return gym_spec(env_id).kwargs["game"]  # e.g. "montezuma_revenge"


def _envpool_task(env_id: str) -> str:
    return "".join(part.capitalize() for part in _game(env_id).split("_")) + "-v5"


# ---------------------------------------------------------------- gymnasium


def gym_atari(env_id: str, a: AtariConfig, render_mode: str | None = None) -> gym.Env:
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, TimeLimit

    # frameskip=1: AtariPreprocessing skips (and max-pools), as the C++ engines do;
    # the episode limit counts agent steps, as envpool's and ALE's vector env do
    env = gym.make(
        env_id,
        frameskip=1,
        repeat_action_probability=a.repeat_action_probability,
        full_action_space=a.full_action_space,
        max_num_frames_per_episode=None,
        render_mode=render_mode,  # fleetrl.collectors.video: "rgb_array", the raw screen
    )
    env = AtariPreprocessing(
        env,
        noop_max=a.noop_max,
        frame_skip=a.frame_skip,
        screen_size=a.screen_size,
        terminal_on_life_loss=a.terminal_on_life_loss,
        grayscale_obs=True,
        scale_obs=False,  # uint8 from the env to the learner; the model scales
    )
    env = FrameStackObservation(env, stack_size=a.frame_stack)  # padded with the reset frame
    return TimeLimit(env, max_episode_steps=a.max_episode_frames // a.frame_skip)


def _gym_vector(env_id: str, a: AtariConfig, num_envs: int) -> gym.vector.VectorEnv:
    from gymnasium.vector import AutoresetMode

    fns = [lambda: gym_atari(env_id, a)] * num_envs
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)


# ---------------------------------------------------------------- next-step engines


def make_cpp_engine(
    spec: AtariEnv, num_envs: int, *, batch_size: int | None = None, seed: int = 0
) -> Any:
    """The raw C++ vector env of an ``ale_vector`` or ``envpool`` spec, preprocessing as configured.

    ``batch_size`` below ``num_envs`` gives the engine's async mode (each call
    answers the first ``batch_size`` envs ready); the collectors use the sync
    mode (``batch_size = num_envs``) through :class:`AleVectorEnv` and
    :class:`EnvPoolAtariEnv`, which add fleetrl's episode-boundary handling.
    """
    a = spec.atari
    batch_size = num_envs if batch_size is None else batch_size
    if spec.engine is EnvEngine.ALE_VECTOR:
        from ale_py.vector_env import AtariVectorEnv

        return AtariVectorEnv(
            _game(spec.env_id),
            num_envs,
            batch_size=batch_size,
            num_threads=spec.num_threads,
            # ALE's own limit counts the reset no-ops and cuts the last agent step short;
            # AleVectorEnv truncates at max_episode_frames / frame_skip agent steps instead
            max_num_frames_per_episode=a.max_episode_frames + (a.noop_max + 2) * a.frame_skip,
            repeat_action_probability=a.repeat_action_probability,
            full_action_space=a.full_action_space,
            img_height=a.screen_size,
            img_width=a.screen_size,
            grayscale=True,
            stack_num=a.frame_stack,
            frameskip=a.frame_skip,
            maxpool=True,
            noop_max=a.noop_max,
            episodic_life=False,
            reward_clipping=False,  # rewards as the game gives them, as in the gymnasium engine
            use_fire_reset=False,  # AtariPreprocessing does not press FIRE at reset either
        )
    import envpool

    return envpool.make(
        _envpool_task(spec.env_id),
        env_type="gymnasium",
        num_envs=num_envs,
        batch_size=batch_size,
        num_threads=spec.num_threads,
        seed=seed,  # env i is seeded with seed + i
        max_episode_steps=a.max_episode_frames // a.frame_skip,
        repeat_action_probability=a.repeat_action_probability,
        full_action_space=a.full_action_space,
        img_height=a.screen_size,
        img_width=a.screen_size,
        gray_scale=True,
        stack_num=a.frame_stack,
        frame_skip=a.frame_skip,
        # envpool draws the no-ops from [0, noop_max) and crashes on noop_max=0 (1.2.5);
        # noop_max + 1 gives [0, noop_max], the closest to gymnasium's [1, noop_max]
        noop_max=a.noop_max + 1,
        episodic_life=False,
        reward_clip=False,
        use_fire_reset=False,
        use_inter_area_resize=True,  # cv2.INTER_AREA, as AtariPreprocessing resizes
    )


class AleVectorEnv(NextStepEnv):
    """ale-py's ``AtariVectorEnv``: C++ threads step and preprocess the games.

    ``seed_offset``: this engine's env i is seeded as env ``seed_offset + i`` of
    a larger batch (the overlapped collector's second half), so a batch split in
    engines plays exactly the games of the unsplit one.
    """

    def __init__(self, spec: AtariEnv, num_envs: int, seed_offset: int = 0):
        a = spec.atari
        self.spec = spec
        self.env = make_cpp_engine(spec, num_envs)
        self.seed_offset = seed_offset
        super().__init__(
            num_envs,
            _frame_stack(a),
            (),
            np.dtype(np.int64),
            int(self.env.single_action_space.n),
        )
        #: agent steps since each env's reset (zero padding in young stacks; the time limit)
        self._age = np.zeros(num_envs, dtype=np.int64)
        self._limit = a.max_episode_frames // a.frame_skip

    # ALE pads a new episode's stack with zero frames; gymnasium's FrameStackObservation
    # and envpool repeat the reset frame. We repeat it too (only rows in their first
    # frame_stack - 1 steps are touched), so the engines' observations mean the same.

    def reset(self, seed: int | None = None) -> dict[NestedKey, np.ndarray]:
        if seed is not None:
            seed += self.seed_offset
        obs, _ = self.env.reset(seed=seed)  # an int seeds env i with seed + i
        obs[:, :-1] = obs[:, -1:]
        self._age[:] = 0
        self._obs = obs
        return {OBSERVATION_KEY: obs}

    def _send(self, action: np.ndarray) -> None:
        self.env.send(action)

    def _recv(self) -> tuple[np.ndarray, ...]:
        obs, reward, terminated, truncated, _ = self.env.recv()
        self._age += 1
        stack = self.spec.atari.frame_stack
        for age in range(1, stack - 1):  # a no-op once every env is frame_stack - 1 steps old
            rows = np.flatnonzero(self._age == age)
            if len(rows):
                pad = stack - 1 - age
                obs[rows, :pad] = obs[rows, pad : pad + 1]
        truncated = (truncated | (self._age >= self._limit)) & ~terminated
        return obs, reward, terminated, truncated

    def _reset_rows(self, mask: np.ndarray) -> np.ndarray:
        obs, _ = self.env.reset(options={"reset_mask": np.asarray(mask, dtype=bool)})
        rows = obs[mask]
        rows[:, :-1] = rows[:, -1:]
        self._age[mask] = 0
        return rows

    def close(self) -> None:
        self.env.close()


class EnvPoolAtariEnv(EnvPoolEnv):
    """envpool's Atari envs in sync mode (every env stepped each call).

    ``seed_offset``: as :class:`AleVectorEnv`'s (env i seeded as env ``seed_offset + i``).
    """

    def __init__(self, spec: AtariEnv, num_envs: int, seed_offset: int = 0):
        self.spec, self.num_envs, self.seed_offset = spec, num_envs, seed_offset
        self.env = self._make(seed_offset)
        self._init_spaces(num_envs)  # uint8 frame stacks, the game's discrete actions

    def _make(self, seed: int) -> Any:
        return make_cpp_engine(self.spec, self.num_envs, seed=seed)


def _frame_stack(a: AtariConfig) -> tuple[tuple[int, ...], np.dtype]:
    """The observation of every Atari engine: uint8 (frame_stack, screen_size, screen_size)."""
    return (a.frame_stack, a.screen_size, a.screen_size), np.dtype(np.uint8)

"""Videos of deterministic evaluation episodes: an mp4 file, and the same clip in TensorBoard.

:func:`record_video` plays ``num_episodes`` episodes of a policy with
deterministic actions on one dedicated env built with
``render_mode="rgb_array"`` (never the training or the test envs) and streams
the rendered frames into an mp4 (imageio-ffmpeg, libx264, yuv420p). The
policy sees the env's own observation, preprocessed as in training (an Atari
policy its 84x84 grey frame stack); the video shows the raw RGB frame the env
renders (Atari: the 210x160 screen at every agent step).

A PettingZoo env (a run's ``env.id: mpe2:...``, :class:`~fleetrl.envs.pettingzoo.PettingZooId`)
is filmed the same way: its ``parallel_env`` built with ``render_mode="rgb_array"``, in
fleetrl's adapter, the team's policy acting for every group; an episode's return is the
team's (the sum over the groups of each group's mean agent reward).

Frames: one for each episode's reset and one after each of its steps, so an
episode of ``L`` steps gives ``L + 1`` frames and the file holds
``sum(L_i + 1)``. Episode ``i`` is seeded ``seed + i``, as
:func:`fleetrl.run.evaluate.evaluate` seeds its env ``i``: the video shows the
episodes ``evaluate`` scores (same env id, wrappers and step limit; an Atari
run made with the ``ale_vector`` or ``envpool`` engine is shown with the
gymnasium engine and the same preprocessing, a MuJoCo run made with envpool
with gymnasium's env of the same id, arguments and step limit: the same task
and physics, its random starts drawn by gymnasium's seeding, not envpool's).

The frame rate is the env's real time: ``metadata["render_fps"]`` (CartPole
50, MuJoCo ``1 / dt``), and for Atari 60 / ``frame_skip`` (the emulator runs at
60 Hz; one frame per agent step). An odd frame height or width is padded by one
black row or column (yuv420p needs even sizes).

MuJoCo renders headless through EGL: ``MUJOCO_GL=egl`` is set when this
module is imported and the variable is unset (gymnasium reads it when it first
renders). pygame (classic control, MPE) renders through SDL: on a machine without
a display, :func:`video_env` sets ``SDL_VIDEODRIVER=dummy`` where it is unset
(:func:`use_headless_sdl`), so SDL prints no display error.

TensorBoard: torch's ``SummaryWriter.add_video`` needs moviepy; instead
:func:`add_tensorboard_clip` writes what ``add_video`` writes, an animated GIF
as an image summary (TensorBoard's Images tab plays it): the same frames,
downscaled by an integer stride so the longer side is at most
:data:`TB_MAX_SIDE` pixels, and above :data:`TB_MAX_FPS` every k-th frame
(browsers slow down GIF frames shorter than 20 ms).

Examples:
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "cartpole.mp4"
    >>> video = record_video(None, "CartPole-v1", path, num_episodes=2, seed=0,
    ...                      max_episode_steps=5)
    >>> video.frames, video.lengths, (video.height, video.width), video.fps
    (12, [5, 5], (400, 600), 50.0)
"""

from __future__ import annotations

import io
import logging
import math
import os
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torchrl.envs.utils import ExplorationType

from fleetrl.errors import ConfigError, EnvError
from fleetrl.extras import pip_install

os.environ.setdefault("MUJOCO_GL", "egl")  # headless MuJoCo; set before gymnasium first renders

__all__ = [
    "TB_MAX_FPS",
    "TB_MAX_SIDE",
    "TB_VIDEO_TAG",
    "Video",
    "add_tensorboard_clip",
    "check_video_path",
    "output_file_problems",
    "record_video",
    "rendering_problem",
    "use_headless_sdl",
    "video_env",
]

logger = logging.getLogger(__name__)

#: TensorBoard clips: the longer side is downscaled (integer stride) to at most this
TB_MAX_SIDE = 320
#: TensorBoard clips: above this frame rate every k-th frame is kept
TB_MAX_FPS = 50.0
#: the TensorBoard tag of the training run's evaluation videos
TB_VIDEO_TAG = "eval/video"
#: the frame rate of the Atari emulator
ATARI_HZ = 60.0
#: SDL's video driver for rgb_array frames on a machine without a display
HEADLESS_SDL_DRIVER = "dummy"

SUFFIX_MSG = "{key}={value!r} is invalid: a video file must end in .mp4"
DIR_MSG = "{key}={value!r} is invalid: {problem}; choose a path in a writable directory"
NOT_INSTALLED_MSG = (
    "{key}={value!r} needs imageio and imageio-ffmpeg, which are not installed ({err}); "
    f"{pip_install('video')}"
)
RENDER_MSG = "env {env_id!r} cannot render rgb_array frames here ({err}){hint}"
MUJOCO_HINT = (
    "; MuJoCo renders headless with MUJOCO_GL=egl (here MUJOCO_GL={gl!r}): install EGL "
    "(e.g. apt-get install libegl1), or set MUJOCO_GL=osmesa with libosmesa6 installed"
)
VIDEO_ENV_MSG = (
    "env={value!r} is invalid for a video: pass a gymnasium id, an AtariEnv, a MujocoEnv, a "
    "PartialEnv or a GymId (a run's env section always is one of these)"
)
FRAME_SIZE_MSG = "env {env_id!r} rendered a frame of shape {got}; the video's frames are {want}"


@dataclass
class Video:
    """What :func:`record_video` wrote."""

    path: Path
    """the mp4 file."""
    frames: int
    """frames in the file: each episode's reset frame and one per step."""
    lengths: list[int] = field(default_factory=list)
    """steps of each episode."""
    returns: list[float] = field(default_factory=list)
    """return of each episode."""
    fps: float = 30.0
    """the file's frame rate."""
    height: int = 0
    """frame height in the file (the rendered height, rounded up to even)."""
    width: int = 0
    """frame width in the file (the rendered width, rounded up to even)."""
    clip: list[np.ndarray] = field(default_factory=list, repr=False)
    """the downscaled frames for TensorBoard (only when asked for)."""


def output_file_problems(path: Path, key: str, suffix: str, suffix_msg: str) -> list[str]:
    """What keeps ``path`` (the argument ``key``) from being written: another suffix than
    ``suffix`` (said by ``suffix_msg``, formatted with ``key`` and ``value``), and a
    missing or unwritable directory. Checked before any work."""
    problems: list[str] = []
    if path.suffix.lower() != suffix:
        problems.append(suffix_msg.format(key=key, value=str(path)))
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        problems.append(DIR_MSG.format(key=key, value=str(path), problem="it is a directory"))
    elif not parent.is_dir():
        problems.append(
            DIR_MSG.format(
                key=key, value=str(path), problem=f"directory {str(parent)!r} does not exist"
            )
        )
    elif not os.access(parent, os.W_OK | os.X_OK) or not _can_create(path):
        problems.append(
            DIR_MSG.format(key=key, value=str(path), problem=f"{str(path)!r} is not writable")
        )
    return problems


def _can_create(path: Path) -> bool:
    """Whether ``path`` can be opened for writing, by trying: ``os.access`` says yes to root
    everywhere, and a pseudo file system (``/proc``) refuses only the write itself. A file
    that did not exist is removed again; an existing one is opened without truncation."""
    existed = path.exists()
    try:
        fd = os.open(path, os.O_WRONLY if existed else os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except OSError:
        return False
    os.close(fd)
    if not existed:
        path.unlink(missing_ok=True)
    return True


def check_video_path(path: str | Path, key: str = "--video") -> Path:
    """``path`` as a :class:`~pathlib.Path`, or a ConfigError naming ``key``: an ``.mp4``
    in an existing writable directory, with imageio-ffmpeg installed. Checked before any work."""
    path = Path(path)
    problems = output_file_problems(path, key, ".mp4", SUFFIX_MSG)
    try:
        import imageio_ffmpeg  # noqa: F401
        import PIL  # noqa: F401  (the TensorBoard GIF; a dependency of imageio)
    except ImportError as err:
        problems.append(NOT_INSTALLED_MSG.format(key=key, value=str(path), err=err))
    if problems:
        raise ConfigError(problems)
    return path


def use_headless_sdl(environ: MutableMapping[str, str] | None = None) -> bool:
    """On a Linux (or BSD) machine without a display, set ``SDL_VIDEODRIVER=dummy`` in
    ``environ`` (default: this process's environment); returns whether it set it.

    pygame (classic control, MPE) starts SDL's video to render rgb_array frames, which
    it draws in memory. Without a display SDL tries its drivers in turn, and the Wayland
    one prints ``error: XDG_RUNTIME_DIR is invalid or not set in the environment.`` before
    SDL settles on an offscreen one: the frames are the same, the error is noise. Left
    alone: a display (``DISPLAY`` or ``WAYLAND_DISPLAY``), a driver the user chose
    (``SDL_VIDEODRIVER``, even empty), and macOS and Windows (their own video, no X11).

    Examples:
        >>> use_headless_sdl({"DISPLAY": ":0"}), use_headless_sdl({"SDL_VIDEODRIVER": "x11"})
        (False, False)
    """
    environ = os.environ if environ is None else environ
    if sys.platform in ("darwin", "win32", "cygwin") or "SDL_VIDEODRIVER" in environ:
        return False
    if environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"):
        return False
    environ["SDL_VIDEODRIVER"] = HEADLESS_SDL_DRIVER
    return True


def video_env(env_id: Any) -> tuple[Any, float]:
    """One env that renders rgb_array frames, and its real-time frame rate.

    ``env_id``: a gymnasium id, an :class:`fleetrl.envs.AtariEnv` (built in the
    gymnasium engine with its preprocessing, whatever its engine) or a
    :class:`fleetrl.envs.MujocoEnv` (gymnasium's env of its id, with its arguments and
    step limit, whatever its engine) or a :class:`fleetrl.envs.PartialEnv` (the policy
    sees the kept observation entries; the frames show the whole env), or a
    :class:`fleetrl.envs.pettingzoo.PettingZooId` (its PettingZoo parallel env, built
    with ``render_mode="rgb_array"``: MPE draws the whole arena).
    """
    from fleetrl.envs.atari import AtariEnv, gym_atari, is_atari_id
    from fleetrl.envs.mujoco import MujocoEnv
    from fleetrl.envs.partial import GymId, PartialEnv
    from fleetrl.envs.pettingzoo import PettingZooId

    use_headless_sdl()  # before pygame first starts SDL's video (it reads the variable then)
    if isinstance(env_id, PettingZooId):
        try:
            pz = env_id.factory()(render_mode="rgb_array", **env_id.kwargs)
        except TypeError as err:  # a parallel_env without render_mode
            raise EnvError(RENDER_MSG.format(env_id=env_id.env_id, err=err, hint="")) from None
        return pz, float(pz.metadata.get("render_fps") or 30)
    if isinstance(env_id, str) and is_atari_id(env_id):
        env_id = AtariEnv(env_id)
    if isinstance(env_id, AtariEnv):
        env = gym_atari(env_id.env_id, env_id.atari, render_mode="rgb_array")
        return env, ATARI_HZ / env_id.atari.frame_skip
    if isinstance(env_id, PartialEnv):  # the policy sees the kept entries; the frames, all
        env, fps = video_env(GymId(env_id.env_id, env_id.env_kwargs))
        return env_id.wrap(env), fps
    kwargs: dict[str, Any] = {}
    if isinstance(env_id, GymId):
        kwargs, env_id = dict(env_id.env_kwargs), env_id.env_id
    if isinstance(env_id, MujocoEnv):
        kwargs = dict(env_id.env_kwargs)
        if env_id.max_episode_steps is not None:
            kwargs["max_episode_steps"] = env_id.max_episode_steps
        env_id = env_id.env_id
    if not isinstance(env_id, str):
        raise EnvError(VIDEO_ENV_MSG.format(value=env_id))
    try:
        env = gym.make(env_id, render_mode="rgb_array", **kwargs)
    except gym.error.Error as err:
        raise EnvError(RENDER_MSG.format(env_id=env_id, err=err, hint="")) from None
    fps = env.metadata.get("render_fps") or 30
    return env, float(fps)


def rendering_problem(env_id: Any) -> str | None:
    """Why ``env_id`` cannot be filmed (None: it can): its video env is built, reset and
    rendered once, so that a run finds out before it starts, not at its first video."""
    try:
        env, _ = video_env(env_id)
    except EnvError as err:
        return str(err)
    recorder = _recorder(env, env_id, 1, None, False)
    try:
        recorder.reset(seed=0)
    except EnvError as err:
        return str(err)
    finally:
        env.close()
    return None


def _recorder(
    env: Any, env_id: Any, num_episodes: int, writer: _Mp4Writer | None, clip: bool
) -> Any:
    """``env`` (from :func:`video_env`) filmed: a gymnasium wrapper, or a PettingZoo one."""
    from fleetrl.envs.pettingzoo import PettingZooId

    name = getattr(env_id, "env_id", env_id)
    if isinstance(env_id, PettingZooId):
        return _team_recorder(env, name, num_episodes, writer, clip)
    return _FrameRecorder(env, name, num_episodes, writer, clip)


def record_video(
    policy: Any,
    env_id: Any,
    path: str | Path,
    *,
    num_episodes: int = 1,
    seed: int = 0,
    max_episode_steps: int | None = None,
    clip: bool = False,
    exploration_type: ExplorationType = ExplorationType.DETERMINISTIC,
) -> Video:
    """Play ``num_episodes`` episodes of ``policy`` and write them to ``path``.

    Args:
        policy: a TensorDict policy (``None``: random actions).
        env_id: a gymnasium id, an :class:`fleetrl.envs.AtariEnv` or a
            :class:`fleetrl.envs.MujocoEnv`, in any engine, or a PettingZoo env's
            :class:`~fleetrl.envs.pettingzoo.PettingZooId` (see :func:`video_env`; a team's
            return is the sum over its groups of each group's mean agent reward).
        path: the mp4 to write (replaced atomically; checked with :func:`check_video_path`).
        num_episodes: episodes in the video, one after the other on one env.
        seed: episode ``i`` is seeded ``seed + i``.
        max_episode_steps: truncate an episode after this many steps (None: the env's limit).
        clip: also keep the downscaled frames for :func:`add_tensorboard_clip`.
        exploration_type: ``DETERMINISTIC`` (the distribution's deterministic action) or
            ``RANDOM`` (sampled actions, torch seeded with ``seed`` for them).

    Returns:
        what was written (:class:`Video`).

    Raises:
        ConfigError: a bad ``path`` or ``num_episodes``.
        EnvError: the env cannot render (e.g. MuJoCo without EGL).
    """
    from fleetrl.collectors import SyncDataCollector

    path = check_video_path(path, "path")
    if not isinstance(num_episodes, int) or num_episodes < 1:
        raise ConfigError([f"num_episodes={num_episodes!r} is invalid: must be an int >= 1"])
    from fleetrl.envs.pettingzoo import PettingZooEnv, PettingZooId

    env, fps = video_env(env_id)
    tmp = path.with_name(f".{path.stem}.partial.mp4")
    recorder = _recorder(env, env_id, num_episodes, _Mp4Writer(tmp, fps), clip)
    film = recorder.film
    played = recorder
    if isinstance(env_id, PettingZooId):  # the grouped layout the team's policy reads
        played = PettingZooEnv(recorder, state=env_id.state)
    try:
        with SyncDataCollector(
            played,
            policy,
            frames_per_batch=32,  # at most 31 steps past the last episode, none rendered
            exploration_type=exploration_type,
            max_frames_per_traj=max_episode_steps,
        ) as collector:
            collector.set_seed(seed)
            if exploration_type is not ExplorationType.DETERMINISTIC:
                torch.manual_seed(seed)  # sampled actions: the same video for the same seed
            while not film.done:
                collector.next()
        film.writer.close()
        os.replace(tmp, path)
    finally:
        film.writer.close()
        tmp.unlink(missing_ok=True)
    h, w = film.writer.size
    return Video(
        path=path,
        frames=film.writer.frames,
        lengths=film.lengths,
        returns=film.returns,
        fps=fps,
        height=h,
        width=w,
        clip=film.clip,
    )


def add_tensorboard_clip(writer: Any, tag: str, video: Video, step: int) -> None:
    """Write ``video.clip`` to a torch ``SummaryWriter`` as an animated GIF image summary."""
    from PIL import Image
    from tensorboard.compat.proto.summary_pb2 import Summary

    if not video.clip:
        raise ValueError("video.clip is empty: record_video(..., clip=True) keeps the frames")
    every = max(1, math.ceil(video.fps / TB_MAX_FPS))
    frames = [Image.fromarray(f) for f in video.clip[::every]]
    buf = io.BytesIO()
    frames[0].save(
        buf,
        format="GIF",
        save_all=True,
        append_images=frames[1:],
        duration=round(1000 * every / video.fps),
        loop=0,
    )
    h, w = video.clip[0].shape[:2]
    image = Summary.Image(height=h, width=w, colorspace=3, encoded_image_string=buf.getvalue())
    writer._get_file_writer().add_summary(
        Summary(value=[Summary.Value(tag=tag, image=image)]), step
    )


def clip_stride(height: int, width: int) -> int:
    """The integer stride that brings the longer side to at most :data:`TB_MAX_SIDE`."""
    return max(1, math.ceil(max(height, width) / TB_MAX_SIDE))


class _Mp4Writer:
    """Streams RGB frames to an mp4 through imageio-ffmpeg (libx264, yuv420p)."""

    def __init__(self, path: Path, fps: float):
        self.path, self.fps = path, fps
        self.frames = 0
        self.size: tuple[int, int] = (0, 0)
        self._shape: tuple[int, ...] | None = None
        self._gen: Any = None

    def write(self, frame: np.ndarray) -> None:
        import imageio_ffmpeg

        if self._gen is None:
            self._shape = frame.shape
            h, w = frame.shape[0] + frame.shape[0] % 2, frame.shape[1] + frame.shape[1] % 2
            self.size = (h, w)
            self._gen = imageio_ffmpeg.write_frames(
                str(self.path),
                (w, h),
                fps=self.fps,
                codec="libx264",
                pix_fmt_in="rgb24",
                pix_fmt_out="yuv420p",
                macro_block_size=1,  # sizes are made even here; no resize
                ffmpeg_log_level="error",
            )
            self._gen.send(None)
        h, w = self.size
        if frame.shape[:2] != (h, w):
            frame = np.pad(frame, ((0, h - frame.shape[0]), (0, w - frame.shape[1]), (0, 0)))
        self._gen.send(np.ascontiguousarray(frame))
        self.frames += 1

    def close(self) -> None:
        if self._gen is not None:
            self._gen.close()
            self._gen = None


class _Film:
    """The frames and episodes of one recording: a frame at each episode's start and after
    each step, until ``num_episodes`` end.

    A reset frame is held back until the episode's first step, so a reset that
    is followed by another reset (the collector's, then its seeded one) leaves
    no frame. Episode ``i`` after a seeded reset is seeded ``seed + i``. The env's
    recorder (:class:`_FrameRecorder`, or :func:`_team_recorder`'s) calls :meth:`reset`
    and :meth:`after_step`.
    """

    def __init__(
        self,
        render: Any,
        env_id: Any,
        num_episodes: int,
        writer: _Mp4Writer | None,
        clip: bool,
        mujoco: bool = False,
    ):
        self.render_env, self.env_id, self.num_episodes = render, env_id, num_episodes
        self.writer, self.keep_clip, self.mujoco = writer, clip, mujoco
        self.clip: list[np.ndarray] = []
        self.lengths: list[int] = []
        self.returns: list[float] = []
        self._base: int | None = None
        self._started = 0
        self._steps = 0
        self._return = 0.0
        self._pending: np.ndarray | None = None
        self._stride = 1
        self._shape: tuple[int, ...] | None = None

    @property
    def done(self) -> bool:
        return len(self.lengths) >= self.num_episodes

    def before_reset(self, seed: int | None) -> tuple[bool, int | None]:
        """Whether the episode that starts is filmed, and the seed to reset it with."""
        if seed is not None:  # the collector's set_seed: episodes count from here
            self._base, self._started = seed, 0
        elif self._steps > 0 and not self.done:
            self.lengths.append(self._steps)
            self.returns.append(self._return)
        if self.done:
            return False, None
        return True, (self._base + self._started if self._base is not None else seed)

    def reset(self, reset: Any, seed: int | None, options: dict[str, Any] | None) -> Any:
        """The env's ``reset`` (gymnasium's or PettingZoo's signature), filmed: seeded as
        episode ``i`` is, and its frame held back for the episode's first step."""
        filmed, seed = self.before_reset(seed)
        if not filmed:
            return reset(options=options)
        out = reset(seed=seed, options=options)
        self.after_reset()
        return out

    def after_reset(self) -> None:
        self._started += 1
        self._steps, self._return = 0, 0.0
        self._pending = self._render()

    def after_step(self, reward: float) -> None:
        if self.done:
            return
        if self._pending is not None:
            self._emit(self._pending)
            self._pending = None
        self._emit(self._render())
        self._steps += 1
        self._return += reward

    def _render(self) -> np.ndarray:
        try:
            frame = self.render_env()
        except Exception as err:  # GL and display errors come in many types
            raise EnvError(self._render_problem(err)) from err
        if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] != 3:
            raise EnvError(self._render_problem(f"render() returned {type(frame).__name__}"))
        if self._shape is None:
            self._shape = frame.shape
            self._stride = clip_stride(*frame.shape[:2])
        elif frame.shape != self._shape:
            raise EnvError(
                FRAME_SIZE_MSG.format(env_id=self.env_id, got=frame.shape, want=self._shape)
            )
        return frame

    def _emit(self, frame: np.ndarray) -> None:
        self.writer.write(frame)
        if self.keep_clip:
            s = self._stride
            self.clip.append(np.ascontiguousarray(frame[::s, ::s]))

    def _render_problem(self, err: Any) -> str:
        hint = MUJOCO_HINT.format(gl=os.environ.get("MUJOCO_GL")) if self.mujoco else ""
        return RENDER_MSG.format(env_id=self.env_id, err=err, hint=hint)


class _FrameRecorder(gym.Wrapper):
    """A gymnasium env filmed (:class:`_Film`): its reward is the episode's return."""

    def __init__(
        self,
        env: gym.Env,
        env_id: Any,
        num_episodes: int,
        writer: _Mp4Writer | None,
        clip: bool,
    ):
        super().__init__(env)
        mujoco = "mujoco" in type(env.unwrapped).__module__
        self.film = _Film(env.render, env_id, num_episodes, writer, clip, mujoco)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return self.film.reset(self.env.reset, seed, options)

    def step(self, action: Any):
        out = self.env.step(action)
        self.film.after_step(float(out[1]))
        return out


def _team_recorder(
    pz: Any, env_id: Any, num_episodes: int, writer: _Mp4Writer | None, clip: bool
) -> Any:
    """A PettingZoo parallel env filmed (:class:`_Film`): its reward is the team's, the sum
    over the agent groups of each group's mean agent reward (the return the grouped rollout
    and ``evaluate`` report)."""
    from pettingzoo.utils.wrappers import BaseParallelWrapper

    from fleetrl.envs.pettingzoo import default_group_map

    class TeamFrameRecorder(BaseParallelWrapper):
        def __init__(self, env: Any):
            super().__init__(env)
            self.film = _Film(env.render, env_id, num_episodes, writer, clip)
            self.groups = list(default_group_map(env).values())

        def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
            return self.film.reset(self.env.reset, seed, options)

        def step(self, actions: dict[str, Any]):
            out = self.env.step(actions)
            rewards = out[1]
            team = sum(sum(float(rewards[a]) for a in g) / len(g) for g in self.groups)
            self.film.after_step(team)
            return out

    return TeamFrameRecorder(pz)

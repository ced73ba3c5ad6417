"""Evaluation videos: mp4 frame counts and sizes decoded back, the TensorBoard clip read back
from the event file, ``fleetrl eval --video``, ``logging.video_every`` and its checks."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import imageio_ffmpeg
import numpy as np
import pytest
import torch
from PIL import Image

from fleetrl.cli import main
from fleetrl.collectors.video import (
    DIR_MSG,
    SUFFIX_MSG,
    TB_VIDEO_TAG,
    check_video_path,
    record_video,
    use_headless_sdl,
)
from fleetrl.errors import ConfigError, EnvError
from fleetrl.run.evaluate import evaluate
from fleetrl.setup.load import load_config
from runs import ONE_UPDATE, ROOT

PPO = str(ROOT / "configs" / "ppo_cartpole.yaml")
#: a tiny run without Ray: 256 frames per iteration, an evaluation and a video after each
VIDEO_RUN = [
    "collector.num_collectors=0",
    "env.num_envs=4",
    "env.max_episode_steps=40",  # short episodes: short videos
    "collector.frames_per_batch=256",
    "trainer.total_frames=512",
    "trainer.target_return=null",
    "trainer.test_every=1",
    "trainer.num_test_episodes=1",
    "ppo.num_epochs=1",
    "ppo.num_mini_batch=2",
    "logging.progress_bar=false",
    "logging.tensorboard=true",
    "logging.plot=false",
    "logging.video_every=1",
]

PAINTED_ID = "FleetrlTestPainted-v0"
PAINTED5_ID = "FleetrlTestPainted5-v0"
BROKEN_RENDER_ID = "FleetrlTestNoRender-v0"


class PaintedEnv(gym.Env):
    """Episodes of ``length`` steps; frame t of an episode is grey level 40 * t, 45 x 62
    (an odd height: the video pads it to 46)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode: str | None = None, length: int = 3):
        self.render_mode, self.length = render_mode, length
        self.observation_space = gym.spaces.Box(0, 100, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.array([float(self.t)], dtype=np.float32)
        return obs, 1.0 + float(action), self.t >= self.length, False, {}

    def render(self):
        return np.full((45, 62, 3), 40 * self.t, dtype=np.uint8)


class NoRenderEnv(PaintedEnv):
    def render(self):
        raise RuntimeError("no display")


if PAINTED_ID not in gym.registry:
    gym.register(PAINTED_ID, entry_point=PaintedEnv)
    gym.register(PAINTED5_ID, entry_point=PaintedEnv, kwargs={"length": 5})
    gym.register(BROKEN_RENDER_ID, entry_point=NoRenderEnv)


def decode(path: Path) -> tuple[list[np.ndarray], dict]:
    """Every frame of an mp4 (RGB, H x W x 3) and ffmpeg's metadata."""
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    w, h = meta["size"]
    frames = [np.frombuffer(b, np.uint8).reshape(h, w, 3) for b in reader]
    return frames, meta


def tensorboard_clips(run: Path) -> list[tuple[int, Image.Image]]:
    from tensorboard.backend.event_processing.event_accumulator import IMAGES, EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"), size_guidance={IMAGES: 0})
    events.Reload()
    assert TB_VIDEO_TAG in events.Tags()["images"]
    return [
        (e.step, Image.open(io.BytesIO(e.encoded_image_string)))
        for e in events.Images(TB_VIDEO_TAG)
    ]


def gif_ms(gif: Image.Image) -> int:
    """An animated GIF's length in milliseconds."""
    total = 0
    for i in range(gif.n_frames):
        gif.seek(i)
        total += gif.info["duration"]
    return total


def test_frames_are_each_reset_and_each_step_in_order_at_the_envs_fps(tmp_path):
    video = record_video(None, PAINTED_ID, tmp_path / "v.mp4", num_episodes=2, seed=0)
    frames, meta = decode(video.path)
    assert (video.frames, video.lengths) == (8, [3, 3])
    assert len(frames) == 8 and meta["fps"] == 10.0 and video.fps == 10.0
    assert {f.shape for f in frames} == {(46, 62, 3)} and (video.height, video.width) == (46, 62)
    # grey level 40 * t, t = 0 (reset) .. 3, twice; the padded row is black
    levels = [round(float(f[:44].mean())) for f in frames]
    assert all(abs(a - b) <= 3 for a, b in zip(levels, [0, 40, 80, 120] * 2)), levels
    assert float(frames[0][45].mean()) < 10 and float(frames[3][45].mean()) < 10


def test_max_episode_steps_truncates_the_recorded_episodes(tmp_path):
    video = record_video(None, PAINTED5_ID, tmp_path / "v.mp4", num_episodes=3, max_episode_steps=2)
    assert (video.frames, video.lengths) == (9, [2, 2, 2])
    assert len(decode(video.path)[0]) == 9


def test_the_video_shows_the_episodes_evaluate_scores(tmp_path):
    from fleetrl.setup.build import make_algorithm

    policy = make_algorithm(load_config(PPO, []), 3).policy
    video = record_video(policy, "CartPole-v1", tmp_path / "c.mp4", num_episodes=3, seed=7)
    assert video.returns == evaluate(policy, "CartPole-v1", 3, seed=7).tolist()
    assert video.frames == sum(video.lengths) + 3 == len(decode(video.path)[0])
    assert (video.height, video.width, video.fps) == (400, 600, 50.0)


def test_atari_video_is_the_raw_screen_at_agent_steps(tmp_path):
    from fleetrl.envs.atari import AtariEnv

    for engine in ("gymnasium", "ale_vector"):  # a C++ engine's run is shown in gymnasium's
        path = tmp_path / f"{engine}.mp4"
        spec = AtariEnv("ALE/Pong-v5", engine=engine)
        video = record_video(None, spec, path, seed=1, max_episode_steps=6)
        frames, meta = decode(path)
        assert (video.frames, video.lengths, len(frames)) == (7, [6], 7)
        assert frames[0].shape == (210, 160, 3) and meta["fps"] == 15.0  # 60 Hz / frame_skip 4


def test_mujoco_renders_headless(tmp_path):
    video = record_video(None, "Hopper-v5", tmp_path / "h.mp4", seed=0, max_episode_steps=3)
    frames, meta = decode(video.path)
    assert (video.frames, video.lengths, len(frames)) == (4, [3], 4)
    assert frames[0].shape == (480, 480, 3) and meta["fps"] == 125.0
    assert frames[-1].std() > 0  # a scene, not a blank frame


#: what makes a machine headless for SDL, and the variable that chooses its video driver
DISPLAY_VARIABLES = ("DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR", "SDL_VIDEODRIVER")


@pytest.mark.parametrize(
    "platform, environ, driver",
    [
        ("linux", {}, "dummy"),  # no display: SDL's dummy driver, no error from the others
        ("linux", {"XDG_RUNTIME_DIR": "/run/user/0"}, "dummy"),
        ("linux", {"DISPLAY": ":0"}, None),  # a display: SDL chooses, as ever
        ("linux", {"WAYLAND_DISPLAY": "wayland-0"}, None),
        ("linux", {"SDL_VIDEODRIVER": "x11"}, "x11"),  # the user's choice is kept
        ("linux", {"SDL_VIDEODRIVER": ""}, ""),
        ("darwin", {}, None),  # macOS and Windows have their own video, and no such error
        ("win32", {}, None),
    ],
)
def test_sdl_renders_with_its_dummy_driver_only_without_a_display(
    platform, environ, driver, monkeypatch
):
    monkeypatch.setattr(sys, "platform", platform)
    given = dict(environ)
    assert use_headless_sdl(given) is (driver == "dummy")
    assert given.get("SDL_VIDEODRIVER") == driver
    assert {k: v for k, v in given.items() if k != "SDL_VIDEODRIVER"} == {
        k: v for k, v in environ.items() if k != "SDL_VIDEODRIVER"
    }


@pytest.mark.e2e  # a fresh process (SDL starts its video once a process): a few seconds
def test_a_headless_video_eval_prints_no_display_error(tmp_path):
    """Issue 57.5: without a display, SDL's Wayland driver printed ``error: XDG_RUNTIME_DIR
    is invalid or not set in the environment.`` before the video was made."""
    run, video = tmp_path / "run", tmp_path / "x.mp4"
    assert main(["train", PPO, *ONE_UPDATE, "--run-dir", str(run)]) == 0
    headless = {k: v for k, v in os.environ.items() if k not in DISPLAY_VARIABLES}
    cli = "import sys; from fleetrl.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", cli, "eval", str(run), "--video", str(video)],
        capture_output=True,
        text=True,
        env=headless,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"^video .*x\.mp4: \d+ frames \(400x600, 50 fps\)", done.stdout, re.M)
    assert "XDG_RUNTIME_DIR" not in done.stderr
    assert not [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert video.stat().st_size > 0


def test_an_env_that_cannot_render_is_an_env_error(tmp_path):
    with pytest.raises(EnvError, match="'FleetrlTestNoRender-v0' cannot render rgb_array frames"):
        record_video(None, BROKEN_RENDER_ID, tmp_path / "v.mp4")
    assert list(tmp_path.iterdir()) == []  # no partial file left


@pytest.mark.parametrize(
    "name, problem",
    [
        ("out.gif", None),
        ("missing/out.mp4", "directory '{d}/missing' does not exist"),
        ("adir.mp4", "it is a directory"),
    ],
)
def test_bad_video_paths_are_refused_with_the_reason(tmp_path, name, problem):
    (tmp_path / "adir.mp4").mkdir()
    path = str(tmp_path / name)
    with pytest.raises(ConfigError) as err:
        check_video_path(path, "--video")
    if problem is None:
        assert str(err.value) == SUFFIX_MSG.format(key="--video", value=path)
    else:
        problem = problem.format(d=tmp_path)
        assert str(err.value) == DIR_MSG.format(key="--video", value=path, problem=problem)


def test_a_path_on_a_file_system_that_refuses_writes_is_refused_before_any_work(tmp_path, capsys):
    """/proc accepts no new file, though os.access says yes to root (issue 35.12: a bare
    BrokenPipeError traceback after the episodes were played); nothing is left behind."""
    with pytest.raises(ConfigError) as err:
        check_video_path("/proc/out.mp4", "--video")
    problem = "'/proc/out.mp4' is not writable"
    assert str(err.value) == DIR_MSG.format(key="--video", value="/proc/out.mp4", problem=problem)
    assert main(["eval", str(tmp_path / "no_run"), "--video", "/proc/out.mp4"]) == 2
    assert problem in capsys.readouterr().err
    free = tmp_path / "fine.mp4"
    assert check_video_path(free) == free and not free.exists()  # probed, then removed
    free.write_bytes(b"kept")
    assert check_video_path(free) == free and free.read_bytes() == b"kept"  # not truncated


def test_eval_video_to_a_bad_path_exits_2_before_any_work(tmp_path, capsys):
    # the target does not exist: the path is checked first, so its message is the one
    assert main(["eval", str(tmp_path / "no_run"), "--video", str(tmp_path / "x.avi")]) == 2
    err = capsys.readouterr().err
    assert "--video=" in err and "a video file must end in .mp4" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (
            ["logging.video_every=-1", "logging.video_episodes=0"],
            [
                "logging.video_every=-1 is invalid: must be >= 0 (0 or null: no videos)",
                "logging.video_episodes=0 is invalid: must be > 0",
            ],
        ),
        (
            ["logging.video_every=2", "trainer.test_every=0"],
            [
                "logging.video_every=2 is invalid: records every N-th evaluation: needs "
                "trainer.test_every > 0 (here trainer.test_every=0)"
            ],
        ),
    ],
)
def test_video_config_problems_are_all_named(overrides, expected):
    with pytest.raises(ConfigError) as err:
        load_config(PPO, overrides)
    assert [p for p in err.value.problems if "video" in p] == expected


def test_an_env_that_cannot_render_is_refused_before_the_run_dir_is_made(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", PPO, *VIDEO_RUN, f"env.id={BROKEN_RENDER_ID}", "--run-dir", str(run)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "logging.video_every=1 is invalid: env 'FleetrlTestNoRender-v0' cannot render" in err
    assert not run.exists()


def test_video_every_writes_mp4s_and_tensorboard_clips_and_eval_video_records(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", PPO, *VIDEO_RUN, "--run-dir", str(run)]) == 0
    videos = sorted((run / "videos").iterdir())
    assert [p.name for p in videos] == ["eval_000000000256.mp4", "eval_000000000512.mp4"]
    # one evaluation episode, CartPole's return is its length: frames = return + 1
    rows = [line.split(",") for line in (run / "metrics.csv").read_text().splitlines()]
    returns = [float(r[rows[0].index("eval/return_mean")]) for r in rows[1:]]
    counts = [len(decode(p)[0]) for p in videos]
    assert counts == [int(r) + 1 for r in returns]
    assert {decode(p)[0][0].shape for p in videos} == {(400, 600, 3)}
    # TensorBoard: the same clips, as animated GIFs downscaled by 2
    clips = tensorboard_clips(run)
    assert [step for step, _ in clips] == [256, 512]
    # (GIF writers merge identical consecutive frames, adding up their durations: the
    # clip's length counts the frames, 20 ms each at CartPole's 50 fps)
    assert [(gif_ms(gif), gif.size) for _, gif in clips] == [(20 * n, (300, 200)) for n in counts]

    capsys.readouterr()
    out_path = tmp_path / "eval.mp4"
    assert main(["eval", str(run), "--video", str(out_path), "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    frames = decode(out_path)[0]
    assert f"video {out_path}: {len(frames)} frames (400x600, 50 fps)" in out

    # resume: earlier videos stay as they were; a file the new video would have replaced
    # (a crashed run's, past the checkpoint) is kept, and the new one gets another name
    before = {p.name: p.read_bytes() for p in videos}
    stray = run / "videos" / "eval_000000000768.mp4"
    stray.write_bytes(b"a crashed run's video")
    assert main(["train", "--resume", str(run), "trainer.total_frames=768"]) == 0
    names = sorted(p.name for p in (run / "videos").iterdir())
    assert names == [*before, "eval_000000000768.mp4", "eval_000000000768_2.mp4"]
    assert all((run / "videos" / n).read_bytes() == b for n, b in before.items())
    assert stray.read_bytes() == b"a crashed run's video"
    assert len(decode(run / "videos" / "eval_000000000768_2.mp4")[0]) > 1
    assert [step for step, _ in tensorboard_clips(run)] == [256, 512, 768]


def test_recording_leaves_the_training_random_state_alone(tmp_path):
    from fleetrl.run.trainer import Trainer

    overrides = [*VIDEO_RUN, "logging.tensorboard=false"]
    trainer = Trainer(load_config(PPO, overrides), run_dir=tmp_path / "run")
    trainer.iterations = 1  # the first evaluation: due, and filmed
    torch_state, numpy_state = torch.get_rng_state(), np.random.get_state()
    assert trainer.evaluator.video_due(1)
    trainer._evaluate()
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), numpy_state))
    assert [p.name for p in (tmp_path / "run" / "videos").iterdir()] == ["eval_000000000000.mp4"]


@pytest.mark.parametrize("every, filmed", [(1, [1, 2, 3, 4]), (2, [2, 4]), (3, [3]), (0, [])])
def test_video_every_films_every_nth_evaluation(every, filmed):
    from fleetrl.run.evaluate import Evaluator

    config = load_config(PPO, [*VIDEO_RUN, "trainer.test_every=2", f"logging.video_every={every}"])
    evaluator = Evaluator(config)
    # evaluations at iterations 2, 4, 6, 8: the 1st, 2nd, 3rd, 4th
    assert [i // 2 for i in range(1, 9) if evaluator.video_due(i)] == filmed

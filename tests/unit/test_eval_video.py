"""``fleetrl eval RUN --video``: every env family in every engine that steps it, through the CLI.

A run trained in the engine (one tiny batch in this process) is filmed by ``fleetrl eval``:
Atari in the gymnasium engine with the training preprocessing, MuJoCo with gymnasium's env of
the same id, whatever engine trained it. The file holds each episode's reset frame and one per
step, at the env's rendered size.
"""

from __future__ import annotations

import re

import imageio_ffmpeg
import pytest

from collecting import needs_envpool
from fleetrl.cli import main
from runs import ROOT

STEPS = 12  # the episodes' step limit (env.max_episode_steps), in training and in the video
TINY = [
    "collector.num_collectors=0",
    "env.num_envs=2",
    "collector.frames_per_batch=32",
    "trainer.total_frames=32",
    "trainer.test_every=0",
    "trainer.target_return=null",
    f"env.max_episode_steps={STEPS}",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]
#: family -> (shipped config, its algorithm's tiny settings, the rendered frame's size)
FAMILIES = {
    "classic": ("ppo_cartpole.yaml", ["ppo.num_mini_batch=2"], (400, 600)),
    "atari": ("ppo_atari.yaml", ["ppo.num_mini_batch=2"], (210, 160)),
    "mujoco": ("sac_mujoco.yaml", ["sac.learning_starts=32", "sac.buffer_size=64"], (480, 480)),
}
#: (family, engine, in the fast suite): each family once there, the issue's case among them;
#: the other engines with the end-to-end tests (make test-all)
FILMED = [
    ("classic", "gymnasium", True),
    ("atari", "gymnasium", False),
    ("atari", "ale_vector", True),
    ("atari", "envpool", False),
    ("mujoco", "gymnasium", False),
    ("mujoco", "envpool", True),  # what `fleetrl eval --video` refused before
]
CASES = [
    pytest.param(
        family,
        engine,
        id=f"{family}-{engine}",
        marks=[
            *([needs_envpool] if engine == "envpool" else []),
            *([] if fast else [pytest.mark.e2e]),
        ],
    )
    for family, engine, fast in FILMED
]


@pytest.mark.parametrize(("family", "engine"), CASES)
def test_eval_films_a_run_of_every_engine(family, engine, tmp_path, capsys):
    config, algo, (height, width) = FAMILIES[family]
    run, video = tmp_path / "run", tmp_path / "eval.mp4"
    train = ["train", str(ROOT / "configs" / config), *TINY, *algo, f"env.engine={engine}"]
    assert main([*train, "--run-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["eval", str(run), "--video", str(video), "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    pattern = r"video .*: (\d+) frames \((\d+)x(\d+), [\d.]+ fps\), episode lengths \[(.*)\]"
    said = re.search(pattern, out)
    assert said, out
    frames, lengths = int(said[1]), [int(n) for n in said[4].split(", ")]
    assert len(lengths) == 2 and all(1 <= n <= STEPS for n in lengths)
    if family != "classic":  # Pong and HalfCheetah last longer than the step limit
        assert lengths == [STEPS, STEPS]
    assert frames == sum(n + 1 for n in lengths)
    reader = imageio_ffmpeg.read_frames(str(video))
    size = next(reader)["size"]
    assert (sum(1 for _ in reader), size) == (frames, (width, height))
    assert (int(said[2]), int(said[3])) == (height, width)


def test_a_video_of_an_env_it_cannot_rebuild_says_what_it_takes(tmp_path):
    import gymnasium as gym

    from fleetrl.collectors.video import record_video
    from fleetrl.errors import EnvError

    env = gym.make("CartPole-v1")
    with pytest.raises(
        EnvError,
        match=r"env=<.*CartPole.*> is invalid for a video: pass a gymnasium id, an AtariEnv, "
        r"a MujocoEnv, a PartialEnv or a GymId",
    ):
        record_video(None, env, tmp_path / "v.mp4")
    env.close()

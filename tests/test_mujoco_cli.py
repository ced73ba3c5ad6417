"""``configs/{ppo,sac}_mujoco.yaml`` end to end through the CLI on real MuJoCo HalfCheetah.

The shipped files as they are (Ray collectors, CleanRL's continuous PPO, SAC with
twin Q networks and a learned temperature), a tiny budget put on top by overrides:
50-step episodes, two batches of 64 frames, then ``fleetrl train --resume`` to
a third, then ``fleetrl eval``. PPO steps gymnasium's envs, SAC envpool's.
"""

from __future__ import annotations

import csv
from pathlib import Path

import imageio_ffmpeg
import pytest
import yaml

from fleetrl.checkpoint import latest_checkpoint, load_checkpoint
from fleetrl.cli import main
from fleetrl.setup.load import load_config

ROOT = Path(__file__).parent.parent
FPB = 64
TINY = [
    "env.max_episode_steps=50",
    "collector.num_cpus_per_collector=0",
    f"collector.frames_per_batch={FPB}",
    f"trainer.total_frames={2 * FPB}",
    "trainer.test_every=1",
    "trainer.num_test_episodes=1",
    "trainer.checkpoint_every=1",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]
TINY_ALGO = {
    # CleanRL's policy, the shipped file's alternative, trains through the CLI too
    "ppo": ["ppo.num_epochs=1", "ppo.num_mini_batch=2", "ppo.distribution=normal"],
    "sac": [
        "env.engine=envpool",
        "sac.buffer_size=1000",
        f"sac.learning_starts={2 * FPB}",  # random actions; learning once 128 frames are stored
        "sac.updates_per_batch=4",
    ],
}
try:
    import envpool  # noqa: F401

    HAVE_ENVPOOL = True
except ImportError:
    HAVE_ENVPOOL = False


def _rows(run: Path) -> list[dict[str, str]]:
    with (run / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def test_shipped_mujoco_configs_hold_the_published_settings():
    ppo = load_config(ROOT / "configs" / "ppo_mujoco.yaml", [])
    assert (ppo.env.id, ppo.env.engine, ppo.collector.num_collectors) == (
        "HalfCheetah-v5",
        "gymnasium",
        2,
    )
    p = ppo.algo
    assert (p.gae_lambda, p.num_epochs, p.num_mini_batch, p.max_grad_norm) == (0.95, 10, 32, 0.5)
    assert ppo.collector.frames_per_batch == 2048 and p.lr_schedule.value == "linear"
    assert (p.distribution.value, p.hidden_sizes, p.entropy_coef) == ("tanh_normal", [64, 64], 0.0)
    sac = load_config(ROOT / "configs" / "sac_mujoco.yaml", [])
    s = sac.algo
    assert (sac.env.id, s.learning_starts, s.batch_size, s.hidden_sizes) == (
        "HalfCheetah-v5",
        5000,
        256,
        [256, 256],
    )
    # one gradient step per env step
    assert s.updates_per_batch == sac.collector.frames_per_batch


@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_shipped_mujoco_config_trains_resumes_and_evaluates(tmp_path, algo, capsys):
    if algo == "sac" and not HAVE_ENVPOOL:
        pytest.skip("envpool is not installed here")
    config = str(ROOT / "configs" / f"{algo}_mujoco.yaml")
    run = tmp_path / "run"
    assert main(["train", config, *TINY, *TINY_ALGO[algo], "--run-dir", str(run)]) == 0
    rows = _rows(run)
    assert [int(float(r["train/frames"])) for r in rows] == [FPB, 2 * FPB]
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["env"]["id"] == "HalfCheetah-v5" and saved["collector"]["num_collectors"] == 2
    assert saved[algo]["hidden_sizes"] == ([64, 64] if algo == "ppo" else [256, 256])
    state = load_checkpoint(latest_checkpoint(run))
    assert (state["frames"], state["iterations"]) == (2 * FPB, 2)
    assert state["collector"] is None  # Ray collected: no local collector state
    # 50-step episodes: each collector's env ended once per 50 of its 64 frames
    assert float(rows[-1]["train/episodes"]) >= 2
    if algo == "ppo":
        # the shipped file normalizes: the learner's statistics count every frame delivered
        assert (saved["env"]["normalize_observation"], saved["env"]["normalize_reward"]) == (
            True,
            True,
        )
        counts = [v for k, v in state["algorithm"]["loss_module"].items() if k.endswith("count")]
        assert counts and all(float(c) == 2 * FPB for c in counts), counts
        assert all(r["loss/objective"] != "" for r in rows)
        assert state["algorithm"]["num_updates"] == 2 * 2  # 1 epoch x 2 minibatches per batch
        assert any("log_std" in k for k in state["algorithm"]["loss_module"])  # the override's
    else:
        assert rows[0]["loss/qvalue"] == ""  # the first batch only fills the memory
        assert float(rows[1]["loss/qvalue"]) >= 0 and float(rows[1]["train/alpha"]) > 0
        assert float(rows[1]["train/buffer_size"]) == 2 * FPB
    assert all(r["eval/return_mean"] != "" for r in rows)  # evaluated every iteration
    assert "frames 128" in capsys.readouterr().out
    # the budget raised: the run goes on from its checkpoint
    assert main(["train", "--resume", str(run), f"trainer.total_frames={3 * FPB}"]) == 0
    assert [int(float(r["train/frames"])) for r in _rows(run)] == [FPB, 2 * FPB, 3 * FPB]
    assert load_checkpoint(latest_checkpoint(run))["frames"] == 3 * FPB
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert f"{algo} on HalfCheetah-v5, 2 episodes, deterministic: mean return" in out
    if algo == "ppo":  # and watched: HalfCheetah never falls, so 50 steps + the reset frame
        video = tmp_path / "cheetah.mp4"
        assert main(["eval", str(run), "--video", str(video)]) == 0
        reader = imageio_ffmpeg.read_frames(str(video))
        width, height = next(reader)["size"]
        assert (sum(1 for _ in reader), height, width) == (51, 480, 480)

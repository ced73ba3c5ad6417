"""``fleetrl train`` on pixels, end to end: the Atari configs' algorithm sections on the fake
pixel env (uint8 frame stacks, no ALE), locally and through a Ray collector."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fakes import PIXEL_ENV_ID, PIXEL_SHAPE
from fleetrl.checkpoint import latest_checkpoint, load_checkpoint
from fleetrl.cli import main
from fleetrl.setup.resume import FROZEN_MSG
from runs import conv_shapes, rows

ROOT = Path(__file__).resolve().parents[2]
FRAMES = 64  # per batch: 2 envs x 32 steps
QUIET = [
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]
#: what the Atari hyperparameters need to finish a tiny budget (the rest is the shipped section)
TINY_ALGO = {
    "ppo": [],
    "dqn": ["dqn.buffer_size=1000", "dqn.learning_starts=64", "dqn.updates_per_batch=4"],
}


def atari_config(tmp_path: Path, algo: str, num_collectors: int) -> Path:
    """configs/<algo>_atari.yaml's algorithm section with the fake pixel env and a tiny budget.

    The shipped file names ALE/Pong-v5 and the env engine; those are exercised where ALE is.
    """
    shipped = yaml.safe_load((ROOT / "configs" / f"{algo}_atari.yaml").read_text())
    data = {
        "algorithm": algo,
        "env": {"id": PIXEL_ENV_ID, "num_envs": 2},
        "collector": {
            "num_collectors": num_collectors,
            "frames_per_batch": FRAMES * max(1, num_collectors),
            "num_cpus_per_collector": 1,
        },
        "trainer": {
            "total_frames": 2 * FRAMES * max(1, num_collectors),
            "target_return": None,
            "test_every": 2,
            "num_test_episodes": 2,
            "checkpoint_every": 1,
        },
        algo: shipped[algo],
    }
    path = tmp_path / f"{algo}_pixels.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def train(tmp_path: Path, algo: str, num_collectors: int) -> Path:
    run = tmp_path / "run"
    config = atari_config(tmp_path, algo, num_collectors)
    rc = main(["train", str(config), *QUIET, *TINY_ALGO[algo], "--run-dir", str(run)])
    assert rc == 0
    return run


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_cli_trains_an_atari_config_on_pixels_locally(tmp_path, algo):
    run = train(tmp_path, algo, num_collectors=0)
    metrics = rows(run)
    assert [int(float(r["train/frames"])) for r in metrics] == [FRAMES, 2 * FRAMES]
    loss_key = "loss/objective" if algo == "ppo" else "loss/td"
    assert metrics[1][loss_key] != ""
    assert float(metrics[1]["eval/return_mean"]) >= 0.0
    if algo == "dqn":
        assert float(metrics[1]["train/buffer_size"]) == 2 * FRAMES
    assert latest_checkpoint(run).name == f"checkpoint_{2 * FRAMES:012d}.pt"
    # model: auto chose the Nature CNN for the uint8 frame stacks
    assert (32, PIXEL_SHAPE[0], 8, 8) in conv_shapes(load_checkpoint(latest_checkpoint(run)))
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved[algo]["model"] == "auto"


def test_resume_refuses_another_model(tmp_path, capsys):
    run = train(tmp_path, "ppo", num_collectors=0)
    capsys.readouterr()
    rc = main(["train", "--resume", str(run), "trainer.total_frames=256", "ppo.model=impala"])
    assert rc == 2
    assert (
        FROZEN_MSG.format(
            key="ppo.model",
            value="impala",
            before="auto",
            run_dir=run,
            what="networks of that kind",
        )
        in capsys.readouterr().err
    )

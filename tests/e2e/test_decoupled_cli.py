"""Decoupled off-policy training (collector.decoupled): ratio, publishing, CLI, resume, checks."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from fleetrl.checkpoint import latest_checkpoint, load_checkpoint
from fleetrl.cli import main

pytestmark = pytest.mark.usefixtures("ray_session")

ROOT = Path(__file__).resolve().parents[2]
DQN = str(ROOT / "configs" / "dqn_cartpole.yaml")
TINY = [
    "collector.decoupled=true",
    "collector.num_collectors=2",
    "env.num_envs=2",
    "collector.frames_per_batch=64",
    "dqn.learning_starts=64",
    "dqn.updates_per_batch=4",
    "dqn.batch_size=16",
    "dqn.hidden_sizes=[32]",
    "trainer.target_return=null",
    "trainer.test_every=0",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]


def test_cli_trains_decoupled_dqn_then_resumes_with_its_buffer(tmp_path, capsys):
    run = tmp_path / "run"
    args = [*TINY, "trainer.checkpoint_every=2", "trainer.weight_update_interval=4"]
    assert main(["train", DQN, *args, "trainer.total_frames=256", "--run-dir", str(run)]) == 0
    with (run / "metrics.csv").open() as f:
        metrics = list(csv.DictReader(f))
    frames = [int(float(r["train/frames"])) for r in metrics]
    assert frames[-1] == 256 and all(b - a >= 64 for a, b in zip([0, *frames], frames[:-1]))
    assert int(float(metrics[-1]["train/policy_version"])) == (256 - 64) * 4 // 64 == 12
    assert sum(float(r["train/episodes"]) > 0 for r in metrics[-1:]) == 1
    state = load_checkpoint(latest_checkpoint(run))
    assert state["frames"] == 256 and state["algorithm"]["num_updates"] == 12
    # the buffer actor's content is the checkpoint's buffer
    assert state["algorithm"]["buffer"]["_storage"]["_len"] == 256
    assert state["algorithm"]["frames_seen"] == 256
    assert "frames 256" in capsys.readouterr().out
    assert main(["train", "--resume", str(run), "trainer.total_frames=384"]) == 0
    resumed = load_checkpoint(latest_checkpoint(run))
    assert resumed["frames"] == 384
    # the ratio counts the resumed buffer's frames: (384 - 64) * 4 / 64 updates in all
    assert resumed["algorithm"]["num_updates"] == 20
    assert resumed["algorithm"]["buffer"]["_storage"]["_len"] == 384

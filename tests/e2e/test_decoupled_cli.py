"""Decoupled DQN through the CLI on Ray: trains, checkpoints with its buffer, resumes."""

from __future__ import annotations

import csv

import pytest

from fleetrl.cli import main
from fleetrl.run.checkpoint import latest_checkpoint, load_checkpoint
from runs import DECOUPLED_DQN, DECOUPLED_TINY

pytestmark = pytest.mark.usefixtures("ray_session")


def test_cli_trains_decoupled_dqn_then_resumes_with_its_buffer(tmp_path, capsys):
    run = tmp_path / "run"
    args = [*DECOUPLED_TINY, "trainer.checkpoint_every=2", "trainer.weight_update_interval=1"]
    assert (
        main(["train", DECOUPLED_DQN, *args, "trainer.total_frames=256", "--run-dir", str(run)])
        == 0
    )
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

"""IMPALA and APPO through the CLI from their shipped configs: async Ray collectors, first
ready first learned, checkpoint written, metrics with the lag columns, resume and eval."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from fleetrl.checkpoint import latest_checkpoint, load_checkpoint
from fleetrl.cli import main
from fleetrl.setup.load import load_config

ROOT = Path(__file__).parent.parent
FPB = 64
#: 2 async Ray collectors x 2 envs, 4 batches of 64 frames, one checkpoint per iteration
TINY = [
    "env.num_envs=2",
    "collector.num_cpus_per_collector=0",
    f"collector.frames_per_batch={FPB}",
    f"trainer.total_frames={4 * FPB}",
    "trainer.target_return=null",
    "trainer.test_every=2",
    "trainer.num_test_episodes=1",
    "trainer.checkpoint_every=1",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]


@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize("name", ["impala", "appo"])
def test_shipped_config_trains_on_async_ray_collectors_and_resumes(tmp_path, name, capsys):
    config = str(ROOT / "configs" / f"{name}_cartpole.yaml")
    shipped = load_config(config, [])
    assert shipped.algorithm == name
    assert shipped.collector.num_collectors == 2 and shipped.collector.sync is False
    section = [f"{name}.hidden_sizes=[16]"]
    if name == "appo":
        section += ["appo.num_epochs=1", "appo.num_mini_batch=2"]
    run = tmp_path / "run"
    assert main(["train", config, *TINY, *section, "--run-dir", str(run)]) == 0
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert [int(float(r["train/frames"])) for r in rows] == [FPB, 2 * FPB, 3 * FPB, 4 * FPB]
    steps = 1 if name == "impala" else 2  # optimizer steps per batch
    assert [int(float(r["train/policy_version"])) for r in rows] == [
        steps * i for i in (1, 2, 3, 4)
    ]
    for r in rows:  # the lag of each batch, in optimizer steps, as a distribution
        lag, lag_max = float(r["train/policy_lag"]), float(r["train/policy_lag_max"])
        assert 0 <= lag <= lag_max <= float(r["train/policy_version"])
        assert float(r["train/dropped_batches"]) == 0  # the shipped bound is far above
        assert not math.isnan(float(r["time/learn_s"]))
    state = load_checkpoint(latest_checkpoint(run))
    assert state["frames"] == 4 * FPB and state["algorithm"]["num_updates"] == 4 * steps
    out = capsys.readouterr().out
    assert "frames 256" in out
    # the budget raised: the run goes on from its checkpoint
    more = f"trainer.total_frames={6 * FPB}"
    assert main(["train", "--resume", str(run), more]) == 0
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert [int(float(r["train/frames"])) for r in rows][-2:] == [5 * FPB, 6 * FPB]
    assert main(["eval", str(run), "--episodes", "1"]) == 0

"""Constructor-to-first-batch: ``Trainer.startup_s``, printed by ``fleetrl train``.

``benchmarks/time_to_solve.py`` reads the figure from the CLI's summary line.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from fleetrl import Trainer, load_config
from fleetrl.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from time_to_solve import STARTUP_RE

ROOT = Path(__file__).resolve().parent.parent
QUIET = [
    "collector.frames_per_batch=256",
    "trainer.total_frames=512",
    "trainer.test_every=0",
    "trainer.checkpoint_every=0",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]


def test_startup_is_set_by_the_first_batch_and_lies_within_the_run(tmp_path):
    config = load_config(
        ROOT / "configs" / "ppo_cartpole.yaml", [*QUIET, "collector.num_collectors=0"]
    )
    before = time.perf_counter()
    trainer = Trainer(config, run_dir=tmp_path / "run")
    assert trainer.startup_s is None  # no batch yet
    metrics = trainer.train()
    whole = time.perf_counter() - before
    assert metrics["train/frames"] == 512
    # the first batch arrived before the second (last) iteration began
    assert 0 < trainer.startup_s < whole - metrics["time/iteration_s"]


@pytest.mark.usefixtures("ray_session")
def test_cli_prints_startup_of_a_run_on_ray_collectors(tmp_path, capsys):
    run = tmp_path / "run"
    args = [*QUIET, "env.num_envs=2", "--run-dir", str(run)]
    assert main(["train", str(ROOT / "configs" / "ppo_cartpole.yaml"), *args]) == 0
    summary = [line for line in capsys.readouterr().out.splitlines() if line.startswith("frames")]
    assert len(summary) == 1 and summary[0].startswith("frames 512  ")
    startup = STARTUP_RE.search(summary[0])
    assert startup is not None and float(startup.group(1)) > 0

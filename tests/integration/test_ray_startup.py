"""Constructor-to-first-batch: ``Trainer.startup_s``, printed by ``fleetrl train``.

``benchmarks/time_to_solve.py`` reads the figure from the CLI's summary line.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fleetrl.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from time_to_solve import STARTUP_RE

ROOT = Path(__file__).resolve().parents[2]
QUIET = [
    "collector.frames_per_batch=256",
    "trainer.total_frames=512",
    "trainer.test_every=0",
    "trainer.checkpoint_every=0",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]


@pytest.mark.usefixtures("ray_session")
def test_cli_prints_startup_of_a_run_on_ray_collectors(tmp_path, capsys):
    run = tmp_path / "run"
    args = [*QUIET, "env.num_envs=2", "--run-dir", str(run)]
    assert main(["train", str(ROOT / "configs" / "ppo_cartpole.yaml"), *args]) == 0
    summary = [line for line in capsys.readouterr().out.splitlines() if line.startswith("frames")]
    assert len(summary) == 1 and summary[0].startswith("frames 512  ")
    startup = STARTUP_RE.search(summary[0])
    assert startup is not None and float(startup.group(1)) > 0

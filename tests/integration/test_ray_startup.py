"""``fleetrl train`` prints ``Trainer.startup_s`` for a run on Ray collectors, in the form
``benchmarks/time_to_solve.py`` reads (the measurement itself: tests/unit/test_startup.py)."""

from __future__ import annotations

import pytest

from fleetrl.cli import main
from runs import ROOT, STARTUP_RUN
from time_to_solve import STARTUP_RE


@pytest.mark.usefixtures("ray_session")
def test_cli_prints_startup_of_a_run_on_ray_collectors(tmp_path, capsys):
    run = tmp_path / "run"
    args = [*STARTUP_RUN, "env.num_envs=2", "--run-dir", str(run)]
    assert main(["train", str(ROOT / "configs" / "ppo_cartpole.yaml"), *args]) == 0
    summary = [line for line in capsys.readouterr().out.splitlines() if line.startswith("frames")]
    assert len(summary) == 1 and summary[0].startswith("frames 512  ")
    startup = STARTUP_RE.search(summary[0])
    assert startup is not None and float(startup.group(1)) > 0

"""Resources Ray cannot give are refused in config keys before any actor starts, and leave
no run directory (the other bad inputs at the CLI: tests/unit/test_cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetrl.cli import main
from fleetrl.errors import ConfigError
from fleetrl.run.trainer import Trainer
from fleetrl.setup.load import config_from_dict
from runs import ONE_UPDATE, ROOT

PPO = str(ROOT / "configs" / "ppo_cartpole.yaml")


@pytest.fixture(scope="module")
def complete_run(tmp_path_factory) -> Path:
    """A run that trained its whole budget: 256 frames."""
    run = tmp_path_factory.mktemp("complete") / "run"
    assert main(["train", PPO, *ONE_UPDATE, "--run-dir", str(run)]) == 0
    return run


@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize("existing", [False, True], ids=["new run dir", "existing run dir"])
def test_collectors_ray_cannot_place_are_named_in_config_keys_and_leave_nothing(
    tmp_path, existing, capsys
):
    """The session's Ray has 4 CPUs; 8 collectors of 1 CPU cannot start."""
    run = tmp_path / "run"
    if existing:
        run.mkdir()
        (run / "notes.txt").write_text("mine")
    overrides = [o for o in ONE_UPDATE if not o.startswith("collector.num_collectors")]
    rc = main(
        [
            "train",
            PPO,
            *overrides,
            "collector.num_collectors=8",
            "collector.frames_per_batch=512",
            "trainer.total_frames=512",
            "--run-dir",
            str(run),
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert (
        "collector.num_collectors=8 is invalid here: 8 collectors x "
        "collector.num_cpus_per_collector=1 ask Ray for 8 CPUs but the Ray cluster has 4; lower "
        "collector.num_cpus_per_collector (e.g. 0.5), use fewer collectors, or attach to a "
        "bigger cluster with collector.address"
    ) in err
    assert "remote_configs" not in err
    if existing:
        assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]
    else:
        assert not run.exists()


@pytest.mark.usefixtures("ray_session")
def test_one_collector_larger_than_any_node_is_named_in_config_keys(tmp_path):
    cfg = config_from_dict(
        {"algorithm": "ppo"},
        [o for o in ONE_UPDATE if not o.startswith("collector.num_collectors")]
        + ["collector.num_collectors=1", "collector.num_cpus_per_collector=16"],
    )
    with pytest.raises(ConfigError) as info:
        Trainer(cfg, run_dir=tmp_path / "run").train()  # said once Ray answers
    assert (
        "collector.num_cpus_per_collector=16 is invalid here: each collector asks Ray for 16 CPUs "
        "but no Ray node has more than 4; lower collector.num_cpus_per_collector (e.g. 4)"
    ) in str(info.value)
    assert "remote_configs" not in str(info.value)
    assert not (tmp_path / "run").exists()

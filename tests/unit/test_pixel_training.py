"""``fleetrl train`` on pixels, end to end: the Atari configs' algorithm sections on the fake
pixel env (uint8 frame stacks, no ALE), locally and through a Ray collector."""

from __future__ import annotations

import pytest
import yaml

from fakes import PIXEL_SHAPE
from fleetrl.cli import main
from fleetrl.run.checkpoint import latest_checkpoint, load_checkpoint
from fleetrl.setup.resume import FROZEN_MSG
from runs import PIXEL_FRAMES as FRAMES
from runs import conv_shapes, rows
from runs import train_on_pixels as train


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

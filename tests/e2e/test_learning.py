"""PPO learns CartPole past a mean return of 200 through the CLI."""

from __future__ import annotations

import pytest
import torch

from fleetrl.setup.load import load_config
from fleetrl.trainer import Trainer
from runs import ROOT

pytestmark = pytest.mark.usefixtures("ray_session")


def test_ppo_learns_cartpole_past_200(tmp_path):
    torch.manual_seed(0)
    cfg = load_config(
        ROOT / "configs" / "ppo_cartpole.yaml",
        [
            "trainer.total_frames=81920",
            "trainer.target_return=200",
            "trainer.test_every=0",
            "trainer.checkpoint_every=0",
            "logging.progress_bar=false",
            "logging.tensorboard=false",
            "logging.plot=false",
        ],
    )
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    trainer.train()
    assert trainer.target_reached(), list(trainer.recent_returns)
    assert trainer.frames <= 81920

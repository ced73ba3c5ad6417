"""Trainer and CLI, end to end on the session's Ray instance."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fleetrl.setup.load import load_config
from fleetrl.trainer import Trainer

pytestmark = pytest.mark.usefixtures("ray_session")
ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "collector.num_collectors=1",
    "env.num_envs=4",
    "trainer.target_return=null",
    "trainer.num_test_episodes=2",
    "logging.progress_bar=false",
]


ALGO_TINY = {
    "ppo_cartpole.yaml": (512, []),
    "a2c_cartpole.yaml": (256, []),
    "dqn_cartpole.yaml": (128, ["dqn.learning_starts=128", "dqn.updates_per_batch=2"]),
    "sac_pendulum.yaml": (
        128,
        ["sac.learning_starts=128", "sac.updates_per_batch=2", "env.num_envs=2"],
    ),
    "ppo_pendulum.yaml": (512, ["ppo.num_mini_batch=4"]),
}


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


SCHEME_METRICS = {
    "train/policy_lag",
    "train/grad_asynchrony",
    "train/dropped_gradients",
    "train/policy_version",
    "time/fps",
    "time/updates_per_s",
    "time/collect_s",
    "time/grad_s",
    "time/update_s",
    "time/broadcast_s",
    "time/collect_to_process",
}

"""Exact resume: N frames straight and N/2 + ``fleetrl train --resume`` to N end the same.

For the central learner with local collection (``collector.num_collectors=0``)
the final checkpoints of the two runs are compared bit for bit (weights,
optimizer state, replay buffer, collector and env state, random state,
counters) and so are the metrics rows, without the wall-clock ``time/``
columns. Where resume cannot be exact, it says so in one log line.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fleetrl.checkpoint import latest_checkpoint, load_checkpoint
from fleetrl.cli import main

ROOT = Path(__file__).resolve().parents[2]
LOCAL = [
    "collector.num_collectors=0",
    "trainer.target_return=null",
    "trainer.checkpoint_every=0",
    "trainer.num_test_episodes=2",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]
#: the same for ppo_cartpole.yaml, whose learning rate otherwise decays
PPO_LOCAL = [*LOCAL, "ppo.lr_schedule=constant"]


# ------------------------------------------------------------------ approximate resume


def approximate_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "is approximate" in r.getMessage()]


def split_run(
    tmp_path: Path, caplog, args: list[str], half: int, total: int, *resume_args: str
) -> Path:
    """Train ``half`` frames, then resume to ``total``; returns the run directory."""
    run = tmp_path / "run"
    path = str(ROOT / "configs" / "ppo_cartpole.yaml")
    assert main(["train", path, *args, f"trainer.total_frames={half}", "--run-dir", str(run)]) == 0
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        resume = ["train", "--resume", str(run), f"trainer.total_frames={total}", *resume_args]
        assert main(resume) == 0
    assert load_checkpoint(latest_checkpoint(run))["frames"] == total
    return run


def test_resume_with_ray_collection_says_it_is_approximate(tmp_path, caplog, ray_session):
    from fleetrl.learners.central import APPROX_RAY_MSG

    args = [
        *PPO_LOCAL,
        "collector.num_collectors=1",
        "env.num_envs=2",
        "collector.frames_per_batch=64",
        "ppo.num_epochs=1",
        "ppo.num_mini_batch=1",
        "trainer.test_every=0",
    ]
    run = split_run(tmp_path, caplog, args, 128, 256)
    lines = approximate_lines(caplog)
    assert len(lines) == 1 and APPROX_RAY_MSG.format(n=1) in lines[0]
    state = load_checkpoint(latest_checkpoint(run))
    assert state["collector"] is None and state["iterations"] == 4

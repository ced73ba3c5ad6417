"""Trainer and CLI, end to end on the session's Ray instance."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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


def test_readme_quickstart_runs(ray_session):
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- quickstart-ppo -->\s*```python\n(.*?)```", text, re.S)
    assert block, "README lost its PPO quickstart block"
    scope: dict = {}
    exec(compile(block.group(1), "README.md quickstart", "exec"), scope)
    assert scope["collector"].frames == 40_960


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

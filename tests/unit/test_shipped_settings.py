"""``configs/{ppo,sac}_mujoco.yaml`` end to end through the CLI on real MuJoCo HalfCheetah.

The shipped files as they are (Ray collectors, CleanRL's continuous PPO, SAC with
twin Q networks and a learned temperature), a tiny budget put on top by overrides:
50-step episodes, two batches of 64 frames, then ``fleetrl train --resume`` to
a third, then ``fleetrl eval``. PPO steps gymnasium's envs, SAC envpool's.
"""

from __future__ import annotations

import csv
from pathlib import Path

from fleetrl.setup.load import load_config

ROOT = Path(__file__).resolve().parents[2]
FPB = 64
TINY = [
    "env.max_episode_steps=50",
    "collector.num_cpus_per_collector=0",
    f"collector.frames_per_batch={FPB}",
    f"trainer.total_frames={2 * FPB}",
    "trainer.test_every=1",
    "trainer.num_test_episodes=1",
    "trainer.checkpoint_every=1",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]
TINY_ALGO = {
    # CleanRL's policy, the shipped file's alternative, trains through the CLI too
    "ppo": ["ppo.num_epochs=1", "ppo.num_mini_batch=2", "ppo.distribution=normal"],
    "sac": [
        "env.engine=envpool",
        "sac.buffer_size=1000",
        f"sac.learning_starts={2 * FPB}",  # random actions; learning once 128 frames are stored
        "sac.updates_per_batch=4",
    ],
}
try:
    import envpool  # noqa: F401

    HAVE_ENVPOOL = True
except ImportError:
    HAVE_ENVPOOL = False


def _rows(run: Path) -> list[dict[str, str]]:
    with (run / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def test_shipped_mujoco_configs_hold_the_published_settings():
    ppo = load_config(ROOT / "configs" / "ppo_mujoco.yaml", [])
    assert (ppo.env.id, ppo.env.engine, ppo.collector.num_collectors) == (
        "HalfCheetah-v5",
        "gymnasium",
        2,
    )
    p = ppo.algo
    assert (p.gae_lambda, p.num_epochs, p.num_mini_batch, p.max_grad_norm) == (0.95, 10, 32, 0.5)
    assert ppo.collector.frames_per_batch == 2048 and p.lr_schedule.value == "linear"
    assert (p.distribution.value, p.hidden_sizes, p.entropy_coef) == ("tanh_normal", [64, 64], 0.0)
    sac = load_config(ROOT / "configs" / "sac_mujoco.yaml", [])
    s = sac.algo
    assert (sac.env.id, s.learning_starts, s.batch_size, s.hidden_sizes) == (
        "HalfCheetah-v5",
        5000,
        256,
        [256, 256],
    )
    # one gradient step per env step
    assert s.updates_per_batch == sac.collector.frames_per_batch

"""``configs/{ppo,sac}_mujoco.yaml`` end to end through the CLI on real MuJoCo HalfCheetah.

The shipped files as they are (Ray collectors, CleanRL's continuous PPO, SAC with
twin Q networks and a learned temperature), a tiny budget put on top by overrides:
50-step episodes, two batches of 64 frames, then ``fleetrl train --resume`` to
a third, then ``fleetrl eval``. PPO steps gymnasium's envs, SAC envpool's.
"""

from __future__ import annotations

from fleetrl.setup.load import load_config
from runs import ROOT


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
    # 4 envs per collector, on-policy, the update compiled: the fastest settings measured
    # that reach both targets (docs/benchmarks/mujoco_learning.md says why)
    assert (ppo.env.num_envs, ppo.collector.prefetch, p.compile) == (4, 0, True)
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

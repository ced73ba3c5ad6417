"""``benchmarks/mujoco_collection.py``: its actor is the shipped config's, and its raw
limit's tanh-normal draw is torchrl's, from the same random state (no timing here)."""

from __future__ import annotations

import torch
from torchrl.modules import TanhNormal

from fleetrl import load_config
from fleetrl.networks.normalization import ObservationNormalizer
from mujoco_collection import ENV, RawLoop, ppo_actor, tanh_normal_draw
from runs import ROOT


def test_the_actor_is_the_shipped_configs():
    config = load_config(str(ROOT / "configs" / "ppo_mujoco.yaml"))
    assert config.env.id == ENV and config.env.normalize_observation
    assert config.algo.hidden_sizes == [64, 64] and config.algo.distribution == "tanh_normal"
    actor, _ = ppo_actor()
    modules = list(actor.modules())
    (norm,) = [m for m in modules if isinstance(m, ObservationNormalizer)]
    assert norm.clip == config.env.clip_observation and norm.count.item() == 1000
    assert [m.out_features for m in modules if isinstance(m, torch.nn.Linear)] == [64, 64, 12]
    assert actor.module[1].distribution_class is TanhNormal


def test_the_raw_draw_is_torchrls_tanh_normal():
    loc, scale = torch.randn(4, 6) * 2, torch.rand(4, 6) + 0.1
    torch.manual_seed(0)
    want = TanhNormal(loc, scale).rsample_and_log_prob()
    torch.manual_seed(0)
    got = tanh_normal_draw(loc, scale)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-5)


def test_the_raw_loop_writes_every_step():
    actor, info = ppo_actor()
    raw = RawLoop(actor, info, num_envs=2, steps=8)
    try:
        assert raw.run() > 0
        assert raw.action.abs().max() <= 1.0 and torch.isfinite(raw.log_prob).all()
        assert raw.obs.shape == (8, 2, 17) and raw.discounted.shape == (8, 2)
    finally:
        raw.shutdown()

"""Pixels through Ray: the PPO Atari config on the fake pixel env through a Ray collector, and
uint8 frame stacks across Ray, compressed or not (locally: tests/unit/test_pixel_training.py)."""

from __future__ import annotations

import pytest
import torch

from fakes import PIXEL_ENV_ID, PIXEL_SHAPE
from fleetrl.algorithms import PPO, PPOConfig
from fleetrl.collectors import RayCollector
from fleetrl.envs.probe import env_spec
from fleetrl.run.checkpoint import latest_checkpoint, load_checkpoint
from runs import PIXEL_FRAMES as FRAMES
from runs import conv_shapes, rows
from runs import train_on_pixels as train


@pytest.mark.usefixtures("ray_session")
def test_cli_trains_the_ppo_atari_config_through_a_ray_collector(tmp_path):
    run = train(tmp_path, "ppo", num_collectors=1)
    metrics = rows(run)
    assert [int(float(r["train/frames"])) for r in metrics] == [FRAMES, 2 * FRAMES]
    assert metrics[1]["loss/objective"] != ""
    state = load_checkpoint(latest_checkpoint(run))
    assert state["frames"] == 2 * FRAMES
    assert (32, PIXEL_SHAPE[0], 8, 8) in conv_shapes(state)


@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize("compress", [None, "lz4"])
def test_pixel_batches_cross_ray_as_uint8(compress):
    torch.manual_seed(0)
    ppo = PPO(PPOConfig(), env_spec(PIXEL_ENV_ID))
    collector = RayCollector(
        PIXEL_ENV_ID,
        ppo.policy,
        frames_per_batch=FRAMES,
        total_frames=FRAMES,
        num_collectors=1,
        num_workers_per_collector=2,
        sync=True,
        compress=compress,
    )
    try:
        (batch,) = list(collector)
        stats = collector.stats()
    finally:
        collector.shutdown()
    for key in ("observation", ("next", "observation")):
        assert batch.get(key).dtype == torch.uint8
        assert batch.get(key).shape[-3:] == torch.Size(PIXEL_SHAPE)
    assert batch.numel() == FRAMES
    # the fake's frames name their step and action: nothing was rescaled on the way
    first = batch["next", "observation"][..., 0, 0, 0].long()
    assert set(first.flatten().tolist()) <= {
        (16 * t + a) % 256 for t in range(1, 7) for a in range(3)
    }
    # bytes per frame over Ray: two uint8 frame stacks (28,224 B each) and small change;
    # float32 frames would be 4x that
    frame_bytes = 2 * 4 * 84 * 84
    if compress:
        assert frame_bytes <= stats["compression"]["bytes_raw"] / FRAMES < frame_bytes + 1024

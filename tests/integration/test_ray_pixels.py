"""``fleetrl train`` on pixels, end to end: the Atari configs' algorithm sections on the fake
pixel env (uint8 frame stacks, no ALE), locally and through a Ray collector."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from fakes import PIXEL_ENV_ID, PIXEL_SHAPE
from fleetrl.algorithms import PPO, PPOConfig
from fleetrl.checkpoint import latest_checkpoint, load_checkpoint
from fleetrl.cli import main
from fleetrl.collectors import RayCollector
from fleetrl.envs.spec import env_spec
from runs import conv_shapes, rows

ROOT = Path(__file__).resolve().parents[2]
FRAMES = 64  # per batch: 2 envs x 32 steps
QUIET = [
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]
#: what the Atari hyperparameters need to finish a tiny budget (the rest is the shipped section)
TINY_ALGO = {
    "ppo": [],
    "dqn": ["dqn.buffer_size=1000", "dqn.learning_starts=64", "dqn.updates_per_batch=4"],
}


def atari_config(tmp_path: Path, algo: str, num_collectors: int) -> Path:
    """configs/<algo>_atari.yaml's algorithm section with the fake pixel env and a tiny budget.

    The shipped file names ALE/Pong-v5 and the env engine; those are exercised where ALE is.
    """
    shipped = yaml.safe_load((ROOT / "configs" / f"{algo}_atari.yaml").read_text())
    data = {
        "algorithm": algo,
        "env": {"id": PIXEL_ENV_ID, "num_envs": 2},
        "collector": {
            "num_collectors": num_collectors,
            "frames_per_batch": FRAMES * max(1, num_collectors),
            "num_cpus_per_collector": 1,
        },
        "trainer": {
            "total_frames": 2 * FRAMES * max(1, num_collectors),
            "target_return": None,
            "test_every": 2,
            "num_test_episodes": 2,
            "checkpoint_every": 1,
        },
        algo: shipped[algo],
    }
    path = tmp_path / f"{algo}_pixels.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def train(tmp_path: Path, algo: str, num_collectors: int) -> Path:
    run = tmp_path / "run"
    config = atari_config(tmp_path, algo, num_collectors)
    rc = main(["train", str(config), *QUIET, *TINY_ALGO[algo], "--run-dir", str(run)])
    assert rc == 0
    return run


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

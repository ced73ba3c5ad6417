"""Reading a run's files back: the metrics rows, checkpoints compared bit for bit."""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path
from typing import Any

import torch
import yaml

from fakes import PIXEL_ENV_ID
from fleetrl.cli import main
from fleetrl.run.checkpoint import latest_checkpoint, load_checkpoint

#: the repository's root (configs/, benchmarks/)
ROOT = Path(__file__).resolve().parent.parent
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


def rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def metric_rows(run: Path) -> list[dict[str, float]]:
    """metrics.csv as floats, without the wall-clock columns."""
    with (run / "metrics.csv").open() as f:
        return [
            {k: float(v) for k, v in row.items() if v != "" and not k.startswith("time/")}
            for row in csv.DictReader(f)
        ]


def assert_identical(a: Any, b: Any, path: str = "checkpoint") -> None:
    """Equal bit for bit: same structure, tensors of the same dtype and values (NaN == NaN)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{path}: {a.keys()} vs {b.keys()}"
        for key in a:
            assert_identical(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{path}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, path
        same = torch.equal(a, b)
        if not same and a.is_floating_point():  # NaN where the other has NaN counts as equal
            same = torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
        assert same, f"{path}: max abs difference {(a.double() - b.double()).abs().max()}"
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), path
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


#: ppo_cartpole.yaml as a tiny run without Ray: one update of 256 frames
ONE_UPDATE = [
    "collector.num_collectors=0",
    "env.num_envs=4",
    "collector.frames_per_batch=256",
    "trainer.total_frames=256",
    "trainer.target_return=null",
    "trainer.test_every=0",
    "ppo.num_epochs=1",
    "ppo.num_mini_batch=2",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]


#: two batches of 256 frames, nothing but the run itself (no eval, checkpoint or logs)
STARTUP_RUN = [
    "collector.frames_per_batch=256",
    "trainer.total_frames=512",
    "trainer.test_every=0",
    "trainer.checkpoint_every=0",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]


#: a tiny PPO run with observation normalization and reward scaling
NORMALIZED_TINY = [
    "env.num_envs=2",
    "collector.frames_per_batch=64",
    "ppo.num_epochs=1",
    "ppo.num_mini_batch=2",
    "ppo.hidden_sizes=[16]",
    "env.normalize_observation=true",
    "env.normalize_reward=true",
]


# ------------------------------------------------ resume


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


def conv_shapes(state: dict) -> list[tuple[int, ...]]:
    """The shapes of the conv kernels a checkpoint's algorithm state holds."""
    return [tuple(v.shape) for v in state["algorithm"]["loss_module"].values() if v.dim() == 4]


# ------------------------------------------------ the Atari configs' algorithms on pixels

PIXEL_FRAMES = 64  # per batch: 2 envs x 32 steps
PIXEL_QUIET = [
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]
#: what the Atari hyperparameters need to finish a tiny budget (the rest is the shipped section)
PIXEL_TINY_ALGO = {
    "ppo": [],
    "dqn": ["dqn.buffer_size=1000", "dqn.learning_starts=64", "dqn.updates_per_batch=4"],
}


def pixel_config(tmp_path: Path, algo: str, num_collectors: int) -> Path:
    """configs/<algo>_atari.yaml's algorithm section with the fake pixel env and a tiny budget.

    The shipped file names ALE/Pong-v5 and the env engine; those are exercised where ALE is.
    """
    shipped = yaml.safe_load((ROOT / "configs" / f"{algo}_atari.yaml").read_text())
    data = {
        "algorithm": algo,
        "env": {"id": PIXEL_ENV_ID, "num_envs": 2},
        "collector": {
            "num_collectors": num_collectors,
            "frames_per_batch": PIXEL_FRAMES * max(1, num_collectors),
            "num_cpus_per_collector": 1,
        },
        "trainer": {
            "total_frames": 2 * PIXEL_FRAMES * max(1, num_collectors),
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


def train_on_pixels(tmp_path: Path, algo: str, num_collectors: int) -> Path:
    run = tmp_path / "run"
    config = pixel_config(tmp_path, algo, num_collectors)
    rc = main(["train", str(config), *PIXEL_QUIET, *PIXEL_TINY_ALGO[algo], "--run-dir", str(run)])
    assert rc == 0
    return run


# ------------------------------------------------ decoupled DQN (collector.decoupled)

DECOUPLED_DQN = str(ROOT / "configs" / "dqn_cartpole.yaml")
#: two Ray collectors writing into the replay actor, a small DQN learning from it
DECOUPLED_TINY = [
    "collector.decoupled=true",
    "collector.num_collectors=2",
    "env.num_envs=2",
    "collector.frames_per_batch=64",
    "dqn.learning_starts=64",
    "dqn.updates_per_batch=4",
    "dqn.batch_size=16",
    "dqn.hidden_sizes=[32]",
    "trainer.target_return=null",
    "trainer.test_every=0",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]

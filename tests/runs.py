"""Reading a run's files back: the metrics rows, checkpoints compared bit for bit."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import torch

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


def conv_shapes(state: dict) -> list[tuple[int, ...]]:
    """The shapes of the conv kernels a checkpoint's algorithm state holds."""
    return [tuple(v.shape) for v in state["algorithm"]["loss_module"].values() if v.dim() == 4]

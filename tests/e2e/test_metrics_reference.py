"""The metrics reference (docs/reference/metrics.md) names every column a run writes, and
only columns the code writes.

Tiny trainings of every algorithm, on the central learner and under sync and async
gradient workers (on the in-process backend: no Ray), write their ``metrics.csv``; each
column found there must be named in the page, in backticks. Each metric name the page
names must be one the code writes (a string literal in ``src/fleetrl``), and the page must
name the whole metric schema every learner reports.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from fleetrl.learners.report import METRIC_COLUMNS
from fleetrl.run.evaluate import EVAL_METRICS
from fleetrl.run.trainer import Trainer
from fleetrl.setup.load import load_config
from runs import ROOT

pytestmark = pytest.mark.e2e

PAGE = ROOT / "docs" / "reference" / "metrics.md"
SRC = ROOT / "src" / "fleetrl"
#: a metric name in backticks: prefix/name, or the one unprefixed column
NAMED = re.compile(r"`((?:train|eval|loss|time)/[a-z0-9_]+|grad_norm)`")

QUIET = [
    "trainer.target_return=null",
    "trainer.checkpoint_every=0",
    "trainer.test_every=2",
    "trainer.num_test_episodes=2",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
    "env.num_envs=4",
    "collector.frames_per_batch=128",
]
GRAD_WORKERS = ["trainer.backend=inprocess", "scheme.num_grad_workers=2"]

#: name -> (config, overrides): every algorithm, and PPO and DQN under gradient workers
RUNS = {
    "ppo central": (
        "ppo_cartpole.yaml",
        [
            "collector.num_collectors=0",
            "trainer.total_frames=256",
            "ppo.entropy_coef=0.01",  # loss/entropy
            "ppo.num_epochs=1",
            "ppo.num_mini_batch=2",
        ],
    ),
    "ppo sync gradient workers": (
        "ppo_cartpole_parallel.yaml",
        [*GRAD_WORKERS, "trainer.total_frames=512", "ppo.num_epochs=1", "ppo.num_mini_batch=2"],
    ),
    "ppo async gradient workers": (
        "ppo_cartpole_async.yaml",
        [*GRAD_WORKERS, "trainer.total_frames=512", "ppo.num_epochs=1", "ppo.num_mini_batch=2"],
    ),
    "a2c": ("a2c_cartpole.yaml", ["collector.num_collectors=0", "trainer.total_frames=256"]),
    "dqn": (
        "dqn_cartpole.yaml",
        [
            "collector.num_collectors=0",
            "trainer.total_frames=384",
            "dqn.learning_starts=128",  # the first row has no loss: the header widens later
            "dqn.updates_per_batch=2",
            "dqn.batch_size=16",
        ],
    ),
    "dqn gradient workers": (
        "dqn_cartpole.yaml",
        [
            *GRAD_WORKERS,
            "collector.num_collectors=0",
            "collector.prefetch=0",
            "trainer.total_frames=512",
            "dqn.learning_starts=256",
            "dqn.updates_per_batch=2",
            "dqn.batch_size=16",
        ],
    ),
    "dqn decoupled": (
        "dqn_cartpole.yaml",
        [
            "trainer.backend=inprocess",
            "collector.decoupled=true",
            "collector.num_collectors=2",
            "trainer.total_frames=512",
            "dqn.learning_starts=128",
            "dqn.updates_per_batch=2",
            "dqn.batch_size=16",
        ],
    ),
    "sac": (
        "sac_pendulum.yaml",
        [
            "collector.num_collectors=0",
            "env.num_envs=1",
            "collector.frames_per_batch=64",
            "trainer.total_frames=192",
            "sac.learning_starts=64",
            "sac.updates_per_batch=2",
            "sac.batch_size=16",
            "sac.hidden_sizes=[16, 16]",
            "sac.max_grad_norm=1.0",  # grad_norm
        ],
    ),
    "impala first ready": (
        "impala_cartpole.yaml",
        ["trainer.backend=inprocess", "trainer.total_frames=512"],
    ),
    "appo first ready": (
        "appo_cartpole.yaml",
        [
            "trainer.backend=inprocess",
            "trainer.total_frames=512",
            "appo.num_epochs=1",
            "appo.num_mini_batch=2",
        ],
    ),
}


def documented() -> set[str]:
    return set(NAMED.findall(PAGE.read_text()))


def header(run: Path) -> list[str]:
    with (run / "metrics.csv").open() as f:
        return next(csv.reader(f))


@pytest.fixture(scope="module")
def columns(tmp_path_factory) -> dict[str, list[str]]:
    """The metrics.csv header of each tiny run."""
    found = {}
    for name, (config, overrides) in RUNS.items():
        run = tmp_path_factory.mktemp("metrics") / "run"
        cfg = load_config(ROOT / "configs" / config, [*QUIET, *overrides])
        Trainer(cfg, run_dir=run).train()
        found[name] = header(run)
    return found


@pytest.mark.parametrize("name", list(RUNS))
def test_every_column_a_run_writes_is_in_the_reference(columns, name):
    missing = sorted(set(columns[name]) - documented())
    assert not missing, f"{name}: {missing} are not in {PAGE.relative_to(ROOT)}"
    # every run writes the whole schema and evaluates
    assert set(METRIC_COLUMNS) <= set(columns[name])
    assert set(EVAL_METRICS) <= set(columns[name])


def test_a_decoupled_run_logs_what_the_alternating_one_does(columns):
    # epsilon and the buffer's size come with the frames the workers wrote
    assert {"train/epsilon", "train/buffer_size"} <= set(columns["dqn decoupled"])
    assert set(columns["dqn decoupled"]) == set(columns["dqn"])


def test_the_runs_cover_every_algorithms_columns(columns):
    seen = set().union(*columns.values())
    for expected in (
        "loss/entropy",
        "loss/kl_approx",
        "loss/td",
        "loss/alpha",
        "train/epsilon",
        "train/buffer_size",
        "train/clip_epsilon",
        "train/alpha",
        "grad_norm",
    ):
        assert expected in seen, expected


def test_the_reference_names_only_columns_the_code_writes():
    source = "\n".join(p.read_text() for p in SRC.rglob("*.py"))
    named = documented()
    unknown = sorted(n for n in named if f'"{n}"' not in source)
    assert not unknown, f"{PAGE.relative_to(ROOT)} names {unknown}, which no code writes"
    assert set(METRIC_COLUMNS) <= named and set(EVAL_METRICS) <= named

"""Decoupled off-policy training (collector.decoupled): ratio, publishing, CLI, resume, checks."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from fleetrl import ConfigError, load_config
from fleetrl.checkpoint import latest_checkpoint, load_checkpoint
from fleetrl.cli import main
from fleetrl.learners.decoupled import DecoupledLearner, allowed_updates
from fleetrl.setup.build import make_algorithm
from fleetrl.setup.verify import DECOUPLED_NEEDS

pytestmark = pytest.mark.usefixtures("ray_session")

ROOT = Path(__file__).parent.parent.parent
DQN = str(ROOT / "configs" / "dqn_cartpole.yaml")
TINY = [
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


def test_learner_never_exceeds_the_ratio_and_takes_every_update_it_allows():
    cfg = load_config(DQN, [*TINY, "trainer.total_frames=448", "trainer.weight_update_interval=3"])
    algorithm = make_algorithm(cfg, 0)
    learner = DecoupledLearner(cfg, algorithm, seed=1)
    steps_at: list[tuple[int, int, int]] = []  # (version before, steps, allowed then)
    published: list[int] = []
    update_on, publish = algorithm.update_on, learner.collection.publish

    def counted_update(minibatches):
        minibatches = list(minibatches)
        steps_at.append((learner.version, len(minibatches), learner.allowed()))
        return update_on(minibatches)

    def counted_publish():
        published.append(learner.version)
        return publish()

    algorithm.update_on, learner.collection.publish = counted_update, counted_publish
    frames, rows = 0, []
    try:
        while (result := learner.run_iteration()) is not None:
            frames += result.frames
            rows.append(result)
        written = learner.buffer.write_count()
    finally:
        learner.shutdown()
    assert frames == 448 == written == learner.written
    # each iteration takes in a whole batch's frames or more; the last may hold the remainder
    assert all(r.frames >= 64 for r in rows[:-1])
    # no step is taken before the ratio allows it, and every step allowed is taken
    assert all(before + steps <= allowed for before, steps, allowed in steps_at)
    total = allowed_updates(448, start=64, updates_per_batch=4, frames_per_batch=64)
    assert total == 24 and learner.version == 24 == sum(s for _, s, _ in steps_at)
    # weights every 3 updates (a sample call never runs past a publish)
    assert published == list(range(3, 25, 3))
    assert rows[-1].metrics["train/policy_version"] == 24


def test_cli_trains_decoupled_dqn_then_resumes_with_its_buffer(tmp_path, capsys):
    run = tmp_path / "run"
    args = [*TINY, "trainer.checkpoint_every=2", "trainer.weight_update_interval=4"]
    assert main(["train", DQN, *args, "trainer.total_frames=256", "--run-dir", str(run)]) == 0
    with (run / "metrics.csv").open() as f:
        metrics = list(csv.DictReader(f))
    frames = [int(float(r["train/frames"])) for r in metrics]
    assert frames[-1] == 256 and all(b - a >= 64 for a, b in zip([0, *frames], frames[:-1]))
    assert int(float(metrics[-1]["train/policy_version"])) == (256 - 64) * 4 // 64 == 12
    assert sum(float(r["train/episodes"]) > 0 for r in metrics[-1:]) == 1
    state = load_checkpoint(latest_checkpoint(run))
    assert state["frames"] == 256 and state["algorithm"]["num_updates"] == 12
    # the buffer actor's content is the checkpoint's buffer
    assert state["algorithm"]["buffer"]["_storage"]["_len"] == 256
    assert state["algorithm"]["frames_seen"] == 256
    assert "frames 256" in capsys.readouterr().out
    assert main(["train", "--resume", str(run), "trainer.total_frames=384"]) == 0
    resumed = load_checkpoint(latest_checkpoint(run))
    assert resumed["frames"] == 384
    # the ratio counts the resumed buffer's frames: (384 - 64) * 4 / 64 updates in all
    assert resumed["algorithm"]["num_updates"] == 20
    assert resumed["algorithm"]["buffer"]["_storage"]["_len"] == 384


def test_decoupled_config_errors_name_every_key():
    with pytest.raises(ConfigError) as err:
        load_config(
            DQN,
            [
                "collector.decoupled=true",
                "collector.num_collectors=0",
                "scheme.num_grad_workers=2",
                "collector.max_served_lag=2",
                "collector.decoupled_frames_ahead=0",
            ],
        )
    problems = err.value.problems
    assert (
        f"collector.num_collectors=0 is invalid: {DECOUPLED_NEEDS['collector.num_collectors']}"
        in problems
    )
    assert (
        f"scheme.num_grad_workers=2 is invalid: {DECOUPLED_NEEDS['scheme.num_grad_workers']}"
        in problems
    )
    assert (
        f"collector.max_served_lag=2 is invalid: {DECOUPLED_NEEDS['collector.max_served_lag']}"
        in problems
    )
    assert "collector.decoupled_frames_ahead=0 is invalid: must be > 0, or null" in problems
    with pytest.raises(ConfigError) as err:
        load_config(ROOT / "configs" / "ppo_cartpole.yaml", ["collector.decoupled=true"])
    assert err.value.problems == [
        "algorithm='ppo' is invalid: " + DECOUPLED_NEEDS["algorithm"].format(allowed="dqn, sac")
    ]

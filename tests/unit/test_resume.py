"""Exact resume: N frames straight and N/2 + ``fleetrl train --resume`` to N end the same.

For the central learner with local collection (``collector.num_collectors=0``)
the final checkpoints of the two runs are compared bit for bit (weights,
optimizer state, replay buffer, collector and env state, random state,
counters) and so are the metrics rows, without the wall-clock ``time/``
columns. Where resume cannot be exact, it says so in one log line.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch

from fleetrl.cli import main
from fleetrl.run.checkpoint import CUSTOM_MODULES_HINT, latest_checkpoint, load_checkpoint
from runs import (
    LOCAL,
    PPO_LOCAL,
    ROOT,
    approximate_lines,
    assert_identical,
    metric_rows,
    split_run,
)

#: config, total frames N (split at N/2), overrides
ALGOS = {
    # two teams on MPE (episodes of 7 steps across batches of 10: the envs are saved
    # mid-episode, with every group's episodes in progress)
    "mappo": (
        "mappo_simple_tag.yaml",
        160,
        [
            "env.num_envs=4",
            "env.kwargs={max_cycles: 7}",
            "collector.frames_per_batch=40",
            "mappo.num_epochs=2",
            "mappo.num_mini_batch=2",
            "trainer.test_every=2",
        ],
    ),
    "ppo": (
        "ppo_cartpole.yaml",
        1024,
        [
            "env.num_envs=4",
            "collector.frames_per_batch=256",
            "ppo.num_epochs=2",
            "ppo.num_mini_batch=4",
            "ppo.lr_schedule=constant",
            "trainer.test_every=2",
        ],
    ),
    "a2c": (
        "a2c_cartpole.yaml",
        512,
        ["env.num_envs=4", "collector.frames_per_batch=128", "trainer.test_every=2"],
    ),
    "dqn": (
        "dqn_cartpole.yaml",
        512,
        [
            "env.num_envs=4",
            "collector.frames_per_batch=64",
            "dqn.learning_starts=128",
            "dqn.updates_per_batch=2",
            "dqn.batch_size=16",
            "dqn.hidden_sizes=[16]",
            "dqn.buffer_size=1000",
            "dqn.eps_anneal_frames=1000",
            "trainer.test_every=3",
        ],
    ),
    "impala": (
        "impala_cartpole.yaml",
        512,
        ["env.num_envs=4", "collector.frames_per_batch=128", "trainer.test_every=2"],
    ),
    "appo": (
        "appo_cartpole.yaml",
        512,
        [
            "env.num_envs=4",
            "collector.frames_per_batch=128",
            "appo.num_epochs=2",
            "appo.num_mini_batch=2",
            "trainer.test_every=2",
        ],
    ),
    # a recurrent policy trained through time on the POMDP (the velocities removed): the
    # collector's recurrent states and the partial env are in the checkpoint
    "ppo_lstm": (
        "ppo_lstm_cartpole_novel.yaml",
        1024,
        [
            "env.num_envs=4",
            "collector.frames_per_batch=256",
            "ppo.recurrent_size=16",
            "ppo.hidden_sizes=[16]",
            "ppo.seq_len=8",
            "ppo.burn_in=2",
            "ppo.num_epochs=2",
            "ppo.num_mini_batch=4",
            "ppo.lr_schedule=constant",  # both schedules follow total_frames, which the
            "ppo.clip_schedule=constant",  # split run's first half sets to half the total
            "trainer.test_every=2",
        ],
    ),
    "sac": (  # the split falls inside the random-action phase (learning_starts)
        "sac_pendulum.yaml",
        512,
        [
            "env.num_envs=2",
            "collector.frames_per_batch=64",
            "sac.learning_starts=384",
            "sac.updates_per_batch=2",
            "sac.batch_size=32",
            "sac.hidden_sizes=[32]",
            "sac.buffer_size=1000",
            "trainer.test_every=0",
        ],
    ),
}


def filled(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint with its replay buffer's storage cut to the rows written (the rest of a
    LazyTensorStorage is allocated but never written: its bytes are whatever memory held)."""
    buffer = checkpoint["algorithm"].get("buffer")
    if buffer is not None:
        storage = buffer["_storage"]
        rows = storage["_len"]
        assert rows > 0
        storage["_storage"] = {k: v[:rows] for k, v in storage["_storage"].items()}
    return checkpoint


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_resume_is_bit_exact_for_the_central_learner_with_local_collection(tmp_path, algo, caplog):
    if algo == "mappo":
        pytest.importorskip("mpe2")
    config, total, extra = ALGOS[algo]
    path = str(ROOT / "configs" / config)
    straight, split = tmp_path / "straight", tmp_path / "split"
    args = [*LOCAL, *extra]
    assert (
        main(["train", path, *args, f"trainer.total_frames={total}", "--run-dir", str(straight)])
        == 0
    )
    assert (
        main(["train", path, *args, f"trainer.total_frames={total // 2}", "--run-dir", str(split)])
        == 0
    )
    half = load_checkpoint(latest_checkpoint(split))
    assert half["frames"] == total // 2
    assert half["collector"]["env"] is not None  # classic control or MPE: the envs were saved
    with caplog.at_level(logging.WARNING):
        assert main(["train", "--resume", str(split), f"trainer.total_frames={total}"]) == 0
    assert not [r for r in caplog.records if "approximate" in r.getMessage()]

    a = filled(load_checkpoint(latest_checkpoint(straight)))
    b = filled(load_checkpoint(latest_checkpoint(split)))
    assert a["frames"] == b["frames"] == total
    a["config"]["logging"].pop("run_dir", None), b["config"]["logging"].pop("run_dir", None)
    assert_identical(a, b)
    rows_a, rows_b = metric_rows(straight), metric_rows(split)
    assert [r["train/frames"] for r in rows_b] == [r["train/frames"] for r in rows_a]
    assert_identical(rows_a, rows_b, "metrics")


# ------------------------------------------------------------------ approximate resume
COUNTING_ID = "fleetrl_test/Counting-v0"


def test_resume_with_an_env_that_cannot_be_saved_says_it_is_approximate(tmp_path, caplog):
    import gymnasium as gym

    from fakes import CountingEnv
    from fleetrl.learners.central import APPROX_ENV_MSG

    if COUNTING_ID not in gym.registry:
        gym.register(COUNTING_ID, entry_point=CountingEnv)
    args = [
        *PPO_LOCAL,
        f"env.id={COUNTING_ID}",
        "env.num_envs=2",
        "collector.frames_per_batch=64",
        "ppo.num_epochs=1",
        "ppo.num_mini_batch=1",
        "trainer.test_every=0",
    ]
    run = split_run(tmp_path, caplog, args, 128, 256)
    assert len(approximate_lines(caplog)) == 1
    assert APPROX_ENV_MSG.format(env=COUNTING_ID) in approximate_lines(caplog)[0]
    assert [r["train/frames"] for r in metric_rows(run)] == [64.0, 128.0, 192.0, 256.0]


def test_resume_with_other_env_settings_says_it_is_approximate(tmp_path, caplog):
    from fleetrl.envs.state import STATE_MISMATCH_MSG

    args = [
        *PPO_LOCAL,
        "env.num_envs=4",
        "collector.frames_per_batch=64",
        "ppo.num_epochs=1",
        "ppo.num_mini_batch=1",
        "trainer.test_every=0",
    ]
    run = split_run(tmp_path, caplog, args, 128, 256, "env.num_envs=2")
    lines = approximate_lines(caplog)
    assert len(lines) == 1
    assert STATE_MISMATCH_MSG.format(saved="4 envs", built="2 envs") in lines[0]
    assert [r["train/frames"] for r in metric_rows(run)] == [64.0, 128.0, 192.0, 256.0]


def test_evaluation_leaves_the_training_random_state_alone(tmp_path):
    import numpy as np

    from fleetrl.run.trainer import Trainer
    from fleetrl.setup.load import load_config

    cfg = load_config(ROOT / "configs" / "ppo_cartpole.yaml", [*PPO_LOCAL, "trainer.test_every=1"])
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    torch_state, numpy_state = torch.get_rng_state(), np.random.get_state()
    result = trainer._evaluate()
    assert set(result) == {"eval/return_mean", "eval/return_std"}
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), numpy_state))


# ------------------------------------------------------------------ other networks
def test_a_run_of_custom_networks_is_refused_by_eval_and_resume_and_resumes_with_them(
    tmp_path, capsys
):
    from tensordict.nn import TensorDictModule
    from torch import nn
    from torchrl.modules import ProbabilisticActor

    from fleetrl import Trainer, load_config

    def linear_actor() -> ProbabilisticActor:  # one layer: the default actor has three
        return ProbabilisticActor(
            TensorDictModule(nn.Linear(4, 2), in_keys=["observation"], out_keys=["logits"]),
            in_keys=["logits"],
            distribution_class=torch.distributions.Categorical,
            return_log_prob=True,
        )

    run = tmp_path / "custom"
    overrides = [*PPO_LOCAL, "env.num_envs=4", "collector.frames_per_batch=128"]
    config = load_config(
        ROOT / "configs" / "ppo_cartpole.yaml",
        [*overrides, "trainer.total_frames=256", "trainer.test_every=0", f"logging.run_dir={run}"],
    )
    Trainer(config, actor=linear_actor()).train()
    capsys.readouterr()

    # the config alone builds the default networks: refused, not evaluated or trained silently
    assert main(["eval", str(run), "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert "is invalid: its algorithm state does not fit a ppo built from its own config" in err
    assert "the checkpoint has parameters they lack: 2 (e.g. 'actor_network_params." in err
    assert err.endswith(f"{CUSTOM_MODULES_HINT}\n")
    assert main(["train", "--resume", str(run), "trainer.total_frames=384"]) == 2
    err = capsys.readouterr().err
    assert "cannot be resumed: its algorithm state does not fit a ppo built from the run's" in err
    assert err.endswith(f"{CUSTOM_MODULES_HINT}\n")

    # with the same kind of modules it resumes
    resumed = Trainer.from_run_dir(run, ["trainer.total_frames=384"], actor=linear_actor())
    assert resumed.train()["train/frames"] == 384


# ------------------------------------------------------------------ another buffer size
@pytest.mark.parametrize(
    ("algo", "size"),
    [("dqn", 96), ("dqn", 400), ("sac", 96)],
    ids=["dqn-smaller", "dqn-bigger", "sac-smaller"],
)
def test_resume_with_another_buffer_size_keeps_the_newest_transitions_and_trains_on(
    tmp_path, algo, size
):
    """Saved with a buffer of 200 holding 256 writes (wrapped), resumed with ``size``: the
    buffer holds the newest transitions that fit, in write order, and the run goes on."""
    from fleetrl.collectors.remote.replay import _in_order
    from fleetrl.run.trainer import Trainer

    config, _, extra = ALGOS[algo]
    run = tmp_path / "run"
    args = [*LOCAL, *extra, f"{algo}.buffer_size=200", "trainer.test_every=0"]
    path = str(ROOT / "configs" / config)
    assert main(["train", path, *args, "trainer.total_frames=256", "--run-dir", str(run)]) == 0
    saved = _in_order(load_checkpoint(latest_checkpoint(run))["algorithm"]["buffer"])
    assert saved.shape[0] == 200

    trainer = Trainer.from_run_dir(run, ["trainer.total_frames=384", f"{algo}.buffer_size={size}"])
    buffer = trainer.algorithm.buffer
    kept = min(size, 200)
    assert (len(buffer), buffer.storage.max_size) == (kept, size)
    held = buffer.storage[:kept]
    for key in ("observation", "action", ("next", "observation")):
        assert torch.equal(held[key], saved[key][200 - kept :])
    assert trainer.train()["train/frames"] == 384
    final = load_checkpoint(latest_checkpoint(run))["algorithm"]["buffer"]["_storage"]
    assert final["_len"] == min(size, kept + 128)

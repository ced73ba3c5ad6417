"""The Trainer and the CLI's train and eval on the in-process backend (trainer.backend=
inprocess): rows, checkpoints, resume, evaluation. The shipped configs on Ray: tests/e2e."""

from __future__ import annotations

import logging
import re

import torch

from fleetrl.cli import main
from fleetrl.learners.update_worker import APPROX_GRAD_WORKERS_MSG
from fleetrl.run.checkpoint import latest_checkpoint, load_checkpoint
from fleetrl.run.run_control import default_run_dir
from fleetrl.run.trainer import TARGET_REACHED, Trainer
from fleetrl.setup.load import config_from_dict, load_config
from runs import ROOT, rows

TINY = [
    "trainer.backend=inprocess",  # workers in this process: tests/unit run without Ray
    "collector.num_collectors=1",
    "env.num_envs=4",
    "trainer.target_return=null",
    "trainer.num_test_episodes=2",
    "logging.progress_bar=false",
]


def test_a_run_that_evaluates_appends_every_row_to_one_metrics_file(tmp_path):
    cfg = load_config(
        ROOT / "configs" / "ppo_cartpole.yaml",
        [
            *TINY,
            "collector.num_collectors=0",
            "collector.frames_per_batch=128",
            "trainer.total_frames=512",
            "trainer.test_every=2",
            "ppo.num_epochs=1",
            "logging.tensorboard=false",
            "logging.plot=false",
        ],
    )
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    path = trainer.run_dir / "metrics.csv"
    inode = path.stat().st_ino
    trainer.train()
    # the eval columns are in the header from the first row: the file is appended to, never
    # rewritten, and each cell keeps the text it was written with
    assert path.stat().st_ino == inode
    metrics = rows(trainer.run_dir)
    assert [(r["train/frames"], r["train/iterations"]) for r in metrics] == [
        ("128", "1"),
        ("256", "2"),
        ("384", "3"),
        ("512", "4"),
    ]
    assert [r["eval/return_mean"] != "" for r in metrics] == [False, True, False, True]
    assert [frames for frames, _ in trainer.eval_history] == [256, 512]


def test_checkpoint_then_resume_continues_exactly(tmp_path, capsys):
    run = tmp_path / "run"
    cfg = load_config(
        ROOT / "configs" / "ppo_cartpole.yaml",
        [
            *TINY,
            "collector.frames_per_batch=512",
            "trainer.total_frames=1024",
            "trainer.checkpoint_every=1",
            "trainer.keep_checkpoints=2",
            "trainer.test_every=0",
            "logging.tensorboard=false",
            "logging.plot=false",
        ],
    )
    first = Trainer(cfg, run_dir=run)
    first.train()
    state = load_checkpoint(latest_checkpoint(run))  # weights_only=True
    assert state["frames"] == 1024 and state["iterations"] == 2
    assert len(list((run / "checkpoints").glob("checkpoint_*.pt"))) == 2
    weights = first.algorithm.get_weights()

    resumed = Trainer.from_run_dir(run, ["trainer.total_frames=2048"])
    assert (resumed.frames, resumed.iterations) == (1024, 2)
    assert (resumed.algorithm.get_weights() == weights).all()
    assert (
        resumed.algorithm.optimizer.state_dict()["state"].keys()
        == first.algorithm.optimizer.state_dict()["state"].keys()
    )
    resumed.train()
    assert resumed.frames == 2048 and resumed.iterations == 4
    assert [int(float(r["train/frames"])) for r in rows(run)] == [512, 1024, 1536, 2048]

    # PPO's evaluations sample its policy (trainer.eval_actions: auto), reproducibly
    assert main(["eval", str(run), "--episodes", "3"]) == 0
    sampled = capsys.readouterr().out
    assert re.search(r"3 episodes, sampled actions: mean return [\d.]+ \+- [\d.]+", sampled)
    assert main(["eval", str(run), "--episodes", "3"]) == 0
    assert capsys.readouterr().out == sampled
    assert main(["eval", str(run), "--episodes", "3", "--actions", "deterministic"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"3 episodes, deterministic actions: mean return [\d.]+ \+- [\d.]+", out)


def test_resume_without_checkpoint_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text("algorithm: ppo\n")
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert "no checkpoint in" in capsys.readouterr().err


def test_overrides_may_follow_options(tmp_path):
    run = tmp_path / "run"
    rc = main(
        [
            "train",
            str(ROOT / "configs" / "ppo_cartpole.yaml"),
            "--run-dir",
            str(run),
            *TINY,
            "collector.frames_per_batch=256",
            "trainer.total_frames=256",
            "trainer.test_every=0",
        ]
    )
    assert rc == 0
    assert [int(float(r["train/frames"])) for r in rows(run)] == [256]


def test_local_collection_without_ray(tmp_path):
    run = tmp_path / "run"
    rc = main(
        [
            "train",
            str(ROOT / "configs" / "ppo_cartpole.yaml"),
            *TINY,
            "collector.num_collectors=0",
            "collector.frames_per_batch=256",
            "trainer.total_frames=512",
            "trainer.test_every=0",
            "--run-dir",
            str(run),
        ]
    )
    assert rc == 0
    metrics = rows(run)
    assert [int(float(r["train/frames"])) for r in metrics] == [256, 512]
    # on-policy, in optimizer steps: each batch tagged with the version it is learned from,
    # over 10 epochs x 8 minibatches, so lags 0..79 (this pinned a hard-coded 0 before)
    assert {float(r["train/policy_lag"]) for r in metrics} == {39.5}
    assert {float(r["train/policy_lag_max"]) for r in metrics} == {79.0}


def test_bad_config_lists_problems_and_exits_2(tmp_path, capsys):
    rc = main(["train", str(ROOT / "configs" / "ppo_cartpole.yaml"), "ppo.lr=-1", "env.num_envz=3"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "ppo.lr=-1.0 is invalid: must be > 0" in err and "did you mean 'env.num_envs'" in err


def test_recurrent_policy_trains_a_few_iterations(tmp_path):
    """A user-supplied LSTM actor (state carried in the TensorDict) trains through the Trainer."""
    from tensordict.nn import TensorDictModule, TensorDictSequential
    from torch import nn
    from torchrl.modules import LSTMModule, ProbabilisticActor

    lstm = LSTMModule(input_size=4, hidden_size=16, in_key="observation", out_key="features")
    head = TensorDictModule(nn.Linear(16, 2), in_keys=["features"], out_keys=["logits"])
    actor = ProbabilisticActor(
        TensorDictSequential(lstm, head),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )
    cfg = load_config(
        ROOT / "configs" / "ppo_cartpole.yaml",
        [
            *TINY,
            "collector.frames_per_batch=256",
            "trainer.total_frames=768",
            "trainer.test_every=3",
            "ppo.num_mini_batch=2",
            "logging.tensorboard=false",
            "logging.plot=false",
        ],
    )
    trainer = Trainer(cfg, actor=actor, run_dir=tmp_path / "run")
    before = {k: v.clone() for k, v in lstm.state_dict().items()}
    last = trainer.train()
    assert trainer.iterations == 3 and trainer.frames == 768
    assert any(
        not torch.equal(before[k], v) for k, v in lstm.state_dict().items()
    )  # the LSTM learned
    assert torch.isfinite(torch.tensor(last["loss/objective"]))
    assert "eval/return_mean" in last


def test_dqn_under_gradient_workers_checkpoints_and_resumes_their_buffers(tmp_path, caplog):
    run = tmp_path / "run"
    tiny = [
        "trainer.backend=inprocess",
        "scheme.num_grad_workers=2",
        "collector.num_collectors=0",
        "collector.prefetch=0",
        "env.num_envs=4",
        "collector.frames_per_batch=32",  # per gradient worker
        "dqn.learning_starts=64",
        "dqn.updates_per_batch=2",
        "dqn.batch_size=16",
        "dqn.hidden_sizes=[16]",
        "trainer.test_every=0",
        "trainer.checkpoint_every=1",
        "logging.progress_bar=false",
        "logging.tensorboard=false",
    ]
    config = str(ROOT / "configs" / "dqn_cartpole.yaml")
    assert main(["train", config, *tiny, "trainer.total_frames=128", "--run-dir", str(run)]) == 0
    state = load_checkpoint(latest_checkpoint(run))
    assert state["frames"] == 128
    assert [r["frames_seen"] for r in state["algorithm"]["replicas"]] == [64, 64]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert main(["train", "--resume", str(run), "trainer.total_frames=192"]) == 0
    # gradient workers collect in their own processes: one line says the resume is approximate
    approximate = [r.getMessage() for r in caplog.records if "is approximate" in r.getMessage()]
    assert len(approximate) == 1
    assert APPROX_GRAD_WORKERS_MSG.format(g=2) in approximate[0]
    resumed = load_checkpoint(latest_checkpoint(run))
    assert resumed["frames"] == 192
    # each worker got its own buffer back and kept filling it
    assert [r["frames_seen"] for r in resumed["algorithm"]["replicas"]] == [96, 96]
    assert resumed["algorithm"]["num_updates"] == state["algorithm"]["num_updates"] + 2


# ------------------------------------------------- the end of a run, and its summary

#: 128-frame iterations on the local collector; CartPole's returns are all >= 1, so a target
#: of 1 is reached by the first iteration that ends two episodes (the first, here)
AT_TARGET = [
    *TINY,
    "collector.num_collectors=0",
    "collector.frames_per_batch=128",
    "trainer.total_frames=1024",
    "trainer.target_return=1",
    "trainer.return_window=2",
    "ppo.num_epochs=1",
    "logging.tensorboard=false",
    "logging.plot=false",
]
PPO_CARTPOLE = str(ROOT / "configs" / "ppo_cartpole.yaml")
JUDGED = "judged on the training return (the mean of the last 2 training episodes)"
LAST_EVAL = re.compile(r"^last evaluation return ([\d.]+) at ([\d,]+) frames \((.*)\)$", re.M)


def test_a_run_that_stops_at_its_target_evaluates_its_final_policy_and_says_so(
    tmp_path, monkeypatch, capsys, caplog
):
    monkeypatch.chdir(tmp_path)  # the run directory by default: runs/<config name>_<time>
    with caplog.at_level(logging.INFO, logger="fleetrl.run.trainer"):
        assert main(["train", PPO_CARTPOLE, *AT_TARGET, "trainer.test_every=10"]) == 0
    out = capsys.readouterr().out
    (run,) = (tmp_path / "runs").iterdir()
    assert re.fullmatch(r"ppo_cartpole_\d{8}-\d{6}", run.name)
    assert f"run directory: runs/{run.name}\n" in out
    # the target is judged on the training return; the run stops at its first iteration
    assert f"target return 1.0 reached at 128 frames, {JUDGED}\n" in out
    reached = [r.getMessage() for r in caplog.records if r.msg == TARGET_REACHED]
    assert len(reached) == 1
    assert reached[0].startswith(f"target return 1.0 reached at 128 frames, {JUDGED}: ")
    # not a scheduled evaluation (test_every=10): the final policy's, in the run's one row
    (row,) = rows(run)
    assert (row["train/frames"], row["train/iterations"]) == ("128", "1")
    value, frames, which = LAST_EVAL.search(out).groups()
    assert (frames, which) == ("128", "the final policy")
    assert value == f"{float(row['eval/return_mean']):.1f}"
    state = load_checkpoint(latest_checkpoint(run))
    assert state["frames"] == 128
    assert state["eval_history"] == [[128, float(row["eval/return_mean"])]]
    assert state["config"]["logging"]["run_name"] == "ppo_cartpole"

    # resumed, it reaches the target again at once (its window came back with it): one more
    # row, with the final policy's evaluation, and the earlier row as it was
    assert main(["train", "--resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"target return 1.0 reached at 256 frames, {JUDGED}\n" in out
    assert LAST_EVAL.search(out).group(2, 3) == ("256", "the final policy")
    again = rows(run)
    assert again[0] == row
    assert [(r["train/frames"], r["eval/return_mean"] != "") for r in again] == [
        ("128", True),
        ("256", True),
    ]
    history = load_checkpoint(latest_checkpoint(run))["eval_history"]
    assert [frames for frames, _ in history] == [128, 256]


def test_a_scheduled_evaluation_at_the_target_is_the_only_one(tmp_path, capsys):
    run = tmp_path / "run"
    args = ["train", PPO_CARTPOLE, *AT_TARGET, "trainer.test_every=1", "--run-dir", str(run)]
    assert main(args) == 0
    assert LAST_EVAL.search(capsys.readouterr().out).group(2, 3) == ("128", "the final policy")
    assert len(rows(run)) == 1
    assert [f for f, _ in load_checkpoint(latest_checkpoint(run))["eval_history"]] == [128]


def test_a_run_without_evaluation_stops_at_its_target_without_one(tmp_path, capsys):
    run = tmp_path / "run"
    args = ["train", PPO_CARTPOLE, *AT_TARGET, "trainer.test_every=0", "--run-dir", str(run)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"target return 1.0 reached at 128 frames, {JUDGED}\n" in out
    assert "last evaluation return" not in out
    (row,) = rows(run)
    assert not [k for k in row if k.startswith("eval/")]
    assert load_checkpoint(latest_checkpoint(run))["eval_history"] == []


def test_the_summary_says_when_the_last_evaluation_is_not_of_the_final_policy(tmp_path, capsys):
    run = tmp_path / "run"
    budget = ["trainer.target_return=null", "trainer.total_frames=384", "trainer.test_every=2"]
    assert main(["train", PPO_CARTPOLE, *AT_TARGET, *budget, "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert "target return" not in out
    groups = LAST_EVAL.search(out).group(2, 3)
    assert groups == ("256", "not the final policy's, at 384 frames")
    assert [r["eval/return_mean"] != "" for r in rows(run)] == [False, True, False]


def test_a_trainer_stopping_after_a_scheduled_evaluation_evaluates_once_more(tmp_path):
    """A Trainer whose target_reached says stop at iteration 3: the evaluation at 2 was
    scheduled (test_every=2), the one at 3 is the final policy's, in the third row."""

    class StopsAtThree(Trainer):
        def target_reached(self) -> bool:
            return self.iterations == 3

    trainer = StopsAtThree(load_config(PPO_CARTPOLE, [*AT_TARGET, "trainer.test_every=2"]),
                           run_dir=tmp_path / "run")  # fmt: skip
    trainer.train()
    assert trainer.reached_target and trainer.frames == 384
    assert [frames for frames, _ in trainer.eval_history] == [256, 384]
    assert [r["eval/return_mean"] != "" for r in rows(trainer.run_dir)] == [False, True, True]


def test_a_run_directory_is_named_after_its_config_file(tmp_path, monkeypatch):
    stamp = r"_\d{8}-\d{6}"
    for name in ("ppo_cartpole", "ppo_lstm_cartpole_novel"):
        path = default_run_dir(load_config(ROOT / "configs" / f"{name}.yaml"))
        assert path.parent.name == "runs" and re.fullmatch(name + stamp, path.name), path
    # a config built in code has no file: the algorithm and the env
    built = default_run_dir(config_from_dict({"env": {"id": "CartPole-v1"}}))
    assert re.fullmatch("ppo_CartPole-v1" + stamp, built.name)
    # the name is a config key: the file or an override may set it
    named = load_config(ROOT / "configs" / "ppo_cartpole.yaml", ["logging.run_name=mine"])
    assert re.fullmatch("mine" + stamp, default_run_dir(named).name)
    monkeypatch.chdir(tmp_path)
    trainer = Trainer(load_config(PPO_CARTPOLE, AT_TARGET))
    trainer.metrics.close()
    assert trainer.run_dir.parent == tmp_path.joinpath("runs").relative_to(tmp_path)
    assert trainer.run_dir.name.startswith("ppo_cartpole_")

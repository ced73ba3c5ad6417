"""Every bad input at the CLI: exit code 2, one message naming the key, the value and the fix,
and no run directory for a run that never started."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from fleetrl.cli import main
from fleetrl.errors import ConfigError
from fleetrl.run.checkpoint import latest_checkpoint
from fleetrl.run.trainer import RUN_EXISTS_MSG, Trainer
from fleetrl.setup.resume import COMPLETE_MSG, DONE_MSG, STOPPED_MSG, RunComplete
from runs import LOCAL, ONE_UPDATE, ROOT

PPO = str(ROOT / "configs" / "ppo_cartpole.yaml")
SAC = str(ROOT / "configs" / "sac_pendulum.yaml")
DQN = str(ROOT / "configs" / "dqn_cartpole.yaml")

# (config file or its text, overrides, what the message must say)
BAD_INPUTS = {
    "unknown env id": (
        PPO,
        ["env.id=NoSuchEnv-v0"],
        [
            "env.id='NoSuchEnv-v0' is invalid: no gymnasium env is registered under that id",
            "gymnasium.pprint_registry()",
        ],
    ),
    "misspelt env id": (
        PPO,
        ["env.id=Cartpole-v1"],
        ["env.id='Cartpole-v1' is invalid", "did you mean 'CartPole-v1'"],
    ),
    "YAML error in an override": (
        PPO,
        ["ppo.hidden_sizes=[64,"],
        [
            "override 'ppo.hidden_sizes=[64,' is invalid: its value is not YAML",
            "close brackets and quotes, e.g. ppo.hidden_sizes=[64, 64]",
        ],
    ),
    "YAML error in the file": (
        "algorithm: ppo\nenv:\n  id: [CartPole-v1\n",
        [],
        ["bad.yaml' is invalid:", "is not valid YAML", "at line 4, column 1"],
    ),
    "empty config file": (
        "# nothing but a comment\n",
        [],
        ["bad.yaml' is invalid:", "holds no settings", "start from one in configs/"],
    ),
    "config file that is not a mapping": (
        "- ppo\n- CartPole-v1\n",
        [],
        ["bad.yaml' is invalid:", "must hold a mapping of config sections", "not a list"],
    ),
    "missing config file": (
        "no/such/config.yaml",
        [],
        ["config='no/such/config.yaml' is invalid: no such file"],
    ),
    "max_episode_steps=0": (
        PPO,
        ["env.max_episode_steps=0"],
        ["env.max_episode_steps=0 is invalid: must be > 0, or null for the env's own limit"],
    ),
    "sac on a discrete env": (
        SAC,
        ["env.id=CartPole-v1"],
        [
            "algorithm='sac' is invalid with env.id='CartPole-v1': SAC needs continuous actions "
            "and CartPole-v1 has 2 discrete actions; use algorithm=ppo or a2c, or an env with "
            "continuous actions (e.g. env.id=Pendulum-v1)"
        ],
    ),
    "dqn on a continuous env": (
        DQN,
        ["env.id=Pendulum-v1"],
        [
            "algorithm='dqn' is invalid with env.id='Pendulum-v1': DQN needs discrete actions "
            "and Pendulum-v1 has continuous actions (1-dimensional)"
        ],
    ),
    "numbers out of range": (
        PPO,
        ["ppo.lr=.nan", "trainer.seed=-1", "ppo.max_grad_norm=0", "ppo.entropy_coef=-0.1"],
        [
            "4 problems:",
            "ppo.lr=nan is invalid: must be a finite number",
            "trainer.seed=-1 is invalid: must be >= 0",
            "ppo.max_grad_norm=0.0 is invalid: must be > 0, or null: off",
            "ppo.entropy_coef=-0.1 is invalid: must be >= 0",
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_exits_2_with_the_key_value_and_fix_and_no_run_dir(tmp_path, case, capsys):
    config, overrides, expected = BAD_INPUTS[case]
    if "\n" in config:  # the file's text
        (tmp_path / "bad.yaml").write_text(config)
        config = str(tmp_path / "bad.yaml")
    run = tmp_path / "runs" / "run"
    assert main(["train", config, *overrides, "--run-dir", str(run)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("fleetrl train: ")
    for text in expected:
        assert text in captured.err
    assert "Traceback" not in captured.err and "EnvInfo(" not in captured.err
    assert captured.out == ""
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "run_dir, reason",
    [("/proc/fleetrl-run", "No such file or directory"), ("{tmp}/a-file/run", "Not a directory")],
)
def test_a_run_dir_that_cannot_be_made_exits_2_naming_it(tmp_path, capsys, run_dir, reason):
    """--run-dir on a file system that refuses it (/proc), or under a file: the run-dir key
    and the reason, exit 2, before Ray or any actor starts (not a FileNotFoundError
    traceback), and nothing is left behind."""
    (tmp_path / "a-file").write_text("")
    run_dir = run_dir.format(tmp=tmp_path)
    assert main(["train", PPO, *LOCAL, "--run-dir", run_dir]) == 2
    err = capsys.readouterr().err
    assert f"run_dir={run_dir!r} is invalid: it cannot be made ({reason})" in err
    assert "Traceback" not in err
    assert not os.path.exists(run_dir)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["train"],
            "give a config file or a shipped config's name (e.g. ppo_cartpole; fleetrl configs "
            "lists them), or --resume RUN_DIR",
        ),
        (["train", "ppo.lr=1e-3"], "'ppo.lr=1e-3' is an override, not a config file"),
        (["train", PPO, "--resume", "runs/x"], "a resumed run keeps its own config.yaml"),
        (
            ["train", "--resume", "runs/x", "--run-dir", "runs/y"],
            "a resumed run writes to the directory it resumes",
        ),
        (["eval", "runs/x", "--episodes", "0"], "--episodes 0 is invalid: must be >= 1"),
    ],
)
def test_argument_combinations_that_would_do_something_else_exit_2(argv, expected, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert expected in capsys.readouterr().err


@pytest.fixture(scope="module")
def complete_run(tmp_path_factory) -> Path:
    """A run that trained its whole budget: 256 frames."""
    run = tmp_path_factory.mktemp("complete") / "run"
    assert main(["train", PPO, *ONE_UPDATE, "--run-dir", str(run)]) == 0
    return run


def _snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*") if p.is_file()}


RESUME_CASES = {
    "complete run, a budget below its frames": (
        ["trainer.total_frames=128"],
        [
            "trainer.total_frames=128 is invalid: the run in {run} is complete at 256 frames; "
            "to train further, resume with a larger budget, e.g. trainer.total_frames=384"
        ],
    ),
    "network and env changed": (
        ["trainer.total_frames=512", "ppo.hidden_sizes=[32]", "env.id=Acrobot-v1"],
        [
            "2 problems:",
            "env.id='Acrobot-v1' is invalid on resume: the run in {run} was started with "
            "env.id='CartPole-v1'",
            "ppo.hidden_sizes=[32] is invalid on resume: the run in {run} was started with "
            "ppo.hidden_sizes=[64, 64] and its checkpoint holds networks of those sizes; drop the "
            "override, or start a new run",
        ],
    ),
    "algorithm and gradient workers changed": (
        ["algorithm=a2c", "scheme.num_grad_workers=2"],
        [
            "2 problems:",
            "algorithm='a2c' is invalid on resume: the run in {run} was started with "
            "algorithm='ppo'",
            "scheme.num_grad_workers=2 is invalid on resume",
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(RESUME_CASES))
def test_resume_that_cannot_continue_exits_2_and_leaves_the_run_as_it_was(
    complete_run, case, capsys, caplog
):
    overrides, expected = RESUME_CASES[case]
    before = _snapshot(complete_run)
    with caplog.at_level(logging.INFO, logger="fleetrl"):
        assert main(["train", "--resume", str(complete_run), *overrides]) == 2
    err = capsys.readouterr().err
    for text in expected:
        assert text.format(run=complete_run) in err
    assert "Traceback" not in err
    assert _snapshot(complete_run) == before
    # a refused resume does not say it resumed first
    assert not [r for r in caplog.records if r.getMessage().startswith("resumed ")]


@pytest.mark.parametrize("overrides", [[], ["trainer.total_frames=256"]], ids=["plain", "same"])
def test_resume_of_a_complete_run_has_nothing_to_do_and_exits_0(
    complete_run, overrides, capsys, caplog
):
    """A supervisor that resumes a run until it exits 0 stops at a complete run, e.g. one
    killed after its last checkpoint: nothing is trained, nothing written."""
    before = _snapshot(complete_run)
    with caplog.at_level(logging.INFO, logger="fleetrl"):
        assert main(["train", "--resume", str(complete_run), *overrides]) == 0
    out, err = capsys.readouterr()
    assert out == DONE_MSG.format(run_dir=complete_run, frames=256, suggest=512) + "\n"
    assert out == (
        f"{complete_run} is complete at 256 frames; nothing to do (to train further: "
        f"fleetrl train --resume {complete_run} trainer.total_frames=512)\n"
    )
    assert err == ""
    assert _snapshot(complete_run) == before
    assert not [r for r in caplog.records if r.getMessage().startswith("resumed ")]
    with pytest.raises(RunComplete) as info:  # in Python: raised before anything is written
        Trainer.from_run_dir(complete_run)
    assert (info.value.frames, info.value.budget) == (256, 256)
    assert not issubclass(RunComplete, ConfigError)


@pytest.mark.parametrize(
    ("frames", "total", "outcome"),
    [
        (4096, 4096, DONE_MSG.format(run_dir="RUN", frames=4096, suggest=8192)),
        # gradient workers stop at the end of the iteration past the budget
        (4224, 4096, DONE_MSG.format(run_dir="RUN", frames=4224, suggest=8320)),
        (4224, 4200, COMPLETE_MSG.format(total=4200, run_dir="RUN", frames=4224, suggest=8424)),
        (4096, 2048, COMPLETE_MSG.format(total=2048, run_dir="RUN", frames=4096, suggest=6144)),
        (4096, 8192, None),
    ],
)
def test_a_budget_of_the_run_is_done_and_one_set_below_its_frames_is_refused(
    frames, total, outcome
):
    from fleetrl.setup.load import load_config
    from fleetrl.setup.resume import check_budget

    config = load_config(PPO, [f"trainer.total_frames={total}"])
    if outcome is None:
        check_budget(frames, config, "RUN", 4096)  # more to train: no word
        return
    error = RunComplete if outcome.startswith("RUN is complete") else ConfigError
    with pytest.raises(error) as info:
        check_budget(frames, config, "RUN", 4096)
    assert str(info.value) == outcome


def test_resume_with_a_broken_config_yaml_names_the_file(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text("algorithm: ppo\nenv: {id: CartPole-v1\n")
    assert main(["train", "--resume", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"resume='{tmp_path / 'config.yaml'}' is invalid" in err
    assert "is not valid YAML" in err and "line 3" in err


def test_resume_may_change_what_the_checkpoint_does_not_fix(complete_run):
    config = Trainer.from_run_dir(
        complete_run, ["trainer.total_frames=512", "ppo.lr=1e-4", "trainer.test_every=5"]
    ).config
    assert (config.trainer.total_frames, config.algo.lr, config.trainer.test_every) == (
        512,
        1e-4,
        5,
    )
    assert latest_checkpoint(complete_run).name == f"checkpoint_{256:012d}.pt"


def test_a_config_built_by_hand_is_checked_before_the_run_dir_is_made(tmp_path):
    from fleetrl.config import Config, EnvConfig

    with pytest.raises(ConfigError) as info:
        Trainer(
            Config(env=EnvConfig(id="NoSuchEnv-v0", max_episode_steps=0)), run_dir=tmp_path / "r"
        )
    assert info.value.problems[0] == (
        "env.max_episode_steps=0 is invalid: must be > 0, or null for the env's own limit"
    )
    assert info.value.problems[1].startswith("env.id='NoSuchEnv-v0' is invalid")
    assert not (tmp_path / "r").exists()


def test_a_new_run_into_a_run_dir_that_holds_a_run_is_refused(complete_run, capsys):
    before = _snapshot(complete_run)
    assert main(["train", PPO, *ONE_UPDATE, "--run-dir", str(complete_run)]) == 2
    assert capsys.readouterr().err == (
        f"fleetrl train: {RUN_EXISTS_MSG.format(run_dir=str(complete_run))}\n"
    )
    assert _snapshot(complete_run) == before


def test_resume_of_a_run_stopped_short_of_its_budget_says_how_to_finish_it(tmp_path, capsys):
    run = tmp_path / "run"
    budget = ["trainer.total_frames=512", "trainer.checkpoint_every=1"]
    assert main(["train", PPO, *ONE_UPDATE, *budget, "--run-dir", str(run)]) == 0
    # as if the process had been killed after its first checkpoint
    latest_checkpoint(run).unlink()
    assert latest_checkpoint(run).name == f"checkpoint_{256:012d}.pt"
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "trainer.total_frames=256"]) == 2
    assert (
        STOPPED_MSG.format(total=256, run_dir=run, frames=256, budget=512, suggest=512)
        in capsys.readouterr().err
    )
    assert main(["train", "--resume", str(run)]) == 0  # no override: it finishes its budget
    assert latest_checkpoint(run).name == f"checkpoint_{512:012d}.pt"

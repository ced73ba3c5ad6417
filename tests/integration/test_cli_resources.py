"""Every bad input at the CLI: exit code 2, one message naming the key, the value and the fix,
and no run directory for a run that never started."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetrl.cli import main
from fleetrl.errors import ConfigError
from fleetrl.setup.load import config_from_dict
from fleetrl.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
PPO = str(ROOT / "configs" / "ppo_cartpole.yaml")
SAC = str(ROOT / "configs" / "sac_pendulum.yaml")
DQN = str(ROOT / "configs" / "dqn_cartpole.yaml")
#: a tiny run without Ray: one update of 256 frames
LOCAL = [
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


@pytest.fixture(scope="module")
def complete_run(tmp_path_factory) -> Path:
    """A run that trained its whole budget: 256 frames."""
    run = tmp_path_factory.mktemp("complete") / "run"
    assert main(["train", PPO, *LOCAL, "--run-dir", str(run)]) == 0
    return run


def _snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*") if p.is_file()}


RESUME_CASES = {
    "complete run": (
        [],
        [
            "trainer.total_frames=256 is invalid: the run in {run} is complete at 256 frames; "
            "to train further, resume with a larger budget, e.g. trainer.total_frames=512"
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


@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize("existing", [False, True], ids=["new run dir", "existing run dir"])
def test_collectors_ray_cannot_place_are_named_in_config_keys_and_leave_nothing(
    tmp_path, existing, capsys
):
    """The session's Ray has 4 CPUs; 8 collectors of 1 CPU cannot start."""
    run = tmp_path / "run"
    if existing:
        run.mkdir()
        (run / "notes.txt").write_text("mine")
    overrides = [o for o in LOCAL if not o.startswith("collector.num_collectors")]
    rc = main(
        [
            "train",
            PPO,
            *overrides,
            "collector.num_collectors=8",
            "collector.frames_per_batch=512",
            "trainer.total_frames=512",
            "--run-dir",
            str(run),
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert (
        "collector.num_collectors=8 is invalid here: 8 collectors x "
        "collector.num_cpus_per_collector=1 ask Ray for 8 CPUs but the Ray cluster has 4; lower "
        "collector.num_cpus_per_collector (e.g. 0.5), use fewer collectors, or attach to a "
        "bigger cluster with collector.address"
    ) in err
    assert "remote_configs" not in err
    if existing:
        assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]
    else:
        assert not run.exists()


@pytest.mark.usefixtures("ray_session")
def test_one_collector_larger_than_any_node_is_named_in_config_keys(tmp_path):
    cfg = config_from_dict(
        {"algorithm": "ppo"},
        [o for o in LOCAL if not o.startswith("collector.num_collectors")]
        + ["collector.num_collectors=1", "collector.num_cpus_per_collector=16"],
    )
    with pytest.raises(ConfigError) as info:
        Trainer(cfg, run_dir=tmp_path / "run").train()  # said once Ray answers
    assert (
        "collector.num_cpus_per_collector=16 is invalid here: each collector asks Ray for 16 CPUs "
        "but no Ray node has more than 4; lower collector.num_cpus_per_collector (e.g. 4)"
    ) in str(info.value)
    assert "remote_configs" not in str(info.value)
    assert not (tmp_path / "run").exists()

from __future__ import annotations

from pathlib import Path

import pytest

from fleetrl import ConfigError
from fleetrl.config import config_from_dict, load_config

CONFIGS = sorted(Path(__file__).parent.parent.joinpath("configs").glob("*.yaml"))
PPO_CARTPOLE = Path(__file__).parent.parent / "configs" / "ppo_cartpole.yaml"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_load(path):
    cfg = load_config(path)
    assert cfg.algorithm in path.name


def test_overrides_are_typed_and_applied():
    cfg = load_config(
        PPO_CARTPOLE,  # a PPO config: ppo.* overrides of an a2c config are refused
        [
            "ppo.lr=1e-3",
            "collector.num_collectors=4",
            "ppo.hidden_sizes=[32, 32]",
            "trainer.target_return=null",
        ],
    )
    assert cfg.ppo.lr == 0.001 and cfg.collector.num_collectors == 4
    assert cfg.ppo.hidden_sizes == [32, 32] and cfg.trainer.target_return is None


def test_every_problem_is_listed_at_once():
    with pytest.raises(ConfigError) as info:
        config_from_dict(
            {
                "algorithm": "ppo",
                "env": {"idd": "CartPole-v1", "num_envs": 0},
                "ppo": {"lr": "fast", "gamma": 2},
            },
            ["collector.frames_per_batch=100", "trainer.lr_schedule=cosine"],
        )
    msg = str(info.value)
    assert "env.idd is not a config key; did you mean 'env.id'?" in msg
    assert "ppo.lr='fast' is invalid: must be float" in msg
    assert "env.num_envs=0 is invalid: must be > 0" in msg
    assert "ppo.gamma=2.0 is invalid: must be in (0, 1]" in msg
    assert "trainer.lr_schedule='cosine' is invalid: must be 'constant' or 'linear'" in msg
    assert len(info.value.problems) >= 5


def test_off_policy_sections_have_no_dead_keys():
    with pytest.raises(ConfigError, match=r"dqn.gae_lambda is not a config key"):
        config_from_dict({"algorithm": "dqn", "dqn": {"gae_lambda": 0.9}})


def test_missing_file_and_bad_override():
    with pytest.raises(ConfigError, match=r"config='nope.yaml' is invalid: no such file"):
        load_config("nope.yaml")
    with pytest.raises(ConfigError, match=r"override 'ppo.lr' is invalid: write key=value"):
        load_config(CONFIGS[0], ["ppo.lr"])

"""The checks of a decoupled config (collector.decoupled): every problem named at once."""

from __future__ import annotations

import pytest

from fleetrl import ConfigError, load_config
from fleetrl.setup.verify import DECOUPLED_NEEDS
from runs import DECOUPLED_DQN, ROOT


def test_decoupled_config_errors_name_every_key():
    with pytest.raises(ConfigError) as err:
        load_config(
            DECOUPLED_DQN,
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

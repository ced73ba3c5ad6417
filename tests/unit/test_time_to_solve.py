"""The contestant selection and ratios of ``benchmarks/time_to_solve.py`` (no training here)."""

from __future__ import annotations

import pytest

from time_to_solve import CONTESTANTS, RATIOS, ratios, select


def test_default_contestants_are_fleetrl_ones_unless_rllib():
    assert select(None, rllib=False) == ["ppo-dist", "ppo-local", "appo"]
    assert select(None, rllib=True) == list(CONTESTANTS)
    assert CONTESTANTS["appo"].config == "appo_cartpole.yaml"
    assert (CONTESTANTS["rllib-appo"].algo, CONTESTANTS["rllib-appo"].runners) == ("appo", 2)


def test_only_picks_in_the_given_order_and_names_unknown_keys():
    assert select("appo, ppo-dist", rllib=False) == ["appo", "ppo-dist"]
    with pytest.raises(SystemExit, match=r"unknown contestant\(s\) \['ppo-fast'\]; choose from"):
        select("appo,ppo-fast", rllib=False)


def test_ratios_only_where_both_sides_ran_and_best_means_fastest():
    found = ratios({"appo": 12.0, "ppo-dist": 15.0, "rllib-ppo-dist": 30.0, "rllib-appo": 40.0})
    assert set(found) == {
        "fleetrl PPO / RLlib PPO, distributed",
        "fleetrl PPO / RLlib PPO, best vs best",
        "fleetrl APPO / fleetrl PPO distributed",
        "fleetrl APPO / RLlib APPO",
        "fleetrl APPO / best RLlib",
    }
    assert found["fleetrl APPO / best RLlib"]["value"] == pytest.approx(0.4)
    assert found["fleetrl APPO / fleetrl PPO distributed"] == {"value": 0.8, "target": 1.0}
    assert found["fleetrl APPO / RLlib APPO"]["value"] == pytest.approx(0.3)
    medians = {"appo": 12.0, "rllib-ppo-dist": 30.0, "rllib-ppo-local": 24.0, "rllib-appo": 40.0}
    best = ratios(medians)["fleetrl APPO / best RLlib"]
    assert best == {"value": 0.5, "target": RATIOS["fleetrl APPO / best RLlib"][2]}

"""The settings, curve readings and summary of ``benchmarks/memory.py`` (no training here)."""

from __future__ import annotations

import ast

import pytest

from memory import (
    CONFIG,
    CONTESTANTS,
    SB3_SCRIPT,
    TARGET,
    curve_of,
    first_reach,
    fleetrl_overrides,
    summarize,
)


def test_fleetrls_contestants_are_the_shipped_config_with_the_zoos_settings():
    from fleetrl import load_config

    lstm = load_config(str(CONFIG), fleetrl_overrides("fleetrl"))
    algo = lstm.algo
    assert (lstm.collector.num_collectors, lstm.env.num_envs) == (0, 8)  # in-process, as SB3
    assert lstm.collector.frames_per_batch == 8 * 32 and algo.seq_len == 32  # n_steps 32
    assert (algo.num_epochs, algo.num_mini_batch) == (20, 1)  # batch_size 256
    assert (algo.lr, algo.clip_epsilon, algo.gamma, algo.gae_lambda) == (1e-3, 0.2, 0.98, 0.8)
    assert (algo.lr_schedule.value, algo.clip_schedule.value) == ("linear", "linear")
    assert (algo.entropy_coef, algo.recurrent_size, algo.head_sizes) == (0.0, 64, [64])
    assert lstm.env.observation_indices == [0, 2] and lstm.env.normalize_observation
    floor = load_config(str(CONFIG), fleetrl_overrides("fleetrl-mlp"))
    assert (floor.algo.model.value, floor.algo.hidden_sizes) == ("mlp", [64, 64])
    assert floor.env.observation_indices == [0, 2]  # the same POMDP


def test_the_sb3_script_uses_the_same_settings_and_parses():
    ast.parse(SB3_SCRIPT)
    for setting in (
        "n_steps=32",
        "batch_size=256",
        "n_epochs=20",
        "gamma=0.98",
        "gae_lambda=0.8",
        "ent_coef=0.0",
        "get_linear_fn(1e-3, 0.0, 1.0)",
        "get_linear_fn(0.2, 0.0, 1.0)",
        "lstm_hidden_size=64",
        "range(8)",
        "norm_obs=True, norm_reward=False",
        "obs[[0, 2]]",
    ):
        assert setting in SB3_SCRIPT, setting
    assert CONTESTANTS == ("fleetrl", "sb3", "fleetrl-mlp")


def test_curves_are_read_from_the_metrics_with_the_launch_offset(tmp_path):
    metrics = tmp_path / "metrics.csv"
    metrics.write_text(
        "train/frames,time/elapsed_s,train/episode_return\n"
        "256,1.0,\n"  # no episode finished yet: no point
        "512,2.0,20.5\n"
        "768,3.5,480.0\n"
    )
    curve = curve_of(metrics, launch_offset=4.0)
    assert curve == [[512, 6.0, 20.5], [768, 7.5, 480.0]]
    assert first_reach(curve, TARGET) == (768, 7.5)
    assert first_reach(curve[:1], TARGET) is None


def test_the_summary_takes_medians_over_solved_seeds_and_the_ratios_to_sb3():
    def run(frames, wall, solved, *points):
        return {"frames": frames, "wall_s": wall, "solved": solved, "curve": [*points]}

    runs = {
        "fleetrl": [
            run(60_000, 90.0, True, [20_000, 30.0, 300], [60_000, 80.0, 480]),
            run(80_000, 110.0, True, [40_000, 50.0, 400], [80_000, 100.0, 490]),
        ],
        "sb3": [
            run(100_000, 400.0, True, [50_000, 200.0, 400], [100_000, 390.0, 500]),
            run(200_000, 700.0, False, [150_000, 500.0, 300]),
        ],
        "fleetrl-mlp": [
            run(200_000, 150.0, False, [200_000, 140.0, 60]),
            run(200_000, 160.0, False, [200_000, 150.0, 80]),
        ],
    }
    s = summarize(runs, 200_000)
    fleetrl, sb3, floor = (s["contestants"][w] for w in ("fleetrl", "sb3", "fleetrl-mlp"))
    assert fleetrl["frames_to_target"] == 70_000 and fleetrl["wall_to_target_s"] == 100.0
    assert sb3["solved"] == 1 and sb3["wall_to_target_s"] == 400.0  # over its solved seed
    assert floor["frames_to_target"] is None and floor["best_return"] == 70
    # the shared return: the lower median best (fleetrl 485, SB3 400); each seed's first reach
    assert s["shared_return"] == 400
    assert (fleetrl["seeds_to_shared"], fleetrl["frames_to_shared"]) == (2, 50_000)
    assert fleetrl["seconds_to_shared"] == 65.0  # seeds at 80 s and 50 s
    assert (sb3["seeds_to_shared"], sb3["frames_to_shared"], sb3["seconds_to_shared"]) == (
        1,
        50_000,
        200.0,
    )
    assert s["ratios"] == {
        "frames to 475, fleetrl / sb3": pytest.approx(0.7),
        "wall to 475, fleetrl / sb3": pytest.approx(0.25),
        "frames to the shared return, fleetrl / sb3": pytest.approx(1.0),
        "seconds to the shared return, fleetrl / sb3": pytest.approx(0.325),
    }
    unsolved = summarize({**runs, "sb3": runs["sb3"][1:]}, 200_000)
    assert "frames to 475, fleetrl / sb3" not in unsolved["ratios"]  # SB3 never reached 475

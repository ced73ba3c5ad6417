"""The settings, curve readings and summary of ``benchmarks/atari_learning.py`` (no training
here: a run is 30 minutes on this machine)."""

from __future__ import annotations

import argparse
import csv
import math

import pytest

from atari_learning import (
    ENGINE,
    FLOOR_HEADER,
    HEADER,
    STEPS,
    TIME_COLUMNS,
    config_path,
    config_problem,
    floor_rows,
    page_tables,
    random_score,
    run_overrides,
    score_at,
    summarize,
)
from collecting import needs_envpool


@pytest.mark.parametrize("algo", ["appo", "ppo"])
def test_a_run_is_the_shipped_config_with_only_the_game_engine_seed_and_budget_set(algo):
    from fleetrl import load_config

    shipped = load_config(str(config_path(algo)))
    run = load_config(str(config_path(algo)), run_overrides("ALE/Breakout-v5", STEPS, 1))
    assert (run.env.id, run.env.engine.value, run.trainer.seed) == ("ALE/Breakout-v5", ENGINE, 1)
    assert (run.trainer.total_frames, run.trainer.test_every) == (1_000_000, 0)
    # 4 emulator frames per agent step, 4 stacked 84x84 frames: the comparison's settings
    assert (run.env.atari.frame_skip, run.env.atari.frame_stack) == (4, 4)
    assert run.env.atari.screen_size == 84
    assert run.algo == shipped.algo  # every hyperparameter as shipped
    assert run.collector == shipped.collector


def write_metrics(path, rows):
    keys = sorted({k for r in rows for k in r})
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, keys)
        writer.writeheader()
        writer.writerows(rows)


def test_the_summary_reads_the_score_curve_throughput_and_time_from_the_metrics(tmp_path):
    rows = [
        {"train/frames": 512, "train/episode_return": "nan", "train/episodes": 0,
         "time/elapsed_s": 2.0, "train/policy_version": 4, "time/collect_s": 1.5,
         "time/learn_s": 0.5, "time/broadcast_s": 0.0, "time/prepare_s": 0.1},
        {"train/frames": 1024, "train/episode_return": 1.5, "train/episodes": 3,
         "time/elapsed_s": 4.0, "train/policy_version": 8, "time/collect_s": 0.5,
         "time/learn_s": 1.5, "time/broadcast_s": 0.25, "time/prepare_s": 0.2},
        {"train/frames": 1536, "train/episode_return": 3.0, "train/episodes": 5,
         "time/elapsed_s": 6.0, "train/policy_version": 12, "time/collect_s": 0.5,
         "time/learn_s": 1.5, "time/broadcast_s": 0.25, "time/prepare_s": 0.2},
    ]  # fmt: skip
    write_metrics(tmp_path / "metrics.csv", rows)
    got = summarize(tmp_path, wall=10.0)
    # 4 s of start-up before the trainer's clock: every point's seconds are since launch
    assert got["curve"] == [[1024, 1.5, 8.0], [1536, 3.0, 10.0]]
    assert (got["score"], got["best_score"], got["episodes"]) == (3.0, 3.0, 5)
    assert (got["frames"], got["updates"], got["frames_per_s"]) == (1536, 12, 153.6)
    assert got["time_breakdown_s"] == dict(zip(TIME_COLUMNS, [2.5, 3.5, 0.5, pytest.approx(0.5)]))
    assert score_at(got["curve"], 1200) == 1.5
    assert math.isnan(score_at(got["curve"], 1000))


def test_the_page_has_one_row_per_run_with_its_scores_and_time():
    run = {
        "frames": 1536, "curve": [[512, 1.0, 3.0], [1536, 4.0, 9.0]], "score": 4.0,
        "eval_return": 5.5, "wall_s": 10.4, "frames_per_s": 147.7, "date": "2026-11-29",
        "time_breakdown_s": {"time/collect_s": 2.4, "time/learn_s": 6.6},
    }  # fmt: skip
    random = {"ALE/Breakout-v5": {"mean": 1.25, "episodes": 100, "seed": 0}}
    (table,) = page_tables({"results": {"fleetrl appo ALE/Breakout-v5": run}, "random": random})
    assert table["header"] == HEADER
    assert table["title"].endswith("a random policy scores 1.25 on ALE/Breakout-v5 (100 episodes)")
    assert table["rows"] == [
        ["fleetrl appo ALE/Breakout-v5", "1,536", "1.0", "4.0", "5.5", "10", "148", "2", "7",
         "2026-11-29"]
    ]  # fmt: skip


@needs_envpool
def test_the_random_floor_is_whole_episodes_of_the_runs_env():
    floor = random_score("ALE/Breakout-v5", episodes=3)
    assert (floor["episodes"], floor["seed"]) == (3, 0)
    assert 0 <= floor["mean"] < 50  # whole games of Breakout at random: a few points each


def test_a_runs_bad_setting_is_refused_by_its_key_before_anything_runs():
    args = argparse.Namespace(game="ALE/Breakout-v5", steps=0, seed=0, overrides=[])
    assert config_problem("appo", args) == "appo: trainer.total_frames=0 is invalid: must be > 0"
    args = argparse.Namespace(game="ALE/Breakout-v5", steps=STEPS, seed=0, overrides=["ppo.lrr=1"])
    assert config_problem("ppo", args).startswith("ppo: ppo.lrr is not a config key")
    args.overrides = []
    assert config_problem("ppo", args) is None
    # the plain floor is ppo_atari.yaml's settings: checked by that config; no overrides
    assert config_problem("plain", args) is None
    args.steps = 0
    assert config_problem("plain", args) == "plain: trainer.total_frames=0 is invalid: must be > 0"
    args.overrides = ["ppo.lr=1e-3"]
    assert config_problem("plain", args).startswith("plain: the plain PPO loop is the fixed floor")
    args.overrides, args.steps = [], 1000  # the plain script would refuse it after start-up
    assert config_problem("plain", args) == (
        "plain: --steps 1000 is less than one update (1024 agent steps)"
    )


def test_the_plain_floor_sits_beside_fleetrls_ppo_at_the_plain_runs_budget():
    plain = {
        "algo": "plain",
        "game": "G",
        "seed": 0,
        "frames": 1000,
        "score": 3.0,
        "wall_s": 50.0,
        "curve": [[500, 2.0, 30.0], [1000, 3.0, 50.0]],
        "eval_return": math.nan,
        "frames_per_s": 20.0,
        "time_breakdown_s": {},
    }
    ppo = {
        "algo": "ppo",
        "game": "G",
        "seed": 0,
        "frames": 2000,
        "score": 9.0,
        "curve": [[512, 1.0, 20.0], [1024, 2.5, 40.0], [2048, 9.0, 80.0]],
        "eval_return": 8.0,
        "wall_s": 90.0,
        "frames_per_s": 22.2,
        "time_breakdown_s": {},
    }
    other_seed = ppo | {"seed": 1}
    appo = ppo | {"algo": "appo"}
    rows = floor_rows(
        {"plain ppo G": plain, "fleetrl ppo G": ppo, "fleetrl ppo G [seed=1]": other_seed,
         "fleetrl appo G": appo}
    )  # fmt: skip
    # fleetrl's score at 1,000 steps is its point at 512 (1.0); it passed 1,000 at 40 s
    assert rows == [["plain ppo G", "fleetrl ppo G", "1,000", "3.0", "1.0", "50", "40", "0.80x"]]
    assert len(FLOOR_HEADER) == len(rows[0])
    tables = page_tables({"results": {"plain ppo G": plain, "fleetrl ppo G": ppo}})
    assert [t["header"] for t in tables] == [HEADER, FLOOR_HEADER]
    assert tables[1]["rows"] == rows
    # the plain run has no eval and no trainer columns: "-", never "nan"
    assert tables[0]["rows"][0][4:9] == ["-", "50", "20", "-", "-"]

"""The RLlib comparison and the report of ``benchmarks/mujoco_learning.py`` (no training here)."""

from __future__ import annotations

import math

import pytest

from mujoco_learning import compare_with_rllib, report, time_to_score


def _run(curve, wall_s=100.0, frames=1000):
    return {"curve": curve, "wall_s": wall_s, "frames": frames, "score": curve[-1][1]}


def test_time_to_score_takes_the_first_point_at_or_above_and_its_seconds():
    run = _run([[200, -5.0, 12.5], [400, 10.0, 30.0], [600, 3.0, 45.0], [800, 20.0, 60.0]])
    assert time_to_score(run, 10.0) == (400, 30.0, True)
    assert time_to_score(run, 15.0) == (800, 60.0, True)
    assert time_to_score(run, 20.5) is None


def test_time_to_score_without_seconds_uses_the_mean_rate():
    run = _run([[250, 1.0], [500, 7.0]], wall_s=80.0, frames=1000)
    assert time_to_score(run, 5.0) == (500, 40.0, False)


def test_compare_with_rllib_reads_the_target_both_ways():
    fleetrl = _run([[100, 50.0, 20.0], [200, 700.0, 40.0], [300, 900.0, 60.0]], wall_s=150.0)
    rllib = {"score": 600.0, "wall_s": 100.0}
    v = compare_with_rllib(fleetrl, rllib)
    assert v["score_ratio"] == pytest.approx(1.5)
    assert v["wall_ratio"] == pytest.approx(1.5)
    assert (v["frames_to_rllib_score"], v["wall_to_rllib_score_s"]) == (200, 40.0)
    assert v["wall_to_rllib_score_exact"] is True
    assert v["time_to_rllib_score_ratio"] == pytest.approx(0.4)
    never = compare_with_rllib(fleetrl, {"score": 1000.0, "wall_s": 100.0})
    assert never["frames_to_rllib_score"] is None
    assert never["time_to_rllib_score_ratio"] is None
    assert math.isnan(compare_with_rllib(fleetrl, {"score": 0.0, "wall_s": 1.0})["score_ratio"])


def test_report_prints_every_run_and_adds_the_rllib_comparison(capsys, monkeypatch, tmp_path):
    import mujoco_learning

    monkeypatch.setattr(mujoco_learning, "RESULTS", tmp_path)
    monkeypatch.setattr(mujoco_learning, "ROOT", tmp_path)
    base = {"eval_return": 1.0, "frames_per_s": 10.0, "updates_per_s": 2.0, "reached": True}
    results = {
        "fleetrl ppo HalfCheetah-v5": {
            **_run([[100, 50.0, 20.0], [200, 700.0, 40.0]], wall_s=150.0, frames=200),
            **base,
            "target": 1442.0,
        },
        "rllib ppo HalfCheetah-v5": {
            "frames": 200,
            "score": 600.0,
            "wall_s": 100.0,
            "frames_per_s": 2.0,
            "curve": [[100, 300.0, 50.0], [200, 600.0, 100.0]],
        },
        "fleetrl sac HalfCheetah-v5": {
            **_run([[64, 3100.0, 9.0]], wall_s=10.0, frames=64),
            **base,
            "target": 3000.0,
        },
    }
    report(results)
    out = capsys.readouterr().out
    for name in results:
        assert name in out
    assert "reached RLlib's final score at 200 steps, 40 s: 0.40x RLlib's wall time" in out
    assert "vs_rllib" in results["fleetrl ppo HalfCheetah-v5"]
    assert "vs_rllib" not in results["fleetrl sac HalfCheetah-v5"]


def test_an_override_written_after_envs_is_refused_before_any_run(capsys, monkeypatch):
    """argparse gives --envs every word after it: an override there would be run as an env
    id, after minutes of runs before it."""
    import mujoco_learning

    def never(*args, **kwargs):
        raise AssertionError("nothing may run")

    monkeypatch.setattr(mujoco_learning, "run_fleetrl", never)
    argv = ["mujoco_learning.py", "--algos", "ppo", "--envs", "Hopper-v5", "env.num_envs=4"]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit) as info:
        mujoco_learning.main()
    assert info.value.code == 2
    assert (
        "--envs env.num_envs=4: an override, not an env id; write the overrides before the "
        "options (mujoco_learning.py env.num_envs=4 --envs Hopper-v5)"
    ) in capsys.readouterr().err

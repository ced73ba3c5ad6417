"""The training progress bar: the return, one frames/s figure, the lag and where the time
went, over the last iterations; no bar where stderr is not a terminal."""

from __future__ import annotations

import math

import pytest

from fleetrl.run import run_control
from fleetrl.run.run_control import ProgressBar
from fleetrl.setup.load import config_from_dict


def test_the_bar_shows_one_frames_per_second_figure_over_the_last_iterations(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(run_control.time, "perf_counter", lambda: now[0])
    config = config_from_dict({"algorithm": "ppo"}, ["trainer.total_frames=100000"])
    bar = ProgressBar(config, initial=0, interactive=True)
    assert math.isnan(bar.rate())
    # a slow start (10 s for the first 1,000 frames), then 1,000 frames a second
    steps = [(10.0, 1000)] + [(1.0, 1000)] * 12
    rates = []
    for seconds, frames in steps:
        now[0] += seconds
        bar.update(frames, {"train/episode_return": 21.5})
        rates.append(bar.rate())
    assert rates[0] == 100.0 and rates[1] == 2000 / 11
    assert rates[-1] == 1000.0  # the last 10 iterations, past the slow start
    line = str(bar.bar)
    assert line.count("fps=") == 1 and "fps=1,000" in line and "return=21.5" in line
    assert "/s" not in line  # tqdm's own rate is not shown
    assert "13.0k/100k" in line
    bar.close()


def test_the_bar_shows_the_lag_and_where_the_last_iterations_time_went():
    config = config_from_dict({"algorithm": "ppo"}, ["trainer.total_frames=100000"])
    bar = ProgressBar(config, initial=0, interactive=True)
    assert bar.shares() == {}
    central = {"time/collect_s": 0.6, "time/learn_s": 0.3, "time/grad_s": math.nan}
    central |= {"time/update_s": math.nan, "time/broadcast_s": 0.0, "time/iteration_s": 1.0}
    for _ in range(ProgressBar.WINDOW):  # fills the window
        bar.update(100, {"train/episode_return": 1.0, "train/policy_lag": 1.5, **central})
    assert bar.shares() == pytest.approx({"collect": 0.6, "learn": 0.3, "publish": 0.0})
    line = str(bar.bar)
    assert "lag=1.5" in line and "collect=60%" in line and "learn=30%" in line
    # gradient workers: computing and applying are the learning; the window moves on
    workers = {"time/collect_s": 0.2, "time/learn_s": math.nan, "time/grad_s": 0.5}
    workers |= {"time/update_s": 0.2, "time/broadcast_s": 0.1, "time/iteration_s": 1.0}
    for _ in range(ProgressBar.WINDOW):
        bar.update(100, {"train/episode_return": 1.0, "train/policy_lag": math.nan, **workers})
    assert bar.shares() == pytest.approx({"collect": 0.2, "learn": 0.7, "publish": 0.1})
    assert "lag=" not in str(bar.bar)  # no lag measured: none shown
    bar.close()


def test_no_bar_when_disabled_or_stderr_is_not_a_terminal():
    config = config_from_dict({"algorithm": "ppo"}, ["logging.progress_bar=false"])
    bar = ProgressBar(config, initial=0, interactive=True)
    bar.update(10, {"train/episode_return": 1.0})
    assert bar.bar is None
    bar.close()
    # a log file gets the metrics, not a bar (under pytest stderr is captured: no terminal)
    bar = ProgressBar(config_from_dict({"algorithm": "ppo"}, []), initial=0)
    assert bar.bar is None
    bar.close()

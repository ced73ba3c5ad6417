"""The training progress bar: the return and one frames/s figure, the last iterations' rate."""

from __future__ import annotations

import math

from fleetrl import run_control
from fleetrl.run_control import ProgressBar
from fleetrl.setup.load import config_from_dict


def test_the_bar_shows_one_frames_per_second_figure_over_the_last_iterations(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(run_control.time, "perf_counter", lambda: now[0])
    config = config_from_dict({"algorithm": "ppo"}, ["trainer.total_frames=100000"])
    bar = ProgressBar(config, initial=0)
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


def test_no_bar_when_disabled():
    config = config_from_dict({"algorithm": "ppo"}, ["logging.progress_bar=false"])
    bar = ProgressBar(config, initial=0)
    bar.update(10, {"train/episode_return": 1.0})
    assert bar.bar is None
    bar.close()

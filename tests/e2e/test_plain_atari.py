"""The plain PPO floor of the Atari learning benchmark (``benchmarks/plain_atari.py``) runs
whole updates over envpool and reports exactly what it collected."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from collecting import needs_envpool
from runs import ROOT


@needs_envpool
@pytest.mark.standalone  # one process of its own, no Ray
def test_the_plain_ppo_loop_trains_whole_updates_and_scores_the_last_episodes(tmp_path):
    out = tmp_path / "plain.json"
    script = ROOT / "benchmarks" / "plain_atari.py"
    cmd = [sys.executable, str(script), "--steps", "2500", "--seed", "1", "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=ROOT, timeout=240)
    r = json.loads(out.read_text())
    # 2 updates of 8 envs x 128 steps: the budget's remainder (452 steps) is not collected
    assert (r["frames"], r["updates"]) == (2048, 2)
    assert r["frames_per_s"] == pytest.approx(2048 / r["wall_s"])
    if r["episodes"]:  # a score after each update with finished episodes, by agent steps
        assert [c[0] for c in r["curve"]][-1] == 2048
        assert r["score"] == r["curve"][-1][1] >= 0
    refused = subprocess.run(
        [sys.executable, str(script), "--steps", "100", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert refused.returncode == 2
    assert "--steps: 100 is less than one update (1024 steps)" in refused.stderr

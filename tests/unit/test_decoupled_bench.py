"""``benchmarks/decoupled.py``: each run's command and its stop rule (no training here: the
run's script is executed on a stand-in Trainer)."""

from __future__ import annotations

import argparse
import json
import subprocess
import types

import pytest

import decoupled


def _args(**kw):
    base = dict(max_wall=240.0, eval_every_frames=2048, eval_episodes=5, whole_budget=False)
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("whole", [False, True])
def test_a_run_passes_its_mode_overrides_and_stop_rule(whole, monkeypatch):
    seen = {}

    def fake_run(cmd, **kwargs):
        seen["cmd"] = cmd
        record = {"updates": 30, "frames": 60, "eval_history": [[20, 1.0]]}
        return types.SimpleNamespace(stdout="RESULT " + json.dumps(record), stderr="")

    monkeypatch.setattr(subprocess, "run", fake_run)
    result = decoupled.run("dqn", "decoupled", _args(whole_budget=whole), "/tmp/x")
    config, target, overrides, run_dir, max_wall, stop = seen["cmd"][3:]
    assert config.endswith("configs/dqn_cartpole.yaml") and float(target) == 400.0
    # the publish interval is the config's (one batch's worth of updates, as alternating)
    assert json.loads(overrides)[-1] == "collector.decoupled=true"
    assert not any("weight_update_interval" in o for o in json.loads(overrides))
    assert (run_dir, max_wall, stop) == (
        "/tmp/x/dqn_decoupled",
        "240.0",
        "whole" if whole else "target",
    )
    assert result["ratio"] == 0.5 and result["mode"] == "decoupled"


class _Trainer:
    """Stands in for fleetrl's Trainer: evaluations arrive, target_reached says when to stop."""

    def __init__(self, config, run_dir):
        self.eval_history = []


@pytest.mark.parametrize(("stop", "stops_at_target"), [("target", True), ("whole", False)])
def test_the_script_stops_at_the_target_or_records_it_and_goes_on(stop, stops_at_target):
    # the run's script up to its Trainer subclass, on the stand-in
    head = decoupled.SCRIPT.split("trainer = ToEvalTarget(")[0]
    head = head.replace("from fleetrl import Trainer, load_config", "")
    argv = ["-c", "cfg.yaml", "400.0", "[]", "/tmp/run", "1e9", stop]
    scope = {"Trainer": _Trainer, "sys": types.SimpleNamespace(argv=argv)}
    exec(head.replace("import json, sys, time", "import json, time"), scope)
    trainer = scope["ToEvalTarget"](None, None)
    trainer.eval_history.append([2048, 150.0])
    assert trainer.target_reached() is False and trainer.reached_at is None
    trainer.eval_history.append([4096, 450.0])
    assert trainer.target_reached() is stops_at_target
    assert trainer.reached_at[1] == 4096
    trainer.eval_history.append([6144, 480.0])  # later evaluations keep the first time
    assert trainer.reached_at[1] == 4096

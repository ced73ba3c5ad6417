"""The GPU program's every part on the CPU (``GPU_PROGRAM_DRY=1``), Ray's included: the
learner, the inference scaling run and the APPO run, stopped at its budget by SIGINT. The
setup alone is the unit tests' (``tests/unit/test_gpu_program.py``); the CUDA tests' part,
skipped here, and the learner part's result files are checked here only."""

from __future__ import annotations

import json

import pytest

from dry_program import CPU_ONLY, ROOT, run_program

RESULTS = ROOT / "benchmarks" / "results"

pytestmark = pytest.mark.standalone  # its own Ray, in the program's processes


@CPU_ONLY
@pytest.mark.timeout(900)  # make test-all runs it at a low priority beside the Ray tests
def test_the_program_runs_every_part_on_the_cpu(tmp_path):
    # budgets as upper limits only, for a starved machine (the parts took 267 s beside the Ray
    # tests, 93 s alone): APPO is stopped 55 s after its start in any case
    budgets = {"GPU_PROGRAM_BUDGET_S": "840", "GPU_INFERENCE_S": "480"}
    budgets |= {"GPU_TESTS_S": "180", "GPU_LEARNER_S": "180"}
    before = sorted(RESULTS.iterdir())
    done, summary = run_program(tmp_path, **budgets)
    assert done.returncode == 0, done.stdout[-3000:]
    parts = {p["name"]: p for p in summary["parts"]}
    assert list(parts) == ["setup", "tests", "learner", "inference_w1", "appo"]
    assert {p["status"] for p in parts.values()} == {"ok"}
    assert summary["dry"] is True and summary["machine"]["imports"] == "ok"
    learner = parts["learner"]["detail"]  # one case, eager only, on the CPU
    assert set(learner["appo_cartpole"]) == {"fleetrl eager", "plain eager"}
    runs = json.loads((tmp_path / "out" / "learner_throughput.json").read_text())["runs"]
    assert list(runs) == ["learner"]
    assert runs["learner"]["device"] == "cpu"
    assert list(runs["learner"]["cases"]) == ["appo_cartpole"]
    assert "== learner: ok" in (tmp_path / "out" / "program.log").read_text()
    assert sorted(RESULTS.iterdir()) == before  # the benchmarks ran on copies
    tests = parts["tests"]["detail"]  # the CUDA tests, skipped here ("needs CUDA")
    assert tests["tests"] == tests["skipped"] >= 3 and tests["failures"] == tests["errors"] == 0
    assert "tests/integration/test_cuda.py" in parts["tests"]["command"]
    rows = parts["inference_w1"]["detail"]
    assert {"raw", "local", "server-cpu", "server-cpu (ray calls)"} <= set(rows)
    appo = parts["appo"]["detail"]
    assert appo["rows"] >= 1 and int(appo["train/frames"]) == 64 * appo["rows"]
    assert parts["appo"]["exit"] == 124  # stopped at its budget, by SIGINT, cleanly
    assert summary["files"] == [
        "appo_learning_curve.png",
        "appo_metrics.csv",
        "extras.tgz",
        "inference_scaling.json",
        "learner_throughput.json",
        "program.log",
        "summary.json",
    ]

"""The GPU program's dry run (``GPU_PROGRAM_DRY=1``): ``benchmarks/gpu_program.sh`` on the CPU,
its result files in a test's folder, its summary read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "benchmarks" / "gpu_program.sh"
#: the dry run is the CPU path; where torch sees a GPU the program runs for real instead
CPU_ONLY = pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is the CPU path")


def run_program(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "out"
    environ = {
        **os.environ,
        "GPU_PROGRAM_DRY": "1",
        "GPU_PYTHON": sys.executable,
        "OUT": str(out),
        "GPU_SCRATCH": str(tmp_path / "scratch"),
        **env,
    }
    done = subprocess.run(
        ["bash", str(PROGRAM)], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=900
    )
    summary = json.loads((out / "summary.json").read_text())
    return done, summary

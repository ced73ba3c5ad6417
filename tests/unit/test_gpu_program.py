"""The GPU program: ``benchmarks/gpu_prepare.sh`` here, ``benchmarks/gpu_program.sh`` there.

- both scripts parse;
- the prepare step, offline, on small stand-in wheels: the pins are this venv's, Ray's wheel
  is slimmed (its jar gone from the archive and from RECORD, the rest byte for byte), one
  call carries everything where the tree and the wheels fit 64 MiB, two where they do not
  (Ray split, its parts joining back to the same bytes), a plan even two cannot carry is
  refused with its sizes, and a missing wheel is named;
- the program on the CPU (``GPU_PROGRAM_DRY=1``): its setup and learner parts here in
  seconds, each result file and status where the summary says; every part, the CUDA tests'
  and Ray's included, in ``tests/e2e/test_gpu_program_dry_run.py``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dry_program import CPU_ONLY, PROGRAM, ROOT, run_program

PREPARE = ROOT / "benchmarks" / "gpu_prepare.sh"
#: what the device machine lacks, and the program's call carries
CARRIED = [
    "ray",
    "jsonschema",
    "jsonschema-specifications",
    "referencing",
    "rpds-py",
    "tensordict",
    "orjson",
    "importlib_metadata",
    "pyvers",
    "torchrl",
    "hoptorch",
    "gymnasium",
    "farama-notifications",
    "ale-py",
    "lz4",
    "zstandard",
]
STANDINS = {  # each wheel's file name, at version 1.0
    "ray": "ray-1.0-cp312-cp312-manylinux2014_x86_64.whl",
    **{n: f"{n.replace('-', '_').lower()}-1.0-py3-none-any.whl" for n in CARRIED[1:]},
}
RAY = STANDINS["ray"]
JAR = os.urandom(300_000)  # incompressible: the sizes below are the bytes written
KEPT = os.urandom(200_000)
TREE = 10_000
FIRST_COMMAND = (
    "mkdir -p /tmp/fleetrl-whl && cp .whl/first/* /tmp/fleetrl-whl/ && ls -l /tmp/fleetrl-whl"
)
PROGRAM_COMMAND = "bash benchmarks/gpu_program.sh"
RAY_KEPT = [
    "ray/__init__.py",
    "ray/_raylet.so",
    "ray/dashboard/client/build/static/js/main.js",
    "ray-1.0.dist-info/RECORD",
]


def make_ray(path: Path) -> None:
    """A stand-in for Ray's wheel: a module, the jar, RLlib, a source map, and RECORD."""
    entries = {
        "ray/__init__.py": b"version = '1.0'\n",
        "ray/_raylet.so": KEPT,
        "ray/jars/ray_dist.jar": JAR,
        "ray/rllib/__init__.py": b"",
        "ray/dashboard/client/build/static/js/main.js": b"js",
        "ray/dashboard/client/build/static/js/main.js.map": b"map",
    }
    record = "".join(f"{name},sha256=x,{len(data)}\n" for name, data in entries.items())
    entries["ray-1.0.dist-info/RECORD"] = (record + "ray-1.0.dist-info/RECORD,,\n").encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in entries.items():
            z.writestr(name, data)


@pytest.fixture
def whl(tmp_path: Path) -> Path:
    """A .whl folder whose cache holds every carried wheel, at version 1.0."""
    cache = tmp_path / ".whl" / "cache"
    cache.mkdir(parents=True)
    for name, file in STANDINS.items():
        if name != "ray":
            (cache / file).write_bytes(b"w" * 100)
    make_ray(cache / RAY)
    return tmp_path / ".whl"


def prepare(whl: Path, *args: str, limit: int = 64 * 2**20) -> subprocess.CompletedProcess:
    pins = [f"--pin={name}==1.0" for name in CARRIED]
    cmd = ["bash", str(PREPARE), "--offline", f"--whl={whl}", f"--limit={limit}"]
    cmd += [f"--tree-bytes={TREE}", "--margin=0", *pins, *args]
    env = {**os.environ, "GPU_PREPARE_PYTHON": sys.executable}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def calls(whl: Path) -> list[dict]:
    return json.loads((whl / "plan.json").read_text())["calls"]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_both_scripts_parse():
    for script in (PROGRAM, PREPARE):
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, script


def test_the_pins_are_this_venvs_versions_of_what_the_device_lacks():
    env = {**os.environ, "GPU_PREPARE_PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(PREPARE), "--list"], capture_output=True, text=True, env=env, check=True
    )
    expected = [f"{n}=={importlib.metadata.version(n)}" for n in CARRIED]
    assert done.stdout.split() == expected


def test_one_call_carries_everything_where_it_fits(whl):
    done = prepare(whl)
    assert done.returncode == 0, done.stderr
    run = whl / "run"
    wheels = sorted(p.name for p in run.glob("*.whl"))
    assert wheels == sorted(STANDINS.values())
    plan = json.loads((whl / "plan.json").read_text())
    assert plan["pins"] == {n: "1.0" for n in CARRIED} and plan["ray_slimmed"] is True
    [call] = plan["calls"]
    assert (call["command"], call["carry"], call["timeout_s"]) == (
        PROGRAM_COMMAND,
        [".whl/run"],
        600,
    )
    assert call["files"] == sorted([*wheels, "SHA256SUMS", "SOURCE"])
    assert call["carried_bytes"] == TREE + sum(p.stat().st_size for p in run.iterdir())
    assert f"carries {call['carried_bytes']:,} bytes" in done.stdout
    slim = (run / RAY).read_bytes()
    assert (run / "SHA256SUMS").read_text() == f"{sha256(slim)}  {RAY}\n"
    assert not (whl / "first").exists()
    # Ray slimmed: the jar, RLlib and the source map gone, from RECORD too; the rest as it was
    with zipfile.ZipFile(run / RAY) as z:
        assert z.namelist() == RAY_KEPT
        assert z.read("ray/_raylet.so") == KEPT
        record = z.read("ray-1.0.dist-info/RECORD").decode().splitlines()
    assert [line.split(",")[0] for line in record] == RAY_KEPT
    assert "slimmed ray-1.0-cp312-cp312-manylinux2014_x86_64.whl: 3 entries" in done.stdout


def test_ray_is_split_over_two_calls_where_one_cannot_carry_it(whl):
    assert prepare(whl).returncode == 0  # one call: the sizes of what travels
    run = whl / "run"
    slim = (run / RAY).read_bytes()
    others = sum(p.stat().st_size for p in run.iterdir() if p.name != RAY)
    usable = TREE + others + len(slim) // 2 + 4096  # half of Ray beside the tree, plus sums
    done = prepare(whl, limit=usable)
    assert done.returncode == 0, done.stderr
    assert [(c["command"], c["carry"]) for c in calls(whl)] == [
        (FIRST_COMMAND, [".whl/first"]),
        (PROGRAM_COMMAND, [".whl/run"]),
    ]
    assert "make call 2 at once after call 1" in done.stdout
    first, rest = (whl / "first" / f"{RAY}.part-00").read_bytes(), (run / f"{RAY}.part-01")
    assert len(first) == usable - TREE
    assert first + rest.read_bytes() == slim  # joined there to the bytes prepared here
    assert not (run / RAY).exists()
    sums = (run / "SHA256SUMS").read_text().splitlines()
    assert sums == [
        f"{sha256(slim)}  {RAY}",
        f"{sha256(first)}  {RAY}.part-00",
        f"{sha256(rest.read_bytes())}  {RAY}.part-01",
    ]
    assert all(c["carried_bytes"] <= usable for c in calls(whl))


def test_a_plan_that_two_calls_cannot_carry_is_refused_with_its_sizes(whl):
    done = prepare(whl, limit=TREE // 2)
    assert done.returncode == 1
    assert "call 1 would carry" in done.stderr
    assert "the tree alone is 10,000 bytes" in done.stderr


def test_a_wheel_missing_offline_is_named(whl):
    (whl / "cache" / STANDINS["tensordict"]).unlink()
    done = prepare(whl)
    assert done.returncode == 1
    assert "no wheel of tensordict==1.0 in" in done.stderr
    assert "run without --offline to download it" in done.stderr


@CPU_ONLY
def test_the_program_runs_its_setup_on_the_cpu(tmp_path):
    """The setup alone (no part): the machine's facts and every import. The parts, the
    learner's included, run in the e2e dry run (tests/e2e/test_gpu_program_dry_run.py)."""
    done, summary = run_program(tmp_path, GPU_PARTS="")
    assert done.returncode == 0, done.stdout[-3000:]
    assert summary["dry"] is True
    assert [(p["name"], p["status"]) for p in summary["parts"]] == [("setup", "ok")]
    assert summary["machine"]["imports"] == "ok"
    assert summary["machine"]["cuda_available"] is False
    assert summary["machine"]["cpu_count"] == os.cpu_count()
    assert summary["files"] == ["extras.tgz", "program.log", "summary.json"]
    assert "fleetrl GPU program: dry=1 device=cpu" in (tmp_path / "out" / "program.log").read_text()

#!/usr/bin/env bash
# Prepare the GPU program (benchmarks/gpu_program.sh) here, then print its device calls.
#
# The device machine (one GPU, 16 cores, no network) has Python 3.12 and torch, but none of
# Ray, torchrl, tensordict, gymnasium or ale-py. This script, run here where PyPI is
# reachable, fetches their cp312 manylinux wheels at the versions of this venv, makes them
# fit the 64 MiB a call may carry, and prints the ``run`` calls to make:
#
# 1. downloads every wheel in WHEELS below (pip download --no-deps --only-binary) into
#    .whl/cache (git-ignored; a wheel already there is not fetched again);
# 2. slims Ray's wheel (79 MB to 43 MB): Java's jar (32 MB), RLlib, Serve, Ray LLM and the
#    dashboard's source maps go, none of which a fleetrl job loads (Ray runs without the jar
#    as a build without Java does); --full-ray keeps it whole;
# 3. lays out what travels: .whl/run (carried by the program's call) holds every wheel,
#    SHA256SUMS and SOURCE (the commit it was prepared from). Where the tree and the
#    wheels pass the limit, Ray's wheel is split: its first part goes to .whl/first,
#    carried by a first call that leaves it in /tmp/fleetrl-whl on the machine, which
#    the program's call (made within the 30 s the machine stays warm) joins to the rest;
# 4. checks each call's carried bytes (the tree's tracked and untracked-not-ignored files,
#    plus its carry) against 64 MiB and its command against 2,000 characters, prints the
#    calls and writes them to .whl/plan.json.
#
#     bash benchmarks/gpu_prepare.sh              # download, slim, plan
#     bash benchmarks/gpu_prepare.sh --offline    # plan from .whl/cache only
#     bash benchmarks/gpu_prepare.sh --full-ray   # Ray untouched: two calls
#     bash benchmarks/gpu_prepare.sh --list       # the pins only
#
# Exit status: 0 with a plan, 1 when a wheel is missing or a call cannot fit.
#
# The work is Python (stdlib only), below, run by the venv's interpreter: the versions pinned
# are its installed ones (GPU_PREPARE_PYTHON names another).
set -euo pipefail
export GPU_PREPARE_ROOT
GPU_PREPARE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${GPU_PREPARE_PYTHON:-$GPU_PREPARE_ROOT/.venv/bin/python}
exec "$PY" - "$@" <<'PYEOF'
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(os.environ["GPU_PREPARE_ROOT"])

#: what the device machine lacks, by distribution name (its own list: the workplace's
#: KINDS.md, "Python packages already there"): fleetrl's runtime dependencies and theirs.
#: torch, numpy, pyyaml, tqdm, tensorboard, matplotlib, msgpack, protobuf, click, filelock,
#: requests, attrs, packaging, cloudpickle, typing-extensions, zipp, opencv, pytest and its
#: timeout and xdist plugins are there already; carrying one would only shadow it.
WHEELS = (
    "ray",  # the collectors' actors; core only (ray[default]'s dashboard is not needed)
    "jsonschema",  # ray
    "jsonschema-specifications",  # jsonschema
    "referencing",  # jsonschema
    "rpds-py",  # jsonschema, referencing
    "tensordict",
    "orjson",  # tensordict
    "importlib_metadata",  # tensordict
    "pyvers",  # tensordict, torchrl
    "torchrl",
    "hoptorch",  # torchrl
    "gymnasium",
    "farama-notifications",  # gymnasium
    "ale-py",  # Pong (its ROMs are in the wheel)
    "lz4",  # fleetrl's wire compression
    "zstandard",  # fleetrl's wire compression
)
#: left out on purpose: envpool (64 MB; Pong runs on the gymnasium and ale_vector engines)
#: and mujoco (10 MB; no MuJoCo case runs there)

#: the device machine's interpreter, for which the wheels are fetched
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
PYTHON_VERSION = "3.12"

LIMIT_BYTES = 64 * 2**20  # what one call may carry: the tree and its carry paths
MARGIN_BYTES = 2 * 2**20  # the tree changes under other engineers' hands before the call
COMMAND_CHARS = 2000

WHL = ROOT / ".whl"
STASH = "/tmp/fleetrl-whl"  # where the first call leaves Ray's first part, on the machine
PROGRAM_COMMAND = "bash benchmarks/gpu_program.sh"
FIRST_COMMAND = f"mkdir -p {STASH} && cp .whl/first/* {STASH}/ && ls -l {STASH}"
#: what leaves Ray's wheel when it is slimmed (RLlib runs in its own venv, here only)
SLIM_DROP = re.compile(
    r"^ray/(jars|rllib|serve|llm)/"  # Java's jar; libraries no fleetrl job imports
    r"|^ray/dashboard/client/build/.*\.map$"  # the dashboard's source maps (no dashboard)
)

MISSING_MSG = (
    "{name} is not installed in {python}: run this script with the project's venv "
    "(.venv/bin/python benchmarks/gpu_prepare.py), or pin it with --pin {name}==VERSION"
)
NO_WHEEL_MSG = (
    "no wheel of {spec} in {cache}: run without --offline to download it (if pip finds no "
    "matching distribution, add --platform manylinux_2_N_x86_64 for its N)"
)
TOO_BIG_MSG = (
    "call {call} would carry {size:,} bytes, over the {limit:,} allowed (64 MiB less a "
    "{margin:,}-byte margin): the tree alone is {tree:,} bytes; leave out a wheel or make "
    "the tree smaller"
)


@dataclass
class Call:
    """One ``run`` call on the device machine: what it carries and runs."""

    purpose: str
    command: str
    carry: list[str]
    timeout_s: int
    carried_bytes: int = 0
    files: list[str] = field(default_factory=list)


def normalized(name: str) -> str:
    """A distribution's name as a wheel's file name spells it (PEP 427)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def pins(overrides: list[str]) -> dict[str, str]:
    """Every wheel's version: this interpreter's installed one, unless ``--pin`` says."""
    given = dict(p.split("==", 1) for p in overrides)
    out, problems = {}, []
    for name in WHEELS:
        if name in given:
            out[name] = given[name]
            continue
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            problems.append(MISSING_MSG.format(name=name, python=sys.executable))
    if problems:
        sys.exit("\n".join(problems))
    return out


def cached_wheel(cache: Path, name: str, version: str) -> Path | None:
    prefix = f"{normalized(name)}-{version}-".lower()
    found = sorted(p for p in cache.glob("*.whl") if p.name.lower().startswith(prefix))
    return found[0] if found else None


def download(cache: Path, specs: list[str]) -> None:
    """Fetch the wheels for the device's interpreter, without their dependencies."""
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    cmd += ["--python-version", PYTHON_VERSION, "--implementation", "cp"]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    subprocess.run([*cmd, "-d", str(cache), *specs], check=True)


def slim_ray(source: Path, target: Path) -> tuple[int, int]:
    """Ray's wheel without :data:`SLIM_DROP` (its RECORD too); (entries, bytes) dropped."""
    target.parent.mkdir(parents=True, exist_ok=True)
    dropped = dropped_bytes = 0
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            if SLIM_DROP.search(info.filename):
                dropped += 1
                dropped_bytes += info.compress_size
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                kept = [x for x in lines if not SLIM_DROP.search(x.split(",", 1)[0])]
                data = "".join(kept).encode()
            dst.writestr(info, data)  # the entry's own compression and date: reproducible
    return dropped, dropped_bytes


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_bytes(root: Path) -> int:
    """What travels with every call: tracked and untracked-not-ignored files, and shared/."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    names = {n for n in out.decode().split("\0") if n and not n.startswith("shared/")}
    total = sum((root / n).stat().st_size for n in names if (root / n).is_file())
    shared = root / "shared"
    if shared.is_dir():
        total += sum(p.stat().st_size for p in shared.rglob("*") if p.is_file())
    return total


def source(root: Path) -> str:
    """The commit the wheels were prepared from, and whether the tree differed from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}{' (with uncommitted changes)' if dirty else ''}"


def split(path: Path, first: int, first_dir: Path, run_dir: Path) -> list[Path]:
    """``path`` in two parts: its first ``first`` bytes in first_dir, the rest in run_dir."""
    parts = [first_dir / f"{path.name}.part-00", run_dir / f"{path.name}.part-01"]
    with path.open("rb") as f:
        parts[0].write_bytes(f.read(first))
        parts[1].write_bytes(f.read())
    return parts


def plan(args: argparse.Namespace) -> list[Call]:
    whl = Path(args.whl)
    cache, run_dir, first_dir, build = whl / "cache", whl / "run", whl / "first", whl / "build"
    cache.mkdir(parents=True, exist_ok=True)
    versions = pins(args.pin)
    specs = [f"{n}=={v}" for n, v in versions.items()]
    missing = [s for s in specs if cached_wheel(cache, *s.split("==")) is None]
    if missing and not args.offline:
        download(cache, missing)
    wheels: dict[str, Path] = {}
    for spec in specs:
        found = cached_wheel(cache, *spec.split("=="))
        if found is None:
            sys.exit(NO_WHEEL_MSG.format(spec=spec, cache=cache))
        wheels[spec.split("==")[0]] = found

    ray = wheels.pop("ray")
    if not args.full_ray:
        slimmed = build / ray.name
        if not slimmed.exists() or slimmed.stat().st_mtime < ray.stat().st_mtime:
            entries, size = slim_ray(ray, slimmed)
            print(f"slimmed {ray.name}: {entries} entries, {size:,} compressed bytes dropped")
        ray = slimmed
    for folder in (run_dir, first_dir):
        shutil.rmtree(folder, ignore_errors=True)
    run_dir.mkdir(parents=True)
    for wheel in wheels.values():
        shutil.copy2(wheel, run_dir / wheel.name)
    (run_dir / "SOURCE").write_text(source(ROOT) + "\n")

    tree = args.tree_bytes if args.tree_bytes is not None else tree_bytes(ROOT)
    limit = args.limit - args.margin
    others = sum(p.stat().st_size for p in run_dir.iterdir())
    ray_size = ray.stat().st_size
    sums = [f"{sha256(ray)}  {ray.name}"]
    calls: list[tuple[Call, Path]] = []
    if tree + others + ray_size + 4096 <= limit:  # 4096: SHA256SUMS itself
        shutil.copy2(ray, run_dir / ray.name)
    else:  # two calls: as much of Ray as fits beside the tree first, the rest with the others
        first_dir.mkdir(parents=True)
        first = max(0, min(ray_size, limit - tree))
        for part in split(ray, first, first_dir, run_dir):
            sums.append(f"{sha256(part)}  {part.name}")
        call = Call(f"Ray's first part, left in {STASH}", FIRST_COMMAND, [".whl/first"], 60)
        calls.append((call, first_dir))
    (run_dir / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    calls.append((Call("the GPU program", PROGRAM_COMMAND, [".whl/run"], 600), run_dir))
    for i, (call, folder) in enumerate(calls, 1):
        call.files = sorted(p.name for p in folder.iterdir())
        call.carried_bytes = tree + sum(p.stat().st_size for p in folder.iterdir())
        if call.carried_bytes > limit:
            size = call.carried_bytes
            sys.exit(
                TOO_BIG_MSG.format(call=i, size=size, limit=limit, margin=args.margin, tree=tree)
            )
        assert len(call.command) < COMMAND_CHARS, call.command
    (whl / "plan.json").write_text(
        json.dumps(
            {
                "pins": versions,
                "ray_wheel": ray.name,
                "ray_slimmed": not args.full_ray,
                "tree_bytes": tree,
                "limit_bytes": args.limit,
                "margin_bytes": args.margin,
                "calls": [asdict(c) for c, _ in calls],
            },
            indent=2,
        )
    )
    return [c for c, _ in calls]


def show(calls: list[Call]) -> None:
    mib = 2**20
    print(f"\n{len(calls)} device call{'s' * (len(calls) > 1)}, in this order:")
    for i, call in enumerate(calls, 1):
        print(f"\n  call {i}: {call.purpose}")
        print(f"    run(command={call.command!r},")
        print(f"        carry={call.carry!r}, timeout_s={call.timeout_s})")
        print(
            f"    carries {call.carried_bytes:,} bytes ({call.carried_bytes / mib:.1f} MiB of 64),"
            f" command {len(call.command)} characters; {len(call.files)} files"
        )
    if len(calls) > 1:
        print(
            "\n  make call 2 at once after call 1: the machine stays warm 30 s, and with it "
            f"{STASH}; the program stops at once if Ray's first part is not there"
        )
    print("\n  results: summary.json, program.log and the parts' files come back from $OUT")


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="gpu_prepare.sh", description="Prepare the GPU program's wheels and print its calls."
    )
    parser.add_argument("--offline", action="store_true", help="use .whl/cache only")
    parser.add_argument("--full-ray", action="store_true", help="carry Ray's wheel unslimmed")
    parser.add_argument("--pin", action="append", default=[], help="NAME==VERSION override")
    parser.add_argument("--list", action="store_true", help="print the pins and stop")
    parser.add_argument("--whl", default=str(WHL), help=argparse.SUPPRESS)  # tests: a tmp dir
    parser.add_argument("--limit", type=int, default=LIMIT_BYTES, help=argparse.SUPPRESS)
    parser.add_argument("--tree-bytes", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--margin", type=int, default=MARGIN_BYTES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.chdir(ROOT)
    if args.list:
        print("\n".join(f"{n}=={v}" for n, v in pins(args.pin).items()))
        return
    show(plan(args))


if __name__ == "__main__":
    main()
PYEOF

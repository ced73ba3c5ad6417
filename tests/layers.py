"""Run the in-process tests beside the Ray tests: ``make test`` and ``make test-all``.

The Ray layer (``tests/integration``, one real Ray instance for the session) is the longest
part of the suite, and it leaves a core idle while it waits on actors to start and answer.
The unit layer (``tests/unit`` and the docstring examples) needs no Ray. Run one after the
other, the suite takes their sum. Here both start at once: the Ray layer streams its report
as it runs, the unit layer runs at a lower priority (``nice``), so it takes what the Ray
layer leaves idle and the Ray layer keeps its pace, and its report follows.

The unit layer runs as two plain pytest processes over two fixed halves of its files
(:data:`UNIT_HALVES`), not as ``pytest -n 2``: an xdist worker collects every test, so each
of its two would import every test's dependencies (torch, tensordict, torchrl, envpool,
MuJoCo, PettingZoo: ~9 s of CPU), and its controller and per-test messages cost more; on
2 cores, where the suite is bound by CPU, the halves finish it sooner (make test: 360 ->
327 s of CPU, 185 -> 167 s).

``make test-all`` adds the end-to-end tests to the Ray layer, the slow unit tests to the
unit layer, and runs the end-to-end tests marked ``standalone`` (they need no session Ray:
a CLI, a cluster or the GPU program's dry run starts its own, or none is used) in a
process beside them, at the unit layer's priority: they fill the time the Ray layer waits.
The exit status is non-zero if any layer fails.

Usage::

    python tests/layers.py                # make test: the fast suite
    python tests/layers.py --all          # make test-all: the end-to-end tests too
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the unit layer's priority (``nice`` increment): below the Ray layer's workers, which Ray
#: starts at nice 15 (its worker_niceness), so their process starts are not held back
UNIT_NICE = 19


#: the unit layer's two halves, by path (about half of its CPU each, on a fresh machine,
#: where torch.compile's tests find no compiled kernels cached and take ~20 s of CPU more):
#: the first, the tests of the collectors, algorithms and learners packages; the second,
#: the rest of ``tests/unit`` (what is not in the first, so a new test file runs in one of
#: them) and the docstring examples. Each runs in a process of its own (see the module
#: docstring).
UNIT_HALVES = (
    ("tests/unit/collectors", "tests/unit/algorithms", "tests/unit/learners"),
    ("tests/unit", "src/fleetrl"),
)


def commands(everything: bool) -> tuple[list[list[str]], list[str], list[str] | None]:
    """The unit layer's (one per half), the Ray layer's and (``everything``) the standalone
    layer's pytest command lines: the end-to-end tests marked ``standalone`` need no session
    Ray (their processes start their own, or use none) and need not wait for the session's
    Ray tests. Only the Ray layer writes pytest's cache: the processes beside it would write
    the same file at once."""
    pytest = [sys.executable, "-m", "pytest", "-q"]
    first, second = UNIT_HALVES
    beside = [*pytest, "-p", "no:cacheprovider", "-p", "no:xdist"]
    marker = [] if everything else ["-m", "not e2e"]
    unit = [
        [*beside, *marker, *first],
        [
            *beside,
            *marker,
            *(f"--ignore={path}" for path in first if path.startswith("tests/unit/")),
            *second,
        ],
    ]
    if everything:
        ray = [*pytest, "-m", "not standalone", "tests/integration", "tests/e2e"]
        standalone = [*beside, "-m", "standalone", "tests/e2e"]
        return unit, ray, standalone
    ray = [*pytest, "-m", "not e2e", "tests/integration"]
    return unit, ray, None


def _lower_priority() -> None:
    os.nice(UNIT_NICE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="the end-to-end tests too")
    args = parser.parse_args(argv)
    unit_cmds, ray_cmd, standalone_cmd = commands(args.all)
    print(
        "unit tests (tests/unit and the docstring examples, in two processes) run beside the Ray "
        "tests (tests/integration"
        + (" and tests/e2e; the standalone e2e tests beside both" if args.all else "")
        + "); the Ray tests' report comes first, the others' follow",
        flush=True,
    )
    start = time.monotonic()
    beside = [
        (f"unit tests, {half} of 2", cmd, _lower_priority)
        for half, cmd in enumerate(unit_cmds, start=1)
    ]
    if standalone_cmd is not None:
        beside.append(("standalone e2e tests", standalone_cmd, _lower_priority))
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in beside]
        procs = [
            subprocess.Popen(
                cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec
            )
            for (_, cmd, preexec), log in zip(beside, logs)
        ]
        try:
            ray_rc = subprocess.call(ray_cmd, cwd=ROOT)
            ray_s = time.monotonic() - start
            rcs = [p.wait() for p in procs]
        except KeyboardInterrupt:
            for p in procs:
                p.terminate()
                p.wait()
            raise
        verdict = {0: "passed"}
        summary = [f"Ray tests: {verdict.get(ray_rc, f'failed (exit {ray_rc})')} in {ray_s:.0f} s"]
        for (name, cmd, _), log, rc in zip(beside, logs, rcs):
            log.seek(0)
            print(f"\n---- {name} ({' '.join(cmd[2:])}) ----", flush=True)
            sys.stdout.write(log.read())
            summary.append(f"{name}: {verdict.get(rc, f'failed (exit {rc})')}")
    total = time.monotonic() - start
    print(f"\n{'; '.join(summary)}; all in {total:.0f} s", flush=True)
    return 0 if ray_rc == 0 and all(rc == 0 for rc in rcs) else 1


if __name__ == "__main__":
    sys.exit(main())

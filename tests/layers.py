"""Run the in-process tests beside the Ray tests: ``make test`` and ``make test-all``.

The Ray layer (``tests/integration``, one real Ray instance for the session) is the longest
part of the suite, and it leaves a core idle while it waits on actors to start and answer.
The unit layer (``tests/unit`` and the docstring examples, on ``-n 2`` workers) needs no
Ray. Run one after the other, the suite takes their sum. Here both start at once: the Ray
layer streams its report as it runs, the unit layer runs at a lower priority (``nice``), so
it takes what the Ray layer leaves idle and the Ray layer keeps its pace, and its report
follows. The exit status is non-zero if either layer fails.

Usage::

    python tests/layers.py                # make test: the fast suite
    python tests/layers.py --all          # make test-all: the end-to-end tests too
"""

from __future__ import annotations

import argparse
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


def commands(everything: bool) -> tuple[list[str], list[str]]:
    """The unit layer's and the Ray layer's pytest command lines."""
    pytest = [sys.executable, "-m", "pytest", "-q"]
    unit = [*pytest, "-n", "2", "-m", "not e2e", "tests/unit", "src/fleetrl"]
    ray = (
        [*pytest, "tests/integration", "tests/e2e"]
        if everything
        else [
            *pytest,
            "-m",
            "not e2e",
            "tests/integration",
        ]
    )
    return unit, ray


def _lower_priority() -> None:
    os.nice(UNIT_NICE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="the end-to-end tests too")
    args = parser.parse_args(argv)
    unit_cmd, ray_cmd = commands(args.all)
    print(
        "unit tests (tests/unit and the docstring examples, 2 workers) run beside the Ray "
        "tests (tests/integration"
        + (" and tests/e2e" if args.all else "")
        + "); the Ray tests' report comes first, the unit tests' follows",
        flush=True,
    )
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as unit_log:
        unit = subprocess.Popen(
            unit_cmd,
            cwd=ROOT,
            stdout=unit_log,
            stderr=subprocess.STDOUT,
            preexec_fn=_lower_priority,
        )
        try:
            ray_rc = subprocess.call(ray_cmd, cwd=ROOT)
            ray_s = time.monotonic() - start
            unit_rc = unit.wait()
        except KeyboardInterrupt:
            unit.terminate()
            unit.wait()
            raise
        unit_log.seek(0)
        print(f"\n---- unit tests ({' '.join(unit_cmd[2:])}) ----", flush=True)
        sys.stdout.write(unit_log.read())
    total = time.monotonic() - start
    verdict = {0: "passed"}
    print(
        f"\nRay tests: {verdict.get(ray_rc, f'failed (exit {ray_rc})')} in {ray_s:.0f} s; "
        f"unit tests: {verdict.get(unit_rc, f'failed (exit {unit_rc})')}; "
        f"both in {total:.0f} s",
        flush=True,
    )
    return 0 if ray_rc == unit_rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

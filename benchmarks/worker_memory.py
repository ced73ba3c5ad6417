"""Worker memory: what a collector worker process holds, import by import.

A collector worker is a Ray worker process that imports torch, tensordict, torchrl, Ray and
fleetrl's collector, then builds its envs and policy. Each stage runs in fresh processes
(``--processes`` of them at once, so that what they share shows), which report from
``/proc/self/smaps_rollup``:

- ``rss``: resident memory, shared pages counted in full in every process;
- ``pss``: shared pages divided among the processes that share them (what a fleet of
  workers costs the machine, per worker);
- ``private``: pages no other process shares.

The stages: ``import torch``; ``+ tensordict``; ``+ torchrl, ray`` (torchrl's package only);
``+ torchrl.envs``; ``+ fleetrl.collectors.remote.worker`` (the worker's module, what fleetrl's
own imports add); ``+ a worker's collector`` (a ``SyncDataCollector`` of 4 CartPole envs
acting at random, one batch collected).

    python benchmarks/worker_memory.py [--processes 4]

Writes ``benchmarks/results/worker_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time

from common import machine, print_table, write_json

STAGES = {
    "import torch": "import torch",
    "+ tensordict": "import torch, tensordict",
    "+ torchrl, ray": "import torch, tensordict, torchrl, ray",
    "+ torchrl.envs": "import torch, tensordict, torchrl, ray, torchrl.envs",
    "+ fleetrl.collectors.remote.worker": (
        "import torch, tensordict, torchrl, ray, torchrl.envs; import fleetrl.collectors.remote.worker"
    ),
    "+ a worker's collector": (
        "import torch, tensordict, torchrl, ray, torchrl.envs; import fleetrl.collectors.remote.worker\n"
        "from fleetrl import SyncDataCollector\n"
        "torch.set_num_threads(1)\n"
        "collector = SyncDataCollector('CartPole-v1', None, frames_per_batch=256, num_envs=4)\n"
        "next(iter(collector))"
    ),
}

#: what each process runs after its stage: says it is ready, then waits to be measured
READY = "\nprint('ready', flush=True)\nimport time\ntime.sleep(120)\n"


def stage(code: str, processes: int) -> dict[str, float]:
    """The median of each figure over ``processes`` processes alive at once (PSS divides
    what they share among those alive)."""
    live = [
        subprocess.Popen([sys.executable, "-c", code + READY], stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    try:
        for p in live:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        time.sleep(1.0)
        measured = [_measure(p.pid) for p in live]
    finally:
        for p in live:
            p.kill()
            p.wait()
    return {k: round(statistics.median(r[k] for r in measured), 1) for k in measured[0]}


def _measure(pid: int) -> dict[str, float]:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        roll = f.read()

    def get(key: str) -> float:
        found = re.search(rf"^{key}:\s+(\d+)", roll, re.M)
        assert found is not None
        return int(found.group(1)) / 1024

    return {
        "rss": get("Rss"),
        "pss": get("Pss"),
        "private": get("Private_Clean") + get("Private_Dirty"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=4, help="processes alive per stage")
    args = parser.parse_args()
    results = {}
    for name, code in STAGES.items():
        results[name] = stage(code, args.processes)
        print(f"{name}: {json.dumps(results[name])}", flush=True)
    rows, before = [], None
    for name, r in results.items():
        added = "" if before is None else f"{r['rss'] - before['rss']:+.0f}"
        rows.append([name, f"{r['rss']:.0f}", added, f"{r['pss']:.0f}", f"{r['private']:.0f}"])
        before = r
    print_table(
        ["stage", "RSS MB", "RSS added MB", "PSS MB", "private MB"],
        rows,
        title=f"One process per stage, {args.processes} alive at once (medians)",
    )
    path = write_json("worker_memory", {"machine": machine(), "results": results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

"""Fleet scale: dozens of collectors on one machine, against the ideal, on a simulated cluster.

Each fleet size runs in a fresh process on a local multi-node Ray cluster
(``ray.cluster_utils.Cluster``: a head for the driver and ``--nodes`` nodes, each with as
many logical CPUs as its share of the collectors). The env's step sleeps ``--step-ms`` and
costs almost no CPU (fakes' ``CountingEnv``), and the policy is random, so dozens of
collectors fit on 2 cores and the figures are the framework's own: the ideal throughput
is ``collectors x envs / step time``. Measured per size, first ready:

- frames/s over a window after every worker has served a batch, against the ideal;
- the driver's CPU per served batch (its process time over the window / batches);
- the first batch's time, from the constructor (every actor's start included);
- the resident memory of each collector worker process (``/proc``), its median.

    python benchmarks/fleet_scale.py [--collectors 4 8 16 32] [--nodes 4] [--step-ms 10]

Writes ``benchmarks/results/fleet_scale.json``. Target: >= 0.9x the ideal at 32
collectors, first ready.

The chaos run (``--chaos 20``): one fleet (``--chaos-collectors``, on nodes with room for
twice their share) collects a fixed budget twice, once undisturbed and once with a node
lost every 20 s (its processes SIGKILLed) and a fresh one added in its place; each reports
its frames (exactly the budget, or the run failed), its wall time and its replacements.
Writes ``benchmarks/results/fleet_chaos.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import textwrap
from pathlib import Path

from common import machine, print_table, run_json, write_json

ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.9

RUN = """
import json, os, sys, time
from pathlib import Path
import ray
from ray import cloudpickle
from ray.cluster_utils import Cluster
sys.path.insert(0, {tests!r})
import fakes
from fakes import CountingEnv
from fleetrl import RayCollector
cloudpickle.register_pickle_by_value(fakes)

def worker_rss_mb():
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if not (proc / "cmdline").read_bytes().startswith(b"ray::CollectorWorker"):
                continue
            for line in (proc / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    found.append(int(line.split()[1]) / 1024)
        except OSError:
            continue
    return found

n, nodes, step_s, steps, window = {n}, {nodes}, {step_s}, {steps}, {window}
cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 1}})
for _ in range(nodes):
    cluster.add_node(num_cpus=-(-n // nodes), resources={{"sim": n}})
cluster.wait_for_nodes()
start = time.perf_counter()
with RayCollector(lambda: CountingEnv(10_000, sleep=step_s), None, frames_per_batch=steps,
                  total_frames=-1, num_collectors=n, sync=False,
                  remote_configs={{"num_cpus": 1, "resources": {{"sim": 1}}}},
                  ray_init_config={{"address": cluster.address}}) as collector:
    first = None
    seen = set()
    batches = frames = 0
    for batch in collector:
        now = time.perf_counter()
        if first is None:
            first = now - start
        seen.add(int(batch["collector", "worker_id"].flatten()[0]))
        if len(seen) == n and not batches:  # every worker up: the window starts
            t0, cpu0, batches, frames = now, time.process_time(), 1, 0
            continue
        if batches:
            batches += 1
            frames += batch.numel()
            if now - t0 >= window:
                break
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    rss = worker_rss_mb()
    spread = len(set(collector.stats()["nodes"].values()))
print(json.dumps({{"collectors": n, "fps": frames / elapsed, "ideal": n / step_s,
                  "driver_cpu_ms_per_batch": 1000 * cpu / max(1, batches - 1),
                  "first_batch_s": first, "worker_rss_mb": rss, "nodes_used": spread}}))
cluster.shutdown()
"""


CHAOS = """
import json, random, sys, time
import ray
from ray import cloudpickle
from ray.cluster_utils import Cluster
sys.path.insert(0, {tests!r})
import fakes
from fakes import CountingEnv
from fleetrl import RayCollector
cloudpickle.register_pickle_by_value(fakes)

n, nodes, step_s, steps, budget, every = {n}, {nodes}, {step_s}, {steps}, {budget}, {every}
room = 2 * -(-n // nodes)  # each node can take twice its share: the others host replacements
cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 1}})
hosts = [cluster.add_node(num_cpus=room, resources={{"sim": room}}) for _ in range(nodes)]
cluster.wait_for_nodes()
rng, lost, frames = random.Random(0), 0, 0
with RayCollector(lambda: CountingEnv(10_000, sleep=step_s), None, frames_per_batch=steps,
                  total_frames=budget, num_collectors=n, sync=False,
                  remote_configs={{"num_cpus": 1, "resources": {{"sim": 1}}}},
                  ray_init_config={{"address": cluster.address}}) as collector:
    start = last = None
    for batch in collector:
        frames += batch.numel()
        now = time.perf_counter()
        start = start if start is not None else now
        last = last if last is not None else now
        if every > 0 and now - last >= every:
            used = set(collector.stats()["nodes"].values())
            victim = rng.choice([h for h in hosts if h.node_id in used])
            cluster.remove_node(victim, allow_graceful=False)
            hosts.remove(victim)
            hosts.append(cluster.add_node(num_cpus=room, resources={{"sim": room}}))
            lost += 1
            last = time.perf_counter()
    wall = time.perf_counter() - start
    restarts = sum(collector.stats()["restarts"].values())
print(json.dumps({{"frames": frames, "budget": budget, "exact": frames == budget,
                  "wall_s": wall, "fps": frames / wall, "nodes_lost": lost,
                  "restarts": restarts}}))
cluster.shutdown()
"""


def run_chaos(args: argparse.Namespace, every: float) -> dict:
    n = args.chaos_collectors
    budget = int(n / (args.step_ms / 1000) * args.chaos_seconds) // args.steps * args.steps
    script = textwrap.dedent(CHAOS).format(
        tests=str(ROOT / "tests"),
        n=n,
        nodes=args.nodes,
        step_s=args.step_ms / 1000,
        steps=args.steps,
        budget=budget,
        every=every,
    )
    return run_json([sys.executable, "-c", script], timeout=1200)[0]


def chaos(args: argparse.Namespace) -> None:
    calm, stormy = run_chaos(args, 0.0), run_chaos(args, args.chaos)
    rows = [
        [
            name,
            f"{r['frames']:,} of {r['budget']:,}",
            "yes" if r["exact"] else "NO",
            f"{r['wall_s']:.1f}",
            f"{r['fps']:,.0f}",
            r["nodes_lost"],
            r["restarts"],
        ]
        for name, r in (("undisturbed", calm), (f"a node lost every {args.chaos:g} s", stormy))
    ]
    print_table(
        ["run", "frames", "exact", "wall s", "frames/s", "nodes lost", "replacements"],
        rows,
        title=(
            f"Chaos: {args.chaos_collectors} collectors on {args.nodes} nodes, "
            f"{args.step_ms:g} ms steps, {args.steps}-step batches"
        ),
    )
    lost = 1 - stormy["fps"] / calm["fps"]
    print(f"\nthroughput lost to the chaos: {lost:.1%}")
    path = write_json(
        "fleet_chaos",
        {"machine": machine(), "args": vars(args), "calm": calm, "chaos": stormy, "lost": lost},
    )
    print(f"wrote {path}")


def run_size(n: int, args: argparse.Namespace) -> dict:
    script = textwrap.dedent(RUN).format(
        tests=str(ROOT / "tests"),
        n=n,
        nodes=min(args.nodes, n),
        step_s=args.step_ms / 1000,
        steps=args.steps,
        window=args.window,
    )
    return run_json([sys.executable, "-c", script], timeout=900)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--collectors", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--nodes", type=int, default=4, help="simulated nodes for the workers")
    parser.add_argument("--step-ms", type=float, default=10.0, help="the env's step (a sleep)")
    parser.add_argument("--steps", type=int, default=100, help="steps per batch (one env)")
    parser.add_argument("--window", type=float, default=20.0, help="seconds measured")
    parser.add_argument(
        "--chaos", type=float, default=0.0, help="the chaos run: lose a node every this many s"
    )
    parser.add_argument("--chaos-collectors", type=int, default=8)
    parser.add_argument("--chaos-seconds", type=float, default=120.0, help="the budget, in s")
    args = parser.parse_args()
    if args.chaos > 0:
        chaos(args)
        return
    results = []
    for n in args.collectors:
        result = run_size(n, args)
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "worker_rss_mb"}), flush=True)
    rows = []
    for r in results:
        rss = r["worker_rss_mb"]
        r["ratio"] = r["fps"] / r["ideal"]
        r["worker_rss_mb_median"] = statistics.median(rss) if rss else math.nan
        rows.append(
            [
                r["collectors"],
                r["nodes_used"],
                f"{r['fps']:,.0f}",
                f"{r['ideal']:,.0f}",
                f"{r['ratio']:.2f}x",
                f"{r['driver_cpu_ms_per_batch']:.2f}",
                f"{r['first_batch_s']:.1f}",
                f"{r['worker_rss_mb_median']:.0f} ({len(rss)} processes)",
            ]
        )
    print_table(
        [
            "collectors",
            "nodes",
            "frames/s",
            "ideal",
            "/ ideal",
            "driver CPU ms/batch",
            "first batch s",
            "worker RSS MB (median)",
        ],
        rows,
        title=(
            f"First ready, 1 env per collector stepping in {args.step_ms:g} ms, "
            f"{args.steps}-step batches, {args.window:g} s window"
        ),
    )
    largest = max(results, key=lambda r: r["collectors"])
    met = largest["collectors"] < 32 or largest["ratio"] >= TARGET
    print(
        f"\ntarget >= {TARGET}x the ideal at 32 collectors: "
        + (f"{largest['ratio']:.2f}x at {largest['collectors']}, {'met' if met else 'missed'}")
    )
    path = write_json("fleet_scale", {"machine": machine(), "args": vars(args), "results": results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

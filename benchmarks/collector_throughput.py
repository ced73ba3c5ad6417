"""SyncDataCollector throughput against the raw loop and torchrl's Collector.

CartPole-v1, a 64x64 MLP categorical policy (action + log-prob), for 1, 16,
64 and 256 envs, in one process, one torch thread. Every contestant is built
and warmed once; then each round times one batch of each, back to back, so
that the ratios compare the same moment of a noisy machine. Figures are
medians over rounds. Writes ``benchmarks/results/collector_throughput.json``.

Two raw loops: ``raw`` steps gymnasium's ``SyncVectorEnv`` and samples through torch's
``Categorical`` (the loop a user writes on gymnasium and torch); ``lean raw``
(``common.LeanRawLoop``) steps the same sub-envs one by one and draws from the logits
directly, which is what fleetrl's collector does, so it is the limit for it.

    python benchmarks/collector_throughput.py [--envs 1 16 64 256] [--steps 200] [--rounds 7]

Targets (issue 2): fleetrl >= 0.85x raw at 64 envs and >= 2.5x torchrl's
Collector there; >= 2x torchrl's Collector at 1 env. Issue 13: the
``compiled`` contestant (``SyncDataCollector(..., compile_policy=True)``, the
same policy module under ``torch.compile``; compiled in its warm-up batch)
>= 0.9x raw at 64 envs and >= 4x torchrl's Collector.
"""

from __future__ import annotations

import argparse
import statistics
import warnings

import torch

from common import (
    IterTimer,
    LeanRawLoop,
    RawLoop,
    categorical_policy,
    gym_env,
    machine,
    mlp,
    plot_collector_throughput,
    print_table,
    write_json,
)
from fleetrl import SyncDataCollector

warnings.filterwarnings("ignore")


def torchrl_collector(policy, num_envs: int, fpb: int):
    from torchrl.collectors import Collector
    from torchrl.envs import GymWrapper

    env = GymWrapper(gym_env(num_envs), categorical_action_encoding=True)
    return Collector(env, policy, frames_per_batch=fpb, total_frames=-1)


def median_ratio(a: list[float], b: list[float]) -> float:
    """Per round, then the median: each ratio compares the same moment of the machine."""
    return statistics.median(x / y for x, y in zip(a, b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--steps", type=int, default=200, help="vector steps per batch")
    parser.add_argument("--rounds", type=int, default=7, help="median over this many rounds")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = mlp()
    policy = categorical_policy(net)

    rows, results = [], []
    for n in args.envs:
        steps = args.steps
        fpb = n * steps
        raw = RawLoop(net, n, steps)
        lean = LeanRawLoop(net, n, steps)
        fleet = IterTimer(SyncDataCollector(gym_env(n), policy, frames_per_batch=fpb), fpb)
        compiled = IterTimer(
            SyncDataCollector(gym_env(n), policy, frames_per_batch=fpb, compile_policy=True), fpb
        )
        trl = IterTimer(torchrl_collector(policy, n, fpb), fpb)
        runs: dict[str, list[float]] = {
            "raw": [],
            "lean": [],
            "fleetrl": [],
            "compiled": [],
            "torchrl": [],
        }
        for _ in range(args.rounds):
            runs["raw"].append(raw.run(steps))
            runs["lean"].append(lean.run(steps))
            runs["fleetrl"].append(fleet.run())
            runs["compiled"].append(compiled.run())
            runs["torchrl"].append(trl.run())
        for c in (raw, lean, fleet, compiled, trl):
            c.shutdown()
        med = {k: statistics.median(v) for k, v in runs.items()}

        ratios = {
            f"{a}_vs_{b}": median_ratio(runs[a], runs[b])
            for a in ("fleetrl", "compiled")
            for b in ("raw", "torchrl")
        }
        ratios["fleetrl_vs_lean"] = median_ratio(runs["fleetrl"], runs["lean"])
        results.append(
            {"num_envs": n, **{f"{k}_fps": v for k, v in med.items()}, **ratios, "runs": runs}
        )
        rows.append(
            [
                n,
                *(f"{med[k]:,.0f}" for k in ("raw", "lean", "fleetrl", "compiled", "torchrl")),
                *(f"{v:.2f}x" for v in ratios.values()),
            ]
        )
        print(f"envs={n}: done", flush=True)
    print()
    print_table(
        [
            "envs",
            "raw fps",
            "lean raw fps",
            "fleetrl fps",
            "compiled fps",
            "torchrl fps",
            "fleetrl/raw",
            "fleetrl/torchrl",
            "compiled/raw",
            "compiled/torchrl",
            "fleetrl/lean raw",
        ],
        rows,
    )
    path = write_json(
        "collector_throughput", {"machine": machine(), "args": vars(args), "results": results}
    )
    print(f"\nwrote {path}")
    if (plot := plot_collector_throughput(results)) is not None:
        print(f"drew {plot}")


if __name__ == "__main__":
    main()

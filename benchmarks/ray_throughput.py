"""RayCollector throughput against two raw loops and torchrl's RayCollector.

CartPole-v1, a 64x64 MLP categorical policy, 2 collectors x 64 envs, on one
Ray instance with 2 CPUs, all in one run:

- limit: two raw loops (as in collector_throughput.py) in two processes at
  once, frames/s summed;
- fleetrl RayCollector, async and sync;
- torchrl RayCollector (torchrl.collectors.Collector inside, the same gymnasium
  vector env through GymWrapper, the same policy), async and sync;
- time from constructor to first batch for both;
- the cost of one update_policy_weights_() for the small MLP and for a ~10M
  parameter MLP, for both.

Prints a table and ratios; writes ``benchmarks/results/ray_throughput.json``.

    python benchmarks/ray_throughput.py [--steps 128] [--batches 12]

Targets (issue 3): fleetrl async >= 0.7x the limit and >= 3x torchrl's
RayCollector async; first batch faster than torchrl's.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
import traceback
import warnings

import torch
from torch import nn

from common import (
    LiveCollector,
    RawLoop,
    categorical_policy,
    gym_env,
    machine,
    mlp,
    paired_ratio,
    print_table,
    write_json,
)

warnings.filterwarnings("ignore")

NUM_COLLECTORS = 2
NUM_ENVS = 64


def _raw_worker(steps: int, barrier, queue) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    loop = RawLoop(mlp(), NUM_ENVS, steps)
    barrier.wait()
    queue.put(loop.run(steps))


def raw_limit(steps: int) -> float:
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(NUM_COLLECTORS), ctx.Queue()
    procs = [
        ctx.Process(target=_raw_worker, args=(steps, barrier, queue)) for _ in range(NUM_COLLECTORS)
    ]
    for p in procs:
        p.start()
    rates = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    return sum(rates)


def fleetrl_collector(policy, fpb: int, sync: bool, total: int = -1):
    from fleetrl import RayCollector

    return RayCollector(
        lambda: gym_env(NUM_ENVS),
        policy,
        frames_per_batch=fpb,
        total_frames=total,
        num_collectors=NUM_COLLECTORS,
        sync=sync,
    )


def torchrl_collector(policy, fpb: int, sync: bool, total: int = -1):
    # torchrl's RayCollector yields nothing when total_frames=-1: give it a budget it never reaches
    total = 10**12 if total == -1 else total
    from torchrl.collectors import Collector
    from torchrl.collectors.distributed import RayCollector as TorchRLRayCollector
    from torchrl.envs import GymWrapper

    def make_env():
        from common import gym_env as make_gym

        return GymWrapper(make_gym(NUM_ENVS), categorical_action_encoding=True)

    return TorchRLRayCollector(
        [make_env] * NUM_COLLECTORS,
        policy,
        collector_class=Collector,
        frames_per_batch=fpb,
        total_frames=total,
        sync=sync,
        remote_configs={"num_cpus": 1, "num_gpus": 0, "memory": 1024**3},
    )


def big_policy(hidden: int = 2200):
    net = nn.Sequential(
        nn.Linear(4, hidden),
        nn.Tanh(),
        nn.Linear(hidden, hidden),
        nn.Tanh(),
        nn.Linear(hidden, hidden),
        nn.Tanh(),
        nn.Linear(hidden, 2),
    )
    return categorical_policy(net), sum(p.numel() for p in net.parameters())


def update_cost(make, policy, repeats: int = 5) -> float:
    """Median seconds of one update_policy_weights_() call while the collector is live."""
    collector = make(policy)
    it = iter(collector)
    next(it)
    times = []
    for _ in range(repeats):
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(1e-3)
        t0 = time.perf_counter()
        collector.update_policy_weights_()
        times.append(time.perf_counter() - t0)
        next(it)
    collector.shutdown()
    return statistics.median(times)


def guarded(name: str, fn, errors: dict):
    try:
        return fn()
    except Exception:  # a peer that cannot run here is reported, not fatal
        errors[name] = traceback.format_exc(limit=3)
        print(f"{name}: failed ({errors[name].splitlines()[-1]})", flush=True)
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=128, help="vector steps per worker batch")
    parser.add_argument(
        "--batches", type=int, default=10, help="timed batches per contestant per round"
    )
    parser.add_argument("--rounds", type=int, default=5, help="median over this many rounds")
    args = parser.parse_args()
    import ray

    torch.set_num_threads(1)
    torch.manual_seed(0)
    fpb = NUM_ENVS * args.steps
    errors: dict[str, str] = {}
    results: dict[str, float | None] = {}

    # Every collector stays alive (logical CPUs enough for all actors; only the one
    # being timed works), so rounds can alternate contestants on a noisy machine.
    ray.init(
        num_cpus=4 * NUM_COLLECTORS,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
    )
    policy = categorical_policy()
    contestants: dict[str, LiveCollector] = {}
    for lib, make in (("fleetrl", fleetrl_collector), ("torchrl", torchrl_collector)):
        for sync in (False, True):
            name = f"{lib}_{'sync' if sync else 'async'}"
            batch = fpb * NUM_COLLECTORS if sync else fpb
            c = guarded(
                name, lambda m=make, b=batch, s=sync: LiveCollector(lambda: m(policy, b, s)), errors
            )
            if c is not None:
                contestants[name] = c
                results[f"{name}_first_batch_s"] = c.first_batch_s
    runs: dict[str, list[float]] = {"limit": [], **{name: [] for name in contestants}}
    for r in range(args.rounds):
        time.sleep(0.5)  # let prefetched tasks finish before the limit runs
        runs["limit"].append(raw_limit(args.steps * args.batches))
        for name, c in contestants.items():
            time.sleep(1.0)  # the previous contestant's prefetched tasks finish first
            n = args.batches // NUM_COLLECTORS if name.endswith("sync") else args.batches
            runs[name].append(c.run(n))
        print(
            f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in runs.items()), flush=True
        )
    for c in contestants.values():
        c.shutdown()
    results["limit_fps"] = statistics.median(runs["limit"])
    for lib in ("fleetrl", "torchrl"):
        for mode in ("async", "sync"):
            name = f"{lib}_{mode}"
            results.setdefault(f"{name}_first_batch_s", None)
            results[f"{name}_fps"] = statistics.median(runs[name]) if name in runs else None
            results[f"{name}_vs_limit_paired"] = (
                statistics.median(x / lim for x, lim in zip(runs[name], runs["limit"]))
                if name in runs
                else None
            )
    results["runs"] = runs

    small_fpb = NUM_ENVS * 2
    big, n_params = big_policy()
    results["big_policy_params"] = n_params
    for lib, make in (("fleetrl", fleetrl_collector), ("torchrl", torchrl_collector)):
        for tag, pol in (("small", categorical_policy()), ("big", big)):
            cost = guarded(
                f"{lib}_update_{tag}",
                lambda m=make, p=pol: update_cost(lambda q: m(q, small_fpb, False), p),
                errors,
            )
            results[f"{lib}_update_{tag}_s"] = cost
            if cost is not None:
                print(f"{lib} update_policy_weights_ ({tag}): {cost * 1e3:.2f} ms", flush=True)
    ray.shutdown()

    results["fleetrl_async_vs_limit"] = results["fleetrl_async_vs_limit_paired"]
    results["fleetrl_sync_vs_limit"] = results["fleetrl_sync_vs_limit_paired"]
    # every ratio the one way (docs/benchmarks/index.md): the median of the rounds' ratios
    results["fleetrl_async_vs_torchrl_async"] = paired_ratio(
        runs.get("fleetrl_async"), runs.get("torchrl_async")
    )
    results["fleetrl_sync_vs_torchrl_sync"] = paired_ratio(
        runs.get("fleetrl_sync"), runs.get("torchrl_sync")
    )

    def fmt(v, unit=""):
        if v is None:
            return "failed"
        return f"{v:,.0f}{unit}" if v > 100 else f"{v:.2f}{unit}"

    print()
    rows = [
        ["limit: 2 raw loops", fmt(results["limit_fps"]), "1.00x", "-", "-"],
    ]
    for lib in ("fleetrl", "torchrl"):
        for mode in ("async", "sync"):
            fps = results[f"{lib}_{mode}_fps"]
            rows.append(
                [
                    f"{lib} RayCollector {mode}",
                    fmt(fps),
                    fmt(results[f"{lib}_{mode}_vs_limit_paired"], "x"),
                    fmt(results[f"{lib}_{mode}_first_batch_s"], "s"),
                    fmt(results[f"fleetrl_{mode}_vs_torchrl_{mode}"], "x")
                    if lib == "torchrl"
                    else "-",
                ]
            )
    print_table(["contestant", "frames/s", "vs limit", "first batch", "fleetrl/torchrl"], rows)
    print()
    print_table(
        ["update_policy_weights_", "fleetrl", "torchrl"],
        [
            [
                f"small MLP ({sum(p.numel() for p in policy.parameters()):,} params)",
                fmt(_ms(results["fleetrl_update_small_s"]), " ms"),
                fmt(_ms(results["torchrl_update_small_s"]), " ms"),
            ],
            [
                f"big MLP ({n_params:,} params)",
                fmt(_ms(results["fleetrl_update_big_s"]), " ms"),
                fmt(_ms(results["torchrl_update_big_s"]), " ms"),
            ],
        ],
    )
    path = write_json(
        "ray_throughput",
        {"machine": machine(), "args": vars(args), "results": results, "errors": errors},
    )
    print(f"\nwrote {path}")


def _ms(v):
    return None if v is None else v * 1e3


if __name__ == "__main__":
    main()

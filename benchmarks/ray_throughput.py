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
  parameter MLP, for both;
- the scaling series: first-ready frames/s of fleetrl's and torchrl's RayCollector against
  the number of collectors (``--collectors``, 1 and 2 here; more on a bigger machine), each
  count against as many raw loops in as many processes, in the same alternating rounds.

Prints the tables and ratios; writes ``benchmarks/results/ray_throughput.json`` and draws
``benchmarks/results/ray_throughput.png`` (frames/s against collectors).

    python benchmarks/ray_throughput.py [--steps 128] [--batches 10] [--collectors 1,2]

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
    plot_ray_scaling,
    print_table,
    write_json,
)

warnings.filterwarnings("ignore")

#: the collectors of the main table (async and sync, first batch, weight updates)
NUM_COLLECTORS = 2
NUM_ENVS = 64


def collector_counts(text: str) -> list[int]:
    """``--collectors``: the counts of the scaling series, sorted, the main table's included.

    Example:
        >>> collector_counts("4,1")
        [1, 2, 4]
    """
    try:
        counts = {int(part) for part in text.split(",") if part.strip()}
    except ValueError:
        counts = set()
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(
            f"--collectors {text!r}: give collector counts of 1 or more, separated by commas "
            "(e.g. 1,2,4)"
        )
    return sorted(counts | {NUM_COLLECTORS})


def scaling_rows(runs: dict[str, list[float]], counts: list[int]) -> list[dict]:
    """The scaling series from the rounds' frames/s: for each collector count, the medians
    of the limit (as many raw loops) and of both first-ready collectors, and the paired
    ratios (the median of the rounds' ratios). The main table's count is keyed without a
    suffix (``limit``, ``fleetrl_async``), the others ``..._x<count>``.

    Example:
        >>> runs = {"limit": [4.0, 6.0], "fleetrl_async": [4.0, 3.0], "torchrl_async": [1.0, 1.0]}
        >>> row = scaling_rows(runs, [2])[0]
        >>> row["collectors"], row["limit_fps"], row["fleetrl_vs_limit"], row["fleetrl_vs_torchrl"]
        (2, 5.0, 0.75, 3.5)
    """
    rows = []
    for k in counts:
        suffix = "" if k == NUM_COLLECTORS else f"_x{k}"
        limit = runs.get(f"limit{suffix}")
        fleet, torchrl = runs.get(f"fleetrl_async{suffix}"), runs.get(f"torchrl_async{suffix}")
        rows.append(
            {
                "collectors": k,
                "limit_fps": statistics.median(limit) if limit else None,
                "fleetrl_async_fps": statistics.median(fleet) if fleet else None,
                "torchrl_async_fps": statistics.median(torchrl) if torchrl else None,
                "fleetrl_vs_limit": paired_ratio(fleet, limit),
                "torchrl_vs_limit": paired_ratio(torchrl, limit),
                "fleetrl_vs_torchrl": paired_ratio(fleet, torchrl),
            }
        )
    return rows


def _raw_worker(steps: int, barrier, queue) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    loop = RawLoop(mlp(), NUM_ENVS, steps)
    barrier.wait()
    queue.put(loop.run(steps))


def raw_limit(steps: int, processes: int = NUM_COLLECTORS) -> float:
    """frames/s of ``processes`` raw loops stepping at once, summed."""
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(processes), ctx.Queue()
    procs = [
        ctx.Process(target=_raw_worker, args=(steps, barrier, queue)) for _ in range(processes)
    ]
    for p in procs:
        p.start()
    rates = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    return sum(rates)


def fleetrl_collector(
    policy, fpb: int, sync: bool, total: int = -1, collectors: int = NUM_COLLECTORS
):
    from fleetrl import RayCollector

    return RayCollector(
        lambda: gym_env(NUM_ENVS),
        policy,
        frames_per_batch=fpb,
        total_frames=total,
        num_collectors=collectors,
        sync=sync,
    )


def torchrl_collector(
    policy, fpb: int, sync: bool, total: int = -1, collectors: int = NUM_COLLECTORS
):
    # torchrl's RayCollector yields nothing when total_frames=-1: give it a budget it never reaches
    total = 10**12 if total == -1 else total
    from torchrl.collectors import Collector
    from torchrl.collectors.distributed import RayCollector as TorchRLRayCollector
    from torchrl.envs import GymWrapper

    def make_env():
        from common import gym_env as make_gym

        return GymWrapper(make_gym(NUM_ENVS), categorical_action_encoding=True)

    return TorchRLRayCollector(
        [make_env] * collectors,
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
    parser.add_argument(
        "--collectors",
        type=collector_counts,
        default=collector_counts("1,2"),
        help="collector counts of the scaling series, e.g. 1,2,4 (first-ready mode; the main "
        f"table's {NUM_COLLECTORS} always among them)",
    )
    args = parser.parse_args()
    import ray

    torch.set_num_threads(1)
    torch.manual_seed(0)
    fpb = NUM_ENVS * args.steps
    errors: dict[str, str] = {}
    results: dict[str, float | None] = {}

    # Every collector stays alive (logical CPUs enough for all actors; only the one
    # being timed works), so rounds can alternate contestants on a noisy machine.
    others = [k for k in args.collectors if k != NUM_COLLECTORS]  # the series' other counts
    ray.init(
        # a logical CPU per worker: 4 collectors of the main table, 2 per other count
        num_cpus=4 * NUM_COLLECTORS + 2 * sum(others),
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
    # the scaling series' other counts, first ready (the main table holds its own count's)
    series: dict[int, dict[str, LiveCollector]] = {k: {} for k in others}
    for k in others:
        for lib, make in (("fleetrl", fleetrl_collector), ("torchrl", torchrl_collector)):
            name = f"{lib}_async_x{k}"
            c = guarded(
                name,
                lambda m=make, n=k: LiveCollector(lambda: m(policy, fpb, False, collectors=n)),
                errors,
            )
            if c is not None:
                series[k][name] = c
    runs: dict[str, list[float]] = {"limit": [], **{name: [] for name in contestants}}
    for k in others:
        runs[f"limit_x{k}"] = []
        runs.update({name: [] for name in series[k]})
    for r in range(args.rounds):
        time.sleep(0.5)  # let prefetched tasks finish before the limit runs
        runs["limit"].append(raw_limit(args.steps * args.batches))
        for name, c in contestants.items():
            time.sleep(1.0)  # the previous contestant's prefetched tasks finish first
            n = args.batches // NUM_COLLECTORS if name.endswith("sync") else args.batches
            runs[name].append(c.run(n))
        for k in others:
            time.sleep(0.5)
            runs[f"limit_x{k}"].append(raw_limit(args.steps * args.batches, k))
            for name, c in series[k].items():
                time.sleep(1.0)
                runs[name].append(c.run(args.batches))
        print(
            f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in runs.items()), flush=True
        )
    for c in [*contestants.values(), *(c for s in series.values() for c in s.values())]:
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
    results["scaling"] = scaling_rows(runs, args.collectors)

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
    print()
    print_table(
        [
            "collectors",
            "limit: raw loops",
            "fleetrl async",
            "vs limit",
            "torchrl async",
            "vs limit",
            "fleetrl/torchrl",
        ],
        [
            [
                str(row["collectors"]),
                fmt(row["limit_fps"]),
                fmt(row["fleetrl_async_fps"]),
                fmt(row["fleetrl_vs_limit"], "x"),
                fmt(row["torchrl_async_fps"]),
                fmt(row["torchrl_vs_limit"], "x"),
                fmt(row["fleetrl_vs_torchrl"], "x"),
            ]
            for row in results["scaling"]
        ],
        title="First-ready frames/s against collectors (each against as many raw loops)",
    )
    path = write_json(
        "ray_throughput",
        {"machine": machine(), "args": vars(args), "results": results, "errors": errors},
    )
    png = plot_ray_scaling(results["scaling"])
    print(f"\nwrote {path}" + (f" and {png}" if png else ""))


def _ms(v):
    return None if v is None else v * 1e3


if __name__ == "__main__":
    main()

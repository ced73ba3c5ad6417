"""Central batched inference against local inference, the raw limit and torchrl's peer.

Two workloads, each with N env workers x E envs (``--workers``, ``--envs``):

- ``pong``: ALE/Pong-v5 (``ale_vector`` engine, one engine thread), fleetrl's Nature CNN
  actor (action + log-prob);
- ``cartpole``: CartPole-v1, the 64x64 MLP categorical policy.

Contestants, each built and warmed once, then timed in paired rounds (each round times
``--batches`` first-ready batches of every contestant, back to back), medians over rounds:

- ``raw``: the limit for local inference, N raw step-then-infer loops (the same network,
  preallocated tensors, no TensorDict) in N processes at once, frames/s summed;
- ``local``: ``RayCollector(..., inference="local")``, today's mode: each worker runs its
  policy copy on its own CPU;
- ``server-cpu``: ``inference="server"``, one inference server on the CPU; the workers
  only step envs, in two double-buffered groups, and reach the server through shared
  memory (``inference_transport="auto"`` on one node); ``server-cpu (ray calls)``: the
  same through Ray calls (``inference_transport="ray"``, what workers on other nodes use);
- ``server-cuda``: the same with ``inference_device="cuda"``, where torch sees a GPU;
- ``torchrl``: torchrl 0.14's ``AsyncBatchedCollector`` (its auto-batching
  ``InferenceServer`` in a thread, N x E envs in threads), the peer that ships the idea.

Reported: frames/s, each row's ratio to ``local`` and to ``raw``, and for the server rows
the request latency (median and p95, from a worker's send to its holding the answer) and
the mean batch at the server (observations per policy call). Writes
``benchmarks/results/inference_server.json`` (``--tag`` adds a suffix, e.g. ``_h100``).

    python benchmarks/inference_server.py [--workloads pong cartpole] [--workers 2]
        [--envs 8] [--steps 32] [--batches 4] [--rounds 3] [--no-torchrl]

A scaling curve (the device machine: 16 cores and a GPU) runs one workload over several
worker counts, e.g. ``--workloads pong --workers 1 2 4 8 14 --no-torchrl --tag _scaling``.

Targets (issue 24): on a machine with a GPU, central inference >= 2x local inference at
8+ env workers on Pong; on CPU, central inference no slower than local at equal workers.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time
import traceback
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from atari_throughput import AtariRawLoop, atari_spec, cnn_policy
from common import RawLoop, categorical_policy, mlp, print_table, write_json
from fleetrl import RayCollector

warnings.filterwarnings("ignore")


# ------------------------------------------------------------------ workloads
def workload_policy(name: str, seed: int = 0):
    """The policy module and the raw network (its logits) of a workload."""
    torch.manual_seed(seed)
    if name == "pong":
        return cnn_policy(atari_spec("ale_vector", 1), seed)
    net = mlp()
    return categorical_policy(net), net


def workload_env(name: str):
    return atari_spec("ale_vector", 1) if name == "pong" else "CartPole-v1"


def _raw_process(name, envs, steps, rounds, barrier, queue) -> None:
    torch.set_num_threads(1)
    _, net = workload_policy(name)
    if name == "pong":
        loop = AtariRawLoop(atari_spec("ale_vector", 1), net, envs, steps)
        run = loop.run
    else:
        loop = RawLoop(net, envs, steps)
        run = lambda: loop.run(steps)  # noqa: E731
    for _ in range(rounds):
        barrier.wait()  # every process starts the round at once
        queue.put(run())
    loop.shutdown()


class ParallelRaw:
    """The raw limit: N raw loops in N processes at once, frames/s summed."""

    def __init__(self, name: str, workers: int, envs: int, steps: int, rounds: int):
        ctx = mp.get_context("spawn")
        self.barrier, self.queue = ctx.Barrier(workers + 1), ctx.Queue()
        self.procs = [
            ctx.Process(
                target=_raw_process,
                args=(name, envs, steps, rounds, self.barrier, self.queue),
                daemon=True,
            )
            for _ in range(workers)
        ]
        for p in self.procs:
            p.start()

    def run(self) -> float:
        self.barrier.wait()
        return sum(self.queue.get() for _ in self.procs)

    def warm(self) -> bool:
        """A warm-up round: the processes are up and their loops have run once."""
        self.run()
        return True

    def stats(self) -> dict:
        return {}

    def shutdown(self) -> None:
        for p in self.procs:
            p.join(timeout=60)


class Collecting:
    """A live collector: frames/s over ``batches`` batches per round (after one warm-up)."""

    def __init__(self, collector, batches: int):
        self.collector, self.batches = collector, batches
        self.it = iter(collector)

    def warm(self) -> bool:
        """The first batch: the workers are up, their envs made and their policies run."""
        next(self.it)
        return True

    def run(self) -> float:
        start = time.perf_counter()
        frames = sum(next(self.it).numel() for _ in range(self.batches))
        return frames / (time.perf_counter() - start)

    def stats(self) -> dict:
        stats = getattr(self.collector, "stats", None)
        return stats().get("inference", {}) if isinstance(self.collector, RayCollector) else {}

    def shutdown(self) -> None:
        self.collector.shutdown()


def fleet(name: str, mode: str, workers: int, envs: int, steps: int, batches: int) -> Collecting:
    policy, _ = workload_policy(name)
    kwargs: dict = {}
    if mode != "local":
        kwargs = dict(
            inference="server",
            inference_device="cuda" if mode == "server-cuda" else None,
            # a share of the GPU: the CUDA contestants are all up at once (paired rounds),
            # and a whole GPU each would leave the second waiting on a one-GPU machine
            inference_remote_config={
                "num_cpus": 0,
                **({"num_gpus": 0.25} if "cuda" in mode else {}),
            },
            inference_transport="ray" if mode.endswith("(ray calls)") else "auto",
        )
    collector = RayCollector(
        workload_env(name),
        policy,
        frames_per_batch=envs * steps,
        total_frames=-1,
        num_collectors=workers,
        num_workers_per_collector=envs,
        sync=False,
        prefetch=1,
        remote_configs={"num_cpus": 1},
        collector_kwargs={"overlap": False},  # local: the plain loop (servers split anyway)
        **kwargs,
    )
    return Collecting(collector, batches)


def torchrl_peer(name: str, workers: int, envs: int, steps: int, batches: int) -> Collecting:
    from torchrl.collectors import AsyncBatchedCollector
    from torchrl.envs import GymEnv, GymWrapper

    policy, _ = workload_policy(name)
    if name == "pong":  # gymnasium's AtariPreprocessing + stack: one env per factory
        from fleetrl.config import AtariConfig
        from fleetrl.envs.atari import gym_atari

        make = lambda: GymWrapper(  # noqa: E731
            gym_atari("ALE/Pong-v5", AtariConfig()), categorical_action_encoding=True
        )
    else:
        make = lambda: GymEnv("CartPole-v1", categorical_action_encoding=True)  # noqa: E731
    collector = AsyncBatchedCollector(
        create_env_fn=[make] * (workers * envs),
        policy=policy,
        frames_per_batch=envs * steps,
        total_frames=-1,
        backend="threading",
    )
    return Collecting(collector, batches)


def guarded(label: str, make, errors: dict):
    try:
        return make()
    except Exception as err:  # a contestant that cannot run here is reported, not fatal
        errors[label] = f"{type(err).__name__}: {err}".splitlines()[0]
        traceback.print_exc()
        return None


# ------------------------------------------------------------------ transport
class _Echo:
    """A Ray actor that answers a request with an action per row, as a server would."""

    def echo(self, inputs):
        return [("action", np.zeros(len(inputs[0][1]), dtype=np.int64))]


def _shm_server(name: str, size: int, conn) -> None:
    from multiprocessing import shared_memory

    shm = shared_memory.SharedMemory(name=name)
    buf = np.ndarray((size,), dtype=np.uint8, buffer=shm.buf)
    while conn.recv_bytes() != b"stop":
        _ = buf.copy()  # the server reads the request out of shared memory
        buf[:8] = 0  # and writes its answer in place
        conn.send_bytes(b"1")
    del buf
    shm.close()


def transport_probe(payload_bytes: int, trips: int) -> dict:
    """Round trips per second of one request of ``payload_bytes`` and a small answer: a Ray
    actor call (what fleetrl's servers use) against shared memory between two processes
    signalled over a pipe (the one-node alternative). Nothing is computed: transport only."""
    from multiprocessing import shared_memory

    import ray

    payload = [("observation", np.zeros(payload_bytes, dtype=np.uint8))]
    actor = ray.remote(num_cpus=0)(_Echo).remote()
    ray.get(actor.echo.remote(payload))
    start = time.perf_counter()
    for _ in range(trips):
        ray.get(actor.echo.remote(payload))
    ray_s = (time.perf_counter() - start) / trips
    ray.kill(actor)

    ctx = mp.get_context("spawn")
    shm = shared_memory.SharedMemory(create=True, size=max(payload_bytes, 8))
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=_shm_server, args=(shm.name, max(payload_bytes, 8), theirs))
    proc.start()
    buf = np.ndarray((max(payload_bytes, 8),), dtype=np.uint8, buffer=shm.buf)
    data = payload[0][1]
    for _ in range(10):
        buf[:payload_bytes] = data
        ours.send_bytes(b"go")
        ours.recv_bytes()
    start = time.perf_counter()
    for _ in range(trips):
        buf[:payload_bytes] = data  # the worker writes its request
        ours.send_bytes(b"go")
        ours.recv_bytes()
        _ = buf[:8].copy()  # and reads the answer
    shm_s = (time.perf_counter() - start) / trips
    ours.send_bytes(b"stop")
    proc.join(timeout=30)
    del buf
    shm.close()
    shm.unlink()
    return {"bytes": payload_bytes, "ray_us": ray_s * 1e6, "shm_us": shm_s * 1e6}


# ------------------------------------------------------------------ one setting
#: every fleetrl contestant, in the order they run (the CUDA ones where torch sees a GPU)
MODES = ("local", "server-cpu", "server-cpu (ray calls)", "server-cuda", "server-cuda (ray calls)")


def fleet_modes(chosen: list[str] | None = None) -> list[str]:
    """fleetrl's contestants: ``chosen`` (all by default), less the CUDA ones without a GPU."""
    cuda = torch.cuda.is_available()
    return [m for m in chosen or MODES if cuda or "cuda" not in m]


def measure(args, name: str, workers: int, errors: dict) -> dict:
    steps = args.steps
    made: dict[str, object] = {}
    rounds = args.rounds
    # every contestant is built first, all at once, and warmed up after: their processes (the
    # raw loops', the collectors' actors, the servers) start together instead of one
    # contestant's after the last's, which on a 16-core machine was most of a run's time
    start = time.perf_counter()
    made["raw"] = guarded(
        f"{name}/raw", lambda: ParallelRaw(name, workers, args.envs, steps, rounds + 1), errors
    )

    def build(mode: str):
        built = guarded(
            f"{name}/{mode}",
            lambda: fleet(name, mode, workers, args.envs, steps, args.batches),
            errors,
        )
        print(f"   {mode}: built at {time.perf_counter() - start:.1f} s", flush=True)
        return built

    # a collector's constructor waits for its workers to start: one thread each
    modes = fleet_modes(args.modes)
    with ThreadPoolExecutor(max_workers=len(modes) or 1) as pool:
        made.update(zip(modes, pool.map(build, modes)))
    if args.torchrl:
        made["torchrl"] = guarded(
            f"{name}/torchrl",
            lambda: torchrl_peer(name, workers, args.envs, steps, args.batches),
            errors,
        )
    print(f"   built {len(made)} contestants in {time.perf_counter() - start:.1f} s", flush=True)
    for label, contestant in made.items():
        if contestant is not None and guarded(f"{name}/{label}", contestant.warm, errors) is None:
            contestant.shutdown()  # it could not collect: the others still run
            made[label] = None
        state = "not run" if made[label] is None else "ready"
        print(f"   {label}: {state} at {time.perf_counter() - start:.1f} s", flush=True)
    live = {k: v for k, v in made.items() if v is not None}
    runs: dict[str, list[float]] = {k: [] for k in live}
    for _ in range(rounds):
        for label, contestant in live.items():
            runs[label].append(contestant.run())
    result: dict = {"workers": workers, "envs": args.envs, "rows": {}}
    for label, contestant in live.items():
        stats = contestant.stats()
        row = {"fps": statistics.median(runs[label]), "runs": runs[label]}
        for other in ("local", "raw", "torchrl"):
            if other in runs and other != label:
                row[f"x_{other}"] = statistics.median(
                    a / b for a, b in zip(runs[label], runs[other])
                )
        if stats:
            row["latency_median_ms"] = stats["latency"]["median_ms"]
            row["latency_p95_ms"] = stats["latency"]["p95_ms"]
            row["mean_batch"] = stats["mean_batch"]
        result["rows"][label] = row
        contestant.shutdown()
    return result


def fmt(value, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=["pong", "cartpole"])
    parser.add_argument("--workers", type=int, nargs="+", default=[2])
    parser.add_argument("--envs", type=int, default=8, help="envs per env worker")
    parser.add_argument("--steps", type=int, default=32, help="steps per batch")
    parser.add_argument("--batches", type=int, default=4, help="batches timed per round")
    parser.add_argument("--rounds", type=int, default=3, help="median over this many rounds")
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=MODES,
        default=None,
        help="fleetrl's contestants (default: all; the CUDA ones only where a GPU is)",
    )
    parser.add_argument("--no-torchrl", dest="torchrl", action="store_false")
    parser.add_argument("--tag", default="", help="suffix of the result file's name")
    parser.add_argument("--trips", type=int, default=2000, help="transport probe round trips")
    args = parser.parse_args()
    torch.set_num_threads(1)

    import ray

    ray.init(
        address="local",
        # logical CPUs: every contestant's workers stay up at once (paired rounds), a CPU
        # each, while only one contestant collects at a time
        num_cpus=max(os.cpu_count() or 1, len(fleet_modes(args.modes)) * max(args.workers) + 2),
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
    )
    errors: dict[str, str] = {}
    # what one request costs to carry: 4 envs of CartPole (64 B) and of Pong (113 kB)
    transport = [transport_probe(size, args.trips) for size in (4 * 4 * 4, 4 * 4 * 84 * 84)]
    print_table(
        ["request bytes", "Ray call us", "shared memory us", "Ray / shm"],
        [
            [
                f"{t['bytes']:,}",
                fmt(t["ray_us"], ".0f"),
                fmt(t["shm_us"], ".0f"),
                fmt(t["ray_us"] / t["shm_us"], ".1f"),
            ]
            for t in transport
        ],
        title="transport: one request's round trip, nothing computed",
    )
    results = []
    for name in args.workloads:
        for workers in args.workers:
            print(f"-- {name}: {workers} env workers x {args.envs} envs", flush=True)
            res = measure(args, name, workers, errors)
            res["workload"] = name
            results.append(res)
            rows = [
                [
                    label,
                    fmt(r["fps"]),
                    fmt(r.get("x_local"), ".2f"),
                    fmt(r.get("x_raw"), ".2f"),
                    fmt(r.get("x_torchrl"), ".2f"),
                    fmt(r.get("latency_median_ms"), ".2f"),
                    fmt(r.get("latency_p95_ms"), ".2f"),
                    fmt(r.get("mean_batch"), ".1f"),
                ]
                for label, r in res["rows"].items()
            ]
            print_table(
                [
                    "contestant",
                    "frames/s",
                    "x local",
                    "x raw",
                    "x torchrl",
                    "latency ms",
                    "p95 ms",
                    "batch",
                ],
                rows,
                title=f"{name}, {workers} env workers x {args.envs} envs",
            )
    for label, err in errors.items():
        print(f"not run: {label}: {err}")
    ray.shutdown()
    path = write_json(
        f"inference_server{args.tag}",
        {"results": results, "transport": transport, "errors": errors, "args": vars(args)},
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

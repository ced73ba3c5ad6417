"""Atari throughput: fleetrl's collectors against the raw loop and torchrl's Collector.

Pong (ALE/Pong-v5), 4x84x84 uint8 frame stacks, frame skip 4, fleetrl's Nature
CNN policy (``make_actor_critic("cnn", ...)``'s actor: action + log-prob), one
torch thread per process, on this machine's cores. Two phases, each in paired
rounds (every contestant is built and warmed once; each round times one batch
of each, back to back) with medians over rounds:

1. One process, ``--envs`` envs:
   - engine ceiling: each engine alone with random actions;
   - raw loop (the limit): step-then-infer over each engine with the same CNN,
     preallocated tensors, no TensorDict; the fastest is the limit;
   - overlap: the C++ engines' async mode (ale_vector, envpool), two halves of
     the envs, the CNN running on one half while the engine's threads step the
     other (measurement only);
   - fleetrl ``SyncDataCollector`` with each engine (``overlap=False``: the
     step-then-infer loop), and with each C++ engine and ``overlap=True``
     (two engine halves, the policy on one while the other steps);
   - torchrl's ``Collector`` over torchrl's ``GymWrapper`` of the same gymnasium
     vector env (gymnasium's ``AtariPreprocessing``): torchrl's envpool wrapper is
     broken as shipped and its ``Resize`` needs torchvision, which has no CPU
     wheel here.
2. Ray, 2 workers x ``--envs`` envs over the fastest engine: fleetrl
   ``RayCollector`` (its workers' default collection mode: no overlap where 2
   workers share 2 cores) sync, async and async with ``compress="lz4"``, and
   async with ``overlap=True``, against two raw loops run in two processes at once; then the bytes per frame a batch
   takes through Ray and its transfer time (worker-side packing, object store,
   driver-side unpacking), for the full and the compact wire layout
   (:mod:`fleetrl.distributed.wire`), each with ``compress=None`` and ``"lz4"``.

3. With ``--rllib``: RLlib's env runners on the same Pong and policy size
   (``rllib_peer.py``, ``rllib_atari_sampler.py``), in RLlib's own virtualenv
   (``benchmarks/.rllib-venv``, installed on first use): a local env runner with
   ``--envs`` envs and 2 remote env runners x ``--envs`` envs, sampling only;
   fleetrl's best SyncDataCollector and RayCollector rows over RLlib's.
   ``--rllib-only`` skips phases 1 and 2.

A frame here is a collector frame: one agent step of one env (one transition);
emulator frames are agent steps x frame skip (4). Writes
``benchmarks/results/atari_throughput.json``.

    python benchmarks/atari_throughput.py [--envs 8] [--steps 64] [--rounds 7]
        [--ray-batches 6] [--ray-rounds 5] [--env-threads 0] [--ray-only ENGINE]
        [--rllib | --rllib-only]

Targets (issue 11): fleetrl's best >= 1.0x the step-then-infer raw loop and
>= 1.5x torchrl's Collector; RayCollector with 2 workers >= 0.8x two raw loops.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
import traceback
import warnings

import numpy as np
import torch

from common import IterTimer, LiveCollector, machine, print_table, write_json
from fleetrl import SyncDataCollector
from fleetrl.envs.atari import AtariEnv
from fleetrl.envs.probe import env_spec
from fleetrl.networks.models import make_actor_critic
from rllib_peer import report_rllib, rllib_phase

warnings.filterwarnings("ignore")

ENV_ID = "ALE/Pong-v5"
ENGINES = ("gymnasium", "ale_vector", "envpool")
NUM_WORKERS = 2


def atari_spec(engine: str, env_threads: int) -> AtariEnv:
    """Pong with fleetrl's default Atari preprocessing (84x84 gray, skip 4, stack 4)."""
    return AtariEnv(ENV_ID, engine=engine, num_threads=env_threads)


def cnn_policy(spec: AtariEnv, seed: int = 0):
    """fleetrl's Nature CNN actor and its logits network (the raw loops run the same one)."""
    torch.manual_seed(seed)
    actor, _ = make_actor_critic("cnn", env_spec(spec), [])
    return actor, actor.module[0].module


class EngineCeiling:
    """The engine alone: random actions, nothing stored. ``run`` returns agent steps/s."""

    def __init__(self, spec: AtariEnv, num_envs: int, steps: int):
        self.batched = spec.make(num_envs)
        self.env = self.batched.env  # the engine's own vector env, without fleetrl's wrapper
        self.num_envs, self.steps = num_envs, steps
        self.num_actions = self.batched.num_actions
        self.rng = np.random.default_rng(0)
        self.env.reset()
        self.run()

    def run(self) -> float:
        env, n = self.env, self.num_envs
        actions = self.rng.integers(0, self.num_actions, size=(self.steps, n))
        start = time.perf_counter()
        for t in range(self.steps):
            env.step(actions[t])
        return self.steps * n / (time.perf_counter() - start)

    def shutdown(self) -> None:
        self.batched.close()


class AtariRawLoop:
    """The limit: step-then-infer over an engine's own vector env with the CNN.

    Preallocated tensors written by index, no TensorDict, no episode bookkeeping
    (the engines reset themselves). It stores what a rollout needs (observation,
    action, log-prob, reward, done); the next observation is the time-shifted
    observation, so it is not copied a second time.
    """

    def __init__(self, spec: AtariEnv, net: torch.nn.Module, num_envs: int, steps: int):
        self.batched = spec.make(num_envs)
        self.env, self.net = self.batched.env, net
        self.num_envs, self.steps = num_envs, steps
        shape = self.batched.observation_spec["observation"][0]
        self.obs_buf = torch.empty(steps, num_envs, *shape, dtype=torch.uint8)
        self.act_buf = torch.empty(steps, num_envs, dtype=torch.int64)
        self.logp_buf = torch.empty(steps, num_envs)
        self.rew_buf = torch.empty(steps, num_envs)
        self.done_buf = torch.empty(steps, num_envs, dtype=torch.bool)
        self.obs_np, _ = self.env.reset()
        self.run()

    def run(self) -> float:
        net, env, obs_np = self.net, self.env, self.obs_np
        start = time.perf_counter()
        with torch.inference_mode():
            for t in range(self.steps):
                obs = torch.from_numpy(obs_np)
                dist = torch.distributions.Categorical(logits=net(obs))
                action = dist.sample()
                self.logp_buf[t] = dist.log_prob(action)
                self.obs_buf[t] = obs
                self.act_buf[t] = action
                obs_np, rew, term, trunc, _ = env.step(action.numpy())
                self.rew_buf[t] = torch.from_numpy(np.asarray(rew, dtype=np.float32))
                self.done_buf[t] = torch.from_numpy(np.logical_or(term, trunc))
        self.obs_np = obs_np
        return self.steps * self.num_envs / (time.perf_counter() - start)

    def shutdown(self) -> None:
        self.batched.close()


def _async_engine(spec: AtariEnv, num_envs: int, batch_size: int):
    """A C++ engine answering ``batch_size`` of ``num_envs`` envs per ``recv``, with the
    collectors' preprocessing (``fleetrl.envs.atari.make_cpp_engine``)."""
    from fleetrl.envs.atari import make_cpp_engine

    return make_cpp_engine(spec, num_envs, batch_size=batch_size)


class OverlapLoop:
    """The raw loop with env steps overlapped with inference: a C++ engine's async mode.

    ``num_envs`` envs answer in batches of half: while the CNN runs on one half,
    the engine's threads step the other (Sample Factory's double buffering).
    Same buffers and work per agent step as :class:`AtariRawLoop`.
    """

    def __init__(self, spec: AtariEnv, net: torch.nn.Module, num_envs: int, steps: int):
        half = num_envs // 2
        self.env = _async_engine(spec, num_envs, half)
        self.net, self.half = net, half
        self.envpool = spec.engine == "envpool"  # envpool's send takes the env ids too
        self.calls = 2 * steps  # as many agent steps per run as the raw loop's
        a = spec.atari
        shape = (a.frame_stack, a.screen_size, a.screen_size)
        self.obs_buf = torch.empty(self.calls, half, *shape, dtype=torch.uint8)
        self.act_buf = torch.empty(self.calls, half, dtype=torch.int64)
        self.id_buf = torch.empty(self.calls, half, dtype=torch.int32)
        self.logp_buf = torch.empty(self.calls, half)
        self.rew_buf = torch.empty(self.calls, half)
        self.done_buf = torch.empty(self.calls, half, dtype=torch.bool)
        if self.envpool:
            self.env.async_reset()
            self.first = None
        else:  # ALE's reset answers the first half; the other half waits for recv
            obs, info = self.env.reset()
            zeros = np.zeros(half, dtype=bool)
            self.first = (obs, np.zeros(half, np.float32), zeros, zeros, info)
        self.run()

    def run(self) -> float:
        net, env, first = self.net, self.env, self.first
        start = time.perf_counter()
        with torch.inference_mode():
            for t in range(self.calls):
                # the half that finished stepping while the CNN ran on the other half
                obs_np, rew, term, trunc, info = first if first is not None else env.recv()
                first = None
                ids = info["env_id"]
                obs = torch.from_numpy(obs_np)
                dist = torch.distributions.Categorical(logits=net(obs))
                action = dist.sample()
                if self.envpool:
                    env.send(action.numpy(), ids)  # steps in the engine's threads from here
                else:
                    env.send(action.numpy())
                self.logp_buf[t] = dist.log_prob(action)
                self.obs_buf[t] = obs
                self.act_buf[t] = action
                self.id_buf[t] = torch.from_numpy(np.asarray(ids, dtype=np.int32))
                self.rew_buf[t] = torch.from_numpy(np.asarray(rew, dtype=np.float32))
                self.done_buf[t] = torch.from_numpy(np.logical_or(term, trunc))
        self.first = None
        return self.calls * self.half / (time.perf_counter() - start)

    def shutdown(self) -> None:
        self.env.close()


def torchrl_collector(spec: AtariEnv, policy, num_envs: int, fpb: int):
    from torchrl.collectors import Collector
    from torchrl.envs import GymWrapper

    # the gymnasium engine's own SyncVectorEnv (gymnasium's AtariPreprocessing + stack)
    env = GymWrapper(spec.make(num_envs).env, categorical_action_encoding=True)
    return Collector(env, policy, frames_per_batch=fpb, total_frames=-1)


def guarded(name: str, fn, errors: dict):
    try:
        return fn()
    except Exception:  # a contestant that cannot run here is reported, not fatal
        errors[name] = traceback.format_exc(limit=3)
        print(f"{name}: failed ({errors[name].splitlines()[-1]})", flush=True)
        return None


def paired(runs: dict[str, list[float]], a: str, b: str) -> float | None:
    """Median over rounds of a/b measured in the same round."""
    if not runs.get(a) or not runs.get(b):
        return None
    return statistics.median(x / y for x, y in zip(runs[a], runs[b]))


# ---------------------------------------------------------------- phase 1: one process


def single_process(args, errors: dict) -> tuple[dict, dict]:
    n, steps = args.envs, args.steps
    fpb = n * steps
    builders = {}
    for engine in ENGINES:
        spec = atari_spec(engine, args.env_threads)
        builders[f"ceiling_{engine}"] = lambda s=spec: EngineCeiling(s, n, steps)
        builders[f"raw_{engine}"] = lambda s=spec: AtariRawLoop(s, cnn_policy(s)[1], n, steps)
    for engine in ("ale_vector", "envpool"):
        spec = atari_spec(engine, args.env_threads)
        builders[f"overlap_{engine}"] = lambda s=spec: OverlapLoop(s, cnn_policy(s)[1], n, steps)
    for engine in ENGINES:
        spec = atari_spec(engine, args.env_threads)
        builders[f"fleetrl_{engine}"] = lambda s=spec: IterTimer(
            SyncDataCollector(s, cnn_policy(s)[0], frames_per_batch=fpb, num_envs=n, overlap=False),
            fpb,
        )
    for engine in ("ale_vector", "envpool"):
        spec = atari_spec(engine, args.env_threads)
        builders[f"fleetrl_overlap_{engine}"] = lambda s=spec: IterTimer(
            SyncDataCollector(s, cnn_policy(s)[0], frames_per_batch=fpb, num_envs=n, overlap=True),
            fpb,
        )
    gym_spec = atari_spec("gymnasium", args.env_threads)
    builders["torchrl"] = lambda: IterTimer(
        torchrl_collector(gym_spec, cnn_policy(gym_spec)[0], n, fpb), fpb
    )

    contestants = {}
    for name, build in builders.items():
        c = guarded(name, build, errors)
        if c is not None:
            contestants[name] = c
    runs: dict[str, list[float]] = {name: [] for name in contestants}
    for r in range(args.rounds):
        for name, c in contestants.items():
            runs[name].append(c.run())
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    for c in contestants.values():
        c.shutdown()

    med = {name: statistics.median(v) for name, v in runs.items()}
    raws = [e for e in ENGINES if f"raw_{e}" in med]
    fleets = [name for name in med if name.startswith("fleetrl_")]  # plain and overlap
    ceilings = [e for e in ENGINES if f"ceiling_{e}" in med]
    res: dict = {"agent_steps_per_s": med}
    res["limit_engine"] = max(raws, key=lambda e: med[f"raw_{e}"]) if raws else None
    res["fastest_engine"] = (
        max(ceilings, key=lambda e: med[f"ceiling_{e}"]) if ceilings else res["limit_engine"]
    )
    best = max(fleets, key=lambda name: med[name]) if fleets else None
    res["fleetrl_best_engine"] = best.removeprefix("fleetrl_") if best else None
    limit = f"raw_{res['limit_engine']}"
    res["vs_limit"] = {name: paired(runs, name, limit) for name in runs}
    res["vs_torchrl"] = {name: paired(runs, name, "torchrl") for name in runs}
    res["overlap_vs_step_then_infer"] = {
        e: paired(runs, f"overlap_{e}", f"raw_{e}") for e in ("ale_vector", "envpool")
    }
    res["fleetrl_overlap_vs_plain"] = {
        e: paired(runs, f"fleetrl_overlap_{e}", f"fleetrl_{e}") for e in ("ale_vector", "envpool")
    }
    res["fleetrl_overlap_vs_step_then_infer"] = {
        e: paired(runs, f"fleetrl_overlap_{e}", f"raw_{e}") for e in ("ale_vector", "envpool")
    }
    best = f"fleetrl_{res['fleetrl_best_engine']}"
    res["targets"] = {
        "fleetrl_best_vs_raw_loop": paired(runs, best, limit),
        "fleetrl_best_vs_torchrl": paired(runs, best, "torchrl"),
    }
    return res, runs


# ---------------------------------------------------------------- phase 2: Ray


def _raw_process(engine, env_threads, n, steps, rounds, barrier, queue) -> None:
    torch.set_num_threads(1)
    spec = atari_spec(engine, env_threads)
    loop = AtariRawLoop(spec, cnn_policy(spec)[1], n, steps)
    for _ in range(rounds):
        barrier.wait()  # the driver starts both processes at once
        queue.put(loop.run())
    loop.shutdown()


class TwoRawLoops:
    """The limit for 2 workers: two raw loops in two processes at once, agent steps/s summed.

    The processes are started once and wait on a barrier between rounds.
    """

    def __init__(self, engine: str, env_threads: int, n: int, steps: int, rounds: int):
        ctx = mp.get_context("spawn")
        self.barrier, self.queue = ctx.Barrier(NUM_WORKERS + 1), ctx.Queue()
        self.procs = [
            ctx.Process(
                target=_raw_process,
                args=(engine, env_threads, n, steps, rounds, self.barrier, self.queue),
                daemon=True,  # a failed run must not hang at exit on a process at the barrier
            )
            for _ in range(NUM_WORKERS)
        ]
        for p in self.procs:
            p.start()

    def run(self) -> float:
        self.barrier.wait()
        return sum(self.queue.get() for _ in self.procs)

    def shutdown(self) -> None:
        for p in self.procs:
            p.join()


#: wire layouts the transfer probe compares: (name, compact, codec)
WIRE_LAYOUTS = (
    ("full", False, None),
    ("compact", True, None),
    ("full+lz4", False, "lz4"),
    ("compact+lz4", True, "lz4"),
)


def _transfer_probe(spec: AtariEnv, n: int, steps: int, repeats: int) -> dict:
    """Bytes per frame of one worker batch through Ray and its transfer time, by wire layout.

    ``transfer`` is what the async path pays per batch: the task's return through Ray's object
    store (worker-side packing included) and the driver's unpacking into fresh tensors;
    ``unpack`` is the driver's unpacking alone, ``round_unpack`` the sync path's (two such
    batches unpacked straight into one round). Full and compact unpack in one copy per leaf.
    """
    import ray

    from fleetrl.distributed.wire import empty_round, pack_batch, unpack_batch

    @ray.remote(num_cpus=1)
    class Probe:
        def __init__(self, spec, policy, n, steps):
            torch.set_num_threads(1)
            collector = SyncDataCollector(spec, policy, frames_per_batch=n * steps, num_envs=n)
            self.batch = next(iter(collector))
            self.keys = collector.compact_keys
            collector.shutdown()

        def batch_of(self, compact, codec):  # as CollectorWorker sends it
            return pack_batch(self.batch, codec, self.keys if compact else None)[0]

        def sizes(self, compact, codec):
            t0 = time.perf_counter()
            _, raw, sent = pack_batch(self.batch, codec, self.keys if compact else None)
            pack_s = time.perf_counter() - t0
            ends = int(self.batch["next", "done"][..., :-1, :].sum())
            return self.batch.numel(), raw, sent, pack_s, ends

    probe = Probe.remote(spec, cnn_policy(spec)[0], n, steps)
    out = {}
    for name, compact, codec in WIRE_LAYOUTS:
        frames, raw, sent, pack_s, ends = ray.get(probe.sizes.remote(compact, codec))
        times, unpack, rounds = [], [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            got = ray.get(probe.batch_of.remote(compact, codec))
            t1 = time.perf_counter()
            batch = unpack_batch(got)  # as RayCollector's async path receives it (one copy)
            t2 = time.perf_counter()
            batch["observation"].sum()  # touch the frames: the batch is usable here
            times.append(time.perf_counter() - t0)
            unpack.append(t2 - t1)
            del batch
            t0 = time.perf_counter()
            rnd = empty_round(got, NUM_WORKERS, got["batch_size"][-1])
            for i in range(NUM_WORKERS):  # as RayCollector's sync path receives a round
                unpack_batch(got, out=rnd[i])
            rounds.append(time.perf_counter() - t0)
            del rnd, got
        out[name] = {
            "frames_per_batch": frames,
            "episode_ends_inside": ends,
            "bytes_raw_per_frame": raw / frames,
            "bytes_sent_per_frame": sent / frames,
            "pack_s_per_batch": pack_s,
            "transfer_s_per_batch": statistics.median(times),
            "unpack_s_per_batch": statistics.median(unpack),
            "round_unpack_s_per_round": statistics.median(rounds),
        }
    ray.kill(probe)
    return out


def ray_phase(args, engine: str, errors: dict) -> tuple[dict, dict]:
    import ray

    from fleetrl import RayCollector

    n, steps = args.envs, args.steps
    fpb = n * steps
    spec = atari_spec(engine, args.env_threads)
    policy = cnn_policy(spec)[0]
    limit = TwoRawLoops(engine, args.env_threads, n, steps, args.ray_rounds)
    # logical CPUs enough for every actor; only the contestant being timed works
    ray.init(
        num_cpus=4 * NUM_WORKERS,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
    )

    def make(sync: bool, compress: str | None, overlap: bool | None):
        return RayCollector(
            spec,
            policy,
            frames_per_batch=fpb * NUM_WORKERS if sync else fpb,
            num_collectors=NUM_WORKERS,
            num_workers_per_collector=n,
            sync=sync,
            compress=compress,
            num_threads=1,
            collector_kwargs={"overlap": overlap},
        )

    contestants = {}
    for name, sync, compress, overlap in (  # overlap None: the workers' default
        ("ray_sync", True, None, None),
        ("ray_async", False, None, None),
        ("ray_async_lz4", False, "lz4", None),
        ("ray_async_overlap", False, None, True),
    ):
        c = guarded(
            name, lambda s=sync, z=compress, o=overlap: LiveCollector(lambda: make(s, z, o)), errors
        )
        if c is not None:
            contestants[name] = c
    runs: dict[str, list[float]] = {"two_raw_loops": [], **{k: [] for k in contestants}}
    for r in range(args.ray_rounds):
        time.sleep(1.0)  # the prefetched tasks finish before the limit runs
        runs["two_raw_loops"].append(limit.run())
        for name, c in contestants.items():
            time.sleep(1.0)
            batches = args.ray_batches
            runs[name].append(c.run(batches // NUM_WORKERS if name == "ray_sync" else batches))
        print(
            f"ray round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in runs.items()),
            flush=True,
        )
    res: dict = {"engine": engine}
    lz4 = contestants.get("ray_async_lz4")
    if lz4 is not None:
        st = lz4.collector.stats()
        comp = st["compression"]
        res["lz4_stats"] = {
            "frames": st["frames"],
            "bytes_raw_per_frame": comp["bytes_raw"] / max(1, st["frames"]),
            "bytes_sent_per_frame": comp["bytes_sent"] / max(1, st["frames"]),
            "ratio": comp["ratio"],
        }
    res["wire_stats"] = {}
    for name, c in contestants.items():
        st = c.collector.stats()
        res["wire_stats"][name] = {
            "bytes_full_per_frame": st["wire"]["bytes_full"] / max(1, st["frames"]),
            "bytes_sent_per_frame": st["wire"]["bytes_sent"] / max(1, st["frames"]),
            "compact_batches": st["wire"]["compact_batches"],
        }
    for c in contestants.values():
        c.shutdown()
    limit.shutdown()
    res["transfer"] = guarded(
        "transfer", lambda: _transfer_probe(spec, n, steps, args.transfer_repeats), errors
    )
    ray.shutdown()
    res["agent_steps_per_s"] = {k: statistics.median(v) for k, v in runs.items() if v}
    res["vs_two_raw_loops"] = {k: paired(runs, k, "two_raw_loops") for k in runs}
    best = max(contestants, key=lambda k: res["agent_steps_per_s"][k]) if contestants else None
    res["best"] = best
    res["target_ray_best_vs_two_raw_loops"] = res["vs_two_raw_loops"].get(best) if best else None
    return res, runs


# ---------------------------------------------------------------- report


def fmt(v, unit: str = "") -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}{unit}" if abs(v) >= 100 else f"{v:.2f}{unit}"


def verdict(v: float | None, target: float) -> str:
    if v is None:
        return "not measured"
    return f"{v:.3f}x vs >= {target}x: {'met' if v >= target else 'NOT met'}"


LABELS = {
    "ceiling_gymnasium": "engine alone: gymnasium (random actions)",
    "ceiling_ale_vector": "engine alone: ale_vector (random actions)",
    "ceiling_envpool": "engine alone: envpool (random actions)",
    "raw_gymnasium": "raw loop, step-then-infer: gymnasium",
    "raw_ale_vector": "raw loop, step-then-infer: ale_vector",
    "raw_envpool": "raw loop, step-then-infer: envpool",
    "overlap_ale_vector": "raw loop, overlap: ale_vector async, 2 halves",
    "overlap_envpool": "raw loop, overlap: envpool async, 2 halves",
    "fleetrl_gymnasium": "fleetrl SyncDataCollector: gymnasium",
    "fleetrl_ale_vector": "fleetrl SyncDataCollector: ale_vector",
    "fleetrl_envpool": "fleetrl SyncDataCollector: envpool",
    "fleetrl_overlap_ale_vector": "fleetrl SyncDataCollector: ale_vector, overlap",
    "fleetrl_overlap_envpool": "fleetrl SyncDataCollector: envpool, overlap",
    "torchrl": "torchrl Collector: GymWrapper(gymnasium)",
    "two_raw_loops": "limit: 2 raw loops in 2 processes",
    "ray_sync": "fleetrl RayCollector 2 workers, sync",
    "ray_async": "fleetrl RayCollector 2 workers, async",
    "ray_async_lz4": "fleetrl RayCollector 2 workers, async, lz4",
    "ray_async_overlap": "fleetrl RayCollector 2 workers, async, overlap=True",
}


def report(args, single: dict, ray_res: dict | None, frame_skip: int) -> None:
    med = single["agent_steps_per_s"]
    print(
        f"\n{ENV_ID}, {args.envs} envs, 4x84x84 uint8, Nature CNN, 1 torch thread; "
        f"limit = raw loop over {single['limit_engine']}"
    )
    rows = [
        [
            LABELS.get(k, k),
            fmt(v),
            fmt(v * frame_skip),
            fmt(single["vs_limit"][k], "x"),
            fmt(single["vs_torchrl"][k], "x"),
        ]
        for k, v in med.items()
    ]
    print_table(
        ["contestant", "agent steps/s", "emulator frames/s", "vs limit", "vs torchrl"], rows
    )
    for engine, v in single["overlap_vs_step_then_infer"].items():
        print(f"overlap / step-then-infer ({engine}, paired): {fmt(v, 'x')}")
    for engine, v in single["fleetrl_overlap_vs_plain"].items():
        raw = single["fleetrl_overlap_vs_step_then_infer"][engine]
        print(
            f"fleetrl overlap / fleetrl plain ({engine}, paired): {fmt(v, 'x')}; "
            f"/ raw step-then-infer: {fmt(raw, 'x')}"
        )
    if ray_res is not None:
        report_ray(args, ray_res, frame_skip)
    t = single["targets"]
    print("\ntargets (issue 11):")
    print(f"  fleetrl best ({single['fleetrl_best_engine']}) vs raw loop: ", end="")
    print(verdict(t["fleetrl_best_vs_raw_loop"], 1.0))
    print(f"  fleetrl best vs torchrl Collector: {verdict(t['fleetrl_best_vs_torchrl'], 1.5)}")
    ray_v = ray_res["target_ray_best_vs_two_raw_loops"] if ray_res else None
    print(f"  RayCollector best vs two raw loops: {verdict(ray_v, 0.8)}")


def report_ray(args, ray_res: dict, frame_skip: int) -> None:
    """Phase 2's tables: throughput against two raw loops, and the wire layouts' bytes and times."""
    print(f"\nRay, {NUM_WORKERS} workers x {args.envs} envs, engine {ray_res['engine']}")
    rm = ray_res["agent_steps_per_s"]
    rows = [
        [
            LABELS.get(k, k),
            fmt(v),
            fmt(v * frame_skip),
            fmt(ray_res["vs_two_raw_loops"][k], "x"),
        ]
        for k, v in rm.items()
    ]
    print_table(["contestant", "agent steps/s", "emulator frames/s", "vs 2 raw loops"], rows)
    if ray_res.get("transfer"):
        print()
        rows = [
            [
                layout,
                t["frames_per_batch"],
                fmt(t["bytes_raw_per_frame"]),
                fmt(t["bytes_sent_per_frame"]),
                f"{t['pack_s_per_batch'] * 1e3:.1f} ms",
                f"{t['transfer_s_per_batch'] * 1e3:.1f} ms",
                f"{t['unpack_s_per_batch'] * 1e3:.1f} ms",
                f"{t['round_unpack_s_per_round'] * 1e3:.1f} ms",
            ]
            for layout, t in ray_res["transfer"].items()
        ]
        print_table(
            [
                "wire",
                "frames/batch",
                "bytes/frame raw",
                "bytes/frame sent",
                "pack",
                "transfer/batch",
                "of which unpack",
                f"sync round unpack ({NUM_WORKERS} batches)",
            ],
            rows,
        )
    for name, w in ray_res.get("wire_stats", {}).items():
        print(
            f"{name}.stats()['wire']: {fmt(w['bytes_full_per_frame'])} bytes/frame in full layout, "
            f"{fmt(w['bytes_sent_per_frame'])} sent; {w['compact_batches']} batches compact"
        )
    if ray_res.get("lz4_stats"):
        s = ray_res["lz4_stats"]
        print(
            f"RayCollector(compress='lz4').stats(): {fmt(s['bytes_raw_per_frame'])} -> "
            f"{fmt(s['bytes_sent_per_frame'])} bytes/frame over {s['frames']:,} frames"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8, help="envs per process (even)")
    parser.add_argument("--steps", type=int, default=64, help="vector steps per batch")
    parser.add_argument("--rounds", type=int, default=7, help="phase 1: median over rounds")
    parser.add_argument("--ray-rounds", type=int, default=5, help="phase 2: median over rounds")
    parser.add_argument(
        "--ray-batches", type=int, default=6, help="timed batches per Ray contestant per round"
    )
    parser.add_argument("--transfer-repeats", type=int, default=5)
    parser.add_argument(
        "--env-threads", type=int, default=0, help="C++ engine threads (0: one per core)"
    )
    parser.add_argument("--no-ray", action="store_true", help="phase 1 only")
    parser.add_argument(
        "--ray-only", choices=ENGINES, help="phase 2 only, over this engine (skips phase 1)"
    )
    parser.add_argument(
        "--rllib", action="store_true", help="also RLlib's env runners (installs on first use)"
    )
    parser.add_argument("--rllib-only", action="store_true", help="RLlib's env runners only")
    parser.add_argument("--rllib-rounds", type=int, default=5, help="RLlib: median over rounds")
    args = parser.parse_args()
    if args.envs < 2 or args.envs % 2:
        parser.error(f"--envs={args.envs} is invalid: the overlap loop needs an even count >= 2")
    torch.set_num_threads(1)
    errors: dict[str, str] = {}
    start = time.perf_counter()
    frame_skip = atari_spec("gymnasium", 0).atari.frame_skip
    single, runs, ray_res, ray_runs, rllib = None, None, None, None, None
    if args.ray_only:
        ray_res, ray_runs = ray_phase(args, args.ray_only, errors)
        report_ray(args, ray_res, frame_skip)
        ray_v = ray_res["target_ray_best_vs_two_raw_loops"]
        print(f"\ntarget (issue 11): RayCollector best vs two raw loops: {verdict(ray_v, 0.8)}")
    elif not args.rllib_only:
        single, runs = single_process(args, errors)
        if not args.no_ray and single["fastest_engine"] is not None:
            ray_res, ray_runs = ray_phase(args, single["fastest_engine"], errors)
    if args.rllib or args.rllib_only:
        rllib = rllib_phase(args, NUM_WORKERS, single, ray_res)
    if single is not None:
        report(args, single, ray_res, frame_skip)
    if rllib is not None:
        report_rllib(rllib, frame_skip)
    else:
        print("\nRLlib: not run (pass --rllib)")
    path = write_json(
        "atari_throughput",
        {
            "machine": machine(),
            "args": vars(args),
            "env_id": ENV_ID,
            "frame_skip": frame_skip,
            "single_process": single,
            "ray": ray_res,
            "runs": {"single_process": runs, "ray": ray_runs},
            "rllib": rllib if rllib is not None else {"not_run": "--rllib not given"},
            "errors": errors,
            "wall_s": time.perf_counter() - start,
        },
    )
    print(f"\nwrote {path} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()

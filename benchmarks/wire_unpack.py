"""Driver-side cost of the wire format: full against compact layout, without Ray.

A fleetrl ``SyncDataCollector`` batch of 4x84x84 ``uint8`` frame stacks (a
pixel env whose episodes end at different steps in each env) is packed as a
worker packs it, with its leaves made read-only as Ray maps them, and
unpacked as ``RayCollector`` unpacks it: into fresh tensors (async mode) and
two batches straight into one round (sync mode); plus the sync path before
the compact layout (unpack without a copy, then ``torch.stack``). Each repeat
times them all in a shuffled order; medians over repeats.

    python benchmarks/wire_unpack.py [--envs 8] [--steps 1024] [--repeats 9]
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np
import torch

from common import print_table, write_json
from fleetrl import SyncDataCollector
from fleetrl.distributed.wire import empty_round, pack_batch, unpack_batch

SHAPE = (4, 84, 84)


class Pixels(gym.Env):
    """Frame stacks whose value names the step; the episode ends after ``length`` steps."""

    def __init__(self, length: int):
        self.length, self.t = length, 0
        self.observation_space = gym.spaces.Box(0, 255, shape=SHAPE, dtype=np.uint8)
        self.action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(SHAPE, dtype=np.uint8), {}

    def step(self, action):
        self.t += 1
        frame = np.full(SHAPE, (16 * self.t + int(action)) % 256, dtype=np.uint8)
        return frame, 0.0, self.t >= self.length, False, {}


def read_only(meta: dict) -> dict:
    for leaf in meta["leaves"].values():
        leaf.flags.writeable = False
    return meta


def stack_round(meta: dict, num: int):
    """The sync path before: unpack on Ray's memory, then torch.stack copies into the round."""
    batches = []
    for _ in range(num):
        b = unpack_batch(meta, copy=False)
        b.set(("collector", "mask"), torch.ones(b.shape, dtype=torch.bool))
        b.names = None
        batches.append(b)
    return torch.stack(batches, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(1)
    n, steps = args.envs, args.steps
    fns = [lambda k=k: Pixels(30 + 7 * k) for k in range(n)]
    env = gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    collector = SyncDataCollector(env, None, frames_per_batch=n * steps)
    batch = collector.collect(n * steps)
    metas = {
        "full": read_only(pack_batch(batch, None)[0]),
        "compact": read_only(pack_batch(batch, None, collector.compact_keys)[0]),
    }
    collector.shutdown()
    times: dict[str, list[float]] = {}

    def timed(name: str, fn) -> None:
        t0 = time.perf_counter()
        out = fn()
        times.setdefault(name, []).append(time.perf_counter() - t0)
        del out

    def into_round(meta: dict):
        rnd = empty_round(meta, 2, steps)
        for i in range(2):
            unpack_batch(meta, out=rnd[i])
        return rnd

    runs = [
        (
            "full, sync round (2 batches) by torch.stack (before)",
            lambda: stack_round(metas["full"], 2),
        )
    ]
    for name, meta in metas.items():
        runs.append(
            (f"{name}, async: one batch into fresh tensors", lambda m=meta: unpack_batch(m))
        )
        runs.append(
            (f"{name}, sync round (2 batches) unpacked in place", lambda m=meta: into_round(m))
        )
    rng = np.random.default_rng(0)
    # a shuffled order each repeat: fresh memory's cost depends on what the allocator freed last
    for _ in range(args.repeats):
        for i in rng.permutation(len(runs)):
            timed(*runs[i])
    times = {name: times[name] for name, _ in runs}
    ends = int(batch["next", "done"][:, :-1].sum())
    medians = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
    print_table(
        ["driver-side unpacking", "median ms"],
        [[name, f"{ms:.1f}"] for name, ms in medians.items()],
        title=f"{n * steps} frames of {SHAPE} uint8, {ends} episode ends inside, "
        f"medians of {args.repeats}",
    )
    path = write_json(
        "wire_unpack",
        {"args": vars(args), "frames": n * steps, "episode_ends": ends, "median_ms": medians},
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

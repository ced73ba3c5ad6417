"""Collection demo: ``python -m fleetrl.demo`` collects CartPole frames and prints frames/s.

Runs a SyncDataCollector in this process, then a RayCollector over two
workers when Ray is available, with a 64x64 MLP categorical policy.
"""

from __future__ import annotations

import argparse
import time

import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.modules import ProbabilisticActor

from fleetrl.collectors import SyncDataCollector, episode_stats


def make_policy() -> ProbabilisticActor:
    net = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2))
    return ProbabilisticActor(
        TensorDictModule(net, in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )


def run_sync(frames: int, num_envs: int) -> None:
    policy = make_policy()
    with SyncDataCollector(
        "CartPole-v1",
        policy,
        frames_per_batch=num_envs * 128,
        total_frames=frames,
        num_envs=num_envs,
    ) as collector:
        start, returns = time.perf_counter(), []
        for batch in collector:
            returns.append(episode_stats(batch).returns)
        elapsed = time.perf_counter() - start
    episodes = torch.cat(returns)
    print(
        f"SyncDataCollector: {collector.frames:,} frames from {num_envs} envs in {elapsed:.2f}s "
        f"= {collector.frames / elapsed:,.0f} frames/s; {episodes.numel()} episodes, "
        f"mean return {episodes.mean():.1f} (random-init policy)"
    )


def run_ray(frames: int, num_envs: int, num_collectors: int) -> None:
    from fleetrl.collectors import RayCollector

    policy = make_policy()
    with RayCollector(
        "CartPole-v1",
        policy,
        frames_per_batch=num_envs * 128,
        total_frames=frames,
        num_collectors=num_collectors,
        num_workers_per_collector=num_envs,
    ) as collector:
        start = time.perf_counter()
        for _ in collector:
            pass
        elapsed = time.perf_counter() - start
        stats = collector.stats()
    print(
        f"RayCollector: {stats['frames']:,} frames from {num_collectors} workers x {num_envs} envs "
        f"in {elapsed:.2f}s = {stats['frames'] / elapsed:,.0f} frames/s "
        f"(after start-up); frames per worker {stats['frames_per_worker']}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=200_000)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--num-collectors", type=int, default=2, help="Ray workers (0: skip Ray)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    run_sync(args.frames, args.num_envs)
    if args.num_collectors:
        run_ray(args.frames, args.num_envs, args.num_collectors)


if __name__ == "__main__":
    main()

"""What normalization costs a SyncDataCollector (fleetrl.networks.normalization).

Pendulum-v1, PPO's default actor (64x64 MLP, TanhNormal), one process, one
torch thread. Three contestants, each built and warmed once, then timed one
batch each per round, back to back, so the ratios compare the same moment of
a noisy machine (medians over rounds):

- ``plain``: the actor as PPO builds it without normalization;
- ``obs``: the same actor with an ``ObservationNormalizer`` first (holding
  statistics, so it really normalizes and clips);
- ``obs+reward``: that, and the collector tracking each env's discounted
  return (``return_discount=0.99``), what reward scaling needs.

    python benchmarks/normalization_overhead.py [--envs 8 64] [--steps 256] [--rounds 7]

Writes ``benchmarks/results/normalization_overhead.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch

from common import machine, print_table, write_json
from fleetrl import SyncDataCollector
from fleetrl.envs.probe import env_spec
from fleetrl.networks.models import make_actor
from fleetrl.networks.normalization import ObservationNormalizer, RunningMoments

warnings.filterwarnings("ignore")
ENV = "Pendulum-v1"


def contestants(num_envs: int, steps: int) -> dict[str, SyncDataCollector]:
    info = env_spec(ENV)
    torch.manual_seed(0)
    plain = make_actor(info, [64, 64])
    norm = ObservationNormalizer(info.obs_shape)
    norm.merge_(RunningMoments.of(torch.randn(1000, *info.obs_shape) * 3 + 1))
    normalized = make_actor(info, [64, 64], normalizer=norm)
    frames = num_envs * steps
    out = {}
    for name, policy, discount in (
        ("plain", plain, None),
        ("obs", normalized, None),
        ("obs+reward", normalized, 0.99),
    ):
        c = SyncDataCollector(
            ENV, policy, frames_per_batch=frames, num_envs=num_envs, return_discount=discount
        )
        c.set_seed(0)
        c.collect(frames)  # warm-up
        out[name] = c
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows, results = [], {"machine": machine(), "env": ENV, "steps": args.steps, "runs": []}
    for n in args.envs:
        collectors = contestants(n, args.steps)
        fps: dict[str, list[float]] = {name: [] for name in collectors}
        for _ in range(args.rounds):
            for name, c in collectors.items():
                start = time.perf_counter()
                c.collect(n * args.steps)
                fps[name].append(n * args.steps / (time.perf_counter() - start))
        for c in collectors.values():
            c.shutdown()
        med = {name: statistics.median(v) for name, v in fps.items()}
        results["runs"].append({"num_envs": n, "fps": med})
        rows.append(
            [
                str(n),
                *(f"{med[name]:,.0f}" for name in med),
                f"{med['obs'] / med['plain']:.3f}",
                f"{med['obs+reward'] / med['plain']:.3f}",
            ]
        )
    print_table(
        ["envs", "plain fps", "obs fps", "obs+reward fps", "obs / plain", "obs+reward / plain"],
        rows,
    )
    write_json("normalization_overhead", results)


if __name__ == "__main__":
    main()

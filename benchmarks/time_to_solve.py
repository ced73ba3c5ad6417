"""Time to solve CartPole-v1 with PPO: fleetrl against RLlib, on this machine, in one run.

For each seed, a fresh process trains until the mean return of the last 20
finished training episodes reaches 475; the wall time is measured from process
start (imports, Ray start-up and actors included) and the frames it took are
read from the run. Medians over the seeds.

    python benchmarks/time_to_solve.py                 # fleetrl only
    python benchmarks/time_to_solve.py --rllib         # also RLlib's PPO (installs ray[rllib] into
                                                       # benchmarks/.rllib-venv on first use)

Each library runs two ways: distributed (fleetrl: 2 Ray collectors x 8 envs;
RLlib: 2 env runners x 8 envs) and local (16 envs sampled in the learner
process: fleetrl's collector.num_collectors=0, RLlib's num_env_runners=0).
The ratios are printed like for like and best against best.

The "start-up s" column: fleetrl's constructor-to-first-batch (from the start
of ``Trainer(...)`` to the first batch's arrival: Ray's start, the actors and
their imports, the envs and the first rollout; ``Trainer.startup_s``, printed
by ``fleetrl train``). RLlib's first batch is sampled inside its first
``train()`` call and cannot be timed from outside, so its column is the time of
``config.build_algo()`` (Ray's start, env runners up), which stops short of the
first batch: a lower bound of its constructor-to-first-batch.

Target (issue 4): fleetrl's median wall time at most half of RLlib's.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ensure_rllib_venv, machine, print_table, write_json

ROOT = Path(__file__).resolve().parent.parent
TARGET = 475.0
#: the end of ``fleetrl train``'s summary line: the Trainer's constructor-to-first-batch
STARTUP_RE = re.compile(r"start-up ([0-9.]+) s")

RLLIB_SCRIPT = r"""
import json, sys, time
start = time.time()
seed, target, budget, runners = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
import ray
from ray.rllib.algorithms.ppo import PPOConfig
ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
config = (
    PPOConfig()
    .environment("CartPole-v1")
    .env_runners(num_env_runners=runners, num_envs_per_env_runner=8 if runners else 16)
    .training(lr=3e-4, num_epochs=6, vf_loss_coeff=0.01, train_batch_size_per_learner=2048,
              minibatch_size=256, gamma=0.99, lambda_=0.95, clip_param=0.2)
    .reporting(metrics_num_episodes_for_smoothing=20)
    .debugging(seed=seed)
)
build_start = time.time()
algo = config.build_algo() if hasattr(config, "build_algo") else config.build()
build_s = time.time() - build_start
solved, frames, ret = False, 0, float("nan")
while frames < budget:
    result = algo.train()
    runners = result.get("env_runners", {})
    ret = runners.get("episode_return_mean", float("nan"))
    frames = result.get("num_env_steps_sampled_lifetime", runners.get("num_env_steps_sampled_lifetime", 0))
    if ret == ret and ret >= target:
        solved = True
        break
print(json.dumps({"solved": solved, "frames": int(frames), "return": ret, "wall_s": time.time() - start,
                  "startup_s": build_s}))
algo.stop()
ray.shutdown()
"""


def run_fleetrl(
    seed: int, budget: int, overrides: list[str], config: str = "ppo_cartpole.yaml"
) -> dict:
    """Train ``configs/<config>`` in a fresh process until the target; wall time from outside."""
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        start = time.perf_counter()
        cmd = [
            sys.executable,
            "-m",
            "fleetrl.cli",
            "train",
            str(ROOT / "configs" / config),
            f"trainer.seed={seed}",
            f"trainer.target_return={TARGET}",
            f"trainer.total_frames={budget}",
            "trainer.test_every=0",
            "trainer.checkpoint_every=0",
            "logging.progress_bar=false",
            "logging.tensorboard=false",
            "logging.plot=false",
            *overrides,
            "--run-dir",
            str(run),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - start
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
        startup = STARTUP_RE.search(out.stdout)
        if startup is None:
            raise RuntimeError(f"no start-up figure in fleetrl train's output: {out.stdout[-500:]}")
        rows = list(csv.DictReader((run / "metrics.csv").open()))
        last = rows[-1]
        ret = float(last["train/episode_return"])
        return {
            "solved": ret >= TARGET,
            "frames": int(float(last["train/frames"])),
            "return": ret,
            "wall_s": wall,
            "fps": float(last["time/fps"]),
            "updates_per_s": float(last["time/updates_per_s"]),
            "updates": int(float(last["train/policy_version"])),
            "startup_s": float(startup.group(1)),
        }


def run_rllib(python: Path, seed: int, budget: int, runners: int) -> dict:
    start = time.perf_counter()
    out = subprocess.run(
        [str(python), "-c", RLLIB_SCRIPT, str(seed), str(TARGET), str(budget), str(runners)],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["wall_s"] = wall  # from process start, measured outside like fleetrl's
    return result


FLEETRL_VARIANTS = {
    "fleetrl (2 Ray collectors x 8 envs)": [],
    "fleetrl (local, 16 envs, no Ray)": ["collector.num_collectors=0", "env.num_envs=16"],
}
RLLIB_VARIANTS = {"rllib (2 env runners x 8 envs)": 2, "rllib (local, 16 envs)": 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=300_000, help="frames before giving up")
    parser.add_argument(
        "--rllib", action="store_true", help="also run RLlib's PPO (installs it on first use)"
    )
    args = parser.parse_args()

    results: dict[str, list[dict]] = {}
    for name, overrides in FLEETRL_VARIANTS.items():
        results[name] = [run_fleetrl(seed, args.budget, overrides) for seed in args.seeds]
        print(f"{name}: {results[name]}", flush=True)
    if args.rllib:
        python = ensure_rllib_venv()
        for name, runners in RLLIB_VARIANTS.items():
            results[name] = [run_rllib(python, seed, args.budget, runners) for seed in args.seeds]
            print(f"{name}: {results[name]}", flush=True)

    rows, summary = [], {}
    for name, runs in results.items():
        wall = statistics.median(r["wall_s"] for r in runs)
        frames = statistics.median(r["frames"] for r in runs)
        startup = statistics.median(r["startup_s"] for r in runs)
        solved = sum(r["solved"] for r in runs)
        summary[name] = {
            "median_wall_s": wall,
            "median_frames": frames,
            "median_startup_s": startup,
            "solved": solved,
            "runs": runs,
        }
        per_seed = ", ".join(f"{r['wall_s']:.0f}s" for r in runs)
        rows.append(
            [
                name,
                f"{solved}/{len(runs)}",
                f"{wall:.1f}",
                f"{startup:.1f}",
                f"{frames:,.0f}",
                per_seed,
            ]
        )
    print()
    print_table(
        ["contestant", "solved", "median wall s", "start-up s", "median frames", "per seed"], rows
    )
    if args.rllib:
        f_ray, f_local = (summary[n]["median_wall_s"] for n in FLEETRL_VARIANTS)
        r_ray, r_local = (summary[n]["median_wall_s"] for n in RLLIB_VARIANTS)
        ratios = {
            "distributed_vs_distributed": f_ray / r_ray,
            "local_vs_local": f_local / r_local,
            "best_vs_best": min(f_ray, f_local) / min(r_ray, r_local),
        }
        summary["ratios"] = ratios
        print()
        for key, value in ratios.items():
            print(
                f"fleetrl / RLlib median wall time, {key.replace('_', ' ')}: {value:.2f}x (target <= 0.5x)"
            )
    path = write_json(
        "time_to_solve", {"machine": machine(), "args": vars(args), "results": summary}
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

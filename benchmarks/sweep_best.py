"""What a sweep buys: the shipped PPO sweep's best config against the configs it started from.

Runs ``fleetrl tune configs/tune_ppo_cartpole.yaml`` (12 trials, ASHA, each a local
PPO run on CartPole that stops at a return of 475), then times, for each seed,
a fresh ``fleetrl train`` process to a return of 475 (the mean of the last 20
training episodes) with:

- the sweep's ``best.yaml``;
- the sweep's base config (``configs/tune_ppo_cartpole.yaml`` without its
  ``tune`` section: the shipped hyperparameters, 16 envs in the learner process);
- ``configs/ppo_cartpole.yaml``, the shipped config (2 Ray collectors x 8 envs).

Wall time from process start, as in ``time_to_solve.py``; medians over the seeds.

    python benchmarks/sweep_best.py                      # the sweep, then the timings
    python benchmarks/sweep_best.py --sweep runs/tune_x  # time the best of a sweep already run
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import print_table, write_json
from time_to_solve import run_fleetrl

ROOT = Path(__file__).resolve().parents[1]
SWEEP_CONFIG = ROOT / "configs" / "tune_ppo_cartpole.yaml"


def run_sweep(directory: Path) -> None:
    cmd = [sys.executable, "-m", "fleetrl.cli", "tune", str(SWEEP_CONFIG), "--dir", str(directory)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(out.stdout[-2000:] + out.stderr[-2000:])


def sweep_table(directory: Path) -> None:
    rows = list(csv.reader((directory / "trials.csv").open()))
    header, body = rows[0], rows[1:]
    shown = [[f"{float(c):.4g}" if _is_float(c) else c for c in row] for row in body]
    print_table(header, shown, title=f"the sweep's trials ({len(body)}), best first")


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return "." in text or "e" in text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=Path, help="a sweep directory already run (its best.yaml)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=300_000, help="frames before giving up")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.sweep
        if directory is None:
            directory = Path(tmp) / "sweep"
            run_sweep(directory)
        sweep_table(directory)
        contestants = {
            "the sweep's best (local, 16 envs)": str(directory / "best.yaml"),
            "the sweep's base (local, 16 envs)": str(SWEEP_CONFIG),
            "shipped ppo_cartpole.yaml (2 Ray collectors x 8 envs)": "ppo_cartpole.yaml",
        }
        results = {}
        for name, config in contestants.items():
            runs = [run_fleetrl(seed, args.budget, [], config) for seed in args.seeds]
            results[name] = runs
            print(f"{name}: {runs}", flush=True)
    rows, summary = [], {}
    for name, runs in results.items():
        wall = statistics.median(r["wall_s"] for r in runs)
        frames = statistics.median(r["frames"] for r in runs)
        solved = sum(r["solved"] for r in runs)
        summary[name] = {"median_wall_s": wall, "median_frames": frames, "solved": solved}
        per_seed = ", ".join(f"{r['wall_s']:.1f}s" for r in runs)
        rows.append([name, f"{solved}/{len(runs)}", f"{wall:.1f}", f"{frames:,.0f}", per_seed])
    print_table(
        ["config", "solved", "median wall s", "median frames", "per seed"],
        rows,
        title="time to a return of 475 on CartPole-v1",
    )
    best, base, shipped = (summary[n] for n in contestants)
    ratios = {}
    if best["solved"] == len(args.seeds):
        for other, label in ((base, "the sweep's base"), (shipped, "shipped ppo_cartpole.yaml")):
            if other["solved"] == len(args.seeds):
                ratios[f"best / {label}, median wall"] = (
                    best["median_wall_s"] / other["median_wall_s"]
                )
    print_table(["ratio", "value"], [[k, f"{v:.2f}x"] for k, v in ratios.items()])
    write_json("sweep_best", {"results": summary, "ratios": ratios, "runs": results})


if __name__ == "__main__":
    main()

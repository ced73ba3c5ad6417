"""MuJoCo learning: PPO and SAC from the shipped configs, scores against the published ones.

Each run is a fresh ``fleetrl train`` process on ``configs/ppo_mujoco.yaml`` or
``configs/sac_mujoco.yaml`` as shipped, with only the env id, the seed and the
budget set on the command line (and evaluation and checkpoints off, so the wall
time is training's). The score is the mean return of the last 20 training
episodes at the end of the budget (``train/episode_return``, how CleanRL and
RLlib report theirs); the final evaluation return (`fleetrl eval`, acting as the
algorithm evaluates: PPO samples, SAC is deterministic) is recorded too.
Wall time is measured from outside, process start to exit.

    python benchmarks/mujoco_learning.py                  # PPO 1M steps on HalfCheetah and
                                                          # Hopper, SAC 100k on HalfCheetah
    python benchmarks/mujoco_learning.py --algos ppo --envs Hopper-v5
    python benchmarks/mujoco_learning.py --steps 20000    # a smoke run of everything
    python benchmarks/mujoco_learning.py --rllib          # also RLlib's PPO on HalfCheetah-v5
                                                          # (in benchmarks/.rllib-venv)
    python benchmarks/mujoco_learning.py --report         # the saved results' table again

Targets (issue 12), seed 0: PPO at 1M env steps, HalfCheetah-v5 >= 1,442 and
Hopper-v5 >= 2,382; SAC on HalfCheetah-v5 >= 3,000 at 100k env steps. With
``--rllib``: RLlib's PPO on HalfCheetah-v5 for the same steps with its tuned
MuJoCo settings (``rllib/tuned_examples/ppo/benchmark_ppo_mujoco.py``: gamma
0.99, lambda 0.95, lr 3e-4, 15 epochs over 16,384-step batches in minibatches
of 4,096, value coefficient 0.01, shared 64x64 tanh layers), on 2 env runners
(this machine's cores instead of the file's 32); target: fleetrl's score at
least RLlib's in at most half its wall time, read two ways: the final scores and
wall times, and the time fleetrl took to reach RLlib's final score against
RLlib's whole run.

Writes ``benchmarks/results/mujoco_learning.json`` (after every run, merged into
the results already there, so runs of a few algorithms or envs at a time add up;
each run records its date and processor, as the file's machine record is the
last run's)
and one learning-curve PNG per env (``mujoco_learning_<algo>_<env>.png``:
training return against env steps, RLlib's curve on the same axes). A run with
other steps, seed or overrides than the targets' is kept under its own name
(``fleetrl ppo HalfCheetah-v5 [steps=20000]``), never over a target run.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import (
    ensure_rllib_venv,
    machine,
    plot_returns,
    print_table,
    return_curve,
    run_json,
    summed_columns,
    train_command,
    write_json,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
#: (algorithm, env) -> (env steps, published score to reach)
TARGETS = {
    ("ppo", "HalfCheetah-v5"): (1_000_000, 1442.0),
    ("ppo", "Hopper-v5"): (1_000_000, 2382.0),
    ("sac", "HalfCheetah-v5"): (100_000, 3000.0),
}
DEFAULT_ENVS = {"ppo": ["HalfCheetah-v5", "Hopper-v5"], "sac": ["HalfCheetah-v5"]}
RLLIB_ENV = "HalfCheetah-v5"

RLLIB_SCRIPT = r"""
import json, sys, time
start = time.time()
env_id, seed, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
import ray
from ray.rllib.algorithms.ppo import PPOConfig
ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
config = (
    PPOConfig()
    .environment(env_id)
    .env_runners(num_env_runners=2, num_envs_per_env_runner=1)
    .training(gamma=0.99, lambda_=0.95, lr=3e-4, num_epochs=15,
              train_batch_size_per_learner=32 * 512, minibatch_size=4096, vf_loss_coeff=0.01)
    .rl_module(model_config={"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh",
                             "vf_share_layers": True})
    .reporting(metrics_num_episodes_for_smoothing=20)
    .debugging(seed=seed)
)
algo = config.build_algo() if hasattr(config, "build_algo") else config.build()
curve, frames, ret = [], 0, float("nan")
while frames < budget:
    result = algo.train()
    runners = result.get("env_runners", {})
    ret = runners.get("episode_return_mean", float("nan"))
    frames = result.get("num_env_steps_sampled_lifetime",
                        runners.get("num_env_steps_sampled_lifetime", 0))
    curve.append([int(frames), ret, time.time() - start])
print(json.dumps({"frames": int(frames), "score": ret, "curve": curve,
                  "train_s": time.time() - start}))
algo.stop()
ray.shutdown()
"""


def run_fleetrl(algo: str, env_id: str, steps: int, seed: int, overrides: list[str]) -> dict:
    """Train the shipped config in a fresh process; score, curve, wall time, throughput."""
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cmd = train_command(
            ROOT / "configs" / f"{algo}_mujoco.yaml",
            run,
            f"env.id={env_id}",
            f"trainer.seed={seed}",
            f"trainer.total_frames={steps}",
            *overrides,
        )
        print(f"fleetrl: {' '.join(cmd[3:])}", flush=True)
        start = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - start
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-3000:])
        rows = list(csv.DictReader((run / "metrics.csv").open()))
        last = rows[-1]
        curve = return_curve(rows, wall)
        # where the time went: the trainer's per-iteration seconds, summed over the run
        breakdown = summed_columns(rows, ("time/collect_s", "time/learn_s", "time/broadcast_s"))
        frames = int(float(last["train/frames"]))
        updates = int(float(last["train/policy_version"]))
        evaluation = subprocess.run(
            [sys.executable, "-m", "fleetrl.cli", "eval", str(run), "--episodes", "10"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        eval_return = _eval_mean(evaluation.stdout)
    return {
        "score": curve[-1][1] if curve else math.nan,
        "eval_return": eval_return,
        "frames": frames,
        "wall_s": wall,
        "frames_per_s": frames / wall,
        "updates": updates,
        "updates_per_s": updates / wall,
        "trainer_fps": float(last["time/fps"]),
        "time_breakdown_s": breakdown,
        "curve": curve,
    }


def _eval_mean(stdout: str) -> float:
    """The mean return of ``fleetrl eval``'s summary line (nan when it printed none)."""
    for line in stdout.splitlines():
        if "mean return" in line:
            return float(line.split("mean return")[1].split()[0])
    return math.nan


def run_rllib(python: Path, env_id: str, steps: int, seed: int) -> dict:
    print(f"rllib: PPO on {env_id}, {steps:,} steps", flush=True)
    result, wall = run_json([str(python), "-c", RLLIB_SCRIPT, env_id, str(seed), str(steps)])
    result["wall_s"] = wall  # process start to exit, as fleetrl's
    result["frames_per_s"] = result["frames"] / wall
    return result


def time_to_score(run: dict, score: float) -> tuple[int, float, bool] | None:
    """(env steps, seconds since process start, exact) when ``run``'s curve first reached ``score``.

    Curves record the seconds of each point; a curve from before they did is
    timed by its frames at the run's mean rate (``exact`` False).
    """
    for point in run["curve"]:
        if point[1] >= score:
            if len(point) > 2:
                return int(point[0]), float(point[2]), True
            return int(point[0]), run["wall_s"] * point[0] / run["frames"], False
    return None


def compare_with_rllib(fleetrl: dict, rllib: dict) -> dict:
    """The target's two readings: final scores and wall times, and time to RLlib's final score."""
    reached = time_to_score(fleetrl, rllib["score"])
    return {
        "score_ratio": fleetrl["score"] / rllib["score"] if rllib["score"] else math.nan,
        "wall_ratio": fleetrl["wall_s"] / rllib["wall_s"],
        "frames_to_rllib_score": reached[0] if reached else None,
        "wall_to_rllib_score_s": reached[1] if reached else None,
        "wall_to_rllib_score_exact": reached[2] if reached else None,
        "time_to_rllib_score_ratio": reached[1] / rllib["wall_s"] if reached else None,
    }


def plot(name: str, curves: dict[str, list[list[float]]], target: float | None) -> Path | None:
    """A PNG of training return against env steps, one line per contestant."""
    return plot_returns(
        RESULTS / f"mujoco_learning_{name.replace(' ', '_')}.png",
        name,
        curves,
        xlabel="env steps",
        line=None if target is None else (target, f"target {target:,.0f}"),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=["ppo", "sac"], choices=["ppo", "sac"])
    parser.add_argument(
        "--envs",
        nargs="+",
        default=None,
        help="env ids (default: PPO HalfCheetah and Hopper, SAC HalfCheetah)",
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="env steps of every run (default: the targets')"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--rllib", action="store_true", help="also RLlib's PPO on HalfCheetah-v5 (own venv)"
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="run nothing: print the table and ratios of the saved results, redraw the PNGs",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        help="key=value overrides for every fleetrl run, e.g. env.engine=envpool (before "
        "--algos and --envs, which take every word after them)",
    )
    args = parser.parse_args()
    # argparse gives --envs every word after it: an override written there would be run
    # as an env id, after the runs before it (minutes)
    misplaced = [e for e in args.envs or () if "=" in e]
    if misplaced:
        parser.error(
            f"--envs {' '.join(misplaced)}: an override, not an env id; write the overrides "
            "before the options (mujoco_learning.py env.num_envs=4 --envs Hopper-v5)"
        )

    path = RESULTS / "mujoco_learning.json"
    if args.report:  # the saved results only: the table, the ratios and the PNGs again
        if not path.exists():
            parser.error(f"--report: {path} does not exist yet; run the benchmark first")
        run_flags = ("--algos", "--envs", "--steps", "--seed", "--rllib")
        given = [a for a in sys.argv[1:] if a.split("=")[0] in run_flags]
        if given or args.overrides:
            parser.error(f"--report runs nothing, so {given + args.overrides} would be ignored")
        saved = json.loads(path.read_text())
        saved.pop("tables", None)  # a file from before runs were merged without them
        report(saved["results"])
        write_json("mujoco_learning", saved, tables=False)
        print(f"wrote {path}")
        return

    results: dict[str, dict] = {}

    def stamped(run: dict) -> dict:
        """A run with when and where it ran (merged rows come from different runs)."""
        run["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        run["cpu_model"] = machine()["cpu_model"]
        return run

    def save() -> None:
        """Merge this invocation's results into the file's; written after every run."""
        merged = json.loads(path.read_text())["results"] if path.exists() else {}
        merged.update(results)
        write_json(
            "mujoco_learning",
            {"machine": machine(), "args": vars(args), "results": merged},
            tables=False,  # the merged rows: the page builds its table from them
        )

    for algo in args.algos:
        for env_id in args.envs or DEFAULT_ENVS[algo]:
            default_steps, target = TARGETS.get((algo, env_id), (1_000_000, None))
            steps = args.steps or default_steps
            r = run_fleetrl(algo, env_id, steps, args.seed, args.overrides)
            r["target"] = target
            r["reached"] = target is not None and r["score"] >= target
            # a smoke run or an override is kept beside the target runs, never over them
            tags = [f"steps={steps}"] if steps != default_steps else []
            tags += [f"seed={args.seed}"] if args.seed != 0 else []
            tags += args.overrides
            suffix = f" [{' '.join(tags)}]" if tags else ""
            r["algo"], r["env_id"], r["suffix"] = algo, env_id, suffix
            results[f"fleetrl {algo} {env_id}{suffix}"] = stamped(r)
            save()  # kept even if the RLlib run below fails
            if args.rllib and algo == "ppo" and env_id == RLLIB_ENV:
                rl = run_rllib(ensure_rllib_venv(["gymnasium[mujoco]"]), env_id, steps, args.seed)
                results[f"rllib ppo {env_id}{suffix}"] = stamped(rl)
                save()
            print(f"{algo} {env_id}: score {r['score']:.1f} in {r['wall_s']:.0f} s", flush=True)
    print()
    report(results)
    save()
    print(f"wrote {path}")


def report(results: dict[str, dict]) -> None:
    """Print the table and the RLlib ratios of ``results``, and (re)draw their PNGs.

    Adds ``vs_rllib`` and ``png`` to each fleetrl run in place.
    """
    table = []
    for key, r in results.items():
        if not key.startswith("fleetrl "):
            continue
        # the target runs' names before runs recorded their algo and env: "fleetrl ppo Hopper-v5"
        algo, env_id = r.get("algo") or key.split(" ")[1], r.get("env_id") or key.split(" ")[2]
        suffix = r.get("suffix", "")
        name = f"{algo} {env_id}{suffix}"
        target = r["target"]
        curves = {"fleetrl": r["curve"]}
        rl = results.get(f"rllib ppo {env_id}{suffix}") if algo == "ppo" else None
        if rl is not None:
            curves["rllib"] = rl["curve"]
            r["vs_rllib"] = compare_with_rllib(r, rl)
            table.append(
                [
                    f"rllib ppo {env_id}{suffix}",
                    f"{rl['frames']:,}",
                    f"{rl['score']:,.0f}",
                    "",
                    "",
                    f"{rl['wall_s']:,.0f}",
                    f"{rl['frames_per_s']:,.0f}",
                    "",
                ]
            )
        png = plot(name, curves, target)
        r["png"] = str(png.relative_to(ROOT)) if png else None
        table.append(
            [
                key,
                f"{r['frames']:,}",
                f"{r['score']:,.0f}",
                f"{r['eval_return']:,.0f}",
                "" if target is None else f"{target:,.0f} {'yes' if r['reached'] else 'no'}",
                f"{r['wall_s']:,.0f}",
                f"{r['frames_per_s']:,.0f}",
                f"{r['updates_per_s']:,.1f}",
            ]
        )
    print_table(
        [
            "run",
            "env steps",
            "score",
            "eval return",
            "target reached",
            "wall s",
            "frames/s",
            "updates/s",
        ],
        table,
    )
    for name, r in results.items():
        if "vs_rllib" in r:
            v = r["vs_rllib"]
            print(
                f"{name} / RLlib: final score {v['score_ratio']:.2f}x, "
                f"wall time {v['wall_ratio']:.2f}x"
            )
            if v["frames_to_rllib_score"] is None:
                print(f"{name} never reached RLlib's final score: target missed")
            else:
                print(
                    f"{name} reached RLlib's final score at {v['frames_to_rllib_score']:,} steps, "
                    f"{v['wall_to_rllib_score_s']:,.0f} s"
                    f"{'' if v['wall_to_rllib_score_exact'] else ' (by its mean rate)'}: "
                    f"{v['time_to_rllib_score_ratio']:.2f}x RLlib's wall time (target <= 0.5)"
                )


if __name__ == "__main__":
    main()

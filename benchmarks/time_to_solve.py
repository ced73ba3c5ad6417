"""Time to solve CartPole-v1: fleetrl's PPO and APPO against RLlib's, on this machine, in one run.

For each seed, a fresh process trains until the mean return of the last 20
finished training episodes reaches 475; the wall time is measured from process
start (imports, Ray start-up and actors included) and the frames it took are
read from the run. Medians over the seeds.

    python benchmarks/time_to_solve.py                  # fleetrl's contestants only
    python benchmarks/time_to_solve.py --rllib          # also RLlib's PPO and APPO (installs
                                                        # ray[rllib] into benchmarks/.rllib-venv
                                                        # on first use)
    python benchmarks/time_to_solve.py --only appo,ppo-dist --seeds 0 1   # a cheap tuning run
    python benchmarks/time_to_solve.py --only appo --set appo.num_epochs=2  # try a setting

The contestants (``--only`` takes their keys, comma-separated):

- ``ppo-dist``: fleetrl PPO, 2 Ray collectors x 8 envs (``configs/ppo_cartpole.yaml``);
- ``ppo-local``: fleetrl PPO, 16 envs in the learner process (``collector.num_collectors=0``);
- ``appo``: fleetrl APPO, 2 async Ray collectors x 8 envs (``configs/appo_cartpole.yaml``);
- ``rllib-ppo-dist``: RLlib PPO, 2 env runners x 8 envs;
- ``rllib-ppo-local``: RLlib PPO, 16 envs in the learner process (``num_env_runners=0``);
- ``rllib-appo``: RLlib APPO, 2 env runners x 8 envs.

The "start-up s" column: fleetrl's constructor-to-first-batch (from the start
of ``Trainer(...)`` to the first batch's arrival: Ray's start, the actors and
their imports, the envs and the first rollout; ``Trainer.startup_s``, printed
by ``fleetrl train``). RLlib's first batch is sampled inside its first
``train()`` call and cannot be timed from outside, so its column is the time of
``config.build_algo()`` (Ray's start, env runners up), which stops short of the
first batch: a lower bound of its constructor-to-first-batch.

Targets: fleetrl PPO's median wall time at most half of RLlib PPO's (issue 4);
fleetrl APPO faster than fleetrl PPO distributed, and at most 1/3 of RLlib's
median wall time, best RLlib contestant (issue 13).
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import ensure_rllib_venv, machine, print_table, run_json, train_command, write_json

ROOT = Path(__file__).resolve().parent.parent
TARGET = 475.0
#: the end of ``fleetrl train``'s summary line: the Trainer's constructor-to-first-batch
STARTUP_RE = re.compile(r"start-up ([0-9.]+) s")

RLLIB_SCRIPT = r"""
import json, sys, time
start = time.time()
algo_name, seed, target, budget, runners = (
    sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
import ray
# APPO's learner is a remote actor of its own (RLlib's default for IMPALA/APPO: num_learners=1,
# one CPU): 2 env runners + the learner need 3 CPU slots, on the same 2 cores
ray.init(num_cpus=2 if algo_name == "ppo" else runners + 1, include_dashboard=False,
         logging_level="ERROR")
envs = 8 if runners else 16
if algo_name == "ppo":
    from ray.rllib.algorithms.ppo import PPOConfig
    # RLlib's tuned CartPole PPO example
    config = (
        PPOConfig()
        .training(lr=3e-4, num_epochs=6, vf_loss_coeff=0.01, train_batch_size_per_learner=2048,
                  minibatch_size=256, gamma=0.99, lambda_=0.95, clip_param=0.2)
    )
else:
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    # RLlib's tuned CartPole APPO example (tuned_examples/appo/cartpole_appo.py), on top of
    # APPO's defaults; one-second iterations (IMPALA's default is 10 s) so the target is
    # checked as often as fleetrl checks it, not in 10 s steps
    config = (
        APPOConfig()
        .training(circular_buffer_iterations_per_batch=2, vf_loss_coeff=0.05, entropy_coeff=0.0)
        .rl_module(model_config=DefaultModelConfig(vf_share_layers=True))
        .reporting(min_time_s_per_iteration=1)
    )
config = (
    config.environment("CartPole-v1")
    .env_runners(num_env_runners=runners, num_envs_per_env_runner=envs)
    .reporting(metrics_num_episodes_for_smoothing=20)
    .debugging(seed=seed)
)
build_start = time.time()
algo = config.build_algo() if hasattr(config, "build_algo") else config.build()
build_s = time.time() - build_start
solved, frames, ret = False, 0, float("nan")
while frames < budget:
    result = algo.train()
    env_runners = result.get("env_runners", {})
    ret = env_runners.get("episode_return_mean", float("nan"))
    frames = result.get("num_env_steps_sampled_lifetime",
                        env_runners.get("num_env_steps_sampled_lifetime", 0))
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
        cmd = train_command(
            ROOT / "configs" / config,
            run,
            f"trainer.seed={seed}",
            f"trainer.target_return={TARGET}",
            f"trainer.total_frames={budget}",
            *overrides,
        )
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
        result = {
            "solved": ret >= TARGET,
            "frames": int(float(last["train/frames"])),
            "return": ret,
            "wall_s": wall,
            "fps": float(last["time/fps"]),
            "updates_per_s": float(last["time/updates_per_s"]),
            "updates": int(float(last["train/policy_version"])),
            "startup_s": float(startup.group(1)),
        }
        if "train/dropped_batches" in last:
            result["dropped_batches"] = int(float(last["train/dropped_batches"] or 0))
        return result


def run_rllib(python: Path, seed: int, budget: int, runners: int, algo: str = "ppo") -> dict:
    """Train RLlib's ``algo`` ('ppo' or 'appo') in a fresh process until the target."""
    result, wall = run_json(
        [str(python), "-c", RLLIB_SCRIPT, algo, str(seed), str(TARGET), str(budget), str(runners)]
    )
    result["wall_s"] = wall  # from process start, measured outside like fleetrl's
    return result


@dataclass(frozen=True)
class Contestant:
    """One row of the table: a library, an algorithm and a way to run it."""

    name: str
    """the row's label."""
    library: str
    """'fleetrl' or 'rllib'."""
    config: str = "ppo_cartpole.yaml"
    """fleetrl: the shipped config under configs/."""
    overrides: list[str] = field(default_factory=list)
    """fleetrl: key=value overrides of the config."""
    algo: str = "ppo"
    """rllib: 'ppo' or 'appo'."""
    runners: int = 2
    """rllib: remote env runners (0: sample in the learner process, 16 envs)."""

    def run(self, seed: int, budget: int, extra: list[str] | None = None) -> dict:
        """One seed to the target; ``extra``: key=value overrides added for fleetrl."""
        if self.library == "fleetrl":
            return run_fleetrl(seed, budget, [*self.overrides, *(extra or [])], self.config)
        return run_rllib(ensure_rllib_venv(), seed, budget, self.runners, self.algo)


CONTESTANTS = {
    "ppo-dist": Contestant("fleetrl PPO (2 Ray collectors x 8 envs)", "fleetrl"),
    "ppo-local": Contestant(
        "fleetrl PPO (local, 16 envs, no Ray)",
        "fleetrl",
        overrides=["collector.num_collectors=0", "env.num_envs=16"],
    ),
    "appo": Contestant(
        "fleetrl APPO (2 async Ray collectors)", "fleetrl", config="appo_cartpole.yaml"
    ),
    "rllib-ppo-dist": Contestant("RLlib PPO (2 env runners x 8 envs)", "rllib"),
    "rllib-ppo-local": Contestant("RLlib PPO (local, 16 envs)", "rllib", runners=0),
    "rllib-appo": Contestant("RLlib APPO (2 env runners x 8 envs)", "rllib", algo="appo"),
}
#: ratio name -> (numerator, denominator or several: the fastest of them), target
RATIOS = {
    "fleetrl PPO / RLlib PPO, distributed": (("ppo-dist",), ("rllib-ppo-dist",), 0.5),
    "fleetrl PPO / RLlib PPO, local": (("ppo-local",), ("rllib-ppo-local",), 0.5),
    "fleetrl PPO / RLlib PPO, best vs best": (
        ("ppo-dist", "ppo-local"),
        ("rllib-ppo-dist", "rllib-ppo-local"),
        0.5,
    ),
    "fleetrl APPO / fleetrl PPO distributed": (("appo",), ("ppo-dist",), 1.0),
    "fleetrl APPO / RLlib APPO": (("appo",), ("rllib-appo",), 1 / 3),
    "fleetrl APPO / best RLlib": (
        ("appo",),
        ("rllib-ppo-dist", "rllib-ppo-local", "rllib-appo"),
        1 / 3,
    ),
}


def select(only: str | None, rllib: bool) -> list[str]:
    """The contestants' keys: ``only``'s (comma-separated), else fleetrl's (+ RLlib's)."""
    if only is None:
        return [k for k, c in CONTESTANTS.items() if rllib or c.library == "fleetrl"]
    keys = [k.strip() for k in only.split(",") if k.strip()]
    unknown = [k for k in keys if k not in CONTESTANTS]
    if unknown or not keys:
        raise SystemExit(
            f"--only {only!r}: unknown contestant(s) {unknown}; choose from {', '.join(CONTESTANTS)}"
        )
    return keys


def ratios(medians: dict[str, float]) -> dict[str, dict[str, float]]:
    """Each ratio of :data:`RATIOS` with a contestant on each side in ``medians``: the
    fastest of each side's, value and target."""
    out = {}
    for name, (num, den, target) in RATIOS.items():
        num_s = [medians[k] for k in num if k in medians]
        den_s = [medians[k] for k in den if k in medians]
        if num_s and den_s:
            out[name] = {"value": min(num_s) / min(den_s), "target": target}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=300_000, help="frames before giving up")
    parser.add_argument(
        "--rllib", action="store_true", help="also run RLlib's PPO and APPO (installs it once)"
    )
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated contestants to run (default: all; of {', '.join(CONTESTANTS)})",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for every fleetrl contestant (repeatable; for tuning with --only)",
    )
    args = parser.parse_args()
    keys = select(args.only, args.rllib)

    results: dict[str, list[dict]] = {}
    failed: dict[str, str] = {}
    for key in keys:
        contestant = CONTESTANTS[key]
        try:
            results[key] = [
                contestant.run(seed, args.budget, args.overrides) for seed in args.seeds
            ]
        except RuntimeError as err:  # one broken contestant must not lose the others' figures
            failed[contestant.name] = str(err)[-1000:]
            print(f"{contestant.name} FAILED: {failed[contestant.name]}", flush=True)
            continue
        print(f"{contestant.name}: {results[key]}", flush=True)

    rows, summary = [], {}
    for key, runs in results.items():
        name = CONTESTANTS[key].name
        wall = statistics.median(r["wall_s"] for r in runs)
        frames = statistics.median(r["frames"] for r in runs)
        startup = statistics.median(r["startup_s"] for r in runs)
        solved = sum(r["solved"] for r in runs)
        summary[name] = {
            "key": key,
            "median_wall_s": wall,
            "median_frames": frames,
            "median_startup_s": startup,
            "solved": solved,
            "runs": runs,
        }
        per_seed = ", ".join(f"{r['wall_s']:.1f}s" for r in runs)
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
    # a contestant that missed the target on some seed has no time to solve: no ratio with it
    found = ratios(
        {s["key"]: s["median_wall_s"] for s in summary.values() if s["solved"] == len(s["runs"])}
    )
    summary["ratios"] = found
    summary["failed"] = failed
    if found:
        print()
    for name, ratio in found.items():
        met = "met" if ratio["value"] <= ratio["target"] else "NOT met"
        print(
            f"median wall time, {name}: {ratio['value']:.2f}x "
            f"(target <= {ratio['target']:.2f}x, {met})"
        )
    path = write_json(
        "time_to_solve", {"machine": machine(), "args": vars(args), "results": summary}
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

"""Decoupled off-policy collection against the alternating mode, on this machine, in one run.

DQN on CartPole-v1 (``configs/dqn_cartpole.yaml``) and SAC on Pendulum-v1
(``configs/sac_pendulum.yaml``), each two ways, each in a fresh process:

    alternating  the shipped config: the learner takes a batch, stores it, runs
                 updates_per_batch updates; the collectors run one batch ahead
    decoupled    collector.decoupled=true: the collectors write into a replay
                 buffer actor while the learner samples and updates at the same
                 ratio (updates_per_batch / frames_per_batch per frame); weights
                 every batch's worth of updates (trainer.weight_update_interval's
                 default: the alternating mode's one publish per batch)

A run stops at the shipped target (the README's "Results with the shipped
configs": evaluation return >= 400 for DQN, >= -250 for SAC; evaluated every
``--eval-every-frames`` frames on ``--eval-episodes`` deterministic episodes),
at the frame budget, or at ``--max-wall`` seconds. With ``--whole-budget`` it
goes on past the target to its whole frame budget (or ``--max-wall``), the
time to the target still recorded: the rates of a long run, start-up a small
part of it. Reported per run: frames/s
of collection and updates/s of learning over the training time, the
updates-per-frame ratio reached, and the wall time to the target from process
start (imports, Ray and the actors included) and the frames it took.

    python benchmarks/decoupled.py                      # both algorithms, both modes
    python benchmarks/decoupled.py --only dqn --max-wall 120
    python benchmarks/decoupled.py --whole-budget --max-wall 300 --out decoupled_budget

Writes ``benchmarks/results/decoupled.json``. Target (issue 13): decoupled
reaches each target in less wall time than alternating.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
import time

from common import machine, print_table, write_json
from time_to_solve import ROOT

#: algorithm -> (config, shipped target, frame budget, frames per batch)
CASES = {
    "dqn": ("dqn_cartpole.yaml", 400.0, 60_000, 256),
    "sac": ("sac_pendulum.yaml", -250.0, 16_384, 64),
}

SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    start = time.time()
    from fleetrl import Trainer, load_config
    config_path, target, overrides, run_dir, max_wall, whole = sys.argv[1:7]
    target, max_wall, whole = float(target), float(max_wall), whole == "whole"

    class ToEvalTarget(Trainer):
        reached_at = None
        def target_reached(self):
            if self.reached_at is None and self.eval_history and self.eval_history[-1][1] >= target:
                self.reached_at = (time.time() - start, self.eval_history[-1][0])
                if not whole:
                    return True
            return time.time() - start > max_wall  # the cap: stop, target reached or not

        def target_judged_on(self):
            return f"the evaluation return (target {target}), or the {max_wall} s cap"

    trainer = ToEvalTarget(load_config(config_path, json.loads(overrides)), run_dir=run_dir)
    last = trainer.train()
    print("RESULT " + json.dumps({
        "reached_s": None if trainer.reached_at is None else trainer.reached_at[0],
        "reached_frames": None if trainer.reached_at is None else trainer.reached_at[1],
        "wall_s": time.time() - start,
        "train_s": last["time/elapsed_s"],
        "frames": trainer.frames,
        "updates": int(last["train/policy_version"]),
        "fps": last["time/fps"],
        "updates_per_s": last["time/updates_per_s"],
        "eval_history": trainer.eval_history,
        "startup_s": trainer.startup_s,
    }))
    """
)


def run(algo: str, mode: str, args: argparse.Namespace, tmp: str) -> dict:
    config, target, budget, fpb = CASES[algo]
    overrides = [
        f"trainer.total_frames={budget}",
        "trainer.target_return=null",
        f"trainer.test_every={max(1, args.eval_every_frames // fpb)}",
        f"trainer.num_test_episodes={args.eval_episodes}",
        "trainer.checkpoint_every=0",
        "logging.progress_bar=false",
        "logging.tensorboard=false",
        "logging.plot=false",
    ]
    if mode == "decoupled":
        overrides += ["collector.decoupled=true"]
    cmd = [
        sys.executable,
        "-c",
        SCRIPT,
        str(ROOT / "configs" / config),
        str(target),
        json.dumps(overrides),
        f"{tmp}/{algo}_{mode}",
        str(args.max_wall),
        "whole" if args.whole_budget else "target",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"{algo} {mode} failed:\n{out.stderr[-3000:]}")
    result = json.loads(lines[-1][len("RESULT ") :])
    result.update(algorithm=algo, mode=mode, target=target, overrides=overrides)
    result["ratio"] = result["updates"] / max(1, result["frames"])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(CASES), default=None)
    parser.add_argument("--max-wall", type=float, default=240.0, help="seconds per run, cap")
    parser.add_argument("--eval-every-frames", type=int, default=2048)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument(
        "--whole-budget",
        action="store_true",
        help="go on past the target to the whole frame budget (or --max-wall)",
    )
    parser.add_argument("--out", default="decoupled", help="results file name")
    args = parser.parse_args()
    import tempfile

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for algo in [args.only] if args.only else sorted(CASES):
            for mode in ("alternating", "decoupled"):
                t = time.time()
                results.append(run(algo, mode, args, tmp))
                print(f"{algo} {mode}: done in {time.time() - t:.0f} s", file=sys.stderr)
    rows = []
    for r in results:
        reached = (
            f"{r['reached_s']:.1f} s at {r['reached_frames']:,} frames"
            if r["reached_s"] is not None
            else f"not reached ({r['wall_s']:.0f} s cap, {r['frames']:,} frames)"
        )
        rows.append(
            [
                r["algorithm"],
                r["mode"],
                f"{r['fps']:.0f}",
                f"{r['updates_per_s']:.1f}",
                f"{r['ratio']:.3f}",
                reached,
                f"{r['frames']:,} in {r['wall_s']:.0f} s",
                f"{r['eval_history'][-1][1]:.1f}" if r["eval_history"] else "-",
            ]
        )
    print_table(
        [
            "algo",
            "mode",
            "frames/s",
            "updates/s",
            "updates/frame",
            "wall time to target",
            "run",
            "last eval",
        ],
        rows,
    )
    path = write_json(
        args.out,
        {"machine": machine(), "args": vars(args), "results": results},
    )
    print(f"written {path}")


if __name__ == "__main__":
    main()

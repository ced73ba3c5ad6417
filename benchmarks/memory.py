"""Policies with memory: fleetrl's recurrent PPO against SB3-contrib's ``RecurrentPPO`` on
CartPole without its velocities, in one run, with the feed-forward PPO as the floor.

The POMDP: CartPole-v1 whose observation keeps the cart position and the pole angle only
(fleetrl's ``env.observation_indices: [0, 2]``; for SB3 a gymnasium wrapper that keeps the
same two entries, the RL Zoo's ``CartPoleNoVel-v1``). A policy must remember the last
observations to infer the velocities.

The contestants, each seed in a fresh process, with the same settings (the RL Zoo's
``ppo_lstm`` settings for CartPoleNoVel-v1, which ``configs/ppo_lstm_cartpole_novel.yaml``
takes over: 8 envs x 32 steps, 20 epochs of one 256-step minibatch, lr 1e-3 and clip 0.2
annealed linearly, gamma 0.98, GAE 0.8, no entropy bonus, observations normalized):

- ``fleetrl``: ``fleetrl train configs/ppo_lstm_cartpole_novel.yaml`` with the 8 envs in
  the learner process (``collector.num_collectors=0 env.num_envs=8``), as SB3 steps them: a
  64-unit LSTM on the observation, shared by policy and value, a 64-unit layer in each head;
- ``sb3``: ``RecurrentPPO("MlpLstmPolicy")`` with the Zoo's policy settings (a 64-unit LSTM
  for the policy and another for the value, ``net_arch`` 64 per head, ReLU), 8 envs in a
  ``DummyVecEnv`` under ``VecNormalize(norm_reward=False)``. It runs in its own virtualenv
  (``benchmarks/.sb3-venv``, made on first use: torch 2.13.0 first, then sb3-contrib);
- ``fleetrl-mlp`` (the floor): the same fleetrl config with ``ppo.model=mlp`` (two 64-unit
  Tanh layers, no memory), on the same budget.

Each trains until the mean return of its last 20 finished training episodes reaches 475,
or until its budget (``--frames``, 200,000) ends. Wall times count from the process's
launch (imports included) to its exit; the curves are the mean of the last 20 episodes
after each 256-frame batch. One torch thread everywhere. Medians over the seeds; the
seeds alternate between the contestants.

    python benchmarks/memory.py                  # 3 seeds; about 25 minutes on 2 cores
    python benchmarks/memory.py --seeds 0        # one seed
    python benchmarks/memory.py --only fleetrl,fleetrl-mlp --frames 20000   # a smoke run

Targets (issue 38): fleetrl reaches 475 in no more frames than RecurrentPPO, in at most
0.5x its wall time; the feed-forward floor stays far below 475.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import print_table, run_json, train_command, write_json

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
SB3_VENV = HERE / ".sb3-venv"
SB3_REQUIREMENTS = ["torch==2.13.0", "sb3-contrib==2.9.2"]  # torch first: the CPU wheel
TARGET = 475.0
WINDOW = 20  # episodes in the mean return a contestant is judged by
CONFIG = ROOT / "configs" / "ppo_lstm_cartpole_novel.yaml"
LOCAL = ["collector.num_collectors=0", "env.num_envs=8"]
CONTESTANTS = ("fleetrl", "sb3", "fleetrl-mlp")
LABELS = {
    "fleetrl": "fleetrl PPO, 64-unit LSTM",
    "sb3": "SB3-contrib RecurrentPPO, 64-unit LSTMs",
    "fleetrl-mlp": "fleetrl PPO, 64x64 MLP (no memory)",
}

SB3_SCRIPT = r"""
import time
start = time.time()
import collections, json, sys
import gymnasium as gym
import numpy as np
import torch
from torch import nn
torch.set_num_threads(1)
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import get_linear_fn
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor, VecNormalize

seed, budget, target, window = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])


class NoVelocity(gym.ObservationWrapper):
    # the cart position and the pole angle: entries 0 and 2 of CartPole's observation
    def __init__(self, env):
        super().__init__(env)
        box = env.observation_space
        self.observation_space = gym.spaces.Box(box.low[[0, 2]], box.high[[0, 2]], dtype=np.float32)

    def observation(self, obs):
        return obs[[0, 2]]


class Curve(BaseCallback):
    def __init__(self):
        super().__init__()
        self.returns = collections.deque(maxlen=window)
        self.points, self.solved_at = [], None

    def _on_step(self):
        for info in self.locals["infos"]:
            if "episode" in info:
                self.returns.append(info["episode"]["r"])
        if len(self.returns) == window and np.mean(self.returns) >= target:
            self.solved_at = (self.num_timesteps, time.time() - start)
            return False
        return True

    def _on_rollout_end(self):
        if self.returns:
            self.points.append([self.num_timesteps, time.time() - start, float(np.mean(self.returns))])


env = VecNormalize(
    VecMonitor(DummyVecEnv([lambda: NoVelocity(gym.make("CartPole-v1")) for _ in range(8)])),
    norm_obs=True, norm_reward=False,
)
model = RecurrentPPO(
    "MlpLstmPolicy", env, n_steps=32, batch_size=256, n_epochs=20, gamma=0.98, gae_lambda=0.8,
    ent_coef=0.0, learning_rate=get_linear_fn(1e-3, 0.0, 1.0), clip_range=get_linear_fn(0.2, 0.0, 1.0),
    policy_kwargs=dict(ortho_init=False, activation_fn=nn.ReLU, lstm_hidden_size=64,
                       enable_critic_lstm=True, net_arch=dict(pi=[64], vf=[64])),
    seed=seed, verbose=0, device="cpu",
)
curve = Curve()
model.learn(total_timesteps=budget, callback=curve)
frames = curve.solved_at[0] if curve.solved_at else model.num_timesteps
print(json.dumps({"solved": curve.solved_at is not None, "frames": int(frames),
                  "curve": curve.points, "seconds_in_process": time.time() - start}))
"""


def ensure_sb3_venv() -> Path:
    """SB3-contrib's own virtualenv (``benchmarks/.sb3-venv``, git-ignored); its python."""
    python = SB3_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {SB3_VENV} with {' '.join(SB3_REQUIREMENTS)} (first use only)...")
        subprocess.run([sys.executable, "-m", "venv", str(SB3_VENV)], check=True)
        for requirement in SB3_REQUIREMENTS:  # one at a time: torch's CPU wheel first
            subprocess.run([str(python), "-m", "pip", "install", "-q", requirement], check=True)
    return python


def fleetrl_overrides(who: str) -> list[str]:
    floor = ["ppo.model=mlp", "ppo.hidden_sizes=[64,64]", "ppo.head_sizes=[]"]
    return [*LOCAL, *(floor if who == "fleetrl-mlp" else [])]


def curve_of(metrics: Path, launch_offset: float) -> list[list[float]]:
    """(frames, seconds since launch, mean of the last 20 returns) after each batch."""
    points = []
    with metrics.open() as f:
        for row in csv.DictReader(f):
            ret = row.get("train/episode_return", "")
            if ret not in ("", "nan"):
                seconds = float(row["time/elapsed_s"]) + launch_offset
                points.append([int(float(row["train/frames"])), seconds, float(ret)])
    return points


def first_reach(curve: list[list[float]], target: float) -> tuple[int, float] | None:
    """The first point of ``curve`` at or above ``target``: its frames and seconds."""
    for frames, seconds, ret in curve:
        if ret >= target:
            return int(frames), seconds
    return None


def run_fleetrl(who: str, seed: int, budget: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cmd = train_command(
            CONFIG,
            run,
            f"trainer.seed={seed}",
            f"trainer.target_return={TARGET}",
            f"trainer.return_window={WINDOW}",
            f"trainer.total_frames={budget}",
            *fleetrl_overrides(who),
        )
        start = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
        wall = time.perf_counter() - start
        if out.returncode != 0:
            raise RuntimeError(f"fleetrl exited {out.returncode}:\n{out.stderr[-3000:]}")
        rows = list(csv.DictReader((run / "metrics.csv").open()))
        # the trainer's clock starts after the imports: the launch offset puts the last
        # batch at the process's wall time less its shutdown (a slight overcount of both)
        offset = wall - float(rows[-1]["time/elapsed_s"])
        curve = curve_of(run / "metrics.csv", offset)
    reached = first_reach(curve, TARGET)
    return {
        "solved": reached is not None,
        "frames": reached[0] if reached else curve[-1][0],
        "wall_s": wall,
        "curve": curve,
    }


def run_sb3(seed: int, budget: int) -> dict:
    python = ensure_sb3_venv()
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(SB3_SCRIPT)
    cmd = [str(python), f.name, str(seed), str(budget), str(TARGET), str(WINDOW)]
    try:
        result, wall = run_json(cmd, cwd=ROOT)
    finally:
        Path(f.name).unlink()
    return {**result, "wall_s": wall}


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(runs: dict[str, list[dict]], budget: int) -> dict:
    """Per contestant: seeds reaching 475, median frames and wall to 475 (over those seeds),
    median best mean return; the shared return (the lower of fleetrl's and SB3's median best
    returns: what both reach) with each one's median frames and seconds to it; and fleetrl's
    ratios to SB3, at 475 where both reach it, and at the shared return."""
    out = {}
    for who, results in runs.items():
        solved = [r for r in results if r.get("solved")]
        best = [max((p[2] for p in r["curve"]), default=float("nan")) for r in results]
        out[who] = {
            "seeds": len(results),
            "solved": len(solved),
            "frames_to_target": median([r["frames"] for r in solved]),
            "wall_to_target_s": median([r["wall_s"] for r in solved]),
            "best_return": median(best),
            "wall_s": median([r["wall_s"] for r in results]),
        }
    ratios: dict[str, float] = {}
    shared = None
    f, s = out.get("fleetrl"), out.get("sb3")
    if f and s:
        if f["solved"] and s["solved"]:
            ratios["frames to 475, fleetrl / sb3"] = f["frames_to_target"] / s["frames_to_target"]
            ratios["wall to 475, fleetrl / sb3"] = f["wall_to_target_s"] / s["wall_to_target_s"]
        shared = min(f["best_return"], s["best_return"])
        for who in ("fleetrl", "sb3"):
            reached = [first_reach(r["curve"], shared) for r in runs[who]]
            reached = [r for r in reached if r is not None]
            out[who]["seeds_to_shared"] = len(reached)
            out[who]["frames_to_shared"] = median([r[0] for r in reached])
            out[who]["seconds_to_shared"] = median([r[1] for r in reached])
        if out["fleetrl"]["frames_to_shared"] and out["sb3"]["frames_to_shared"]:
            ratios["frames to the shared return, fleetrl / sb3"] = (
                out["fleetrl"]["frames_to_shared"] / out["sb3"]["frames_to_shared"]
            )
            ratios["seconds to the shared return, fleetrl / sb3"] = (
                out["fleetrl"]["seconds_to_shared"] / out["sb3"]["seconds_to_shared"]
            )
    return {"contestants": out, "ratios": ratios, "budget": budget, "shared_return": shared}


def print_summary(summary: dict) -> None:
    rows = []
    for who, s in summary["contestants"].items():
        frames = f"{s['frames_to_target']:,.0f}" if s["frames_to_target"] else "not reached"
        wall = f"{s['wall_to_target_s']:.1f}" if s["wall_to_target_s"] else "not reached"
        rows.append(
            [
                LABELS[who],
                f"{s['solved']}/{s['seeds']}",
                frames,
                wall,
                f"{s['best_return']:.1f}",
                f"{s['wall_s']:.1f}",
            ]
        )
    print_table(
        [
            "contestant",
            "seeds reaching 475",
            "frames to 475",
            "wall s to 475",
            "best mean return",
            "wall s (run)",
        ],
        rows,
        title=f"CartPole without velocities: medians over seeds, budget {summary['budget']:,} "
        f"frames; the mean return of the last {WINDOW} training episodes; wall from launch to "
        "exit (a run stops at 475)",
    )
    shared = summary.get("shared_return")
    if shared is not None:
        rows = []
        for who in ("fleetrl", "sb3"):
            s = summary["contestants"][who]
            reached = s["frames_to_shared"] is not None
            rows.append(
                [
                    LABELS[who],
                    f"{s['seeds_to_shared']}/{s['seeds']}",
                    f"{s['frames_to_shared']:,.0f}" if reached else "not reached",
                    f"{s['seconds_to_shared']:.1f}" if reached else "not reached",
                ]
            )
        print_table(
            ["contestant", "seeds reaching it", "frames to it", "seconds from launch to it"],
            rows,
            title=f"the shared return {shared:.1f}: the lower of fleetrl's and SB3's median best "
            "mean returns",
        )
    if summary["ratios"]:
        print_table(
            ["ratio", "value"],
            [[k, f"{v:.2f}x"] for k, v in summary["ratios"].items()],
            title="fleetrl over SB3 (medians); targets: frames <= 1.00x, wall time <= 0.50x",
        )


def plot(runs: dict[str, list[dict]]) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for who, results in runs.items():
        for i, r in enumerate(results):
            xs = [p[0] for p in r["curve"]]
            ts = [p[1] for p in r["curve"]]
            ys = [p[2] for p in r["curve"]]
            color = {"fleetrl": "C0", "sb3": "C1", "fleetrl-mlp": "C2"}[who]
            label = LABELS[who] if i == 0 else None
            axes[0].plot(xs, ys, color=color, label=label, alpha=0.8)
            axes[1].plot(ts, ys, color=color, label=label, alpha=0.8)
    axes[0].xaxis.set_major_formatter(
        matplotlib.ticker.FuncFormatter(lambda x, _: f"{x / 1000:.0f}k")
    )
    for ax, xlabel in zip(axes, ("env steps", "seconds from launch")):
        ax.axhline(TARGET, color="gray", linestyle="--", linewidth=1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"mean return, last {WINDOW} episodes")
    axes[0].legend(loc="upper left", fontsize=8)
    fig.suptitle("CartPole without velocities: one line per seed")
    fig.tight_layout()
    path = HERE / "results" / "memory.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def resummarize() -> None:
    """The summary, tables and plot of ``results/memory.json`` recomputed from its stored runs
    and curves, as this script now computes them; the file says so."""
    import json

    import common

    path = HERE / "results" / "memory.json"
    data = json.loads(path.read_text())
    runs = data["runs"]
    summary = summarize(runs, data["budget"])
    common.TABLES.clear()  # the page shows the tables the summary prints
    print_summary(summary)
    png = plot(runs)
    data.update(summary)
    data["tables"] = list(common.TABLES)
    data["png"] = str(png.relative_to(ROOT)) if png else None
    data["resummarized"] = (
        f"summary recomputed on {time.strftime('%Y-%m-%d')} from this run's stored curves "
        "(python memory.py --resummarize)"
    )
    path.write_text(json.dumps(data, indent=2))
    print(f"rewrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--frames", type=int, default=200_000, help="budget per run")
    parser.add_argument("--only", default=",".join(CONTESTANTS))
    parser.add_argument("--no-save", action="store_true", help="print only (a smoke run)")
    parser.add_argument(
        "--resummarize",
        action="store_true",
        help="recompute the summary and plot of the committed result from its curves (no run)",
    )
    args = parser.parse_args()
    if args.resummarize:
        resummarize()
        return
    only = [w for w in args.only.split(",") if w]
    unknown = sorted(set(only) - set(CONTESTANTS))
    if unknown:
        parser.error(f"--only {','.join(unknown)}: the contestants are {', '.join(CONTESTANTS)}")
    runs: dict[str, list[dict]] = {who: [] for who in only}
    failed: dict[str, str] = {}
    for i, seed in enumerate(args.seeds):
        order = only if i % 2 == 0 else only[::-1]  # alternate who runs first
        for who in order:
            if who in failed:
                continue
            print(f"{who} seed {seed}...", flush=True)
            try:
                r = (
                    run_sb3(seed, args.frames)
                    if who == "sb3"
                    else run_fleetrl(who, seed, args.frames)
                )
            except (RuntimeError, subprocess.SubprocessError) as err:
                failed[who] = str(err)[-500:]
                print(f"{who} failed: {failed[who]}", flush=True)
                continue
            r["seed"] = seed
            runs[who].append(r)
            print(
                f"  solved={r['solved']} frames={r['frames']:,} wall={r['wall_s']:.1f}s",
                flush=True,
            )
    runs = {w: r for w, r in runs.items() if r}
    summary = summarize(runs, args.frames)
    print_summary(summary)
    if args.no_save:
        return
    png = plot(runs)
    path = write_json(
        "memory",
        {
            **summary,
            "runs": runs,
            "failed": failed,
            "png": str(png.relative_to(ROOT)) if png else None,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

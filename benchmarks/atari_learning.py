"""Atari learning: the shipped APPO and PPO configs on Breakout, their curves, scores and time.

Each run is a fresh ``fleetrl train`` process on ``configs/appo_atari.yaml`` or
``configs/ppo_atari.yaml`` as shipped, with only the game, the engine, the seed and the
budget set on the command line (and evaluation during training off, so the wall time is
training's). A frame is one agent step (4 emulator frames, frame skip 4).

- **score**: the mean return of the last 20 training episodes at the end of the budget
  (``train/episode_return``, how CleanRL and Sample Factory report theirs), and along the
  run (the curve);
- **eval return**: ``fleetrl eval`` of the final checkpoint, 10 episodes;
- **wall time**: measured from outside, process start to exit; **agent steps/s**: the run's
  frames over it (collection and learning together);
- **where the time went**: the trainer's per-iteration seconds summed over the run
  (``time/collect_s``: waiting for batches, ``time/learn_s``: the learner's update,
  ``time/broadcast_s``: publishing weights) and ``fleetrl report``'s own table.

A uniformly random policy's mean return over 100 episodes, with the same env settings, is
measured once per game and drawn under the curves: the floor a curve must leave.

``--algos plain`` runs the floor under fleetrl's PPO instead: PPO in one process over
envpool with CleanRL's ``ppo_atari_envpool.py`` settings (``plain_atari.py``: the same env,
network and hyperparameters as ``ppo_atari.yaml``, no Ray, no TensorDict); the page sets
fleetrl's PPO run beside it at the plain run's budget.

    python benchmarks/atari_learning.py                      # APPO and PPO, Breakout, 1M steps
    python benchmarks/atari_learning.py --algos appo --steps 200000
    python benchmarks/atari_learning.py --algos plain --steps 500000   # the plain PPO floor
    python benchmarks/atari_learning.py --report             # the saved results' table again

Writes ``benchmarks/results/atari_learning.json`` (after every run, merged into the results
already there) and one curve PNG per run (``atari_learning_<algo>_<game>.png``). A run with
other steps, seed or overrides than the defaults is kept under its own name, never over a
default run.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import (
    plot_returns,
    print_table,
    return_curve,
    summed_columns,
    train_command,
    write_json,
)
from mujoco_learning import _eval_mean
from plain_atari import NUM_ENVS, STEPS_PER_UPDATE

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
GAME = "ALE/Breakout-v5"
ENGINE = "envpool"
STEPS = 1_000_000
#: what the page says of the rows and the machine line's command
NOTE = (
    "Each row is a run of its own, in a sitting of its own (when: its end), run by "
    "`python benchmarks/atari_learning.py --algos ALGO`; the random policy's score by "
    "`--random-only`. The machine line's command is the last invocation's."
)
#: episodes of the random policy's score (:func:`random_score`)
RANDOM_EPISODES = 100
#: the trainer's columns of seconds summed into the run's time breakdown
TIME_COLUMNS = ("time/collect_s", "time/learn_s", "time/broadcast_s", "time/prepare_s")


def config_path(algo: str) -> Path:
    """The shipped Atari config of ``algo``."""
    return ROOT / "configs" / f"{algo}_atari.yaml"


def run_overrides(game: str, steps: int, seed: int) -> list[str]:
    """What a run sets on the shipped config: the game, the engine, the seed, the budget,
    and no evaluation during training (its wall time is training's)."""
    return [
        f"env.id={game}",
        f"env.engine={ENGINE}",
        f"trainer.seed={seed}",
        f"trainer.total_frames={steps}",
        "trainer.test_every=0",
    ]


def config_problem(algo: str, args: argparse.Namespace) -> str | None:
    """What ``fleetrl train`` would refuse in a run's config, the env's checks included (None:
    nothing), said before the random policy's episodes or any run start."""
    from fleetrl import load_config
    from fleetrl.errors import ConfigError

    if algo == "plain" and args.overrides:
        return f"plain: the plain PPO loop is the fixed floor; it takes no overrides ({args.overrides})"
    if algo == "plain" and 0 < args.steps < PLAIN_UPDATE:
        return f"plain: --steps {args.steps} is less than one update ({PLAIN_UPDATE} agent steps)"
    overrides = [*run_overrides(args.game, args.steps, args.seed), *args.overrides]
    try:
        load_config(str(config_path("ppo" if algo == "plain" else algo)), overrides)
    except ConfigError as err:
        return f"{algo}: {err}"
    return None


#: the plain loop's agent steps per update (its envs x steps per env)
PLAIN_UPDATE = NUM_ENVS * STEPS_PER_UPDATE


def timed_run(cmd: list[str]) -> float:
    """Run ``cmd`` from the checkout; its seconds from start to exit (a failure raises its
    stderr's end)."""
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return wall


def run_fleetrl(
    algo: str, game: str, steps: int, seed: int, overrides: list[str], keep: Path | None
) -> dict:
    """Train the shipped config in a fresh process; score, curve, wall time, breakdown."""
    with tempfile.TemporaryDirectory() as tmp:
        run = (keep or Path(tmp)) / f"{algo}_{game.split('/')[-1]}_s{seed}"
        cmd = train_command(config_path(algo), run, *run_overrides(game, steps, seed), *overrides)
        print(f"fleetrl: {' '.join(cmd[3:])}", flush=True)
        summary = summarize(run, timed_run(cmd))
        summary["command"] = " ".join(["fleetrl", *cmd[3:]])
        evaluation = subprocess.run(
            [sys.executable, "-m", "fleetrl.cli", "eval", str(run), "--episodes", "10"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        summary["eval_return"] = _eval_mean(evaluation.stdout)
        report = subprocess.run(
            [sys.executable, "-m", "fleetrl.cli", "report", str(run)],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        summary["report"] = report.stdout.strip()
    return summary


def run_plain(game: str, steps: int, seed: int) -> dict:
    """The plain PPO loop (``plain_atari.py``) in a fresh process; its score, curve, time."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plain.json"
        cmd = [
            sys.executable,
            str(Path(__file__).with_name("plain_atari.py")),
            *("--game", game, "--steps", str(steps), "--seed", str(seed), "--out", str(out)),
        ]
        print(f"plain: {' '.join(cmd[1:])}", flush=True)
        wall = timed_run(cmd)
        r = json.loads(out.read_text())
    r.update(
        wall_s=wall,  # from outside, as fleetrl's runs are timed
        frames_per_s=r["frames"] / wall,
        eval_return=math.nan,
        best_score=max((c[1] for c in r["curve"]), default=math.nan),
        time_breakdown_s={},
        command=" ".join(["python", "benchmarks/plain_atari.py", *cmd[2:-2]]),
    )
    return r


def random_score(game: str, episodes: int = RANDOM_EPISODES, seed: int = 0) -> dict:
    """A uniformly random policy's mean return over ``episodes`` whole episodes, with the
    runs' env settings (the shipped config's env section, the same engine): the floor a
    curve must leave."""
    from fleetrl import load_config
    from fleetrl.collectors import episode_stats
    from fleetrl.setup.build import make_collector

    config = load_config(
        str(config_path("ppo")),
        [*run_overrides(game, STEPS, seed), "collector.num_collectors=0", "env.num_envs=8"],
    )
    returns: list[float] = []
    collector = make_collector(config, None, total_frames=-1, seed=seed)  # None: random
    try:
        while len(returns) < episodes:
            returns += episode_stats(collector.next()).returns.flatten().tolist()
    finally:
        collector.shutdown()
    returns = returns[:episodes]
    return {"mean": sum(returns) / len(returns), "episodes": len(returns), "seed": seed}


def summarize(run: Path, wall: float) -> dict:
    """A finished run's score, curve, throughput and time breakdown, from its metrics.csv;
    ``wall``: its process's seconds from start to exit."""
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    last = rows[-1]
    curve = return_curve(rows, wall)
    breakdown = summed_columns(rows, TIME_COLUMNS)
    frames = int(float(last["train/frames"]))
    return {
        "score": curve[-1][1] if curve else math.nan,
        "best_score": max((c[1] for c in curve), default=math.nan),
        "episodes": int(float(last["train/episodes"])),  # a running count
        "frames": frames,
        "wall_s": wall,
        "frames_per_s": frames / wall,
        "updates": int(float(last["train/policy_version"])),
        "time_breakdown_s": breakdown,
        "curve": curve,
    }


def score_at(curve: list[list[float]], frames: int) -> float:
    """The curve's score at the last point at or before ``frames`` agent steps (nan: none)."""
    points = [c[1] for c in curve if c[0] <= frames]
    return points[-1] if points else math.nan


def plot(name: str, curve: list[list[float]], floor: float | None) -> Path | None:
    """A PNG of training return against agent steps, with the random policy's score."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")  # a file name and a URL as is
    return plot_returns(
        RESULTS / f"atari_learning_{safe}.png",
        name,
        {"fleetrl": curve},
        xlabel="agent steps",
        line=None if floor is None else (floor, f"random policy {floor:.2f}"),
    )


HEADER = [
    "run",
    "agent steps",
    "score at half",
    "score",
    "eval return",
    "wall s",
    "agent steps/s",
    "waiting for batches s",
    "learning s",
    "when",
]


def _fmt(value: float, spec: str) -> str:
    """``value`` formatted, or "-" where there is none (nan)."""
    return "-" if math.isnan(value) else format(value, spec)


def table_rows(results: dict[str, dict]) -> list[list[str]]:
    """One row per run: its scores, time and throughput, and where its time went."""
    rows = []
    for key, r in results.items():
        b = r["time_breakdown_s"]
        rows.append(
            [
                key,
                f"{r['frames']:,}",
                f"{score_at(r['curve'], r['frames'] // 2):.1f}",
                f"{r['score']:.1f}",
                _fmt(r["eval_return"], ".1f"),
                f"{r['wall_s']:,.0f}",
                f"{r['frames_per_s']:,.0f}",
                _fmt(b.get("time/collect_s", math.nan), ",.0f"),
                _fmt(b.get("time/learn_s", math.nan), ",.0f"),
                r.get("date", "-"),
            ]
        )
    return rows


def time_at(curve: list[list[float]], frames: int) -> float:
    """Seconds since launch at the curve's first point at or past ``frames`` (nan: none)."""
    return next((c[2] for c in curve if c[0] >= frames), math.nan)


FLOOR_HEADER = [
    "plain run",
    "fleetrl run",
    "agent steps",
    "plain score",
    "fleetrl score",
    "plain s",
    "fleetrl s",
    "fleetrl time / plain",
]


def floor_rows(results: dict[str, dict]) -> list[list[str]]:
    """Each plain PPO run beside fleetrl's PPO run on its game with the same seed, at the
    plain run's budget: the scores there, and the seconds each took to get there."""
    rows = []
    for key, plain in results.items():
        if plain.get("algo") != "plain":
            continue
        steps = plain["frames"]
        for other, r in results.items():
            same = (r.get("game"), r.get("seed", 0)) == (plain.get("game"), plain.get("seed", 0))
            if r.get("algo") != "ppo" or not same or r["frames"] < steps:
                continue
            fleet_s = time_at(r["curve"], steps)
            rows.append(
                [
                    key,
                    other,
                    f"{steps:,}",
                    f"{plain['score']:.1f}",
                    _fmt(score_at(r["curve"], steps), ".1f"),
                    f"{plain['wall_s']:,.0f}",
                    _fmt(fleet_s, ",.0f"),
                    _fmt(fleet_s / plain["wall_s"], ".2f") + "x",
                ]
            )
    return rows


def page_tables(data: dict) -> list[dict]:
    """The benchmark page's table, from the merged results (each run its own row)."""
    floors = "; ".join(
        f"a random policy scores {r['mean']:.2f} on {game} ({r['episodes']} episodes)"
        for game, r in data.get("random", {}).items()
    )
    title = (
        "score: mean training return of the last 20 episodes (at half the budget, and at its "
        "end); eval: 10 episodes of `fleetrl eval` on the final checkpoint"
        + (f"; {floors}" if floors else "")
    )
    tables = [{"title": title, "header": HEADER, "rows": table_rows(data["results"])}]
    floor = floor_rows(data["results"])
    if floor:
        tables.append(
            {
                "title": "fleetrl's PPO against the plain PPO loop (one process, envpool, "
                "CleanRL's settings) at the plain run's budget: the score there (the last "
                "20 episodes' mean) and the seconds from launch to it",
                "header": FLOOR_HEADER,
                "rows": floor,
            }
        )
    return tables


def report(results: dict[str, dict], random: dict[str, dict]) -> None:
    """Print the table of ``results`` and (re)draw their PNGs (``png`` added in place)."""
    for key, r in results.items():
        floor = random.get(r.get("game", GAME), {}).get("mean")
        png = plot(key.removeprefix("fleetrl "), r["curve"], floor)  # "plain ppo ..." stays
        r["png"] = str(png.relative_to(ROOT)) if png else None
    print_table(HEADER, table_rows(results))
    if floor_rows(results):
        print_table(FLOOR_HEADER, floor_rows(results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--algos", nargs="+", default=["appo", "ppo"], choices=["appo", "ppo", "plain"]
    )
    parser.add_argument("--game", default=GAME)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep-runs", type=Path, default=None, help="keep the run dirs here")
    parser.add_argument("--report", action="store_true", help="run nothing: the saved table")
    parser.add_argument(
        "--random-only",
        action="store_true",
        help="measure the random policy's score on --game (again) and nothing else",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        help="key=value overrides for every run; before --algos, which takes every word after it",
    )
    args = parser.parse_args()
    if not args.report:  # every run's config checked, env included, before any runs
        problems = [config_problem(a, args) for a in args.algos]
        if any(problems):
            parser.error("; ".join(p for p in problems if p))
    path = RESULTS / "atari_learning.json"
    saved = json.loads(path.read_text()) if path.exists() else {"results": {}, "random": {}}
    random = saved.get("random", {})
    if args.report:
        if not path.exists():
            parser.error(f"--report: {path} does not exist yet; run the benchmark first")
        report(saved["results"], random)
        write_json("atari_learning", saved | {"note": NOTE}, tables=False)
        return

    results: dict[str, dict] = {}

    def save() -> None:
        merged = json.loads(path.read_text())["results"] if path.exists() else {}
        merged.update(results)
        payload = {
            "args": vars(args) | {"keep_runs": None},
            "results": merged,
            "random": random,
            "note": NOTE,
        }
        write_json("atari_learning", payload, tables=False)

    if args.game not in random or args.random_only:  # the curves' floor: seconds, once a game
        random[args.game] = random_score(args.game)
        print(f"a random policy on {args.game}: {random[args.game]['mean']:.2f}", flush=True)
        if args.random_only:
            report(saved["results"], random)
            write_json("atari_learning", saved | {"random": random, "note": NOTE}, tables=False)
            return
    for algo in args.algos:
        if algo == "plain":
            r = run_plain(args.game, args.steps, args.seed)
        else:
            r = run_fleetrl(algo, args.game, args.steps, args.seed, args.overrides, args.keep_runs)
        tags = [f"steps={args.steps}"] if args.steps != STEPS else []
        tags += [f"seed={args.seed}"] if args.seed != 0 else []
        tags += args.overrides
        suffix = f" [{' '.join(tags)}]" if tags else ""
        r.update(algo=algo, game=args.game, engine=ENGINE, seed=args.seed, suffix=suffix)
        r["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        who = "plain ppo" if algo == "plain" else f"fleetrl {algo}"
        results[f"{who} {args.game}{suffix}"] = r
        save()
        print(
            f"{algo} {args.game}: score {r['score']:.1f} (eval {r['eval_return']:.1f}) "
            f"in {r['wall_s']:.0f} s, {r['frames_per_s']:.0f} agent steps/s",
            flush=True,
        )
    print()
    merged = json.loads(path.read_text())["results"] if path.exists() else {}
    report(merged | results, random)
    save()
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

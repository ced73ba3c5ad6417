"""Atari against the fastest peer: fleetrl's APPO and Sample Factory 2.1.1's, side by side.

One sitting, on this machine, each run a fresh process of its own, one after the other
(Sample Factory seed 0, fleetrl seed 0, Sample Factory seed 1, fleetrl seed 1):

- **fleetrl**: ``fleetrl train configs/appo_atari.yaml`` as shipped, on ``ALE/Breakout-v5``
  with the envpool engine (:func:`atari_learning.run_fleetrl`: the same command, score and
  wall time as the Atari learning benchmark);
- **Sample Factory**: its APPO with its own Atari defaults (8 rollout workers x 1 env,
  rollout 128, batch 256 x 4 per iteration, 4 epochs; ``sf_examples/atari/atari_params.py``)
  in its own virtualenv (``benchmarks/.sf-venv``, made on first use: it needs gymnasium<1
  and numpy<2), by ``benchmarks/sf_atari_runner.py``, on the same game with fleetrl's env
  settings: ALE v5 sticky actions 0.25, up to 30 no-ops, frame skip 4, 84x84 grayscale,
  4 stacked frames, no life-loss episode ends, no FIRE at reset, unclipped rewards.

Both networks are the Nature CNN with a shared torso (each side's parameter count is in the
table, read from its final checkpoint). A score is the mean return of the last 20 training
episodes (fleetrl's ``train/episode_return``; Sample Factory's ``Avg episode reward`` with
``--stats_avg=20``); a wall time runs from the process's start to its exit.

Tables: the return at equal agent steps (the median of the per-seed differences); the wall
time to the shared return (per seed, the lower of the two final scores: when each side's
curve first reaches it); full-loop agent steps/s (collection and learning together); and
collection alone: fleetrl's collectors with the shipped config and no learner, and Sample
Factory with its learner cut to a sixteenth of its work (1 epoch x 1 minibatch of 1,024,
``--async_rl=True``: it has no collection-only mode). Sample Factory's own timing lines
(its learner's ``train`` seconds, a rollout worker's ``env_step``, the inference worker's
``handle_policy_step``) are kept beside fleetrl's ``fleetrl report`` breakdown.

Targets (issue 58): fleetrl's return at equal steps >= Sample Factory's (median per-seed
difference >= 0); wall time to the shared return <= 0.7x; full-loop agent steps/s >= 1.3x.

    python benchmarks/atari_peer.py                       # 500k agent steps, seeds 0 and 1
    python benchmarks/atari_peer.py --steps 100000 --seeds 0
    python benchmarks/atari_peer.py --runs-dir DIR        # keep the runs; a run whose
                                                          # result is in DIR is read, not rerun
    python benchmarks/atari_peer.py --runs-dir DIR --note "..."   # say how, in the result

Writes ``benchmarks/results/atari_peer.json`` and ``atari_peer.png`` (both sides' curves).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from atari_learning import config_path, run_fleetrl, run_overrides, score_at
from common import plot_returns, print_table, write_json

HERE = Path(__file__).resolve().parent
GAME = "ALE/Breakout-v5"
STEPS = 500_000
SEEDS = (0, 1)
SF_VENV = HERE / ".sf-venv"
#: installed one at a time, in this order: torch's CPU wheel first (no CUDA build)
SF_REQUIREMENTS = (
    "torch==2.13.0",
    "numpy<2",
    "gymnasium==0.29.1",
    "ale-py==0.9.1",
    "sample-factory==2.1.1",
)
SF_RUNNER = HERE / "sf_atari_runner.py"
#: Sample Factory's learner at a sixteenth of its default work per 1,024 agent steps, for
#: its collection's rate (it has no collection-only mode)
SF_COLLECTION_FLAGS = (
    "--async_rl=True",
    "--num_epochs=1",
    "--num_batches_per_epoch=1",
    "--batch_size=1024",
)
#: agent steps of each side's collection-alone run; the first fifth is warm-up, not timed
COLLECTION_STEPS = 60_000
#: the points (fractions of the budget) of the return-at-equal-steps table
FRACTIONS = (0.25, 0.5, 0.75, 1.0)

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]")
FRAMES = re.compile(r"Total num frames: (\d+)")
REWARD = re.compile(r"Avg episode reward: \[\(0, '([-\d.e+]+)'\)\]")
PROFILE = re.compile(r"\] (.+?) profile tree view:")
ENTRY = re.compile(r"([a-z_]+): ([\d.]+)")


def ensure_sf_venv() -> Path:
    """Sample Factory's own virtualenv (``benchmarks/.sf-venv``, git-ignored); its python."""
    python = SF_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {SF_VENV} with {' '.join(SF_REQUIREMENTS)} (first use only)...")
        subprocess.run([sys.executable, "-m", "venv", str(SF_VENV)], check=True)
        for requirement in SF_REQUIREMENTS:
            subprocess.run([str(python), "-m", "pip", "install", "-q", requirement], check=True)
    return python


def _stamp(line: str) -> float | None:
    """A Sample Factory log line's time (epoch seconds; its logger writes local time)."""
    m = STAMP.match(line)
    if m is None:
        return None
    when = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
    return time.mktime(when.timetuple()) + int(m.group(2)) / 1000


def parse_sf_log(text: str) -> dict:
    """A Sample Factory run's log, read: its curve (``[agent steps, mean return of the last
    20 episodes, seconds since the process started]`` at each report), its agent steps at
    each report (``marks``: ``[agent steps, seconds]``), its timing lines (each profile's
    named seconds) and the runner's ``SF_RESULT`` (status, wall seconds, parameters)."""
    start, frames, result = None, 0, {}
    curve: list[list[float]] = []
    marks: list[list[float]] = []
    profiles: dict[str, dict[str, float]] = {}
    profile: dict[str, float] | None = None
    for raw in text.splitlines():
        line = ANSI.sub("", raw)
        if line.startswith("SF_START "):
            start = float(line.split()[1])
            continue
        if line.startswith("SF_RESULT "):
            result = json.loads(line.split(" ", 1)[1])
            continue
        when = _stamp(line)
        if when is None:  # a continuation line: a profile's tree
            if profile is not None:
                for key, value in ENTRY.findall(line):
                    profile.setdefault(key, float(value))
            continue
        profile = None
        since = when - start if start is not None else math.nan
        if m := FRAMES.search(line):
            frames = int(m.group(1))
            marks.append([frames, since])
        elif m := REWARD.search(line):
            curve.append([frames, float(m.group(1)), since])
        elif m := PROFILE.search(line):
            profile = profiles.setdefault(m.group(1), {})
    return {"curve": curve, "marks": marks, "profiles": profiles, "frames": frames, **result}


def steady_rate(marks: list[list[float]], warmup: float = 0.2) -> float:
    """Agent steps/s between the first mark past ``warmup`` of the steps and the last."""
    last = marks[-1]
    first = next(m for m in marks if m[0] >= warmup * last[0])
    return (last[0] - first[0]) / (last[1] - first[1])


def run_sample_factory(python: Path, seed: int, steps: int, log: Path, extra=()) -> dict:
    """Sample Factory's APPO in a process of its own (:data:`SF_RUNNER`), its log kept at
    ``log``; the log read (:func:`parse_sf_log`) with its score and rates."""
    with tempfile.TemporaryDirectory() as train_dir:
        cmd = [str(python), str(SF_RUNNER), GAME, str(seed), str(steps), train_dir, *extra]
        print(f"sample factory: seed {seed}, {steps:,} agent steps {' '.join(extra)}", flush=True)
        with log.open("w") as out:
            code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=HERE).returncode
    if code != 0:
        raise RuntimeError(f"Sample Factory exited with {code}; its log: {log}")
    return sf_summary(log.read_text())


def sf_summary(text: str) -> dict:
    """A finished Sample Factory run's score, wall time and rates, from its log."""
    r = parse_sf_log(text)
    if r.get("status") != 0:
        raise RuntimeError(f"Sample Factory's run did not finish (status {r.get('status')})")
    curve = r.pop("curve")
    return {
        **r,
        "curve": curve,
        "score": curve[-1][1] if curve else math.nan,
        "frames_per_s": r["frames"] / r["wall_s"],
        "steady_frames_per_s": steady_rate(r["marks"]),
    }


def fleetrl_params(run: Path) -> int:
    """Parameters of the policy and value networks in a run's final checkpoint, a tensor
    that two networks share (the torso) counted once; an observation normalizer's
    statistics are buffers, not parameters (Sample Factory's count leaves its own out too)."""
    import torch

    from fleetrl.networks.normalization import ObservationNormalizer

    statistics = {name for name, _ in ObservationNormalizer((1,)).named_buffers()}
    path = sorted((run / "checkpoints").glob("checkpoint_*.pt"))[-1]
    state = torch.load(path, map_location="cpu", weights_only=False)["algorithm"]["loss_module"]
    seen, count = set(), 0
    for key, value in state.items():
        if key.rsplit(".", 1)[-1] in statistics:
            continue
        if "_network_params." in key and value.untyped_storage().data_ptr() not in seen:
            seen.add(value.untyped_storage().data_ptr())
            count += value.numel()
    return count


def run_fleetrl_seed(seed: int, steps: int, runs: Path) -> dict:
    """The shipped APPO config trained in a fresh process (:func:`atari_learning.run_fleetrl`)
    with its parameter count; its run dir kept under ``runs``."""
    r = run_fleetrl("appo", GAME, steps, seed, [], runs)
    r["params"] = fleetrl_params(runs / f"appo_{GAME.split('/')[-1]}_s{seed}")
    return r


def fleetrl_collection(steps: int) -> dict:
    """fleetrl's collectors alone, as the shipped APPO config builds them (2 Ray collectors
    x 4 envpool envs, first ready) with its initial policy: agent steps/s past the first
    fifth. Run in a process of its own (``--fleetrl-collection``)."""
    from fleetrl import load_config
    from fleetrl.setup.build import make_algorithm, make_collector

    config = load_config(str(config_path("appo")), run_overrides(GAME, steps, 0))
    algorithm = make_algorithm(config, 0)
    collector = make_collector(
        config, algorithm.policy, total_frames=steps, seed=0, reads=algorithm.env_keys_read()
    )
    start, marks, frames = time.perf_counter(), [], 0
    try:
        for batch in collector:
            frames += batch.numel()
            marks.append([frames, time.perf_counter() - start])
    finally:
        collector.shutdown()
    return {"frames": frames, "marks": marks, "steady_frames_per_s": steady_rate(marks)}


def first_reach(curve: list[list[float]], value: float) -> float:
    """Seconds since launch when ``curve`` first reaches ``value`` (nan: never)."""
    return next((c[2] for c in curve if c[1] >= value), math.nan)


def compare(fl: dict[int, dict], sf: dict[int, dict], steps: int) -> dict:
    """The sitting's tables and targets from each side's runs, paired by seed."""
    seeds = sorted(set(fl) & set(sf))
    at = [int(f * steps) for f in FRACTIONS]
    returns = []
    for s in seeds:
        for point in at:
            a, b = score_at(fl[s]["curve"], point), score_at(sf[s]["curve"], point)
            returns.append([s, point, a, b, a - b])
    final_diffs = [r[4] for r in returns if r[1] == at[-1]]
    shared = []
    for s in seeds:
        value = min(fl[s]["score"], sf[s]["score"])
        a, b = first_reach(fl[s]["curve"], value), first_reach(sf[s]["curve"], value)
        shared.append([s, value, a, b, a / b])
    rates = [[s, fl[s]["frames_per_s"], sf[s]["frames_per_s"]] for s in seeds]
    rate_ratio = statistics.mean(r[1] for r in rates) / statistics.mean(r[2] for r in rates)
    return {
        "returns": returns,
        "median_final_difference": statistics.median(final_diffs),
        "shared": shared,
        "median_time_ratio": statistics.median(r[4] for r in shared),
        "rates": rates,
        "rate_ratio": rate_ratio,
    }


def report(data: dict) -> None:
    """Print the sitting's tables (kept for the page) and draw both sides' curves."""
    if data.get("note"):
        print(f"note: {data['note']}")
    fl = {int(k): v for k, v in data["fleetrl"].items()}
    sf = {int(k): v for k, v in data["sample_factory"].items()}
    c = compare(fl, sf, data["steps"])
    print_table(
        ["seed", "agent steps", "fleetrl", "Sample Factory", "difference"],
        [[s, f"{p:,}", f"{a:.2f}", f"{b:.2f}", f"{d:+.2f}"] for s, p, a, b, d in c["returns"]],
        title="return at equal agent steps (mean of the last 20 training episodes); median "
        f"difference at the end: {c['median_final_difference']:+.2f} (target >= 0)",
    )
    print_table(
        ["seed", "shared return", "fleetrl s", "Sample Factory s", "ratio"],
        [[s, f"{v:.2f}", f"{a:,.0f}", f"{b:,.0f}", f"{r:.2f}x"] for s, v, a, b, r in c["shared"]],
        title="wall time to the shared return (the lower of the two final scores), from "
        f"launch; median ratio {c['median_time_ratio']:.2f}x (target <= 0.7x)",
    )
    rows = [
        [s, f"{a:,.0f}", f"{b:,.0f}", f"{fl[s]['wall_s']:,.0f}", f"{sf[s]['wall_s']:,.0f}"]
        for s, a, b in c["rates"]
    ]
    print_table(
        ["seed", "fleetrl steps/s", "Sample Factory steps/s", "fleetrl wall s", "SF wall s"],
        rows,
        title=f"full loop (collection and learning): {c['rate_ratio']:.2f}x Sample "
        "Factory's agent steps/s (target >= 1.3x)",
    )
    collection = data.get("collection")
    if collection:
        a = collection["fleetrl"]["steady_frames_per_s"]
        b = collection["sample_factory"]["steady_frames_per_s"]
        print_table(
            ["fleetrl steps/s", "Sample Factory steps/s", "ratio"],
            [[f"{a:,.0f}", f"{b:,.0f}", f"{a / b:.2f}x"]],
            title="collection alone: fleetrl's collectors without a learner; Sample Factory "
            "with its learner at a sixteenth of its work (it has no collection-only mode)",
        )
    profile_rows = []
    for s in sorted(sf):
        p = sf[s]["profiles"]
        learner = next((v for k, v in p.items() if k.startswith("Learner")), {})
        infer = next((v for k, v in p.items() if k.startswith("InferenceWorker")), {})
        worker = next((v for k, v in p.items() if k.startswith("RolloutWorker")), {})
        fb = fl[s]["time_breakdown_s"]
        profile_rows.append(
            [
                s,
                f"{fb.get('time/learn_s', math.nan):,.0f}",
                f"{fb.get('time/collect_s', math.nan):,.0f}",
                f"{learner.get('train', math.nan):,.0f}",
                f"{infer.get('handle_policy_step', math.nan):,.0f}",
                f"{worker.get('env_step', math.nan):,.0f}",
                f"{fl[s]['params']:,} / {sf[s]['params']:,}",
            ]
        )
    print_table(
        [
            "seed",
            "fleetrl learning s",
            "fleetrl waiting s",
            "SF learner train s",
            "SF inference s",
            "SF one worker's env_step s",
            "parameters (fleetrl / SF)",
        ],
        profile_rows,
        title="where the time went: fleetrl's trainer columns; Sample Factory's own timing lines",
    )
    curves = {f"fleetrl seed {s}": fl[s]["curve"] for s in sorted(fl)}
    curves |= {f"Sample Factory seed {s}": sf[s]["curve"] for s in sorted(sf)}
    plot_returns(
        HERE / "results" / "atari_peer.png",
        f"APPO on {GAME}: fleetrl and Sample Factory 2.1.1",
        curves,
        xlabel="agent steps",
    )


def _saved(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS, help="agent steps of each run")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument(
        "--runs-dir", type=Path, default=None, help="keep the runs (logs, run dirs) here"
    )
    parser.add_argument("--no-collection", action="store_true", help="skip collection alone")
    parser.add_argument("--report", action="store_true", help="run nothing: the saved tables")
    parser.add_argument(
        "--note",
        default=None,
        help="how the runs were made, kept with the result (e.g. which came from --runs-dir)",
    )
    parser.add_argument("--fleetrl-collection", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fleetrl_collection:  # the child process of the collection-alone measurement
        print("FLEETRL_COLLECTION " + json.dumps(fleetrl_collection(args.fleetrl_collection)))
        return
    if args.steps < 1:
        parser.error(f"--steps: {args.steps} is not a positive number of agent steps")
    path = HERE / "results" / "atari_peer.json"
    if args.report:
        if not path.exists():
            parser.error(f"--report: {path} does not exist yet; run the benchmark first")
        data = json.loads(path.read_text())
        report(data)
        write_json("atari_peer", {k: v for k, v in data.items() if k != "tables"})
        return
    python = ensure_sf_venv()
    with tempfile.TemporaryDirectory() as tmp:
        runs = args.runs_dir or Path(tmp)
        runs.mkdir(parents=True, exist_ok=True)
        data = {"game": GAME, "steps": args.steps, "fleetrl": {}, "sample_factory": {}}
        if args.note:
            data["note"] = args.note
        for seed in args.seeds:  # alternating sides, so drift on the machine touches both
            sf_log = runs / f"sf_s{seed}.log"
            saved = sf_log.read_text() if sf_log.exists() else ""
            data["sample_factory"][seed] = (
                sf_summary(saved)
                if "SF_RESULT " in saved
                else run_sample_factory(python, seed, args.steps, sf_log)
            )
            fl_json = runs / f"fleetrl_s{seed}.json"
            data["fleetrl"][seed] = _saved(fl_json) or run_fleetrl_seed(seed, args.steps, runs)
            if "params" not in data["fleetrl"][seed]:  # a result saved without its count
                run = runs / f"appo_{GAME.split('/')[-1]}_s{seed}"
                data["fleetrl"][seed]["params"] = fleetrl_params(run)
            fl_json.write_text(json.dumps(data["fleetrl"][seed]))
        if not args.no_collection:
            child = subprocess.run(
                [sys.executable, __file__, "--fleetrl-collection", str(COLLECTION_STEPS)],
                capture_output=True,
                text=True,
                cwd=HERE,
            )
            line = [x for x in child.stdout.splitlines() if x.startswith("FLEETRL_COLLECTION ")]
            if not line:
                raise RuntimeError(child.stderr[-3000:])
            data["collection"] = {
                "fleetrl": json.loads(line[0].split(" ", 1)[1]),
                "sample_factory": run_sample_factory(
                    python, 0, COLLECTION_STEPS, runs / "sf_collection.log", SF_COLLECTION_FLAGS
                ),
            }
    report(data)
    out = write_json("atari_peer", data)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

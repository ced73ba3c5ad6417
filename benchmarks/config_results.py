"""What each shipped config reaches in what time, gathered from the committed benchmark results.

Writes ``src/fleetrl/configs/results.json``, package data that ``fleetrl configs`` reads:
one line per config that a benchmark ran as shipped (the script and its result file are
named), and none for the configs no benchmark has run yet. It reruns nothing: run it after
a benchmark whose result file it reads is re-run (``tests/unit/test_configs_command.py``
fails while the committed file differs from what this script writes).

    python benchmarks/config_results.py           # write the file
    python benchmarks/config_results.py --check   # exit 1 if the file is out of date
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "src" / "fleetrl" / "configs" / "results.json"


def _load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"{name}.json").read_text())


def _frames(n: float) -> str:
    return f"{n / 1e6:g}M" if n >= 1e6 else f"{round(n / 1000):,}k"


def _entry(reaches: str, source: str, date: str) -> dict[str, str]:
    return {"reaches": reaches, "source": f"benchmarks/results/{source}.json", "date": date}


def _time_to_solve(key: str) -> Callable[[], dict[str, str]]:
    def gather() -> dict[str, str]:
        data = _load("time_to_solve")
        row = next(r for r in data["results"].values() if r.get("key") == key)
        seeds = len(row["runs"])
        reaches = (
            f"train return 475 in {row['median_wall_s']:.0f} s, "
            f"{_frames(row['median_frames'])} frames ({row['solved']}/{seeds} seeds, median)"
        )
        return _entry(reaches, "time_to_solve", data["date"])

    return gather


def _scheme_mode(mode: str) -> Callable[[], dict[str, str]]:
    def gather() -> dict[str, str]:
        data = _load("scheme_modes")
        row = data["results"][mode]
        runs = len(row["runs"])
        reaches = (
            f"train return 475 in {row['wall_s']:.0f} s, {_frames(row['frames'])} frames "
            f"({row['solved']}/{runs} seed{'s' if runs > 1 else ''})"
        )
        return _entry(reaches, "scheme_modes", data["date"])

    return gather


def _decoupled(algorithm: str) -> Callable[[], dict[str, str]]:
    def gather() -> dict[str, str]:
        data = _load("decoupled")
        row = next(
            r for r in data["results"] if r["algorithm"] == algorithm and r["mode"] == "alternating"
        )
        reaches = (
            f"evaluation return {row['target']:g} in {row['reached_s']:.0f} s, "
            f"{_frames(row['reached_frames'])} frames (1 seed)"
        )
        return _entry(reaches, "decoupled", data["date"])

    return gather


def _mujoco(algo: str) -> Callable[[], dict[str, str]]:
    def gather() -> dict[str, str]:
        data = _load("mujoco_learning")
        rows = [
            r
            for name, r in data["results"].items()
            if name.startswith(f"fleetrl {algo} HalfCheetah-v5")
        ]
        scores = ", ".join(f"{r['score']:,.0f}" for r in rows)
        walls = ", ".join(f"{r['wall_s']:.0f}" for r in rows)
        reaches = (
            f"HalfCheetah-v5 train return {scores} at {_frames(rows[0]['frames'])} steps "
            f"in {walls} s ({len(rows)} seed{'s' if len(rows) > 1 else ''})"
        )
        return _entry(reaches, "mujoco_learning", rows[0].get("date", data["date"]))

    return gather


def _marl() -> dict[str, str]:
    data = _load("marl")
    seeds = data["learning"]["per_seed"]
    ours = data["learning"]["contestants"]["fleetrl"]
    returns = [s["return"]["fleetrl"] for s in seeds]
    reaches = (
        f"return {statistics.median(returns):.2f} at {_frames(data['learning']['equal_frames'])} "
        f"frames in {ours['wall_s']:.0f} s ({len(seeds)} seeds, median)"
    )
    return _entry(reaches, "marl", data["date"])


def _sweep() -> dict[str, str]:
    data = _load("sweep_best")
    best = data["results"]["the sweep's best (local, 16 envs)"]
    reaches = (
        f"its best trial's config: train return 475 in {best['median_wall_s']:.0f} s "
        f"({best['solved']} seeds, median)"
    )
    return _entry(reaches, "sweep_best", data["date"])


#: shipped config -> how its line is read from a result file (each benchmark runs the
#: config as shipped, with only its budget, seed and the env id of a MuJoCo run set)
GATHER: dict[str, Callable[[], dict[str, str]]] = {
    "ppo_cartpole": _time_to_solve("ppo-dist"),
    "appo_cartpole": _time_to_solve("appo"),
    "ppo_cartpole_parallel": _scheme_mode("parallel (sync)"),
    "ppo_cartpole_async": _scheme_mode("async"),
    "ppo_cartpole_decentralized": _scheme_mode("decentralized"),
    "dqn_cartpole": _decoupled("dqn"),
    "sac_pendulum": _decoupled("sac"),
    "ppo_mujoco": _mujoco("ppo"),
    "sac_mujoco": _mujoco("sac"),
    "mappo_simple_spread": _marl,
    "tune_ppo_cartpole": _sweep,
}


def gathered() -> dict[str, Any]:
    """The file's content: every measured shipped config's line."""
    return {
        "written_by": "python benchmarks/config_results.py",
        "configs": {name: GATHER[name]() for name in sorted(GATHER)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args()
    text = json.dumps(gathered(), indent=2) + "\n"
    if args.check:
        stale = not OUT.is_file() or OUT.read_text() != text
        print(f"{OUT}: {'out of date' if stale else 'up to date'}")
        return 1 if stale else 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    for name, entry in gathered()["configs"].items():
        print(f"  {name}: {entry['reaches']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

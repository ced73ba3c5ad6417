"""Start-up: how long fleetrl takes before it does any work, against the floor and torchrl.

Each figure is measured in a fresh process, the median over ``--rounds``:

- ``fleetrl --help``: the command line answers (target: under 1 s), against the
  floor of starting the interpreter (``python -c pass``);
- ``import fleetrl``: the package's import (its names are imported when first used);
- distributed CartPole (``configs/ppo_cartpole.yaml``: 2 Ray collectors x 8 envs),
  run by ``fleetrl train``: the whole process to its first batch, and the
  Trainer's constructor-to-first-batch (``Trainer.startup_s``, target: at most
  5 s on 2 cores), which the CLI prints;
- the same run through the Python API: ``Trainer(load_config(...)).train()`` in a
  fresh process, its ``startup_s`` (Ray starts inside the constructor there);
- the floor written from what a first batch needs and nothing else: start
  Ray, start 2 actors that import torch, tensordict and torchrl and build their
  CartPole envs, and step them for one batch (``ray.init`` + the actors' imports
  + one rollout, in sequence: the least a cold Ray collection can take);
- torchrl's ``RayCollector`` on the same envs and a policy of the same size: its
  constructor to its first batch, imports before the clock.

    python benchmarks/startup.py [--rounds 3]

Writes ``benchmarks/results/startup.json``.

The refusal table (``--refusals``): ``fleetrl train`` given a bad input of each kind
(:data:`REFUSALS`: an unknown key, a typo, a value out of range, a value of the wrong type,
a missing file, an override without ``=``, an override whose value is not YAML), the
process's wall time to its refusal (exit 2), against ``python -c pass`` and
``fleetrl --help``; target: every refusal under 1 s. ``--checkout DIR`` times another
checkout's fleetrl (its ``src`` first on the path; e.g. a ``git worktree`` of an older
commit, for the figures before a change).

    python benchmarks/startup.py --refusals [--rounds 5] [--checkout DIR --out NAME]

Writes ``benchmarks/results/startup_refusals.json`` (or ``NAME.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import machine, print_table, write_json

ROOT = Path(__file__).resolve().parent.parent
STARTUP_RE = re.compile(r"start-up ([0-9.]+) s")
QUIET = [
    "trainer.total_frames=2048",
    "collector.frames_per_batch=1024",
    "trainer.test_every=0",
    "trainer.checkpoint_every=0",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]

PYTHON_API = r"""
import json, sys, tempfile, time
start = time.perf_counter()
from fleetrl import Trainer, load_config
config = load_config(sys.argv[1], sys.argv[2:])
built = time.perf_counter()
trainer = Trainer(config, run_dir=tempfile.mkdtemp() + "/run")
trainer.train()
print(json.dumps({"imports_s": built - start, "startup_s": trainer.startup_s}))
"""

FLOOR = r"""
import json, time
start = time.perf_counter()
import ray
ray.init(include_dashboard=False, logging_level="ERROR")
up = time.perf_counter()

@ray.remote(num_cpus=1)
class Worker:
    def __init__(self):
        import gymnasium as gym
        import numpy as np
        import tensordict  # noqa: F401  what a batch is made of
        import torch
        import torchrl.modules  # noqa: F401  what the default policies are made of

        self.torch, self.np = torch, np
        self.env = gym.make_vec("CartPole-v1", num_envs=8, vectorization_mode="sync")
        self.obs, _ = self.env.reset(seed=0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2)
        )

    def batch(self, steps):
        torch = self.torch
        out = self.np.empty((steps, 8, 4), dtype=self.np.float32)
        with torch.inference_mode():
            for t in range(steps):
                logits = self.net(torch.from_numpy(self.obs))
                action = torch.distributions.Categorical(logits=logits).sample().numpy()
                out[t] = self.obs
                self.obs, *_ = self.env.step(action)
        return out.size

workers = [Worker.remote() for _ in range(2)]
ray.get([w.batch.remote(64) for w in workers])
done = time.perf_counter()
print(json.dumps({"ray_init_s": up - start, "first_batch_s": done - start}))
"""

TORCHRL = r"""
import json, time
import torch
from tensordict.nn import TensorDictModule
from torchrl.collectors.distributed import RayCollector
from torchrl.envs import GymEnv
from torchrl.modules import ProbabilisticActor
from torch.distributions import Categorical

def make_env():
    return GymEnv("CartPole-v1")

net = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2))
policy = ProbabilisticActor(
    TensorDictModule(net, in_keys=["observation"], out_keys=["logits"]),
    in_keys=["logits"], distribution_class=Categorical, return_log_prob=True,
)
start = time.perf_counter()
collector = RayCollector(
    [make_env] * 2, policy, frames_per_batch=1024, total_frames=2048, sync=True,
    ray_init_config={"include_dashboard": False, "logging_level": "ERROR"},
    remote_configs={"num_cpus": 1},
)
batch = next(iter(collector))
first = time.perf_counter() - start
print(json.dumps({"startup_s": first, "frames": batch.numel()}))
collector.shutdown()
"""


def timed(cmd: list[str], cwd: Path = ROOT) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}... failed:\n{out.stderr[-3000:]}")
    return wall, out


def last_json(out: subprocess.CompletedProcess) -> dict:
    """The last JSON line a script printed (libraries may print after it)."""
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"no result line in:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return json.loads(lines[-1])


#: a bad input of each kind, as ``fleetrl train`` arguments (run from the checkout's root)
REFUSALS = {
    "unknown key": ["configs/ppo_cartpole.yaml", "collector.frobnicate=1"],
    "typo of a key": ["configs/ppo_cartpole.yaml", "collector.num_colectors=4"],
    "value out of range": ["configs/ppo_cartpole.yaml", "ppo.lr=-1"],
    "value of the wrong type": ["configs/ppo_cartpole.yaml", "env.num_envs=two"],
    "missing file": ["configs/no_such_config.yaml"],
    "override without =": ["configs/ppo_cartpole.yaml", "ppo.lr"],
    "override value not YAML": ["configs/ppo_cartpole.yaml", "ppo.hidden_sizes=[64"],
}


def refused(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    """Wall time of a command that must be refused (exit 2), and the first line it said."""
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env)
    wall = time.perf_counter() - start
    if out.returncode != 2:
        raise RuntimeError(f"{' '.join(cmd)}: exit {out.returncode}, not 2:\n{out.stderr[-2000:]}")
    return wall, out.stderr.strip().splitlines()[-1]


def measure_refusals(rounds: int, checkout: Path) -> tuple[dict[str, list[float]], dict]:
    """Each refusal's wall time per round, with the floor and fleetrl --help, run against the
    fleetrl of ``checkout``; and what each refusal said (its last line)."""
    py = sys.executable
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    figures: dict[str, list[float]] = {}
    said: dict[str, str] = {}
    for _ in range(rounds):
        figures.setdefault("python -c pass", []).append(timed([py, "-c", "pass"], checkout)[0])
        start = time.perf_counter()
        subprocess.run(
            [py, "-m", "fleetrl.cli", "--help"],
            capture_output=True,
            cwd=checkout,
            env=env,
            check=True,
        )
        figures.setdefault("fleetrl --help", []).append(time.perf_counter() - start)
        for name, argv in REFUSALS.items():
            wall, said[name] = refused([py, "-m", "fleetrl.cli", "train", *argv], checkout, env)
            figures.setdefault(name, []).append(wall)
    return figures, said


def refusal_table(rounds: int, checkout: Path, out: str) -> None:
    figures, said = measure_refusals(rounds, checkout)
    medians = {name: statistics.median(values) for name, values in figures.items()}
    floor, help_s = medians["python -c pass"], medians["fleetrl --help"]
    rows = [
        [
            name,
            " ".join(REFUSALS.get(name, ["-"])[1:]) or REFUSALS.get(name, ["-"])[0],
            f"{medians[name]:.2f}",
            f"{medians[name] / floor:.1f}x",
            f"{medians[name] / help_s:.1f}x",
            "yes" if medians[name] < 1 else "no",
        ]
        for name in figures
    ]
    print_table(
        [
            "fleetrl train refuses",
            "input",
            "wall s (median)",
            "/ python -c pass",
            "/ fleetrl --help",
            "under 1 s",
        ],
        rows,
        title=f"Refusals, {rounds} rounds, fleetrl of {checkout}",
    )
    worst = max(medians[name] for name in REFUSALS)
    print(
        f"\ntarget every refusal under 1 s: slowest {worst:.2f} s, {'met' if worst < 1 else 'missed'}"
    )
    for name, line in said.items():
        print(f"  {name}: {line}")
    path = write_json(
        out,
        {"checkout": str(checkout), "rounds": figures, "medians": medians, "said": said},
    )
    print(f"wrote {path}")


def measure(rounds: int) -> dict[str, list[float]]:
    py = sys.executable
    config = str(ROOT / "configs" / "ppo_cartpole.yaml")
    figures: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)

    for r in range(rounds):
        add("python -c pass", timed([py, "-c", "pass"])[0])
        add("fleetrl --help", timed([py, "-m", "fleetrl.cli", "--help"])[0])
        add("import fleetrl", timed([py, "-c", "import fleetrl"])[0])
        with tempfile.TemporaryDirectory() as tmp:
            wall, out = timed(
                [py, "-m", "fleetrl.cli", "train", config, *QUIET, "--run-dir", f"{tmp}/run"]
            )
        found = STARTUP_RE.search(out.stdout)
        if found is None:
            raise RuntimeError(f"no start-up figure in fleetrl train's output:\n{out.stdout}")
        add("fleetrl train: Trainer.startup_s", float(found.group(1)))
        add("fleetrl train: whole process", wall)
        api = last_json(timed([py, "-c", PYTHON_API, config, *QUIET])[1])
        add("Python API: Trainer.startup_s", api["startup_s"])
        floor = last_json(timed([py, "-c", FLOOR])[1])
        add("floor: ray.init", floor["ray_init_s"])
        add("floor: ray.init + 2 actors + first batch", floor["first_batch_s"])
        torchrl = last_json(timed([py, "-c", TORCHRL])[1])
        add("torchrl RayCollector: constructor to first batch", torchrl["startup_s"])
        print(f"round {r + 1}/{rounds} done", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="median over this many rounds")
    parser.add_argument(
        "--refusals", action="store_true", help="only the refusal table (startup_refusals.json)"
    )
    parser.add_argument(
        "--checkout", type=Path, default=ROOT, help="with --refusals: the fleetrl checkout to time"
    )
    parser.add_argument("--out", default="startup_refusals", help="with --refusals: result name")
    args = parser.parse_args()
    if args.refusals:
        refusal_table(args.rounds, args.checkout.resolve(), args.out)
        return
    figures = measure(args.rounds)
    medians = {name: statistics.median(values) for name, values in figures.items()}
    rows = [
        [name, f"{m:.2f}", " ".join(f"{v:.2f}" for v in figures[name])]
        for name, m in medians.items()
    ]
    print_table(["measure", "median s", "rounds"], rows)
    floor = medians["floor: ray.init + 2 actors + first batch"]
    startup = medians["fleetrl train: Trainer.startup_s"]
    ratios = {
        "fleetrl --help / python -c pass": medians["fleetrl --help"] / medians["python -c pass"],
        "fleetrl train startup_s / floor": startup / floor,
        "Python API startup_s / floor": medians["Python API: Trainer.startup_s"] / floor,
        "fleetrl train startup_s / torchrl RayCollector": startup
        / medians["torchrl RayCollector: constructor to first batch"],
    }
    print()
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}x")
    print()
    help_s = medians["fleetrl --help"]
    print(f"target fleetrl --help < 1 s: {help_s:.2f} s, {'met' if help_s < 1 else 'missed'}")
    print(
        "target Trainer.startup_s <= 5 s (distributed CartPole, fleetrl train): "
        f"{startup:.2f} s, {'met' if startup <= 5 else 'missed'}"
    )
    path = write_json(
        "startup",
        {"machine": machine(), "rounds": figures, "medians": medians, "ratios": ratios},
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

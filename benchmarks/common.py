"""Shared pieces of the benchmarks: the policy, the env, the raw loop, the table.

The raw loop is the limit every collector is measured against: a plain Python
loop that steps the same gymnasium vector env with the same torch policy and
writes into preallocated tensors, with no TensorDict and no bookkeeping.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.modules import ProbabilisticActor

from fleetrl.envs.gymnasium import make_gym_vector_env

ENV_ID = "CartPole-v1"
RLLIB_VENV = Path(__file__).resolve().parent / ".rllib-venv"
# what the venv holds, one requirement a line: later calls install only what is missing
RLLIB_VENV_STAMP = RLLIB_VENV / "fleetrl-requirements.txt"


def mlp(obs_dim: int = 4, num_actions: int = 2, hidden: int = 64) -> nn.Module:
    return nn.Sequential(
        nn.Linear(obs_dim, hidden),
        nn.Tanh(),
        nn.Linear(hidden, hidden),
        nn.Tanh(),
        nn.Linear(hidden, num_actions),
    )


def categorical_policy(net: nn.Module | None = None) -> ProbabilisticActor:
    """The 64x64 MLP categorical policy every contestant runs: action + log-prob."""
    net = net or mlp()
    return ProbabilisticActor(
        TensorDictModule(net, in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )


def gym_env(num_envs: int):
    """The env every contestant steps: gymnasium SyncVectorEnv, same-step autoreset."""
    return make_gym_vector_env(ENV_ID, num_envs)


#: a timed benchmark run's settings: no evaluation inside it, one checkpoint at the end (for
#: a later evaluation), and no progress bar, TensorBoard or plot
QUIET_RUN = (
    "trainer.test_every=0",
    "trainer.checkpoint_every=0",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
)


def train_command(config: Path, run_dir: Path, *overrides: str) -> list[str]:
    """``fleetrl train CONFIG OVERRIDES --run-dir RUN_DIR`` in a fresh interpreter of this
    venv, with :data:`QUIET_RUN` before the overrides (an override may set one again)."""
    return [
        sys.executable,
        "-m",
        "fleetrl.cli",
        "train",
        str(config),
        *QUIET_RUN,
        *overrides,
        "--run-dir",
        str(run_dir),
    ]


def ensure_rllib_venv(extra: Sequence[str] = ()) -> Path:
    """RLlib's own virtualenv (``benchmarks/.rllib-venv``, git-ignored); its python.

    Created on first use: torch 2.13.0 first, so pip takes the CPU wheel and no
    later requirement pulls a multi-GB CUDA build, then ``ray[rllib]`` at our Ray
    version and gymnasium, then ``extra`` (e.g. ale-py for Atari). A later call
    with more ``extra`` installs only what the stamp file does not list yet.
    """
    import ray

    python = RLLIB_VENV / "bin" / "python"
    wanted = [f"ray[rllib]=={ray.__version__}", "gymnasium[classic-control]", *extra]
    pip = [str(python), "-m", "pip", "install", "-q"]
    if not python.exists():
        print(
            f"creating {RLLIB_VENV} with ray[rllib]=={ray.__version__} (first use only)...",
            flush=True,
        )
        subprocess.run([sys.executable, "-m", "venv", str(RLLIB_VENV)], check=True)
        subprocess.run([*pip, "torch==2.13.0"], check=True)  # the CPU wheel first: no CUDA
    have = RLLIB_VENV_STAMP.read_text().split() if RLLIB_VENV_STAMP.exists() else []
    missing = [r for r in wanted if r not in have]
    if missing:
        print(f"installing {' '.join(missing)} into {RLLIB_VENV}...", flush=True)
        subprocess.run([*pip, *missing], check=True)
        RLLIB_VENV_STAMP.write_text("\n".join([*have, *missing]) + "\n")
    return python


class RawLoop:
    """The limit: env + policy + preallocated tensors, nothing else.

    ``run(steps)`` returns frames/s of ``steps`` vector steps. Built once and
    reused, like a collector, so rounds can alternate contestants.
    """

    def __init__(self, net: nn.Module, num_envs: int, steps: int, seed: int = 0):
        self.net, self.num_envs = net, num_envs
        self.env = gym_env(num_envs)
        self.obs_np, _ = self.env.reset(seed=seed)
        self.obs_buf = torch.empty(steps, num_envs, 4)
        self.next_obs_buf = torch.empty(steps, num_envs, 4)
        self.act_buf = torch.empty(steps, num_envs, dtype=torch.int64)
        self.logp_buf = torch.empty(steps, num_envs)
        self.rew_buf = torch.empty(steps, num_envs)
        self.done_buf = torch.empty(steps, num_envs, dtype=torch.bool)
        self.run(min(steps, 20))

    def run(self, steps: int) -> float:
        net, env, obs_np = self.net, self.env, self.obs_np
        start = time.perf_counter()
        with torch.inference_mode():
            for t in range(steps):
                obs = torch.from_numpy(obs_np)
                dist = torch.distributions.Categorical(logits=net(obs))
                action = dist.sample()
                self.logp_buf[t] = dist.log_prob(action)
                self.obs_buf[t] = obs
                self.act_buf[t] = action
                obs_np, rew, term, trunc, _ = env.step(action.numpy())
                self.next_obs_buf[t] = torch.from_numpy(obs_np)
                self.rew_buf[t] = torch.from_numpy(rew)
                self.done_buf[t] = torch.from_numpy(term | trunc)
        self.obs_np = obs_np
        return steps * self.num_envs / (time.perf_counter() - start)

    def shutdown(self) -> None:
        self.env.close()


class LeanRawLoop(RawLoop):
    """The raw loop doing only what a collector must: the sub-envs of the same vector env
    stepped one by one (a finished one reset at once; no info dicts merged), and the
    categorical draw and its log-probability from the logits (softmax, one multinomial
    draw, the normalized logit gathered), no distribution object built. The limit for a
    collector that does the same (fleetrl's ``SyncDataCollector`` does)."""

    def run(self, steps: int) -> float:
        net, obs_np, n = self.net, self.obs_np, self.num_envs
        envs = self.env.envs
        start = time.perf_counter()
        with torch.inference_mode():
            for t in range(steps):
                obs = torch.from_numpy(obs_np)
                logits = net(obs)
                logits = logits - logits.logsumexp(-1, keepdim=True)
                action = torch.multinomial(logits.softmax(-1), 1, True)
                self.logp_buf[t] = logits.gather(-1, action).squeeze(-1)
                action = action.squeeze(-1)
                self.obs_buf[t] = obs
                self.act_buf[t] = action
                actions = action.numpy()
                obs_np = np.empty_like(obs_np)
                next_obs = obs_np  # a copy only where an episode ended
                reward = np.empty(n)
                done = np.empty(n, dtype=bool)
                for i, env in enumerate(envs):
                    o, reward[i], term, trunc, _ = env.step(actions[i])
                    done[i] = term or trunc
                    if done[i]:
                        if next_obs is obs_np:
                            next_obs = obs_np.copy()
                        next_obs[i] = o
                        o, _ = env.reset()
                    elif next_obs is not obs_np:
                        next_obs[i] = o
                    obs_np[i] = o
                self.next_obs_buf[t] = torch.from_numpy(next_obs)
                self.rew_buf[t] = torch.from_numpy(reward)
                self.done_buf[t] = torch.from_numpy(done)
        self.obs_np = obs_np
        return steps * self.num_envs / (time.perf_counter() - start)


class IterTimer:
    """Times one batch of an iterable collector per call, after one warm-up batch."""

    def __init__(self, collector: object, frames_per_batch: int):
        self.collector, self.frames_per_batch = collector, frames_per_batch
        self.it = iter(collector)
        next(self.it)

    def run(self) -> float:
        start = time.perf_counter()
        next(self.it)
        return self.frames_per_batch / (time.perf_counter() - start)

    def shutdown(self) -> None:
        self.collector.shutdown()


def run_json(
    cmd: Sequence[str], cwd: Path | None = None, timeout: float | None = None
) -> tuple[dict, float]:
    """Run ``cmd`` in a fresh process; the JSON object on its last line of output and its
    wall seconds from launch to exit. RuntimeError with the end of its stderr where it
    fails."""
    start = time.perf_counter()
    out = subprocess.run(
        list(cmd), capture_output=True, text=True, cwd=cwd, timeout=timeout, check=False
    )
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} exited {out.returncode}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]), wall


class LiveCollector:
    """A collector kept live between timed rounds: the seconds to its first batch when
    built (construction included, ``first_batch_s``), then frames/s per round, counted with
    :func:`fleetrl.collectors.frames_in` (a masked sync batch counts its mask).

    Args:
        make: builds the collector (any iterable collector with ``shutdown()``).
        drain: take one batch untimed before each round, so that what the collector
            prefetched while other contestants ran does not count for this round.
    """

    def __init__(self, make, drain: bool = True):
        start = time.perf_counter()
        self.collector = make()
        self.it = iter(self.collector)
        next(self.it)
        self.first_batch_s = time.perf_counter() - start
        self.drain = drain
        #: the frames of the latest round
        self.last_frames = 0

    def run(self, batches: int) -> float:
        """frames/s over ``batches`` batches."""
        return self._timed(lambda frames, done: done < batches)

    def run_for(self, seconds: float) -> float:
        """frames/s over whole batches until ``seconds`` passed (one batch at least)."""
        start = time.perf_counter()
        return self._timed(lambda frames, done: time.perf_counter() - start < seconds)

    def _timed(self, more) -> float:
        from fleetrl.collectors import frames_in

        if self.drain:
            next(self.it)
        frames, done, start = 0, 0, time.perf_counter()
        while done == 0 or more(frames, done):  # one batch at least
            frames += frames_in(next(self.it))
            done += 1
        self.last_frames = frames
        return frames / (time.perf_counter() - start)

    def shutdown(self) -> None:
        self.collector.shutdown()


#: the keys every result file's ``machine`` record holds (the docs' benchmark pages show them)
MACHINE_KEYS = ("cpu_model", "cores", "python", "torch", "torchrl", "tensordict", "ray", "numpy")


def cpu_model() -> str:
    """The processor's model name, as the OS reports it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """What a result ran on: the CPU, its cores, and the versions that matter."""
    import ray
    import tensordict
    import torchrl

    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchrl": torchrl.__version__,
        "tensordict": tensordict.__version__,
        "ray": ray.__version__,
        "numpy": np.__version__,
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def paired_ratio(a: Sequence[float] | None, b: Sequence[float] | None) -> float | None:
    """How ``a`` compares with ``b``, the one way every benchmark computes a ratio: the
    median over the paired rounds of each round's ``a / b`` (both measured in the same round,
    so the machine's drift cancels), not the ratio of the two medians. None where either was
    not measured.

    Example:
        >>> paired_ratio([10.0, 30.0, 20.0], [5.0, 10.0, 20.0])  # rounds: 2.0, 3.0, 1.0
        2.0
    """
    if not a or not b:
        return None
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


#: every table this process printed, in order: write_json saves them with the results
TABLES: list[dict] = []


def write_json(name: str, payload: dict, tables: bool = True) -> Path:
    """Save ``payload`` as ``benchmarks/results/<name>.json``, with the machine, the date and
    every table printed so far (the docs' benchmark pages are generated from these files).
    ``tables=False`` for a file whose results merge several runs: the tables printed are
    this run's only, and the page builds its table from the merged results instead."""
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    path = out / f"{name}.json"
    payload = {
        **payload,
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(
            ["python", *[Path(a).name if i == 0 else a for i, a in enumerate(sys.argv)]]
        ),
        **({"tables": list(TABLES)} if tables else {}),
    }
    path.write_text(json.dumps(payload, indent=2))
    return path


def print_table(header: list[str], rows: list[list[str]], title: str | None = None) -> None:
    """Print a table, and keep it for the result file (:func:`write_json`)."""
    TABLES.append(
        {
            "title": title,
            "header": [str(h) for h in header],
            "rows": [[str(x) for x in row] for row in rows],
        }
    )
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = " | ".join(f"{{:>{w}}}" for w in widths)
    if title:
        print(title)
    print(fmt.format(*header))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(fmt.format(*row))


# ------------------------------------------------------------------ plots
RESULTS_DIR = Path(__file__).parent / "results"


def _pyplot():
    """matplotlib's pyplot on the Agg backend (files only), or None where it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def plot_collector_throughput(results: list[dict], out: Path = RESULTS_DIR) -> Path | None:
    """``collector_throughput.png``: frames/s against the number of envs, one line per
    contestant (the two raw loops, fleetrl, fleetrl with a compiled policy, torchrl), from the
    rows of ``collector_throughput.json``'s ``results``; both axes logarithmic."""
    plt = _pyplot()
    if plt is None or not results:
        return None
    envs = [r["num_envs"] for r in results]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (
        ("raw_fps", "raw loop (gymnasium vector step, torch Categorical)"),
        ("lean_fps", "lean raw loop (the limit)"),
        ("fleetrl_fps", "fleetrl SyncDataCollector"),
        ("compiled_fps", "fleetrl, compiled policy"),
        ("torchrl_fps", "torchrl Collector"),
    ):
        ys = [r.get(key) for r in results]
        if all(y is not None for y in ys):
            ax.plot(envs, ys, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(envs, [str(n) for n in envs])
    ax.set_xlabel("envs in the collector (CartPole-v1)")
    ax.set_ylabel("frames/s (median of paired rounds)")
    ax.set_title("Collector throughput against envs")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return _save(fig, plt, out / "collector_throughput.png")


def plot_ray_scaling(rows: list[dict], out: Path = RESULTS_DIR) -> Path | None:
    """``ray_throughput.png``: first-ready frames/s against the number of collectors, one
    line per contestant (the raw loops, fleetrl's and torchrl's ``RayCollector``), from
    ``ray_throughput.json``'s ``results.scaling``."""
    plt = _pyplot()
    if plt is None or not rows:
        return None
    counts = [r["collectors"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label in (
        ("limit_fps", "raw loops, one per process (the limit)"),
        ("fleetrl_async_fps", "fleetrl RayCollector, first ready"),
        ("torchrl_async_fps", "torchrl RayCollector, first ready"),
    ):
        points = [(k, r.get(key)) for k, r in zip(counts, rows, strict=True)]
        points = [(k, y) for k, y in points if y is not None]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=label)
    ax.set_xticks(counts, [str(k) for k in counts])
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(lambda y, _: f"{y / 1000:,.0f}k")
    ax.set_xlabel("collectors (64 CartPole-v1 envs each)")
    ax.set_ylabel("frames/s (median of paired rounds)")
    ax.set_title("Ray throughput against collectors")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return _save(fig, plt, out / "ray_throughput.png")


def plot_learner_ratios(
    cases: dict[str, dict], name: str = "learner_throughput", out: Path = RESULTS_DIR
) -> Path | None:
    """``<name>.png`` (the result file's name): each case's fleetrl optimizer step against the same
    update written in plain PyTorch (plain ms / fleetrl ms: above 1 is faster than plain),
    eager and, where measured, compiled, from ``learner_throughput.json``'s ``cases``; the
    0.9x line is the target."""
    plt = _pyplot()
    if plt is None or not cases:
        return None
    names = list(cases)
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(names) + 1.5))
    modes = [m for m in ("eager", "compiled") if any(cases[n].get(f"ratio_{m}") for n in names)]
    height = 0.8 / max(1, len(modes))
    for i, mode in enumerate(modes):
        ratios = [cases[n].get(f"ratio_{mode}") or 0.0 for n in names]
        ys = [k + (i - (len(modes) - 1) / 2) * height for k in range(len(names))]
        ax.barh(ys, ratios, height=height, label=f"fleetrl {mode} / plain {mode}")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.axvline(0.9, color="grey", linestyle="--", label="target 0.9x")
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("plain PyTorch ms per step / fleetrl ms per step")
    ax.set_title("Learner throughput against plain PyTorch")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.3 / len(names)), ncol=3)
    return _save(fig, plt, out / f"{name}.png")


def return_curve(rows: list[dict], wall: float) -> list[list[float]]:
    """A run's ``metrics.csv`` rows as ``[frames, train/episode_return, seconds since the
    process started]`` points, rows without a return left out; ``wall``: the process's
    seconds from start to exit (the start-up before the trainer's clock is added to it)."""
    offset = wall - float(rows[-1]["time/elapsed_s"])
    return [
        [
            int(float(r["train/frames"])),
            float(r["train/episode_return"]),
            offset + float(r["time/elapsed_s"]),
        ]
        for r in rows
        if r.get("train/episode_return", "") not in ("", "nan")
    ]


def summed_columns(rows: list[dict], keys: Sequence[str]) -> dict[str, float]:
    """Each of ``keys`` (per-iteration seconds) summed over a run's ``metrics.csv`` rows:
    where the run's time went. A key the file lacks is left out."""
    return {
        key: sum(float(r[key]) for r in rows if r.get(key, "") not in ("", "nan"))
        for key in keys
        if key in rows[-1]
    }


def plot_returns(
    path: Path,
    title: str,
    curves: dict[str, list[list[float]]],
    *,
    xlabel: str,
    line: tuple[float, str] | None = None,
) -> Path | None:
    """A learning-curve PNG: each curve's ``[steps, mean training return, ...]`` points
    against steps, one line per label, and ``line`` (a value and its label: a target, a
    random policy's score) dashed; None where matplotlib is missing."""
    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, curve in curves.items():
        if curve:
            ax.plot([c[0] for c in curve], [c[1] for c in curve], label=label)
    if line is not None:
        ax.axhline(line[0], color="grey", linestyle="--", label=line[1])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("mean training return (last 20 episodes)")
    ax.set_title(title)
    ax.legend()
    return _save(fig, plt, path)


def _save(fig, plt, path: Path) -> Path:
    path.parent.mkdir(exist_ok=True)
    fig.tight_layout()
    # no timestamp in the file: the same results draw the same bytes
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path


def redraw(out: Path = RESULTS_DIR) -> list[Path]:
    """Draw every plot again from the committed result files (``python benchmarks/common.py
    plots``): the same plots each benchmark draws when it writes its results."""
    drawn = [
        plot_collector_throughput(
            json.loads((out / "collector_throughput.json").read_text())["results"], out
        ),
        *(
            plot_learner_ratios(json.loads((out / f"{name}.json").read_text())["cases"], name, out)
            for name in (
                "learner_throughput",
                "learner_throughput_compiled",
                "learner_throughput_recurrent",
            )
        ),
        plot_ray_scaling(
            json.loads((out / "ray_throughput.json").read_text())["results"].get("scaling", []),
            out,
        ),
    ]
    return [p for p in drawn if p is not None]


if __name__ == "__main__":
    if sys.argv[1:] != ["plots"]:
        sys.exit("usage: python benchmarks/common.py plots")
    for drawn_path in redraw():
        print(f"drew {drawn_path}")

"""Multi-agent PPO on MPE simple_spread: fleetrl's MAPPO against torchrl's own loop, and
multi-agent collection against a raw loop.

One run, the same env (``mpe2:simple_spread_v3``: 3 agents, 25-step episodes, 8 envs) and
the same hyperparameters (read from ``configs/mappo_simple_spread.yaml``: lr, gamma,
lambda, clip, entropy and critic coefficients, epochs, minibatches, gradient clip, hidden
sizes, shared parameters, frames per batch), ``--frames`` frames per learner run:

- ``fleetrl``: fleetrl's MAPPO through its ``Trainer`` on the shipped config
  (``collector.num_collectors: 0``: the envs step in the learner process);
- ``torchrl``: torchrl's own MAPPO loop, written here the way torchrl's multi-agent PPO
  tutorial writes it: ``PettingZooWrapper`` envs in a ``SerialEnv`` with a ``RewardSum``,
  a ``MultiAgentMLP`` actor and a centralised ``MultiAgentMLP`` critic, torchrl's
  ``Collector``, ``MAPPOLoss`` with its ``MultiAgentGAE``, a ``ReplayBuffer`` sampled
  without replacement for the minibatches, Adam with the same eps as fleetrl's (1e-5);
- ``rllib`` (``--rllib``): RLlib's multi-agent PPO on the same PettingZoo env
  (``ParallelPettingZooEnv``, one policy shared by the agents, 8 envs in the learner
  process) in ``benchmarks/.rllib-venv`` (made on first use). Its critic is each agent's
  own (RLlib has no centralised critic built in), its return is divided by the 3 agents.

Each learner runs in a fresh process; its wall time is from the process's launch (imports
included) and its curve records, after each batch, the frames, the mean team return of the
last 40 finished episodes (``trainer.return_window``: the sum over an episode of the agents'
mean reward) and the seconds since launch. With several seeds the contestants alternate
in order from seed to seed and each ratio is the median of the seeds' ratios
(``paired_ratio``).

- **return at equal frames**: the mean of the last 3 curve points (3 batches), per
  contestant at the same frames;
- **wall time to a shared return**: the lower of fleetrl's and torchrl's loop's returns at
  equal frames is the shared return (the target's pair: RLlib's return, when it runs, does
  not move it); each contestant's time is when the mean of its last 3 points first
  reached it.

Collection (``--collect-seconds`` of timed collection per contestant, in alternating
rounds): fleetrl's ``RayCollector`` with 1 and 2 collectors, built by
``fleetrl.setup.build.make_collector`` from the shipped config (``collector.num_collectors``
1 and 2, its ``sync: true`` and ``prefetch: 0``), acting with a fresh MAPPO's policy,
against the limit: the raw loop (8 PettingZoo envs stepped in plain Python, the same
``MultiAgentMLP`` actor called on a stacked tensor, preallocated tensors, no TensorDict)
in 1 and in 2 processes at once (frames/s summed). fleetrl's local ``SyncDataCollector``
(``num_collectors: 0``, what the learner run collects with) and torchrl's ``Collector`` of
the torchrl loop run in the same rounds against the single raw loop.

    python benchmarks/marl.py [--frames 100000] [--seeds 1] [--collect-seconds 12] [--rllib]

Writes ``benchmarks/results/marl.json``. Targets (issue 37): on simple_spread, fleetrl's
return at equal frames at least torchrl's loop's, in at most 0.5x its wall time (to the
shared return); collection at least 0.9x the raw loop (1 and 2 Ray collectors).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "mappo_simple_spread.yaml"
MAX_CYCLES = 25  # simple_spread's episode length (mpe2's default, as the config builds it)
SMOOTH = 3  # curve points (batches) averaged into a return
TARGET_RETURN_GAP = 0.0  # fleetrl's return at equal frames - torchrl's >= 0
TARGET_WALL_RATIO = 0.5  # fleetrl's wall time to the shared return <= 0.5x torchrl's
TARGET_COLLECT_RATIO = 0.9  # collection >= 0.9x the raw loop
#: fleetrl's defaults for the keys the config omits, and its Adam eps (fixed in MultiAgentPPO)
DEFAULTS = {"normalize_advantage": True, "clip_value": None, "adam_eps": 1e-5}
#: fleetrl's timing stats (``time/<key>`` of each metrics row) summed over a learner run
FLEETRL_TIMES = ("collect_s", "env_s", "policy_s", "pack_s", "learn_s")
QUIET = [
    "trainer.test_every=0",
    "trainer.checkpoint_every=0",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]

warnings.filterwarnings("ignore")


# ------------------------------------------------------------------ pure helpers


def hyperparameters(path: Path = CONFIG) -> dict:
    """The settings every contestant trains with, read from the shipped config's YAML (the
    torchrl loop imports nothing of fleetrl), with fleetrl's defaults for keys it omits."""
    import yaml

    raw = yaml.safe_load(Path(path).read_text())
    algo = raw["mappo"]
    return {
        "env_id": raw["env"]["id"],
        "num_envs": int(raw["env"]["num_envs"]),
        "frames_per_batch": int(raw["collector"]["frames_per_batch"]),
        "return_window": int(raw["trainer"]["return_window"]),
        "lr": float(algo["lr"]),
        "gamma": float(algo["gamma"]),
        "gae_lambda": float(algo["gae_lambda"]),
        "clip_epsilon": float(algo["clip_epsilon"]),
        "entropy_coef": float(algo["entropy_coef"]),
        "critic_coef": float(algo["critic_coef"]),
        "num_epochs": int(algo["num_epochs"]),
        "num_mini_batch": int(algo["num_mini_batch"]),
        "max_grad_norm": algo["max_grad_norm"],
        "hidden_sizes": [int(h) for h in algo["hidden_sizes"]],
        "share_params": bool(algo["share_params"]),
        **{k: algo.get(k, v) for k, v in DEFAULTS.items()},
    }


def smoothed(curve: list[list[float]], k: int = SMOOTH) -> list[list[float]]:
    """Each point ``[frames, return, seconds]`` with its return averaged over it and the
    ``k - 1`` points before it (fewer at the start); points without a return are dropped."""
    points = [p for p in curve if p[1] is not None and not math.isnan(p[1])]
    out = []
    for i, (frames, _, seconds) in enumerate(points):
        window = [p[1] for p in points[max(0, i - k + 1) : i + 1]]
        out.append([frames, sum(window) / len(window), seconds])
    return out


def return_at(curve: list[list[float]], frames: float, k: int = SMOOTH) -> float | None:
    """The smoothed return at the last point at or before ``frames`` (None: none yet)."""
    before = [p for p in smoothed(curve, k) if p[0] <= frames]
    return before[-1][1] if before else None


def time_to_return(curve: list[list[float]], target: float, k: int = SMOOTH) -> float | None:
    """Seconds since launch when the smoothed return first reached ``target`` (None: never)."""
    return next((p[2] for p in smoothed(curve, k) if p[1] >= target), None)


#: the contestants whose returns set the shared return: the issue's target compares these two
SHARED_BY = ("fleetrl", "torchrl")


def shared_return(finals: dict[str, float | None]) -> float | None:
    """The return both of :data:`SHARED_BY` reached: the lower of their returns at equal
    frames (every contestant's where neither ran). Another contestant's time to it is
    reported where it reached it."""
    pair = {n: v for n, v in finals.items() if n in SHARED_BY}
    values = [v for v in (pair or finals).values() if v is not None]
    return min(values) if values else None


#: the packages a profile's own time is summed under (the rest: "other Python")
PACKAGES = ("mpe2", "pettingzoo", "fleetrl", "torchrl", "tensordict", "torch", "numpy")


def package_of(filename: str, function: str) -> str:
    """Which package a cProfile entry's own time belongs to: by its file's path, or for a
    built-in (file ``~``) by the module its name shows (``<built-in method torch.cat>``)."""
    if filename == "~":
        name = function.replace("<built-in method ", "").replace("<method ", "")
        for package in PACKAGES:
            if package in name:
                return f"{package} (C)"
        return "built-ins (C)"
    parts = Path(filename).parts
    for package in PACKAGES:
        if package in parts:
            return package
    return "other Python"


def profile_by_package(run) -> tuple[dict[str, float], int]:
    """``run()`` (returning the frames it stepped) under cProfile: the own time of each
    package (:func:`package_of`) in seconds, and the frames."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    frames = run()
    profiler.disable()
    spent: dict[str, float] = {}
    for (filename, _, function), (_, _, own, _, _) in pstats.Stats(profiler).stats.items():
        key = package_of(filename, function)
        spent[key] = spent.get(key, 0.0) + own
    return spent, frames


def profile_table(profiles: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: each package's own time in microseconds per frame, one column per
    profile (``{"own_s": {package: seconds}, "frames": n}``), the costliest package first
    (its largest figure in any column), then the total."""

    def per_frame(prof: dict, package: str | None) -> float:
        own = prof["own_s"].get(package, 0.0) if package else sum(prof["own_s"].values())
        return 1e6 * own / prof["frames"]

    packages = sorted(
        {p for prof in profiles.values() for p in prof["own_s"]},
        key=lambda p: -max(per_frame(prof, p) for prof in profiles.values()),
    )
    rows = [
        [p or "all", *(f"{per_frame(prof, p):.1f}" for prof in profiles.values())]
        for p in [*packages, None]
    ]
    return ["own time of", *(f"{n}, us/frame" for n in profiles)], rows


def fmt(value: float | None, spec: str = ".2f", unit: str = "") -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else (f"{value:{spec}}{unit}")
    )


# ------------------------------------------------------------------ the learners


def fleetrl_worker(frames: int, seed: int, launched_at: float) -> dict:
    """fleetrl's MAPPO through its Trainer, on the shipped config (run in a fresh process)."""
    from fleetrl import Trainer, load_config

    config = load_config(
        str(CONFIG), [f"trainer.total_frames={frames}", f"trainer.seed={seed}", *QUIET]
    )
    import torch

    curve: list[list[float]] = []
    spent = dict.fromkeys(FLEETRL_TIMES, 0.0)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(config, run_dir=Path(tmp) / "run")

        def record(row: dict, _checkpoint) -> None:
            for key in spent:  # fleetrl's own timing stats, summed over the run
                value = float(row.get(f"time/{key}", math.nan))
                spent[key] += 0.0 if math.isnan(value) else value
            curve.append(
                [
                    int(row["train/frames"]),
                    float(row["train/episode_return"]),
                    time.time() - launched_at,
                ]
            )

        last = trainer.train(on_iteration=record)
        trained = time.time() - launched_at
    return {
        "curve": curve,
        "trained_s": trained,
        "startup_s": trainer.startup_s,
        "updates": int(last.get("train/policy_version", 0)),
        "torch_threads": torch.get_num_threads(),
        "spent_s": spent,
    }


def make_torchrl_env(hp: dict, seed: int):
    """torchrl's side of the env: ``num_envs`` PettingZooWrappers in a SerialEnv, the
    agents in one group ``"agents"``, and a RewardSum of each agent's episode reward."""
    from mpe2 import simple_spread_v3
    from torchrl.envs import PettingZooWrapper, RewardSum, SerialEnv, TransformedEnv
    from torchrl.envs.utils import MarlGroupMapType

    def one():
        return PettingZooWrapper(
            simple_spread_v3.parallel_env(max_cycles=MAX_CYCLES),
            group_map=MarlGroupMapType.ALL_IN_ONE_GROUP,
            categorical_actions=True,
        )

    env = TransformedEnv(
        SerialEnv(hp["num_envs"], one),
        RewardSum(in_keys=[("agents", "reward")], out_keys=[("agents", "episode_reward")]),
    )
    env.set_seed(seed)
    return env


def make_torchrl_networks(env, hp: dict):
    """The tutorial's networks: a decentralised MultiAgentMLP actor (categorical, log-prob)
    and a centralised MultiAgentMLP critic, both shared by the agents."""
    import torch
    from tensordict.nn import TensorDictModule
    from torchrl.modules import MultiAgentMLP, ProbabilisticActor

    obs_spec = env.observation_spec["agents", "observation"]
    n_agents, obs_dim = obs_spec.shape[-2], obs_spec.shape[-1]
    n_actions = env.full_action_spec["agents", "action"].space.n
    actor_net = MultiAgentMLP(
        n_agent_inputs=obs_dim,
        n_agent_outputs=n_actions,
        n_agents=n_agents,
        centralized=False,
        share_params=hp["share_params"],
        num_cells=hp["hidden_sizes"],
        activation_class=torch.nn.Tanh,
    )
    policy = ProbabilisticActor(
        TensorDictModule(
            actor_net, in_keys=[("agents", "observation")], out_keys=[("agents", "logits")]
        ),
        in_keys={"logits": ("agents", "logits")},
        out_keys=[("agents", "action")],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )
    critic = TensorDictModule(
        MultiAgentMLP(
            n_agent_inputs=obs_dim,
            n_agent_outputs=1,
            n_agents=n_agents,
            centralized=True,
            share_params=hp["share_params"],
            num_cells=hp["hidden_sizes"],
            activation_class=torch.nn.Tanh,
        ),
        in_keys=[("agents", "observation")],
        out_keys=[("agents", "state_value")],
    )
    return policy, critic


def torchrl_worker(frames: int, seed: int, launched_at: float) -> dict:
    """torchrl's MAPPO loop, as its multi-agent PPO tutorial writes one (a fresh process)."""
    import torch
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement
    from torchrl.objectives import ValueEstimators
    from torchrl.objectives.multiagent import MAPPOLoss

    hp = hyperparameters()
    torch.manual_seed(seed)
    env = make_torchrl_env(hp, seed)
    policy, critic = make_torchrl_networks(env, hp)
    fpb = hp["frames_per_batch"]
    collector = Collector(env, policy, frames_per_batch=fpb, total_frames=frames)
    minibatch = fpb // hp["num_mini_batch"]
    buffer = ReplayBuffer(
        storage=LazyTensorStorage(fpb),
        sampler=SamplerWithoutReplacement(),
        batch_size=minibatch,
    )
    loss_module = MAPPOLoss(
        policy,
        critic,
        clip_epsilon=hp["clip_epsilon"],
        entropy_bonus=hp["entropy_coef"] > 0,
        entropy_coeff=hp["entropy_coef"],
        critic_coeff=hp["critic_coef"],
        normalize_advantage=hp["normalize_advantage"],
        clip_value=hp["clip_value"],
        loss_critic_type="l2",
    )
    loss_module.set_keys(
        reward=("agents", "reward"),
        action=("agents", "action"),
        sample_log_prob=("agents", "action_log_prob"),
        value=("agents", "state_value"),
        done=("agents", "done"),
        terminated=("agents", "terminated"),
    )
    loss_module.make_value_estimator(
        ValueEstimators.MAGAE, gamma=hp["gamma"], lmbda=hp["gae_lambda"]
    )
    gae = loss_module.value_estimator
    optim = torch.optim.Adam(loss_module.parameters(), lr=hp["lr"], eps=hp["adam_eps"])

    window: deque[float] = deque(maxlen=hp["return_window"])
    curve: list[list[float]] = []
    seen, startup = 0, None
    spent = {"collect_s": 0.0, "learn_s": 0.0}
    waited = time.perf_counter()
    for batch in collector:
        learn_start = time.perf_counter()
        spent["collect_s"] += learn_start - waited
        if startup is None:
            startup = time.time() - launched_at
        with torch.no_grad():
            gae(
                batch,
                params=loss_module.critic_network_params,
                target_params=loss_module.target_critic_network_params,
            )
        buffer.extend(batch.reshape(-1))
        for _ in range(hp["num_epochs"]):
            for _ in range(fpb // minibatch):
                sub = buffer.sample()
                losses = loss_module(sub)
                total = losses["loss_objective"] + losses["loss_critic"]
                if "loss_entropy" in losses.keys():  # noqa: SIM118  (a TensorDict)
                    total = total + losses["loss_entropy"]
                total.backward()
                if hp["max_grad_norm"] is not None:
                    torch.nn.utils.clip_grad_norm_(loss_module.parameters(), hp["max_grad_norm"])
                optim.step()
                optim.zero_grad()
        collector.update_policy_weights_()
        spent["learn_s"] += time.perf_counter() - learn_start
        # the team's return: each finished episode's sum of the agents' mean reward
        done = batch["next", "done"]  # [envs, T, 1]: every agent of an episode ends together
        team = batch["next", "agents", "episode_reward"].mean(-2)  # [envs, T, 1]
        window.extend(team[done].tolist())
        seen += batch.numel()
        curve.append(
            [seen, sum(window) / len(window) if window else math.nan, time.time() - launched_at]
        )
        waited = time.perf_counter()
    trained = time.time() - launched_at
    collector.shutdown()
    return {
        "curve": curve,
        "trained_s": trained,
        "startup_s": startup,
        "updates": len(curve) * hp["num_epochs"] * hp["num_mini_batch"],
        "torch_threads": torch.get_num_threads(),
        "spent_s": spent,
    }


RLLIB_SCRIPT = r"""
import json, sys, time
launched_at = float(sys.argv[4])
seed, budget, hp = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
import ray
from mpe2 import simple_spread_v3
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
from ray.tune.registry import register_env

N_AGENTS = 3
register_env("simple_spread",
             lambda _: ParallelPettingZooEnv(simple_spread_v3.parallel_env(max_cycles=25)))
ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
fpb = hp["frames_per_batch"]
config = (
    PPOConfig()
    .environment("simple_spread")
    .multi_agent(policies={"shared"}, policy_mapping_fn=lambda agent_id, *a, **k: "shared")
    .env_runners(num_env_runners=0, num_envs_per_env_runner=hp["num_envs"])
    .training(lr=hp["lr"], gamma=hp["gamma"], lambda_=hp["gae_lambda"],
              clip_param=hp["clip_epsilon"], entropy_coeff=hp["entropy_coef"],
              vf_loss_coeff=hp["critic_coef"], num_epochs=hp["num_epochs"],
              grad_clip=hp["max_grad_norm"], grad_clip_by="global_norm",
              train_batch_size_per_learner=fpb,
              # a minibatch counts agent steps: the batch's env steps x 3 agents, in 4
              minibatch_size=fpb * N_AGENTS // hp["num_mini_batch"])
    .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=hp["hidden_sizes"],
                                               fcnet_activation="tanh",
                                               vf_share_layers=False))
    .reporting(metrics_num_episodes_for_smoothing=hp["return_window"])
    .debugging(seed=seed)
)
algo = config.build_algo()
curve, frames, startup = [], 0, None
while frames < budget:
    result = algo.train()
    if startup is None:
        startup = time.time() - launched_at
    runners = result.get("env_runners", {})
    ret = runners.get("episode_return_mean", float("nan")) / N_AGENTS  # the agents' sum
    frames = result.get("num_env_steps_sampled_lifetime",
                        runners.get("num_env_steps_sampled_lifetime", 0))
    curve.append([int(frames), ret, time.time() - launched_at])
trained = time.time() - launched_at
print(json.dumps({"curve": curve, "trained_s": trained, "startup_s": startup}))
algo.stop()
ray.shutdown()
"""


def run_learner(name: str, frames: int, seed: int) -> dict:
    """One learner run in a fresh process: its curve, and its wall time from launch to exit."""
    launched_at = time.time()
    if name == "rllib":
        from common import ensure_rllib_venv

        python = ensure_rllib_venv(["pettingzoo==1.27.0", "mpe2==1.1.1"])
        launched_at = time.time()  # the venv's making not counted
        cmd = [
            str(python),
            "-c",
            RLLIB_SCRIPT,
            str(seed),
            str(frames),
            json.dumps(hyperparameters()),
            repr(launched_at),
        ]
    else:
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            name,
            "--frames",
            str(frames),
            "--seed",
            str(seed),
            "--launched-at",
            repr(launched_at),
        ]
    from common import run_json

    result, wall = run_json(cmd, cwd=ROOT)
    curve = result["curve"]
    result.update(
        wall_s=wall,
        frames=int(curve[-1][0]) if curve else 0,
        frames_per_s=(curve[-1][0] / wall) if curve else None,
    )
    print(
        f"{name} seed {seed}: {result['frames']:,} frames, return "
        f"{fmt(return_at(curve, result['frames']))}, {wall:.1f} s",
        flush=True,
    )
    return result


def learning(frames: int, seeds: int, rllib: bool) -> tuple[dict, dict]:
    """Every contestant on every seed (their order alternating from seed to seed)."""
    names = ["fleetrl", "torchrl", *(["rllib"] if rllib else [])]
    runs: dict[str, list[dict]] = {n: [] for n in names}
    failed: dict[str, str] = {}
    for seed in range(seeds):
        order = names if seed % 2 == 0 else names[::-1]
        for name in order:
            if name in failed:
                continue
            try:
                runs[name].append(run_learner(name, frames, seed))
            except (RuntimeError, subprocess.SubprocessError, OSError) as err:
                failed[name] = str(err)[-2000:]
                print(f"{name} FAILED: {failed[name]}", flush=True)
    return {n: r for n, r in runs.items() if r}, failed


def learning_summary(runs: dict[str, list[dict]]) -> dict:
    """Per seed: each contestant's return at equal frames, the shared return and the time
    to it; per contestant the medians; the paired ratios against torchrl's loop."""
    from common import paired_ratio

    seeds = min(len(r) for r in runs.values())
    equal = min(run["frames"] for rs in runs.values() for run in rs)  # equal frames
    per_seed = []
    for s in range(seeds):
        finals = {n: return_at(rs[s]["curve"], equal) for n, rs in runs.items()}
        shared = shared_return(finals)
        to_shared = {
            n: time_to_return(rs[s]["curve"], shared) if shared is not None else None
            for n, rs in runs.items()
        }
        per_seed.append({"return": finals, "shared_return": shared, "time_to_shared_s": to_shared})
    summary: dict = {"equal_frames": equal, "per_seed": per_seed, "contestants": {}}
    for n, rs in runs.items():
        rets = [p["return"][n] for p in per_seed if p["return"][n] is not None]
        times = [p["time_to_shared_s"][n] for p in per_seed if p["time_to_shared_s"][n]]
        summary["contestants"][n] = {
            "return": statistics.median(rets) if rets else None,
            "time_to_shared_s": statistics.median(times) if times else None,
            "wall_s": statistics.median(r["wall_s"] for r in rs[:seeds]),
            "trained_s": statistics.median(r["trained_s"] for r in rs[:seeds]),
            "startup_s": statistics.median(r["startup_s"] for r in rs[:seeds] if r["startup_s"]),
            "frames_per_s": statistics.median(r["frames_per_s"] for r in rs[:seeds]),
            "torch_threads": rs[0].get("torch_threads"),
        }
    if "fleetrl" in runs and "torchrl" in runs:
        f_ret = [p["return"]["fleetrl"] for p in per_seed]
        t_ret = [p["return"]["torchrl"] for p in per_seed]
        summary["return_difference"] = statistics.median(a - b for a, b in zip(f_ret, t_ret))
        summary["time_to_shared_ratio"] = paired_ratio(
            [p["time_to_shared_s"]["fleetrl"] for p in per_seed],
            [p["time_to_shared_s"]["torchrl"] for p in per_seed],
        )
        summary["wall_ratio"] = paired_ratio(
            [r["wall_s"] for r in runs["fleetrl"][:seeds]],
            [r["wall_s"] for r in runs["torchrl"][:seeds]],
        )
    return summary


# ------------------------------------------------------------------ collection


class RawLoop:
    """The limit: ``num_envs`` PettingZoo envs stepped in plain Python with the actor's
    MultiAgentMLP on one stacked tensor, into preallocated tensors; nothing else.

    ``run_for(seconds)`` steps whole 25-step chunks until ``seconds`` passed; frames/s.
    """

    def __init__(self, net, num_envs: int, seed: int = 0, chunk: int = MAX_CYCLES):
        import numpy as np
        import torch
        from mpe2 import simple_spread_v3

        self.np, self.torch, self.net, self.chunk = np, torch, net, chunk
        self.envs = [simple_spread_v3.parallel_env(max_cycles=MAX_CYCLES) for _ in range(num_envs)]
        self.agents = list(self.envs[0].possible_agents)
        self.obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)]
        n, a = num_envs, len(self.agents)
        dim = self.envs[0].observation_space(self.agents[0]).shape[0]
        self.obs_buf = torch.empty(chunk, n, a, dim)
        self.next_obs_buf = torch.empty(chunk, n, a, dim)
        self.act_buf = torch.empty(chunk, n, a, dtype=torch.int64)
        self.logp_buf = torch.empty(chunk, n, a)
        self.rew_buf = torch.empty(chunk, n, a)
        self.done_buf = torch.empty(chunk, n, dtype=torch.bool)
        self.run_for(0.0)

    def run_for(self, seconds: float) -> float:
        np, torch, net, agents, envs = self.np, self.torch, self.net, self.agents, self.envs
        frames, start = 0, time.perf_counter()
        with torch.inference_mode():
            while True:
                for t in range(self.chunk):
                    obs = torch.from_numpy(np.stack([[o[a] for a in agents] for o in self.obs]))
                    dist = torch.distributions.Categorical(logits=net(obs))
                    action = dist.sample()
                    self.logp_buf[t] = dist.log_prob(action)
                    self.obs_buf[t] = obs
                    self.act_buf[t] = action
                    act = action.numpy()
                    for i, env in enumerate(envs):
                        o, r, term, trunc, _ = env.step(dict(zip(agents, act[i])))
                        self.next_obs_buf[t, i] = torch.from_numpy(np.stack([o[a] for a in agents]))
                        self.rew_buf[t, i] = torch.tensor([r[a] for a in agents])
                        done = all(term[a] or trunc[a] for a in agents)
                        self.done_buf[t, i] = done
                        self.obs[i] = env.reset()[0] if done else o
                frames += self.chunk * len(envs)
                if time.perf_counter() - start >= seconds:
                    self.last_frames = frames
                    return frames / (time.perf_counter() - start)


def actor_mlp(policy):
    """The MultiAgentMLP inside a MAPPO policy: what the raw loop calls."""
    from torchrl.modules import MultiAgentMLP

    return next(m for m in policy.modules() if isinstance(m, MultiAgentMLP))


def _raw_process(spec: dict, state: dict, num_envs: int, conn, barrier) -> None:
    import torch
    from torchrl.modules import MultiAgentMLP

    torch.set_num_threads(1)
    net = MultiAgentMLP(**spec)
    net.load_state_dict(state)
    loop = RawLoop(net, num_envs)
    conn.send("ready")
    while (msg := conn.recv()) is not None:
        seconds, together = msg
        if together:
            barrier.wait()
        conn.send(loop.run_for(seconds))


class RawPool:
    """Raw loops in their own processes (one torch thread each), alive between rounds:
    ``run(k, seconds)`` runs ``k`` of them at once and sums their frames/s."""

    def __init__(self, net, num_envs: int, processes: int = 2):
        ctx = mp.get_context("spawn")
        spec = {
            "n_agent_inputs": net.n_agent_inputs,
            "n_agent_outputs": net.n_agent_outputs,
            "n_agents": net.n_agents,
            "centralized": net.centralized,
            "share_params": net.share_params,
            "num_cells": list(net.num_cells),
            "activation_class": net.activation_class,
        }
        state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        self.barrier = ctx.Barrier(processes)
        self.conns, self.procs = [], []
        for _ in range(processes):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(
                target=_raw_process, args=(spec, state, num_envs, theirs, self.barrier)
            )
            proc.start()
            self.conns.append(mine)
            self.procs.append(proc)
        for conn in self.conns:
            assert conn.recv() == "ready"

    def run(self, k: int, seconds: float) -> float:
        together = k == len(self.conns)
        for conn in self.conns[:k]:
            conn.send((seconds, together))
        return sum(conn.recv() for conn in self.conns[:k])

    def shutdown(self) -> None:
        for conn in self.conns:
            conn.send(None)
        for proc in self.procs:
            proc.join(timeout=10)


def collection(seconds: float, rounds: int) -> dict:
    """frames/s of each contestant in alternating rounds, and each one's paired ratios."""
    import ray
    import torch

    from common import LiveCollector, paired_ratio
    from fleetrl import load_config
    from fleetrl.setup.build import make_algorithm, make_collector

    torch.set_num_threads(1)
    hp = hyperparameters()
    base = load_config(str(CONFIG), QUIET)
    algorithm = make_algorithm(base, seed=0)
    policy = algorithm.policy
    net = actor_mlp(policy)

    def fleetrl(k: int):
        config = load_config(str(CONFIG), [f"collector.num_collectors={k}", *QUIET])
        # as the Trainer builds it: the env computes only what the networks read
        reads = algorithm.env_keys_read()
        return lambda: make_collector(config, policy, total_frames=-1, seed=0, reads=reads)

    def torchrl_collector():
        from torchrl.collectors import Collector

        env = make_torchrl_env(hp, 0)
        return Collector(env, policy_for_torchrl, frames_per_batch=hp["frames_per_batch"])

    # the torchrl loop's own networks, with the same actor weights
    env0 = make_torchrl_env(hp, 0)
    policy_for_torchrl, _ = make_torchrl_networks(env0, hp)
    actor_mlp(policy_for_torchrl).load_state_dict(net.state_dict())
    env0.close()

    # every collector stays alive (logical CPUs for all actors; only the timed one works)
    ray.init(num_cpus=4, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    errors: dict[str, str] = {}
    pool = RawPool(net, hp["num_envs"])
    contestants: dict[str, LiveCollector] = {}
    for name, make in (
        ("fleetrl SyncDataCollector (local)", fleetrl(0)),
        ("fleetrl RayCollector x1", fleetrl(1)),
        ("fleetrl RayCollector x2", fleetrl(2)),
        ("torchrl Collector (local)", torchrl_collector),
    ):
        try:
            contestants[name] = LiveCollector(make, drain=False)
        except Exception:  # one that cannot run here is reported, not fatal
            errors[name] = traceback.format_exc(limit=4)
            print(f"{name}: failed ({errors[name].splitlines()[-1]})", flush=True)
    per_round = seconds / rounds
    runs: dict[str, list[float]] = {"raw loop x1": [], "raw loop x2": []}
    runs.update({name: [] for name in contestants})
    for r in range(rounds):
        runs["raw loop x1"].append(pool.run(1, per_round))
        for name in ("fleetrl SyncDataCollector (local)", "fleetrl RayCollector x1"):
            if name in contestants:
                runs[name].append(contestants[name].run_for(per_round))
        runs["raw loop x2"].append(pool.run(2, per_round))
        if "fleetrl RayCollector x2" in contestants:
            runs["fleetrl RayCollector x2"].append(
                contestants["fleetrl RayCollector x2"].run_for(per_round)
            )
        if "torchrl Collector (local)" in contestants:
            runs["torchrl Collector (local)"].append(
                contestants["torchrl Collector (local)"].run_for(per_round)
            )
        print(f"collection round {r + 1}/{rounds}: done", flush=True)
    # where the time goes: the local collector (the same SyncDataCollector every Ray worker
    # runs) and the raw loop, each under cProfile for a round's time
    profiles = {}
    local = contestants.get("fleetrl SyncDataCollector (local)")
    if local is not None:
        raw = RawLoop(net, hp["num_envs"])

        def local_frames() -> int:
            local.run_for(per_round)
            return local.last_frames

        def raw_frames() -> int:
            raw.run_for(per_round)
            return raw.last_frames

        for name, run in (
            ("fleetrl SyncDataCollector (local)", local_frames),
            ("raw loop x1", raw_frames),
        ):
            spent, frames = profile_by_package(run)
            profiles[name] = {"own_s": spent, "frames": frames}
    first = {name: c.first_batch_s for name, c in contestants.items()}
    for c in contestants.values():
        c.shutdown()
    pool.shutdown()
    ray.shutdown()
    limit_of = {
        "fleetrl SyncDataCollector (local)": "raw loop x1",
        "fleetrl RayCollector x1": "raw loop x1",
        "fleetrl RayCollector x2": "raw loop x2",
        "torchrl Collector (local)": "raw loop x1",
    }
    rows = {}
    for name, values in runs.items():
        limit = limit_of.get(name)
        rows[name] = {
            "fps": statistics.median(values) if values else None,
            "limit": limit,
            "vs_limit": paired_ratio(values, runs[limit]) if limit else 1.0,
            "first_batch_s": first.get(name),
            "runs": values,
        }
    return {
        "rows": rows,
        "profiles": profiles,
        "errors": errors,
        "seconds": seconds,
        "rounds": rounds,
    }


# ------------------------------------------------------------------ the report


LABELS = {
    "fleetrl": "fleetrl MAPPO (Trainer, configs/mappo_simple_spread.yaml)",
    "torchrl": "torchrl MAPPO loop (Collector + MAPPOLoss + MultiAgentGAE)",
    "rllib": "RLlib multi-agent PPO (shared policy, per-agent critic)",
}


def report(learn: dict, failed: dict, collect: dict | None, runs: dict) -> dict:
    """Print the tables (kept for the result file) and return the targets."""
    from common import print_table

    tables, targets = report_tables(learn, failed, collect, runs)
    for i, table in enumerate(tables):
        if i:
            print()
        print_table(table["header"], table["rows"], title=table["title"])
    return targets


def page_tables(data: dict) -> list[dict]:
    """The tables of a result file (``results/marl.json``), built from its stored results by
    the code that prints them at the end of a run: what the docs page shows."""
    runs = {
        name: [{**run, "curve": curve} for run, curve in zip(data["runs"][name], curves)]
        for name, curves in data["curves"].items()
    }
    tables, _ = report_tables(data["learning"], data["failed"], data["collection"], runs)
    return tables


def _table(title: str, header: list[str], rows: list[list[str]]) -> dict:
    return {"title": title, "header": header, "rows": rows}


def report_tables(
    learn: dict, failed: dict, collect: dict | None, runs: dict
) -> tuple[list[dict], dict]:
    """Every table of the report (``{"title", "header", "rows"}``, in order) and the targets.

    Each figure of the targets table is computed from the tables above it: the learners'
    from the per-seed tables (the median of the seeds' differences and ratios, as
    :func:`learning_summary` pairs them), the collection's from its table's "vs limit"
    (the median of the rounds' ratios, each round shown)."""
    tables = _learning_tables(learn, failed, runs)
    targets = {}
    if "return_difference" in learn:
        diff = learn["return_difference"]
        targets["return at equal frames, fleetrl - torchrl"] = {
            "value": diff,
            "target": TARGET_RETURN_GAP,
            "met": diff >= TARGET_RETURN_GAP,
            "shown": f"{diff:+.2f}",
            "wanted": ">= +0.00",
        }
        ratio = learn["time_to_shared_ratio"]
        targets["wall time to the shared return, fleetrl / torchrl"] = {
            "value": ratio,
            "target": TARGET_WALL_RATIO,
            "met": ratio is not None and ratio <= TARGET_WALL_RATIO,
            "shown": fmt(ratio, ".2f", "x"),
            "wanted": f"<= {TARGET_WALL_RATIO:.2f}x",
        }
        wall = learn["wall_ratio"]
        targets["wall time for the whole run, fleetrl / torchrl (not a target)"] = {
            "value": wall,
            "target": None,
            "met": None,
            "shown": fmt(wall, ".2f", "x"),
            "wanted": "-",
        }
    if collect is not None:
        crow = []
        for name, r in collect["rows"].items():
            crow.append(
                [
                    name,
                    fmt(r["fps"], ",.0f"),
                    "; ".join(fmt(v, ",.0f") for v in r.get("runs") or []) or "-",
                    r["limit"] or "-",
                    fmt(r["vs_limit"], ".2f", "x") if r["limit"] else "1.00x",
                    fmt(r["first_batch_s"], ".1f", " s"),
                ]
            )
            if name.startswith("fleetrl RayCollector"):
                targets[f"collection, {name} / {r['limit']}"] = {
                    "value": r["vs_limit"],
                    "target": TARGET_COLLECT_RATIO,
                    "met": r["vs_limit"] is not None and r["vs_limit"] >= TARGET_COLLECT_RATIO,
                    "shown": fmt(r["vs_limit"], ".2f", "x"),
                    "wanted": f">= {TARGET_COLLECT_RATIO:.2f}x",
                }
        tables.append(
            _table(
                f"collection: 8 envs per collector, frames/s: the median of {collect['rounds']} "
                "paired rounds, and each round's (in order); vs limit: the median of the "
                "rounds' ratios to the limit's figure in the same round",
                ["contestant", "frames/s", "rounds", "limit", "vs limit", "first batch"],
                crow,
            )
        )
    if collect is not None and collect.get("profiles"):
        header, rows = profile_table(collect["profiles"])
        tables.append(
            _table(
                "where collection time goes: cProfile's own time by package, in microseconds "
                "per frame (the profiler's overhead included: compare the columns, not with "
                "the frames/s above)",
                header,
                rows,
            )
        )
    seeds = len(learn["per_seed"])
    tables.append(
        _table(
            f"targets (issue 37): fleetrl against torchrl's loop, the median over the {seeds} "
            "seed(s) of the per-seed differences and ratios above; collection, the table's "
            "vs limit",
            ["target", "measured", "wanted", ""],
            [
                [name, t["shown"], t["wanted"], "-" if t["met"] is None else verdict_of(t["met"])]
                for name, t in targets.items()
            ],
        )
    )
    return tables, targets


def _learning_tables(learn: dict, failed: dict, runs: dict) -> list[dict]:
    """The learners' tables: the medians over the seeds, each seed's returns and times,
    the curve of seed 0 and where its time went."""
    equal, per_seed = learn["equal_frames"], learn["per_seed"]
    names = list(learn["contestants"])
    rows = []
    for name, c in learn["contestants"].items():
        rows.append(
            [
                LABELS[name],
                f"{equal:,}",
                fmt(c["return"]),
                fmt(c["time_to_shared_s"], ".1f", " s"),
                fmt(c["wall_s"], ".1f", " s"),
                fmt(c["startup_s"], ".1f", " s"),
                fmt(c["frames_per_s"], ",.0f"),
            ]
        )
    for name, err in failed.items():
        rows.append([LABELS[name], "failed", err.strip().splitlines()[-1][:120], "", "", "", ""])
    tables = [
        _table(
            f"learning: {len(per_seed)} seed(s), each figure the median over the seeds (each "
            "seed's returns and times: the next two tables); return: the team return of the "
            f"last 40 episodes, mean of the last {SMOOTH} batches; time to shared return: to "
            "its seed's own; times from process launch",
            [
                "contestant",
                "frames",
                "return at equal frames",
                "time to shared return",
                "wall time",
                "first batch",
                "frames/s (wall)",
            ],
            rows,
        )
    ]
    pair = "fleetrl" in names and "torchrl" in names
    seed_rows = []
    for s, p in enumerate(per_seed):
        ret = p["return"]
        both = pair and ret["fleetrl"] is not None and ret["torchrl"] is not None
        diff = ret["fleetrl"] - ret["torchrl"] if both else None
        seed_rows.append(
            [str(s), *(fmt(ret.get(n)) for n in names), fmt(p["shared_return"])]
            + ([fmt(diff, "+.2f")] if pair else [])
        )
    tables.append(
        _table(
            f"return at equal frames ({equal:,}), per seed; the seed's shared return: the lower "
            "of fleetrl's and torchrl's",
            ["seed", *names, "shared return", *(["fleetrl - torchrl"] if pair else [])],
            seed_rows,
        )
    )
    time_rows = []
    for s, p in enumerate(per_seed):
        to = p["time_to_shared_s"]
        walls = {n: runs[n][s]["wall_s"] if s < len(runs.get(n, [])) else None for n in names}
        row = [str(s), *(fmt(to.get(n), ".1f", " s") for n in names)]
        if pair:
            row.append(_ratio(to.get("fleetrl"), to.get("torchrl")))
        row += [fmt(walls[n], ".1f", " s") for n in names]
        if pair:
            row.append(_ratio(walls["fleetrl"], walls["torchrl"]))
        time_rows.append(row)
    tables.append(
        _table(
            "seconds from launch to the seed's shared return, and for the whole run, per seed "
            "(-: never reached)",
            [
                "seed",
                *(f"{n} to shared" for n in names),
                *(["fleetrl / torchrl"] if pair else []),
                *(f"{n} wall" for n in names),
                *(["fleetrl / torchrl (wall)"] if pair else []),
            ],
            time_rows,
        )
    )
    marks = [equal * q // 4 for q in (1, 2, 3, 4)]
    tables.append(
        _table(
            f"return along the run (seed 0, mean of the last {SMOOTH} batches)",
            ["frames", *names],
            [[f"{m:,}", *(fmt(return_at(runs[n][0]["curve"], m)) for n in names)] for m in marks],
        )
    )
    spent_rows = []
    for name, rs in runs.items():
        spent = rs[0].get("spent_s") or {}
        spent_rows.append(
            [
                name,
                fmt(rs[0]["wall_s"], ".1f"),
                fmt(rs[0]["startup_s"], ".1f"),
                *(fmt(spent.get(k), ".1f") for k in FLEETRL_TIMES),
            ]
        )
    tables.append(
        _table(
            "where the learner runs' time goes (seed 0, seconds summed over the run): "
            "collect_s waiting for batches (env_s, policy_s, pack_s: fleetrl's split of it), "
            "learn_s the updates (GAE, epochs of minibatches)",
            ["contestant", "wall", "first batch", *FLEETRL_TIMES],
            spent_rows,
        )
    )
    return tables


def _ratio(a: float | None, b: float | None) -> str:
    return fmt(a / b, ".2f", "x") if a is not None and b else "-"


def verdict_of(met: bool) -> str:
    return "met" if met else "not met"


def shared_of(learn: dict) -> float | None:
    """The shared return of the first seed (what the plot draws dashed)."""
    per_seed = learn.get("per_seed") or [{}]
    return per_seed[0].get("shared_return")


def plot(curves: dict[str, list[list[list[float]]]], shared: float | None) -> Path | None:
    """``results/marl.png``: each contestant's smoothed team return against frames and
    against seconds from launch, one line per seed, with the shared return dashed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return None
    colors = {"fleetrl": "C0", "torchrl": "C1", "rllib": "C2"}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, seeds in curves.items():
        for i, curve in enumerate(seeds):
            points = smoothed(curve)
            label = name if i == 0 else None
            color = colors.get(name)
            axes[0].plot([p[0] for p in points], [p[1] for p in points], color=color, label=label)
            axes[1].plot([p[2] for p in points], [p[1] for p in points], color=color, label=label)
    axes[0].xaxis.set_major_formatter(
        matplotlib.ticker.FuncFormatter(lambda x, _: f"{x / 1000:.0f}k")
    )
    for ax, xlabel in zip(axes, ("env steps (team frames)", "seconds from launch")):
        if shared is not None:
            ax.axhline(shared, color="gray", linestyle="--", linewidth=1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("team return")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle("MAPPO on MPE simple_spread: one line per seed")
    fig.tight_layout()
    path = Path(__file__).resolve().parent / "results" / "marl.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def resummarize() -> None:
    """The learning summary and the targets of ``results/marl.json`` recomputed from its
    stored runs and curves, as this script now computes them; the file says so."""
    import common

    path = common.RESULTS_DIR / "marl.json"
    data = json.loads(path.read_text())
    runs = {
        name: [{**run, "curve": curve} for run, curve in zip(data["runs"][name], curves)]
        for name, curves in data["curves"].items()
    }
    data["learning"] = learning_summary(runs)
    common.TABLES.clear()  # the page shows the tables the report prints
    data["targets"] = report(data["learning"], data["failed"], data["collection"], runs)
    data["tables"] = list(common.TABLES)
    plot(data["curves"], shared_of(data["learning"]))
    data["resummarized"] = (
        f"learning summary and targets recomputed on {time.strftime('%Y-%m-%d')} from this "
        "run's stored curves (python marl.py --resummarize)"
    )
    path.write_text(json.dumps(data, indent=2))
    print(f"\nrewrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100_000, help="frames per learner run")
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..K-1 per learner")
    parser.add_argument(
        "--collect-seconds",
        type=float,
        default=12.0,
        help="timed collection per contestant, over all rounds (0: no collection phase)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="paired collection rounds")
    parser.add_argument(
        "--rllib", action="store_true", help="also RLlib's multi-agent PPO (own venv)"
    )
    parser.add_argument("--worker", choices=["fleetrl", "torchrl"], help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--launched-at", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--resummarize",
        action="store_true",
        help="recompute the learning summary and targets of the committed result from its "
        "stored curves (no run)",
    )
    args = parser.parse_args()

    if args.resummarize:
        resummarize()
        return
    if args.worker:  # one learner run, in its own process: its result as the last line
        launched_at = args.launched_at if args.launched_at is not None else time.time()
        work = fleetrl_worker if args.worker == "fleetrl" else torchrl_worker
        print(json.dumps(work(args.frames, args.seed, launched_at)))
        return

    from common import write_json

    runs, failed = learning(args.frames, args.seeds, args.rllib)
    if "fleetrl" not in runs or "torchrl" not in runs:
        raise SystemExit(f"a learner failed: {failed}")
    learn = learning_summary(runs)
    collect = collection(args.collect_seconds, args.rounds) if args.collect_seconds > 0 else None
    print()
    targets = report(learn, failed, collect, runs)
    hp = hyperparameters()
    path = write_json(
        "marl",
        {
            "args": {k: v for k, v in vars(args).items() if k not in ("worker", "launched_at")},
            "hyperparameters": hp,
            "learning": learn,
            "curves": {n: [r["curve"] for r in rs] for n, rs in runs.items()},
            "runs": {
                n: [{k: v for k, v in r.items() if k != "curve"} for r in rs]
                for n, rs in runs.items()
            },
            "failed": failed,
            "collection": collect,
            "targets": targets,
        },
    )
    plot({n: [r["curve"] for r in rs] for n, rs in runs.items()}, shared_of(learn))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()

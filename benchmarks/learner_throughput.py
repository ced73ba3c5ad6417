"""Learner throughput: fleetrl's update against the same update in plain PyTorch.

The learner's twin of ``collector_throughput.py``. For each algorithm at the
shapes of its shipped config, one collected batch (a real rollout of the
config's env with the algorithm's own policy, laid out as the trainer
receives it: ``[collectors, envs, time]`` with a mask for sync Ray
collection) is learned from by two contestants:

- **fleetrl**: ``Algorithm.learn(batch)``, as the trainer runs it (GAE or
  V-trace, advantage normalization, the minibatch schedule, the flat
  gradient route, logging info; for DQN/SAC the replay buffer extend and
  the sampled steps);
- **plain**: the same update written from the equations in
  ``benchmarks/plain_learners.py``, on plain tensors, with the same networks
  (copies), data, schedule, optimizer and clipping. MAPPO's and IPPO's plain update
  (``benchmarks/plain_multiagent.py``) works on one agent group's tensors
  ``[envs, time, n_agents, ...]``.

With ``--compile``, each is also run compiled: fleetrl with
``<algo>.compile=true``, plain with ``torch.compile`` of its step. With
``--device cuda`` the learners run on the GPU (``trainer.device=cuda``) and
``--cudagraphs`` adds fleetrl's ``<algo>.cudagraphs=true`` rows.

Paired rounds (the contestants alternate; each one's turn repeats its update for at
least 0.25 s, ``--min-round-s``), medians; one torch thread, as the
trainer uses. Prints milliseconds and optimizer steps per second for each
contestant, and the ratio fleetrl/plain (steps/s over steps/s: 1.0 is as
fast as plain PyTorch). Results go to ``benchmarks/results/learner_throughput.json``.

    python benchmarks/learner_throughput.py                      # every case, eager
    python benchmarks/learner_throughput.py --cases ppo_mujoco_tanh --compile
    python benchmarks/learner_throughput.py --device cuda --compile --cudagraphs
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, paired_ratio, plot_learner_ratios, print_table, write_json
from plain_learners import (
    PlainA2C,
    PlainDQN,
    PlainPPO,
    PlainRecurrentPPO,
    PlainSAC,
    PlainVTrace,
    grad_norm,
    parity_record,
)
from plain_multiagent import PlainMAPPO, group_data, group_networks
from plain_multiagent import parity as multiagent_parity

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@dataclass
class Case:
    config: str
    overrides: list[str] = field(default_factory=list)


#: each algorithm at the shapes of its shipped config
CASES: dict[str, Case] = {
    "ppo_cartpole": Case("ppo_cartpole.yaml"),
    "ppo_mujoco_tanh": Case("ppo_mujoco.yaml", ["ppo.distribution=tanh_normal"]),
    "ppo_mujoco_normal": Case("ppo_mujoco.yaml", ["ppo.distribution=normal"]),
    "a2c_cartpole": Case("a2c_cartpole.yaml"),
    "dqn_cartpole": Case("dqn_cartpole.yaml"),
    "sac_mujoco": Case("sac_mujoco.yaml"),
    "impala_cartpole": Case("impala_cartpole.yaml"),
    "appo_cartpole": Case("appo_cartpole.yaml"),
    "ppo_atari": Case("ppo_atari.yaml"),
    "ppo_lstm_cartpole": Case("ppo_lstm_cartpole_novel.yaml"),
    "mappo_simple_spread": Case("mappo_simple_spread.yaml"),
    "ippo_simple_spread": Case("ippo_simple_spread.yaml"),
}


def load(case: Case, extra: list[str]) -> Any:
    from fleetrl.setup.load import load_config

    return load_config(CONFIGS / case.config, [*case.overrides, *extra])


def collected_batch(config: Any, policy: Any, seed: int = 0) -> Any:
    """One batch of the config's env, acted by ``policy``, laid out as the trainer gets it."""
    from fleetrl import SyncDataCollector
    from fleetrl.envs import create_env_fn

    c, e = config.collector, config.env
    sync = c.sync and c.num_collectors > 0 and not c.decoupled
    collectors = c.num_collectors if sync else 1
    num_envs = e.num_envs * collectors
    collector = SyncDataCollector(
        create_env_fn(e),
        policy,
        frames_per_batch=c.frames_per_batch,
        num_envs=num_envs,
        return_discount=config.algo.gamma if e.normalize_reward else None,
    )
    collector.set_seed(seed)
    batch = collector.next()
    collector.shutdown()
    if sync:  # a sync RayCollector stacks its collectors in front, with a mask
        batch = batch.reshape(collectors, e.num_envs, batch.shape[-1])
        batch.set(("collector", "mask"), torch.ones(batch.shape, dtype=torch.bool))
        batch.names = [None, None, "time"]
    return batch


def plain_data(batch: Any) -> dict[str, torch.Tensor]:
    """The batch as plain tensors over ``[envs, time]``."""
    flat = batch.reshape(-1, batch.shape[-1]) if batch.batch_dims > 2 else batch
    data = {
        "obs": flat["observation"],
        "next_obs": flat["next", "observation"],
        "action": flat["action"],
        "reward": flat["next", "reward"].squeeze(-1),
        "terminated": flat["next", "terminated"].squeeze(-1),
        "done": flat["next", "done"].squeeze(-1),
    }
    if "action_log_prob" in flat:
        data["logp"] = flat["action_log_prob"]
    if "recurrent_state_h" in flat:  # an LSTM policy's stored states (torchrl's keys)
        data["is_init"] = flat["is_init"].squeeze(-1)
        for key, name in (("recurrent_state_h", "h"), ("recurrent_state_c", "c")):
            data[name] = flat[key]
            data[f"next_{name}"] = flat["next", key]
    return {k: v.contiguous().clone() for k, v in data.items()}


def prefill(algorithm: Any, batch: Any, plain: Any | None, frames: int) -> None:
    """Fill both replay buffers with the batch's transitions until ``frames`` (untimed)."""
    from fleetrl.algorithms.base import flatten_valid
    from fleetrl.keys import TRANSITION_KEYS

    data = flatten_valid(batch, TRANSITION_KEYS).to(algorithm.device)
    raw = plain_data(batch)
    while algorithm.frames_seen < frames:
        algorithm.buffer.extend(data.clone())
        algorithm.frames_seen += data.numel()
        if plain is not None:
            plain.buffer.extend(
                {k: v.flatten(0, 1) for k, v in raw.items() if k in plain.buffer.data}
            )


class FleetrlContestant:
    """``Algorithm.learn`` on the collected batch, as the trainer runs it."""

    def __init__(self, name: str, config: Any, algorithm: Any, batch: Any):
        self.name, self.config, self.algorithm, self.batch = name, config, algorithm, batch
        self.compile_s: float | None = None

    def run(self) -> tuple[float, int]:
        first = self.algorithm.num_updates
        batch = self.batch.clone()  # learn writes advantages into it: a fresh copy each time
        if self.algorithm.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        self.algorithm.learn(batch)
        if self.algorithm.device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        return seconds, self.algorithm.num_updates - first


class PlainContestant:
    def __init__(self, name: str, learner: Any, data: dict[str, torch.Tensor], compiled: bool):
        self.name, self.learner, self.data = name, learner, data
        self.step = torch.compile(learner.step) if compiled else learner.step
        self.compile_s: float | None = None
        #: fleetrl's loss against this learner's on one minibatch (recurrent_parity)
        self.parity: dict[str, float] | None = None

    def run(self) -> tuple[float, int]:
        start = time.perf_counter()
        steps = self.learner.learn(self.data, self.step)
        if self.learner.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start, steps


def plain_learner(config: Any, algorithm: Any, device: str) -> Any:
    """The plain learner of ``config.algorithm`` on copies of ``algorithm``'s networks."""
    from fleetrl.envs import create_env_fn, env_spec

    name, algo = config.algorithm, config.algo
    if name in ("mappo", "ippo"):  # one group of agents stacked on a dim (MPE's)
        return PlainMAPPO(*group_networks(algorithm), algo, device=device)
    info = env_spec(create_env_fn(config.env))
    if getattr(algorithm, "sequences", None) is not None:  # model: lstm
        if name != "ppo":
            raise ValueError(f"no plain recurrent {name}: only ppo has one")
        torso, core, head = algorithm.actor.module[0].module
        value_head = algorithm.critic.module[-1].module
        kind = "categorical" if info.discrete else getattr(algo.distribution, "value", "")
        return PlainRecurrentPPO(
            torso.module,
            core.lstm,
            head.module,
            value_head,
            kind,
            algo,
            info.action_low,
            info.action_high,
            device=device,
        )
    if name in ("ppo", "a2c", "impala", "appo"):
        actor_body = algorithm.actor.module[0].module
        critic_body = algorithm.critic.module
        if info.discrete:
            kind = "categorical"
        else:
            kind = getattr(algo, "distribution", "tanh_normal")
            kind = getattr(kind, "value", kind)
        args = (actor_body, critic_body, kind, algo, info.action_low, info.action_high)
        if name == "ppo":
            return PlainPPO(*args, device=device)
        if name == "a2c":
            return PlainA2C(*args, device=device)
        return PlainVTrace(*args, clipped=name == "appo", device=device)
    if name == "dqn":
        qnet = algorithm.qvalue.module[0].module
        return PlainDQN(qnet, algo, info.obs_shape, info.obs_dtype, device=device)
    if name == "sac":
        actor_body = algorithm.actor.module[0].module
        qnet = algorithm.loss_module.qvalue_network.module
        return PlainSAC(actor_body, qnet, algo, info, device=device)
    raise ValueError(name)


def recurrent_parity(algorithm: Any, plain: PlainRecurrentPPO, batch: Any) -> dict[str, float]:
    """fleetrl's loss on one sequence minibatch against plain's, before any update.

    Both prepare the whole batch (GAE, sequences) with the same weights; the first of
    ``num_mini_batch`` unshuffled parts of the sequences is the minibatch both read. The
    gradients are taken with ``autograd.grad`` (no step, ``.grad`` untouched). Returns
    the two losses, their gradient norms, and the largest differences of the advantages
    and of the loss masks; the timed rounds mean something only where these agree.
    """
    from fleetrl.algorithms.sequences import LOSS_MASK_KEY

    data = algorithm.prepare(batch.clone())
    seqs = plain.prepare(plain.to_device(plain_data(batch)))
    if data.shape != seqs["mask"].shape:
        raise ValueError(f"sequences differ: fleetrl {data.shape}, plain {seqs['mask'].shape}")
    idx = torch.arange(data.shape[0]).tensor_split(algorithm.num_mini_batch)[0]
    fleet_loss, _ = algorithm.loss(data[idx])
    plain_loss = plain.loss(*(seqs[k][idx] for k in plain.KEYS))
    norms = [
        grad_norm(fleet_loss, algorithm.optimizer.param_groups[0]["params"]),
        grad_norm(plain_loss, plain.params),
    ]
    mask = seqs["mask"]
    fleet_adv = data.get("advantage").squeeze(-1)[mask]
    return {
        **parity_record(fleet_loss, plain_loss, norms, fleet_adv - seqs["adv"][mask]),
        "loss_mask_differences": int((data.get(LOSS_MASK_KEY) != mask).sum()),
    }


def build_case(name: str, args: argparse.Namespace) -> list[Any]:
    """The contestants of one case: fleetrl and plain, eager (and compiled, CUDA-graphed)."""
    from fleetrl.setup.build import make_algorithm

    case = CASES[name]
    device = [f"trainer.device={args.device}"] if args.device != "cpu" else []
    config = load(case, device)
    algorithm = make_algorithm(config, seed=0)
    batch = collected_batch(config, algorithm.policy)
    rows = [("eager", [])]
    if args.compile:
        rows.append(("compiled", [f"{config.algorithm}.compile=true"]))
    if args.cudagraphs:
        rows.append(("cudagraphs", [f"{config.algorithm}.cudagraphs=true"]))
    contestants: list[Any] = []
    for mode, overrides in rows:
        try:
            contestants += build_mode(case, config, algorithm, batch, mode, overrides, device, args)
        except Exception as err:  # a mode this machine cannot run: the others still do
            print(f"{name} {mode}: failed: {type(err).__name__}: {err}", flush=True)
    return contestants


def build_mode(
    case: Case,
    config: Any,
    algorithm: Any,
    batch: Any,
    mode: str,
    overrides: list[str],
    device: list[str],
    args: argparse.Namespace,
) -> list[Any]:
    """fleetrl (and plain, but for CUDA graphs) in one mode, warmed up (compiled)."""
    from fleetrl.setup.build import make_algorithm

    cfg, algo = config, algorithm
    if overrides:  # the same weights as the eager contestants'
        cfg = load(case, [*device, *overrides])
        algo = make_algorithm(cfg, seed=0)
        algo.load_state_dict(algorithm.state_dict())
    contestants: list[Any] = [FleetrlContestant(f"fleetrl {mode}", cfg, algo, batch)]
    plain = None
    if mode != "cudagraphs":  # the plain update has no CUDA-graph row
        learner = plain_learner(cfg, algorithm, args.device)
        multiagent = isinstance(learner, PlainMAPPO)
        data = group_data(batch, algo.layout.group) if multiagent else plain_data(batch)
        plain = PlainContestant(f"plain {mode}", learner, data, mode == "compiled")
        contestants.append(plain)
        if mode == "eager" and (multiagent or isinstance(learner, PlainRecurrentPPO)):
            check = multiagent_parity if multiagent else recurrent_parity
            plain.parity = check(algo, learner, batch)  # before either updates
            print(f"  parity: {plain.parity}", flush=True)
    if not algo.on_policy:  # replay: both buffers filled past learning_starts first
        prefill(algo, batch, plain.learner if plain else None, max(algo.learning_starts, 4096))
    for contestant in contestants:
        start = time.perf_counter()
        contestant.run()  # warm-up (and compilation)
        if mode != "eager":  # fleetrl reports its own compile time; plain: the first call
            own = getattr(getattr(contestant, "algorithm", None), "compile_s", None)
            contestant.compile_s = own if own is not None else time.perf_counter() - start
    return contestants


#: a contestant's turn in a round repeats its update until this many seconds: A2C's and
#: IMPALA's one 3 ms step per batch, timed alone, varies by 2x on a shared 2-core machine
MIN_ROUND_S = 0.25


def measure(
    contestants: list[Any], rounds: int, min_round_s: float = MIN_ROUND_S
) -> dict[str, list[float]]:
    """Paired rounds: every contestant once per round (its update repeated until
    ``min_round_s``), the order reversed every other round; ms per optimizer step."""
    ms: dict[str, list[float]] = {c.name: [] for c in contestants}
    for r in range(rounds):
        for c in contestants if r % 2 == 0 else reversed(contestants):
            total_s, total_steps = 0.0, 0
            while total_s < min_round_s or total_steps == 0:
                seconds, steps = c.run()
                total_s, total_steps = total_s + seconds, total_steps + steps
            ms[c.name].append(1000 * total_s / total_steps)
    return ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--min-round-s",
        type=float,
        default=MIN_ROUND_S,
        help="each contestant's turn in a round repeats its update until this many seconds",
    )
    parser.add_argument("--compile", action="store_true", help="add compiled rows")
    parser.add_argument("--cudagraphs", action="store_true", help="add fleetrl's CUDA-graph rows")
    parser.add_argument("--device", default="cpu", help="the learners' device (cpu or cuda)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the trainer's 1)")
    parser.add_argument("--out", default="learner_throughput", help="results file name")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results: dict[str, Any] = {"machine": machine(), "device": args.device, "cases": {}}
    table = []
    for name in args.cases:
        print(f"{name}: building and warming up...", flush=True)
        torch._dynamo.reset()  # each case compiles afresh: no cache limit reached across cases
        try:
            contestants = build_case(name, args)
        except Exception as err:  # one case that cannot run (a missing engine) leaves the rest
            print(f"{name}: failed: {type(err).__name__}: {err}", flush=True)
            results["cases"][name] = {"error": f"{type(err).__name__}: {err}"}
            continue
        ms = measure(contestants, args.rounds, args.min_round_s)
        med = {k: statistics.median(v) for k, v in ms.items()}
        case: dict[str, Any] = {"ms_per_step": med, "rounds_ms": ms, "compile_s": {}}
        for c in contestants:
            if c.compile_s is not None:
                case["compile_s"][c.name] = c.compile_s
            if getattr(c, "parity", None) is not None:
                case["parity"] = c.parity
        for mode in ("eager", "compiled", "cudagraphs"):
            fleet = med.get(f"fleetrl {mode}")
            if fleet is None:
                continue
            plain = med.get(f"plain {mode}")
            # plain ms / fleetrl ms of each round (steps/s over steps/s), their median
            ratio = paired_ratio(ms.get(f"plain {mode}"), ms[f"fleetrl {mode}"])
            vs_eager = paired_ratio(ms.get("plain eager"), ms[f"fleetrl {mode}"])
            case[f"ratio_{mode}"], case[f"ratio_{mode}_vs_plain_eager"] = ratio, vs_eager
            row = [
                name,
                mode,
                f"{fleet:.3f}",
                f"{1000 / fleet:,.0f}",
                "" if plain is None else f"{plain:.3f}",
                "" if ratio is None else f"{ratio:.2f}x",
                "" if vs_eager is None else f"{vs_eager:.2f}x",
                f"{case['compile_s'].get(f'fleetrl {mode}', 0):.1f}" if mode != "eager" else "",
            ]
            table.append(row)
        results["cases"][name] = case
        path = write_json(args.out, results)
    print()
    print_table(
        [
            "case",
            "mode",
            "fleetrl ms/step",
            "fleetrl steps/s",
            "plain ms/step",
            "fleetrl/plain",
            "vs plain eager",
            "compile s",
        ],
        table,
    )
    print(f"\nresults: {path}")
    if (plot := plot_learner_ratios(results["cases"], args.out)) is not None:
        print(f"drew {plot}")


if __name__ == "__main__":
    main()

"""MuJoCo collection: one collector worker of the shipped PPO config against the raw limit
and torchrl's Collector.

HalfCheetah-v5, PPO's MuJoCo actor as ``configs/ppo_mujoco.yaml`` builds it (an
``ObservationNormalizer`` holding statistics, a 64x64 tanh MLP, ``TanhNormal`` within the
action bounds, action + log-probability), one process, one torch thread, at 1, 4 and 16
envs (the shipped config runs 4 per collector). Contestants, each built and warmed once,
then timed one batch each per round, back to back (medians over rounds; ratios per round):

- ``raw``: the limit, written from the equations: the same gymnasium vector env and the
  same network modules called on tensors, the tanh-normal draw and its log-probability
  computed inline (``x = loc + scale * eps``, ``a = tanh(x)``,
  ``log p = sum(log N(x)) - sum(2 (log 2 - x - softplus(-2x)))``), the action clipped to
  the bounds, the discounted return for reward scaling kept, every output written into
  preallocated tensors; no TensorDict, no episode bookkeeping;
- ``fleetrl``: ``SyncDataCollector(..., return_discount=0.99)``, what a collector worker
  runs;
- ``torchrl``: ``torchrl.collectors.Collector`` on ``GymEnv(id, num_envs=n)`` (float64
  observations cast by ``DoubleToFloat``), the same actor.

Also fleetrl's time per vector step, split into the policy call and the rest of the loop
(``CollectTimes``: ``policy_s``, ``env_s``).

    python benchmarks/mujoco_collection.py [--envs 1 4 16] [--steps 256] [--rounds 5]

Writes ``benchmarks/results/mujoco_collection.json``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings

import torch
from torch.nn import functional as F

from common import IterTimer, machine, print_table, write_json
from fleetrl import SyncDataCollector
from fleetrl.envs.gymnasium import make_gym_vector_env
from fleetrl.envs.probe import env_spec
from fleetrl.networks.models import make_actor
from fleetrl.networks.normalization import ObservationNormalizer, RunningMoments

warnings.filterwarnings("ignore")
ENV = "HalfCheetah-v5"
GAMMA = 0.99


def ppo_actor():
    """The shipped config's actor, its normalizer holding statistics (so it normalizes)."""
    info = env_spec(ENV)
    norm = ObservationNormalizer(info.obs_shape, clip=10.0)
    norm.merge_(RunningMoments.of(torch.randn(1000, *info.obs_shape) * 2 + 0.5))
    return make_actor(info, [64, 64], normalizer=norm), info


LOG_SQRT_2PI, LOG_2 = math.log(math.sqrt(2 * math.pi)), math.log(2.0)


def tanh_normal_draw(loc: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A tanh-normal action in [-1, 1] and its log-probability, from the equations: the
    Gaussian draw ``x``, ``a = tanh(x)``, ``log N(x) - log |d tanh / dx|`` summed over the
    action's dims (the derivative's log as ``2 (log 2 - x - softplus(-2x))``)."""
    x = loc + torch.empty_like(loc).normal_() * scale
    normal = -((x - loc) ** 2) / (2 * scale**2) - scale.log() - LOG_SQRT_2PI
    jacobian = 2.0 * (LOG_2 - x - F.softplus(-2.0 * x))
    return x.tanh(), normal.sum(-1) - jacobian.sum(-1)


class RawLoop:
    """The limit (see the module docstring); ``run()`` returns frames/s of one batch."""

    def __init__(self, actor, info, num_envs: int, steps: int):
        self.net = actor.module[0].module  # normalizer, MLP, NormalParamExtractor
        self.env = make_gym_vector_env(ENV, num_envs)
        self.obs_np, _ = self.env.reset(seed=0)
        self.low = info.action_low.numpy()
        self.high = info.action_high.numpy()
        self.steps, self.n = steps, num_envs
        dim, act = info.obs_shape[0], info.action_dim
        self.obs = torch.empty(steps, num_envs, dim)
        self.next_obs = torch.empty(steps, num_envs, dim)
        self.action = torch.empty(steps, num_envs, act)
        self.log_prob = torch.empty(steps, num_envs)
        self.reward = torch.empty(steps, num_envs)
        self.done = torch.empty(steps, num_envs, dtype=torch.bool)
        self.discounted = torch.empty(steps, num_envs)
        self.ret = torch.zeros(num_envs)
        self.run()

    def run(self) -> float:
        env, obs_np, net = self.env, self.obs_np, self.net
        start = time.perf_counter()
        with torch.inference_mode():
            for t in range(self.steps):
                obs = torch.from_numpy(obs_np).float()
                loc, scale = net(obs)
                action, self.log_prob[t] = tanh_normal_draw(loc, scale)
                self.obs[t] = obs
                self.action[t] = action
                clipped = action.numpy().clip(self.low, self.high)
                obs_np, rew, term, trunc, infos = env.step(clipped)
                done = term | trunc
                next_obs = obs_np
                if done.any():
                    next_obs = obs_np.copy()
                    for i in done.nonzero()[0]:
                        next_obs[i] = infos["final_obs"][i]
                self.next_obs[t] = torch.from_numpy(next_obs)
                reward = torch.from_numpy(rew)
                self.reward[t] = reward
                self.done[t] = torch.from_numpy(done)
                self.ret = self.ret * GAMMA + reward
                self.discounted[t] = self.ret
                self.ret[torch.from_numpy(done)] = 0.0
        self.obs_np = obs_np
        return self.steps * self.n / (time.perf_counter() - start)

    def shutdown(self) -> None:
        self.env.close()


def torchrl_collector(actor, num_envs: int, frames: int):
    from torchrl.collectors import Collector
    from torchrl.envs import DoubleToFloat, GymEnv, TransformedEnv

    env = TransformedEnv(GymEnv(ENV, num_envs=num_envs), DoubleToFloat())
    return Collector(env, actor, frames_per_batch=frames, total_frames=-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--steps", type=int, default=256, help="vector steps per batch")
    parser.add_argument("--rounds", type=int, default=5, help="median over this many rounds")
    parser.add_argument("--no-torchrl", action="store_true", help="leave torchrl out")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    actor, info = ppo_actor()
    names = ["raw", "fleetrl"] + ([] if args.no_torchrl else ["torchrl"])
    rows, parts_rows, results = [], [], []
    for n in args.envs:
        frames = n * args.steps
        fleet = SyncDataCollector(
            ENV, actor, frames_per_batch=frames, num_envs=n, return_discount=GAMMA
        )
        fleet.set_seed(0)
        contestants = {
            "raw": RawLoop(actor, info, n, args.steps),
            "fleetrl": IterTimer(fleet, frames),  # one batch to warm up, untimed
        }
        fleet.take_times()  # the parts of the timed batches only
        if not args.no_torchrl:
            contestants["torchrl"] = IterTimer(torchrl_collector(actor, n, frames), frames)
        runs: dict[str, list[float]] = {k: [] for k in names}
        for _ in range(args.rounds):
            for name, contestant in contestants.items():
                runs[name].append(contestant.run())
        times = fleet.take_times()
        steps_timed = args.rounds * args.steps
        per_step = {
            "policy_us": times.policy_s / steps_timed * 1e6,
            "env_us": times.env_s / steps_timed * 1e6,
            "pack_us": times.pack_s / steps_timed * 1e6,
        }
        for contestant in contestants.values():
            contestant.shutdown()
        med = {k: statistics.median(v) for k, v in runs.items()}
        ratios = {
            "fleetrl_vs_raw": statistics.median(a / b for a, b in zip(runs["fleetrl"], runs["raw"]))
        }
        if "torchrl" in runs:
            ratios["fleetrl_vs_torchrl"] = statistics.median(
                a / b for a, b in zip(runs["fleetrl"], runs["torchrl"])
            )
        results.append(
            {
                "num_envs": n,
                **{f"{k}_fps": v for k, v in med.items()},
                **ratios,
                "fleetrl_per_vector_step": per_step,
                "runs": runs,
            }
        )
        rows.append(
            [n, *(f"{med[k]:,.0f}" for k in names), *(f"{v:.2f}x" for v in ratios.values())]
        )
        parts_rows.append(
            [n, f"{1e6 * n / med['fleetrl']:,.0f}", *(f"{per_step[k]:,.0f}" for k in per_step)]
        )
        print(f"envs={n}: done", flush=True)
    print()
    print_table(
        [
            "envs",
            *(f"{k} fps" for k in names),
            "fleetrl/raw",
            *(["fleetrl/torchrl"] if "torchrl" in names else []),
        ],
        rows,
        title=f"{ENV}, PPO's MuJoCo actor (normalized observations, TanhNormal), one process",
    )
    print()
    print_table(
        ["envs", "us per vector step", "policy call", "rest of the loop", "batch building"],
        parts_rows,
        title="fleetrl: a vector step's time, part by part (CollectTimes, per vector step)",
    )
    path = write_json(
        "mujoco_collection", {"machine": machine(), "args": vars(args), "results": results}
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()

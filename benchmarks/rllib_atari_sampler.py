"""RLlib's env runners sampling Pong: the RLlib peer of ``atari_throughput.py``.

Runs in RLlib's own virtualenv (``benchmarks/.rllib-venv``, see
``common.ensure_rllib_venv``), started by ``atari_throughput.py --rllib``; it
imports nothing from fleetrl. The last line it prints is a JSON object.

The env and the policy are RLlib's own, sized like fleetrl's:

- ``ALE/Pong-v5`` with ``frameskip=1`` and sticky actions 0.25 (fleetrl's
  default), wrapped by ``wrap_atari_for_new_api_stack`` (what RLlib ships for
  Atari on its new API stack): 84x84 grayscale, frame skip 4 max-pooled, up to
  30 no-op starts, episodic life, fire on reset, 4 stacked frames. Its
  observations are float32 scaled to [-1, 1] (RLlib's ``NormalizedImageEnv``),
  where fleetrl keeps uint8.
- PPO's default RLModule with Nature CNN filters ``[[32, 8, 4], [64, 4, 2],
  [64, 3, 1]]`` (valid padding) and a 512-unit policy head. RLlib's own default
  for 84x84 is not the Nature CNN (``[[16, 8, 4], [32, 4, 2], [256, 11, 1]]``),
  so the filters are given. Sampling computes the action and its log-prob
  (``forward_exploration``), as fleetrl's collectors do.

Sampling is PPO's own (``synchronous_parallel_sample`` over the algorithm's
env-runner group, ``--steps`` per env per runner and call), timed over
``--rounds`` calls after one warm-up call, medians, three ways:

- ``local_random``: the local env runner (``num_env_runners=0``) with ``--envs``
  envs and random actions: RLlib's env path alone, no model;
- ``local``: the same with the policy, in this process;
- ``remote``: ``--runners`` remote env runners x ``--envs`` envs sampling at
  once, their episodes sent back to this process; steps summed.

Only sampling is timed, never learning. Every process runs torch on one thread.

    benchmarks/.rllib-venv/bin/python benchmarks/rllib_atari_sampler.py [--envs 8]
        [--steps 64] [--rounds 5] [--runners 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

ENV_ID = "ALE/Pong-v5"
ENV_NAME = "fleetrl_bench_pong"
NATURE_FILTERS = [[32, 8, 4, "valid"], [64, 4, 2, "valid"], [64, 3, 1, "valid"]]
NATURE_HIDDEN = [512]
FRAME_SKIP = 4


def make_pong(env_config: dict):
    """RLlib's Atari env, built in each env runner process (which also gets one torch thread)."""
    import ale_py
    import gymnasium as gym
    import torch
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack

    torch.set_num_threads(1)  # the env runner's inference: one thread, like fleetrl's workers
    gym.register_envs(ale_py)
    env = gym.make(ENV_ID, frameskip=1, repeat_action_probability=0.25, full_action_space=False)
    return wrap_atari_for_new_api_stack(env, dim=84, frameskip=FRAME_SKIP, framestack=4)


def build(num_runners: int, num_envs: int, steps: int, seed: int):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    config = (
        PPOConfig()
        .environment(ENV_NAME)
        .env_runners(
            num_env_runners=num_runners,
            num_envs_per_env_runner=num_envs,
            num_cpus_per_env_runner=1,
            rollout_fragment_length=steps,
        )
        .rl_module(
            model_config=DefaultModelConfig(
                conv_filters=NATURE_FILTERS,
                conv_activation="relu",
                head_fcnet_hiddens=NATURE_HIDDEN,
                head_fcnet_activation="relu",
                vf_share_layers=True,
            )
        )
        .training(train_batch_size_per_learner=num_envs * steps * max(1, num_runners))
        .debugging(seed=seed)
    )
    return config.build_algo() if hasattr(config, "build_algo") else config.build()


def steps_in(episodes) -> int:
    return sum(len(e) for e in episodes)


def time_sampling(algo, env_steps: int, rounds: int, random_actions: bool = False) -> list[float]:
    """Agent steps/s of PPO's own sampling step, ``rounds`` times after a warm-up.

    ``synchronous_parallel_sample`` is what PPO's ``training_step`` calls: every
    remote env runner samples at once and its episodes come back to this
    process (like fleetrl's batches to the driver); with no remote runner, the
    local one samples here.
    """
    from ray.rllib.execution.rollout_ops import synchronous_parallel_sample

    def sample() -> int:
        episodes = synchronous_parallel_sample(
            worker_set=algo.env_runner_group,
            max_env_steps=env_steps,
            random_actions=random_actions,
            _uses_new_env_runners=True,
            concat=True,
        )
        return steps_in(episodes)

    sample()  # warm-up: envs reset, first forward passes
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        steps = sample()
        out.append(steps / (time.perf_counter() - t0))
    return out


def describe(algo) -> dict:
    """What RLlib built: the env runner's observation space and its module's conv layers."""
    runner = algo.env_runner
    module = runner.module
    convs = [
        list(m.weight.shape) for m in module.modules() if type(m).__name__ == "Conv2d"
    ]  # shapes (out, in, k, k)
    linears = [list(m.weight.shape) for m in module.modules() if type(m).__name__ == "Linear"]
    space = runner.env.single_observation_space
    return {
        "observation_space": {"shape": list(space.shape), "dtype": str(space.dtype)},
        "conv_weights": convs,
        "linear_weights": linears,
        "parameters": sum(p.numel() for p in module.parameters()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=64, help="vector steps per sample call")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import ale_py
    import gymnasium as gym
    import ray
    import torch
    from ray import tune

    torch.set_num_threads(1)
    ray.init(
        num_cpus=args.runners + 2,  # the driver (PPO's local learner) and one per env runner
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
    )
    tune.register_env(ENV_NAME, make_pong)
    timesteps = args.envs * args.steps
    result: dict = {
        "versions": {
            "ray": ray.__version__,
            "torch": torch.__version__,
            "gymnasium": gym.__version__,
            "ale_py": ale_py.__version__,
        },
        "args": vars(args),
        "frame_skip": FRAME_SKIP,
        "runs": {},
    }
    algo = build(0, args.envs, args.steps, args.seed)
    result["model"] = describe(algo)
    result["runs"]["local_random"] = time_sampling(algo, timesteps, args.rounds, True)
    result["runs"]["local"] = time_sampling(algo, timesteps, args.rounds)
    algo.stop()
    algo = build(args.runners, args.envs, args.steps, args.seed)
    result["runs"]["remote"] = time_sampling(algo, timesteps * args.runners, args.rounds)
    algo.stop()
    ray.shutdown()
    result["agent_steps_per_s"] = {k: statistics.median(v) for k, v in result["runs"].items()}
    print(json.dumps(result))


if __name__ == "__main__":
    main()

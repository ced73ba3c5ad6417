"""The floor under fleetrl's Atari learning: PPO in one process over envpool, nothing else.

CleanRL's ``ppo_atari_envpool.py`` settings, which ``configs/ppo_atari.yaml``'s
hyperparameters are: 8 envs x 128 steps per update, 4 epochs x 4 minibatches, Adam at
2.5e-4 annealed linearly to 0 over the budget, gamma 0.99, GAE 0.95, clip 0.1 (the value
too), entropy 0.01, value 0.5, gradient norm 0.5, advantages normalized per minibatch.

- **the env**: the engine fleetrl's runs use (``fleetrl.envs.atari.make_cpp_engine``: envpool
  in sync mode with ``env.atari``'s settings), stepped directly; an env whose episode ended
  is reset right after the step that ended it (envpool's ``reset(env_id)``), so no
  transition spans two episodes and a truncated one bootstraps from its last observation;
- **the network**: the Nature CNN of ``ppo_atari.yaml`` as fleetrl builds it (the same
  layers and initial weights, seeded alike), its modules taken out of the algorithm;
- **the update**: :class:`plain_learners.PlainPPO`, written from the equations on plain
  tensors (no TensorDict, no torchrl loss);
- **the loop**: step-then-infer, preallocated tensors, one torch thread, no Ray, no logging
  beyond the score.

A score is the mean return of the last 20 finished episodes, as fleetrl's
``train/episode_return``; the curve holds it after each update with the seconds since the
process started. Run by ``atari_learning.py --algos plain`` in a process of its own:

    python benchmarks/plain_atari.py --game ALE/Breakout-v5 --steps 500000 --seed 0 --out r.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections import deque
from pathlib import Path

START = time.time()

import numpy as np  # noqa: E402
import torch  # noqa: E402

#: CleanRL's ppo_atari_envpool.py: envs, steps per env per update
NUM_ENVS, STEPS_PER_UPDATE = 8, 128
CONFIG = Path(__file__).resolve().parent.parent / "configs" / "ppo_atari.yaml"


def build(game: str, seed: int):
    """The env engine, the spec, the plain learner (the config's network and settings)."""
    from fleetrl import load_config
    from fleetrl.envs.atari import AtariEnv, make_cpp_engine
    from fleetrl.setup.build import make_algorithm
    from plain_learners import PlainPPO

    overrides = [f"env.id={game}", "env.engine=envpool", f"trainer.seed={seed}"]
    config = load_config(str(CONFIG), overrides)
    algorithm = make_algorithm(config, seed)
    actor_body, critic_body = algorithm.actor.module[0].module, algorithm.critic.module
    learner = PlainPPO(actor_body, critic_body, "categorical", config.algo)
    spec = AtariEnv(game, engine="envpool", atari=config.env.atari)  # the runs' settings
    engine = make_cpp_engine(spec, NUM_ENVS, seed=seed)
    return engine, learner, config.algo


def train(game: str, steps: int, seed: int) -> dict:
    """PPO for ``steps`` agent steps; its curve, score, updates and wall time."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    env, learner, cfg = build(game, seed)
    n, t_len = NUM_ENVS, STEPS_PER_UPDATE
    updates = steps // (n * t_len)
    obs_np, info = env.reset()
    obs = torch.from_numpy(obs_np[np.argsort(info["env_id"])].copy())
    shape = tuple(obs.shape[1:])
    buf = {
        "obs": torch.empty(n, t_len, *shape, dtype=torch.uint8),
        "next_obs": torch.empty(n, t_len, *shape, dtype=torch.uint8),
        "action": torch.empty(n, t_len, dtype=torch.int64),
        "logp": torch.empty(n, t_len),
        "reward": torch.empty(n, t_len),
        "terminated": torch.empty(n, t_len, dtype=torch.bool),
        "done": torch.empty(n, t_len, dtype=torch.bool),
    }
    running = np.zeros(n)
    returns: deque[float] = deque(maxlen=20)
    curve, episodes = [], 0
    for update in range(updates):
        for group in learner.opt.param_groups:  # linear annealing to 0 over the budget
            group["lr"] = cfg.lr * (1 - update / updates)
        with torch.inference_mode():
            for t in range(t_len):
                logits = learner.policy.body(obs)
                action = torch.distributions.Categorical(logits=logits).sample()
                buf["logp"][:, t] = torch.log_softmax(logits, -1).gather(1, action[:, None])[:, 0]
                buf["obs"][:, t] = obs
                buf["action"][:, t] = action
                env.send(action.numpy(), None)
                nxt, reward, term, trunc, info = env.recv(reset=False, return_info=True)
                order = np.argsort(info["env_id"])
                nxt, reward = nxt[order], reward[order]
                term = np.asarray(term[order], dtype=bool)
                done = term | np.asarray(trunc[order], dtype=bool)
                buf["next_obs"][:, t] = torch.from_numpy(nxt)
                buf["reward"][:, t] = torch.from_numpy(reward.astype(np.float32))
                buf["terminated"][:, t] = torch.from_numpy(term)
                buf["done"][:, t] = torch.from_numpy(done)
                running += reward
                obs = torch.from_numpy(nxt.copy())
                if done.any():  # reset the finished envs now: the next step is a new episode's
                    ids = np.flatnonzero(done).astype(np.int32)
                    reset_obs, reset_info = env.reset(ids)
                    obs[ids] = torch.from_numpy(reset_obs[np.argsort(reset_info["env_id"])])
                    returns.extend(running[ids].tolist())
                    running[ids] = 0.0
                    episodes += len(ids)
        learner.learn(buf)
        if returns:
            curve.append([(update + 1) * n * t_len, float(np.mean(returns)), time.time() - START])
    env.close()
    return {
        "frames": updates * n * t_len,
        "updates": updates,
        "episodes": episodes,
        "score": curve[-1][1] if curve else float("nan"),
        "curve": curve,
        "wall_s": time.time() - START,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="ALE/Breakout-v5")
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.steps < NUM_ENVS * STEPS_PER_UPDATE:
        parser.error(
            f"--steps: {args.steps} is less than one update ({NUM_ENVS * STEPS_PER_UPDATE} steps)"
        )
    result = train(args.game, args.steps, args.seed)
    result["frames_per_s"] = result["frames"] / result["wall_s"]
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()

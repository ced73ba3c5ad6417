"""What an evaluation video costs: milliseconds per frame, rendered and encoded.

For each env, the episodes of a constant policy (action 0, or zeros; seeded,
cut at ``--steps``) are played
three ways, in a shuffled order each repeat: without rendering (``evaluate``,
one env), to an mp4 (``record_video``), and to an mp4 plus the TensorBoard GIF
clip (``clip=True`` and ``add_tensorboard_clip``). Medians over repeats, per
frame of the video (each reset and each step).

    python benchmarks/video_cost.py [--steps 200] [--episodes 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import torch
from tensordict.nn import TensorDictModule

from common import print_table, write_json
from fleetrl.collectors.video import add_tensorboard_clip, record_video, video_env
from fleetrl.envs.atari import AtariEnv
from fleetrl.run.evaluate import evaluate

ENVS = {
    "CartPole-v1": "CartPole-v1",
    "ALE/Pong-v5 (gymnasium engine)": AtariEnv("ALE/Pong-v5"),
    "Hopper-v5 (MUJOCO_GL=egl)": "Hopper-v5",
}


def constant_policy(env: object) -> TensorDictModule:
    """Action 0 (discrete) or zeros (continuous) for every env of the batch."""
    space = video_env(env)[0].action_space
    if isinstance(space, gym.spaces.Discrete):
        return TensorDictModule(
            lambda obs: torch.zeros(obs.shape[0], dtype=torch.int64), ["observation"], ["action"]
        )
    return TensorDictModule(
        lambda obs: torch.zeros(obs.shape[0], *space.shape), ["observation"], ["action"]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="cut each episode here")
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    from torch.utils.tensorboard import SummaryWriter

    out = Path(tempfile.mkdtemp())
    writer = SummaryWriter(str(out / "tb"))
    rows, results = [], []
    for name, env in ENVS.items():
        kw = {"seed": 0, "max_episode_steps": args.steps}
        times: dict[str, list[float]] = {"plain": [], "mp4": [], "gif": []}
        policy = constant_policy(env)
        video = record_video(policy, env, out / "warm.mp4", num_episodes=1, **kw)  # warm-up
        for _ in range(args.repeats):
            order = list(times)
            random.shuffle(order)
            for way in order:
                start = time.perf_counter()
                if way == "plain":
                    for i in range(args.episodes):  # one env, as the video plays them
                        evaluate(policy, env, 1, seed=i, max_episode_steps=args.steps)
                else:
                    video = record_video(
                        policy,
                        env,
                        out / "v.mp4",
                        num_episodes=args.episodes,
                        clip=way == "gif",
                        **kw,
                    )
                    if way == "gif":
                        add_tensorboard_clip(writer, "eval/video", video, 0)
                times[way].append(time.perf_counter() - start)
        ms = {k: 1000 * statistics.median(v) / video.frames for k, v in times.items()}
        kib = video.path.stat().st_size / 1024
        rows.append(
            [
                name,
                video.frames,
                f"{video.height}x{video.width}, {video.fps:g}",
                f"{ms['plain']:.2f}",
                f"{ms['mp4']:.2f}",
                f"{ms['gif']:.2f}",
                f"{kib:.0f}",
            ]
        )
        results.append(
            {
                "env": name,
                "frames": video.frames,
                "height": video.height,
                "width": video.width,
                "fps": video.fps,
                "ms_per_frame": ms,
                "mp4_kib": kib,
            }
        )
    writer.close()
    print_table(
        [
            "env",
            "frames",
            "size, fps",
            "no render (ms/frame)",
            "mp4 (ms/frame)",
            "mp4 + TensorBoard GIF (ms/frame)",
            "mp4 size (KiB)",
        ],
        rows,
        title=f"per frame of the video, medians of {args.repeats}",
    )
    path = write_json("video_cost", {"args": vars(args), "results": results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

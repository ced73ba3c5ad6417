"""Sample Factory 2.1.1's APPO on an ALE game with fleetrl's Atari settings.

Run by ``benchmarks/atari_peer.py`` with the Python of ``benchmarks/.sf-venv`` (Sample
Factory needs gymnasium<1 and numpy<2), never imported by fleetrl:

    .sf-venv/bin/python sf_atari_runner.py GAME SEED AGENT_STEPS TRAIN_DIR [--sf_flag=value ...]

Everything not given stays Sample Factory's own Atari default
(``sf_examples/atari/atari_params.py``: 8 rollout workers x 1 env, rollout 128, batch 256 x 4
per iteration, 4 epochs, lr 2.5e-4 linearly decayed, normalized inputs and returns). The env
is registered here with the settings fleetrl's ``env.atari`` uses, so both sides play the
same game: ALE v5 with sticky actions 0.25, up to 30 no-ops at reset, frame skip 4 (the max
of the last two frames), 84x84 grayscale, 4 frames stacked; no life-loss episode ends, no
FIRE at reset, rewards unclipped. Agent steps are counted as such
(``--summaries_use_frameskip=False``).

Prints ``SF_START <epoch seconds>`` first and ``SF_RESULT <json>`` last (exit status, wall
seconds, the model's parameter count from its final checkpoint).
"""

import glob
import json
import sys
import time

START = time.time()

import ale_py  # noqa: E402,F401  registers the ALE ids
import gymnasium as gym  # noqa: E402
from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args  # noqa: E402
from sample_factory.envs.env_utils import register_env  # noqa: E402
from sample_factory.envs.env_wrappers import (  # noqa: E402
    MaxAndSkipEnv,
    NoopResetEnv,
    NumpyObsWrapper,
)
from sample_factory.train import run_rl  # noqa: E402
from sf_examples.atari.atari_params import atari_override_defaults  # noqa: E402

GAME, SEED, STEPS, TRAIN_DIR = sys.argv[1:5]
EXTRA = sys.argv[5:]


def make_env(env_name, cfg, env_config, render_mode=None):
    """The game with fleetrl's Atari settings (see the module's doc)."""
    env = gym.make(
        GAME,
        frameskip=1,
        repeat_action_probability=0.25,
        full_action_space=False,
        render_mode=render_mode,
    )
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = NoopResetEnv(env, noop_max=30)
    env = MaxAndSkipEnv(env, skip=cfg.env_frameskip)
    env = gym.wrappers.ResizeObservation(env, (84, 84))
    env = gym.wrappers.GrayScaleObservation(env)
    env = gym.wrappers.FrameStack(env, cfg.env_framestack)
    return NumpyObsWrapper(env)


register_env("fleetrl_atari", make_env)  # at import: spawned workers import this module


def parameter_count(train_dir: str) -> int | None:
    """Parameters of the model in the experiment's newest checkpoint (None: no checkpoint)."""
    import torch

    paths = sorted(glob.glob(f"{train_dir}/sf/checkpoint_p0/*.pth"))
    if not paths:
        return None
    state = torch.load(paths[-1], map_location="cpu", weights_only=False)["model"]
    return sum(v.numel() for k, v in state.items() if "running_mean_std" not in k)


def main() -> None:
    print(f"SF_START {START}", flush=True)
    argv = [
        "--env=fleetrl_atari",
        "--algo=APPO",
        "--device=cpu",
        f"--seed={SEED}",
        f"--train_for_env_steps={STEPS}",
        "--summaries_use_frameskip=False",
        "--stats_avg=20",
        f"--train_dir={TRAIN_DIR}",
        "--experiment=sf",
        "--experiment_summaries_interval=10",
        "--with_wandb=False",
        *EXTRA,
    ]
    parser, partial = parse_sf_args(argv=argv)
    atari_override_defaults(partial.env, parser)
    cfg = parse_full_cfg(parser, argv)
    status = run_rl(cfg)
    result = {
        "status": int(status),
        "wall_s": time.time() - START,
        "params": parameter_count(TRAIN_DIR),
    }
    print(f"SF_RESULT {json.dumps(result)}", flush=True)


if __name__ == "__main__":
    main()

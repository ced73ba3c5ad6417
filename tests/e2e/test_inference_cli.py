"""``fleetrl train`` with central inference (``collector.inference: server``): the shipped
PPO configs on CartPole and on Atari Pong (the Nature CNN on an inference server, the
Ray collectors stepping envs), through the CLI, with exact frames and policy versions."""

from __future__ import annotations

import pytest

from fleetrl.cli import main
from fleetrl.run.checkpoint import latest_checkpoint, load_checkpoint
from runs import ROOT, rows

SERVER = [
    "collector.inference=server",
    "collector.num_cpus_per_inference_server=0",  # the test session's Ray has 4 CPUs
    "trainer.target_return=null",
    "trainer.test_every=2",
    "trainer.num_test_episodes=1",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
]
CASES = {
    "ppo_cartpole.yaml": ["trainer.total_frames=8192"],
    "ppo_atari.yaml": [
        "env.num_envs=4",
        "env.max_episode_steps=100",
        "collector.frames_per_batch=256",
        "trainer.total_frames=1024",
        "ppo.num_epochs=1",
        "ppo.num_mini_batch=2",
    ],
}


@pytest.mark.usefixtures("ray_session")
@pytest.mark.parametrize("config", sorted(CASES))
def test_training_with_an_inference_server_counts_frames_and_versions(config, tmp_path):
    run = tmp_path / "run"
    args = ["train", str(ROOT / "configs" / config), *SERVER, *CASES[config], "--run-dir", str(run)]
    assert main(args) == 0
    metrics = rows(run)
    total = int(CASES[config][-1 if config == "ppo_cartpole.yaml" else 3].split("=")[1])
    assert int(float(metrics[-1]["train/frames"])) == total
    frames_per_batch = 2048 if config == "ppo_cartpole.yaml" else 256
    assert len(metrics) == total // frames_per_batch
    # on-policy, sync, prefetch 0: each batch was collected with the learner's newest weights,
    # so the lag (optimizer steps, at learning time) is only the update's own steps, as with
    # local inference: at most epochs x minibatches - 1 (a step tagged older would add to it)
    steps = 10 * 8 if config == "ppo_cartpole.yaml" else 1 * 2
    assert {float(r["train/policy_lag_max"]) for r in metrics} == {steps - 1}
    state = load_checkpoint(latest_checkpoint(run))
    assert int(state["frames"]) == total
    assert "eval/return_mean" in metrics[1] and metrics[1]["eval/return_mean"] != ""
    assert state["config"]["collector"]["inference"] == "server"
    assert int(state["algorithm"]["num_updates"]) == len(metrics) * steps

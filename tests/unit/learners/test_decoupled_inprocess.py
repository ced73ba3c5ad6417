"""Decoupled collection on the in-process backend: every worker writes into the one buffer
(an actor handle names its worker, so the copy a worker starts with is the same buffer)."""

from __future__ import annotations

import torch

from fakes import counting
from fleetrl import RayCollector, Trainer, load_config
from fleetrl.collectors.replay import RemoteReplayBuffer
from policies import constant_policy
from runs import DECOUPLED_DQN, DECOUPLED_TINY


def test_in_process_workers_fill_the_one_buffer_exactly():
    rb = RemoteReplayBuffer(1000, 16, backend="inprocess")
    with RayCollector(
        counting(7),
        constant_policy(1),
        frames_per_batch=60,
        total_frames=250,
        num_collectors=2,
        num_workers_per_collector=2,
        replay_buffer=rb,
        backend="inprocess",
    ) as c:
        progress = list(c)
        assert c.frames == 250
    assert sorted(int(p["frames"]) for p in progress) == [10, 60, 60, 60, 60]
    assert len(rb) == rb.write_count() == 250
    sample = rb.sample(3)
    assert (sample["next", "observation"] == sample["observation"] + 1).all()
    rb.shutdown()


def test_a_decoupled_run_trains_on_the_in_process_backend(tmp_path):
    config = load_config(
        DECOUPLED_DQN,
        [
            *DECOUPLED_TINY,
            "trainer.backend=inprocess",
            "trainer.total_frames=512",
            f"logging.run_dir={tmp_path / 'run'}",
        ],
    )
    metrics = Trainer(config).train()
    assert metrics["train/frames"] == 512
    assert metrics["train/policy_version"] > 0  # it learned from the buffer
    assert torch.isfinite(torch.tensor(metrics["loss/td"]))

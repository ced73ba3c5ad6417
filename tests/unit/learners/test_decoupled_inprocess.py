"""Decoupled collection on the in-process backend: every worker writes into the one buffer
(an actor handle names its worker, so the copy a worker starts with is the same buffer)."""

from __future__ import annotations

import torch

from fakes import counting
from fleetrl import RayCollector, Trainer, load_config
from fleetrl.collectors.remote.replay import RemoteReplayBuffer
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


def test_a_checkpoint_taken_while_tasks_are_in_flight_holds_the_writes_its_frames_count(
    tmp_path,
):
    """Tasks in flight at a checkpoint have written into the buffer before the learner counted
    their frames: the checkpoint's buffer holds the counted writes, no more, and a run resumed
    from it ends with as many transitions as its budget."""
    from fleetrl.run.checkpoint import latest_checkpoint, load_checkpoint

    run = tmp_path / "run"
    overrides = [
        *DECOUPLED_TINY,
        "trainer.backend=inprocess",
        "trainer.total_frames=512",
        "dqn.buffer_size=1000",
        f"logging.run_dir={run}",
    ]
    trainer = Trainer(load_config(DECOUPLED_DQN, overrides))
    trainer.learner = learner = trainer.make_learner()
    try:
        trainer.frames += learner.run_iteration().frames
        in_flight = [p.ref for p in learner.collection.collector._pool.pending]
        assert in_flight
        # the workers finish their tasks (each writes into the buffer); no record is taken yet
        learner.buffer.backend.wait(in_flight, num_returns=len(in_flight))
        held = learner.buffer.state_dict()["buffer"]["_storage"]
        assert learner.buffer.write_count() > trainer.frames == learner.written
        state = load_checkpoint(trainer.checkpoint())
    finally:
        learner.shutdown()
    buffer = state["algorithm"]["buffer"]
    frames = state["frames"]
    assert frames == trainer.frames == state["algorithm"]["frames_seen"]
    assert buffer["_storage"]["_len"] == buffer["_writer"]["_write_count"] == frames
    assert buffer["_writer"]["_cursor"] == frames
    # the rows of the counted writes: the first ones (in process, tasks write in order)
    for key in ("observation", "action"):
        assert torch.equal(buffer["_storage"]["_storage"][key], held["_storage"][key][:frames])

    resumed = Trainer.from_run_dir(run)
    assert resumed.train()["train/frames"] == 512
    final = load_checkpoint(latest_checkpoint(run))
    assert final["frames"] == final["algorithm"]["frames_seen"] == 512
    assert final["algorithm"]["buffer"]["_storage"]["_len"] == 512

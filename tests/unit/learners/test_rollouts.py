"""The one collection path: the central learner and a gradient worker collect through the
same :class:`~fleetrl.learners.collection.Collection`, so the same config and seed give the same
frames and episodes in both, and the warm-up rule is the algorithm class's."""

from __future__ import annotations

import math

import pytest
import torch

from fleetrl.learners import GradWorker
from fleetrl.learners.central import CentralLearner
from fleetrl.learners.collection import Collection, random_start_frames
from fleetrl.setup.build import make_algorithm
from fleetrl.setup.load import config_from_dict

FPB = 256
SEED = 5


def config(algorithm="ppo", section=None, num_envs=4):
    return config_from_dict(
        {
            "algorithm": algorithm,
            "env": {
                "id": "CartPole-v1" if algorithm != "sac" else "Pendulum-v1",
                "num_envs": num_envs,
            },
            "collector": {"num_collectors": 0, "frames_per_batch": FPB},
            "trainer": {"total_frames": 4 * FPB, "seed": SEED},
            algorithm: {"hidden_sizes": [16], **(section or {})},
        }
    )


def test_central_learner_and_gradient_worker_collect_the_same_episodes():
    cfg = config(section={"num_epochs": 1, "num_mini_batch": 2})
    central = CentralLearner(cfg, make_algorithm(cfg, SEED), seed=SEED)
    worker = GradWorker(cfg, index=0, seed=SEED)
    try:
        # one process, one torch RNG: each collection starts from the same sampling state
        torch.manual_seed(0)
        result = central.run_iteration()
        torch.manual_seed(0)
        report = worker.step()
    finally:
        central.shutdown()
        worker.shutdown()
    assert result.frames == report.collected.frames == FPB
    assert len(result.returns) > 0  # CartPole's first random-ish episodes end within 256 frames
    assert result.returns == report.collected.returns
    assert result.lengths == report.collected.lengths
    # the episodes' frames are inside the batch: lengths are whole episodes
    assert sum(result.lengths) <= FPB and all(n >= 1 for n in result.lengths)


def test_the_random_start_is_the_algorithm_classs_and_shared_out_among_learners():
    sac = make_algorithm(config("sac", {"learning_starts": 100}, num_envs=2), SEED)
    ppo = make_algorithm(config(), SEED)
    assert type(sac).random_start and not type(ppo).random_start
    assert random_start_frames(ppo, collected=0) == -1
    assert random_start_frames(sac, collected=0) == 100
    assert random_start_frames(sac, collected=0, share=3) == 34  # ceil(100 / 3) per learner
    assert random_start_frames(sac, collected=40, share=3) == 0  # its share is behind it


def test_a_local_collector_is_told_every_version_and_the_collection_is_taken_once():
    cfg = config(section={"num_epochs": 1, "num_mini_batch": 2})
    algorithm = make_algorithm(cfg, SEED)
    rollouts = Collection(cfg, algorithm, total_frames=2 * FPB, seed=SEED)
    try:
        assert rollouts.shares_policy
        first = rollouts.next_batch()
        algorithm.learn(first)  # 2 optimizer steps
        second = rollouts.next_batch()
        tags = second.get(("collector", "policy_version"))
        assert torch.all(tags == 2)  # published before the batch, with the step count
        collection, _ = rollouts.take()
        assert collection.frames == 2 * FPB
        assert rollouts.take()[0].frames == 0  # taken: reset
        assert rollouts.next_batch() is None  # the budget is spent exactly
    finally:
        rollouts.shutdown()


def test_the_iteration_splits_collection_and_learning_into_parts_where_they_happen():
    cfg = config(section={"num_epochs": 2, "num_mini_batch": 2})
    central = CentralLearner(cfg, make_algorithm(cfg, SEED), seed=SEED)
    worker = GradWorker(cfg, index=0, seed=SEED)
    try:
        m = central.run_iteration().metrics
        report = worker.step()
    finally:
        central.shutdown()
        worker.shutdown()
    # local collection: the loop and the batch's building, inside the wait for the batch
    local = [m["time/env_s"], m["time/policy_s"], m["time/pack_s"]]
    assert all(s >= 0 for s in local) and sum(local) <= m["time/collect_s"]
    assert all(math.isnan(m[f"time/{p}"]) for p in ("weights_s", "transfer_s", "unpack_s"))
    # the update: preparing the batch (GAE), then the optimizer steps, together learn_s
    assert 0 < m["time/prepare_s"] < m["time/learn_s"]
    assert m["time/prepare_s"] + m["time/optimize_s"] == pytest.approx(m["time/learn_s"])
    # a gradient worker: its collectors' parts travel with its report; its first step
    # prepared the batch inside the gradient's time
    times = report.collected.times
    assert (times.frames, times.batches) == (FPB, 1) and times.env_s >= 0
    assert 0 < report.prepare_s <= report.grad_s

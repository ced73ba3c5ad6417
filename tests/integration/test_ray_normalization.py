"""One normalization statistic per run, on Ray: two collector workers and the gradient workers
act with the learner's merged statistics (the statistics themselves:
tests/unit/test_normalization.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fleetrl.keys import DISCOUNTED_RETURN_KEY
from fleetrl.learners.central import CentralLearner
from fleetrl.networks.normalization import EPS
from fleetrl.setup.build import make_algorithm
from fleetrl.setup.load import config_from_dict
from runs import NORMALIZED_TINY


# ------------------------------------------------------------------ two Ray workers
def record(learner: CentralLearner) -> tuple[list, dict]:
    """Wrap the learner's collection: every batch delivered, and the learner's normalizer
    buffers at each publish (by version)."""
    collection = learner.collection
    delivered, published = [], {}
    next_batch, publish = collection.next_batch, collection.publish

    def recording_next_batch():
        batch = next_batch()
        if batch is not None:
            delivered.append(batch.clone())
        return batch

    def recording_publish():
        (norm,) = learner.algorithm.observation_normalizers
        published[learner.version] = {k: v.clone() for k, v in norm.named_buffers()}
        return publish()

    collection.next_batch, collection.publish = recording_next_batch, recording_publish
    (norm,) = learner.algorithm.observation_normalizers
    published[learner.version] = {k: v.clone() for k, v in norm.named_buffers()}
    return delivered, published


def worker_normalizers(learner: CentralLearner) -> list[tuple[int, dict[str, torch.Tensor]]]:
    """Each remote worker's (version, normalizer buffers), from its saved state."""
    out = []
    for w in learner.collection.collector.state_dict()["workers"]:
        policy = w["collector"]["policy_state_dict"]
        buffers = {k.rsplit(".", 1)[1]: v for k, v in policy.items() if k.endswith(("count", "m2"))}
        buffers["mean"] = next(v for k, v in policy.items() if k.endswith(".mean"))
        out.append((w["version"], buffers))
    return out


def test_two_ray_workers_act_with_the_learners_statistics_merged_from_every_frame(ray_session):
    overrides = [*NORMALIZED_TINY, "collector.num_collectors=2", "trainer.total_frames=256"]
    config = config_from_dict(
        {"algorithm": "ppo", "env": {"id": "Pendulum-v1"}, "ppo": {"gamma": 0.9}}, overrides
    )
    algorithm = make_algorithm(config, 0)
    learner = CentralLearner(config, algorithm, seed=0)
    delivered, published = record(learner)
    seen_versions = set()
    try:
        while learner.run_iteration() is not None:
            for version, buffers in worker_normalizers(learner):
                seen_versions.add(version)
                for name, value in buffers.items():
                    assert torch.equal(value, published[version][name]), (version, name)
    finally:
        learner.shutdown()
    assert len(delivered) == 4 and len(seen_versions) >= 3  # workers acted on new statistics
    workers = torch.cat([b.get(("collector", "worker_id")).flatten() for b in delivered])
    assert sorted(workers.unique().tolist()) == [0, 1]

    obs = torch.cat([b.get("observation").reshape(-1, 3) for b in delivered]).double().numpy()
    (norm,) = algorithm.observation_normalizers
    assert norm.count.item() == len(obs) == 256
    np.testing.assert_allclose(norm.mean.numpy(), obs.mean(0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(norm.var.numpy(), obs.var(0), rtol=1e-10)

    g = torch.cat([b.get(DISCOUNTED_RETURN_KEY).flatten() for b in delivered]).double().numpy()
    assert algorithm.reward_scaler.moments.count.item() == 256
    assert algorithm.reward_scaler.std == pytest.approx(np.sqrt(g.var() + EPS), rel=1e-10)


# ------------------------------------------------------------------ gradient workers
def replica_statistics(uw) -> list[dict[str, torch.Tensor]]:
    """Each gradient worker's normalizer buffers and reward moments, from its state."""
    out = []
    for state in ray_get([w.handle.state_dict.remote() for w in uw.workers]):
        loss = state["loss_module"]
        stats = {
            name: next(v for k, v in loss.items() if k.endswith(f".{name}"))
            for name in ("count", "mean", "m2")
        }
        stats.update({f"reward.{k}": v for k, v in state["reward_scaler"].items()})
        out.append(stats)
    return out


def master_statistics(algorithm) -> dict[str, torch.Tensor]:
    stats = algorithm.normalization.statistics()
    out = {name: stats[f"observation.0.{name}"] for name in ("count", "mean", "m2")}
    out.update({k: v for k, v in stats.items() if k.startswith("reward.")})
    return out


def ray_get(refs):
    import ray

    return ray.get(refs)


#: async and decentralized run with make test-all (marker e2e): make test stays within 6 min
@pytest.mark.parametrize(
    "mode",
    [
        "sync",
        pytest.param("async", marks=pytest.mark.e2e),
        pytest.param("decentralized", marks=pytest.mark.e2e),
    ],
)
def test_gradient_workers_share_the_masters_statistics(ray_session, mode):
    from fleetrl.learners import UpdateWorker

    scheme = {"num_grad_workers": 2, "update": mode}
    config = config_from_dict(
        {
            "algorithm": "ppo",
            "env": {"id": "Pendulum-v1", "num_envs": 2},
            "collector": {"num_collectors": 0, "frames_per_batch": 32},
            "scheme": scheme,
            "trainer": {"total_frames": 4096, "seed": 3},
            "ppo": {"num_epochs": 1, "num_mini_batch": 2, "hidden_sizes": [16]},
        },
        ["env.normalize_observation=true", "env.normalize_reward=true"],
    )
    algorithm = make_algorithm(config, 3)
    uw = UpdateWorker(config, algorithm, seed=3)
    try:
        before = master_statistics(algorithm)
        frames = 0
        for _ in range(3):
            frames += uw.run_iteration().frames
            after = master_statistics(algorithm)
            assert after["count"].item() == after["reward.count"].item() == frames
            replicas = replica_statistics(uw)
            # sync: each replica started its last batch with the master's statistics of the
            # iteration before; decentralized: all merged the same moments, as the mirror did
            want = {"sync": before, "decentralized": after}.get(mode)
            for stats in replicas:
                if want is not None:
                    assert all(torch.equal(stats[k], want[k]) for k in want), mode
            before = after
        assert frames >= 3 * 64
    finally:
        uw.shutdown()

"""RayCollector on a multi-agent torchrl env: each worker's SyncDataCollector batches in
torchrl's grouped layout, stacked in front in sync mode and counted exactly."""

from __future__ import annotations

import functools

import pytest
import torch
from torchrl.testing.mocking_classes import NestedCountingEnv

from fleetrl import RayCollector, SyncDataCollector, episode_stats
from fleetrl.keys import POLICY_VERSION_KEY, TRAJ_IDS_KEY, WORKER_ID_KEY

pytestmark = pytest.mark.usefixtures("ray_session")


#: a torchrl class and its arguments: workers import it, they do not import tests/
_nested_env = functools.partial(NestedCountingEnv, batch_size=(2,))


def _layout(batch, lead: int):
    """Leaf key -> (shape without the first ``lead`` dims, dtype)."""
    return {
        key: (tuple(batch.get(key).shape[lead:]), batch.get(key).dtype)
        for key in batch.keys(include_nested=True, leaves_only=True)
    }


def test_sync_mode_carries_grouped_batches_exactly():
    local = SyncDataCollector(_nested_env, None, frames_per_batch=12, total_frames=12)
    want = _layout(local.next(), 0)
    local.shutdown()
    with RayCollector(
        _nested_env,
        None,
        frames_per_batch=24,
        total_frames=48,
        num_collectors=2,
        sync=True,
    ) as collector:
        batches = list(collector)
        frames = collector.stats()["frames"]
    assert frames == 48
    assert [b.batch_size for b in batches] == [torch.Size([2, 2, 6])] * 2
    for batch in batches:
        got = _layout(batch, 1)
        # what the local collector yields, plus the sync round's mask
        assert {k: v for k, v in got.items() if k != ("collector", "mask")} == want
        assert batch.get(("next", "data", "states")).shape == (2, 2, 6, 3, 1)
        assert batch.get(WORKER_ID_KEY)[0].unique().tolist() == [0]
        assert batch.get(WORKER_ID_KEY)[1].unique().tolist() == [1]
        assert batch.get(POLICY_VERSION_KEY).shape == (2, 2, 6)
        assert bool((episode_stats(batch).lengths > 0).all())
    ids = [
        set(torch.cat([b.get(TRAJ_IDS_KEY)[w].flatten() for b in batches]).tolist()) for w in (0, 1)
    ]
    assert not ids[0] & ids[1]

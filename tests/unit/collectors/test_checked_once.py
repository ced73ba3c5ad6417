"""A batch size is checked where it is set, not again for every batch: the iterator and a
RayCollector's workers collect sizes that were checked when the collector was built (issue
59: "each rule is checked once per run"). ``collect(frames)``, where a caller passes a size,
checks it."""

from __future__ import annotations

import pytest

from fleetrl import ConfigError, RayCollector, SyncDataCollector
from fleetrl.collectors.local import sync as sync_module


@pytest.fixture
def per_batch_checks(monkeypatch):
    """Every call of the batch-size rule by the local collector's module, by its arguments."""
    calls = []
    rule = sync_module.batch_size_problems

    def counted(**kwargs):
        calls.append(kwargs)
        return rule(**kwargs)

    monkeypatch.setattr(sync_module, "batch_size_problems", counted)
    return calls


def test_the_iterator_checks_no_batch_size_per_batch_and_collect_checks_its_argument(
    per_batch_checks,
):
    collector = SyncDataCollector("CartPole-v1", frames_per_batch=8, total_frames=32, num_envs=2)
    assert sum(b.numel() for b in collector) == 32  # 4 batches
    assert per_batch_checks == []
    assert collector.collect(6).numel() == 6  # a caller's size: checked, once
    assert [c["frames_per_batch"] for c in per_batch_checks] == [6]
    with pytest.raises(ConfigError, match=r"frames=7 is invalid: must be a multiple of the number"):
        collector.collect(7)
    with pytest.raises(ConfigError, match=r"frames=0 is invalid: must be > 0"):
        collector.collect(0)
    collector.shutdown()


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "first-ready"])
def test_a_workers_tasks_are_not_checked_again(per_batch_checks, sync):
    collector = RayCollector(
        "CartPole-v1",
        frames_per_batch=16,
        total_frames=64,
        num_collectors=2,
        num_workers_per_collector=2,
        sync=sync,
        backend="inprocess",
    )
    assert sum(b.numel() for b in collector) == 64
    collector.shutdown()
    assert per_batch_checks == []  # in the workers: no per-task check


def test_a_subclass_that_collects_its_own_way_is_still_called(per_batch_checks):
    class Doubled(SyncDataCollector):
        calls = 0

        def collect(self, frames, **kwargs):
            type(self).calls += 1
            return super().collect(frames, **kwargs)

    collector = RayCollector(
        "CartPole-v1",
        frames_per_batch=8,
        total_frames=16,
        num_collectors=1,
        num_workers_per_collector=2,
        collector_class=Doubled,
        backend="inprocess",
    )
    assert sum(b.numel() for b in collector) == 16
    collector.shutdown()
    assert Doubled.calls == 2  # its collect() runs per task, and checks its argument
    assert len(per_batch_checks) == 2

"""Overlapped collection in Ray workers: bit-identical batches to the plain loop's, and the
settings refused before any actor starts (in one process: tests/unit/collectors/test_overlap.py)."""

from __future__ import annotations

import re

import pytest

from collecting import OVERLAP_ENVS as N
from collecting import OVERLAP_STEPS as STEPS
from collecting import assert_same_batches as assert_same
from collecting import breakout as spec
from collecting import collect_breakout as collect
from fleetrl import ConfigError, RayCollector
from fleetrl.collectors.local.overlap import (
    OVERLAP_NUM_ENVS_MSG,
)
from policies import atari_row_policy


def test_ray_workers_overlap_with_bit_identical_batches(ray_session):
    atari = {"max_episode_frames": 4 * 15}
    want, _ = collect("ale_vector", False, batches=1, atari=atari)
    with RayCollector(
        spec("ale_vector", **atari),
        atari_row_policy(),
        frames_per_batch=N * STEPS,
        total_frames=N * STEPS,
        num_collectors=1,
        num_workers_per_collector=N,
        collector_kwargs={"overlap": True},
    ) as c:
        c.set_seed(3)
        got = list(c)
    assert_same(got, want)


def test_ray_refuses_overlap_before_any_actor_starts(ray_session):
    message = OVERLAP_NUM_ENVS_MSG.format(n=3, even=4)
    with pytest.raises(
        ConfigError, match=re.escape(f"collector_kwargs['overlap']=True is invalid: {message}")
    ):
        RayCollector(
            spec("ale_vector"),
            None,
            frames_per_batch=12,
            num_collectors=1,
            num_workers_per_collector=3,
            collector_kwargs={"overlap": True},
        )

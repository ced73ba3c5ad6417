"""Overlapped collection (env steps of one half while the policy acts on the other): the
batches are bit-identical to the plain step-then-infer loop's for a policy that acts on
each env's row alone, on real ALE games in both C++ engines."""

from __future__ import annotations

import re

import pytest
import torch

from fleetrl import ConfigError, RayCollector, SyncDataCollector
from fleetrl.collectors.overlap import (
    OVERLAP_NUM_ENVS_MSG,
    HalvedEnv,
)
from fleetrl.config import AtariConfig
from fleetrl.envs.atari import AtariEnv
from policies import atari_row_policy

try:
    import envpool  # noqa: F401  (no wheel outside Linux x86_64)

    HAVE_ENVPOOL = True
except ImportError:
    HAVE_ENVPOOL = False

N = 4  # envs: two halves of 2
STEPS = 40  # per batch


def spec(engine: str, **atari) -> AtariEnv:
    return AtariEnv("ALE/Breakout-v5", engine, AtariConfig(**atari), num_threads=1)


def collect(engine, overlap, *, batches=2, atari=None, policy=None, **kwargs):
    with SyncDataCollector(
        spec(engine, **(atari or {})),
        policy or atari_row_policy(),
        frames_per_batch=N * STEPS,
        total_frames=batches * N * STEPS,
        num_envs=N,
        overlap=overlap,
        **kwargs,
    ) as c:
        assert c.overlap is overlap
        assert isinstance(c.env, HalvedEnv) is overlap
        c.set_seed(3)
        out = list(c)
        state = c.state_dict()
    return out, state


def assert_same(got, want) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.batch_size == b.batch_size
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        for key in b.keys(True, True):
            assert torch.equal(a[key], b[key]), key


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

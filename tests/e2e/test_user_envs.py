"""A torchrl ``ParallelEnv`` a user builds keeps the episode-boundary contract (its workers
are spawned processes, seconds to start: the rest of the class is in
tests/unit/envs/test_episode_boundaries.py)."""

from __future__ import annotations

import functools

import pytest

from boundaries import assert_episode_contract, exact_starts, exact_successor
from fakes import BOUNDARY_FNS, torchrl_boundary_env
from fleetrl import SyncDataCollector

pytestmark = pytest.mark.standalone  # no Ray


def test_a_torchrl_parallel_env_keeps_the_contract():
    from torchrl.envs import ParallelEnv

    fns = [functools.partial(torchrl_boundary_env, i) for i in range(len(BOUNDARY_FNS))]
    env = ParallelEnv(len(fns), fns)
    with SyncDataCollector(env, None, frames_per_batch=60, total_frames=60) as collector:
        collector.set_seed(0)
        batch = next(iter(collector))
    assert batch.batch_size == (3, 20)
    assert assert_episode_contract(batch, exact_successor, exact_starts, frames=60) >= 3

from __future__ import annotations

import pytest

from fleetrl.batch_sizes import BatchSizeNames, batch_size_problems, is_unlimited


def strings(problems):
    return [str(p) for p in problems]


def test_one_collector_checks_batch_and_budget_against_its_envs():
    assert strings(batch_size_problems(frames_per_batch=12, total_frames=24, num_envs=4)) == []
    assert strings(batch_size_problems(frames_per_batch=10, total_frames=30, num_envs=4)) == [
        "frames_per_batch=10 is invalid: must be a multiple of the number of envs (4); use 8 or 12",
        "total_frames=30 is invalid: must be a multiple of the number of envs (4); use 28 or 32",
    ]
    # a size below one round suggests the smallest valid one
    assert strings(batch_size_problems(frames_per_batch=3, total_frames=None, num_envs=4)) == [
        "frames_per_batch=3 is invalid: must be a multiple of the number of envs (4); use 4 or 8"
    ]


@pytest.mark.parametrize("endless", [None, -1])
def test_no_limit_is_none_or_minus_one(endless):
    assert is_unlimited(endless)
    assert strings(batch_size_problems(frames_per_batch=8, total_frames=endless, num_envs=4)) == []


def test_no_limit_is_nothing_else():
    assert not any(is_unlimited(v) for v in (0, -2, 1, True, "-1"))


def test_a_sync_split_before_and_after_the_env_counts_are_known():
    assert strings(
        batch_size_problems(frames_per_batch=16, total_frames=None, num_envs=None, split=3)
    ) == [
        "frames_per_batch=16 is invalid: sync=True splits each batch across the 3 collectors: "
        "must be a multiple of num_collectors (3); use frames_per_batch=15 or 18"
    ]
    assert strings(
        batch_size_problems(frames_per_batch=60, total_frames=-1, num_envs=4, split=2)
    ) == [
        "frames_per_batch=60 is invalid: sync=True splits each batch across the 2 collectors: "
        "frames_per_batch / num_collectors = 30 frames per collector must be a multiple of each "
        "collector's 4 envs; use frames_per_batch=56 or 64"
    ]
    assert (
        strings(batch_size_problems(frames_per_batch=64, total_frames=-1, num_envs=4, split=2))
        == []
    )


def test_collectors_with_different_env_counts_need_a_common_multiple():
    assert strings(batch_size_problems(frames_per_batch=12, total_frames=18, num_envs=[3, 4])) == [
        "total_frames=18 is invalid: must be a multiple of every collector's number of envs "
        "(lcm of [3, 4] = 12); use 12 or 24"
    ]
    # a count not yet known checks nothing that depends on it
    assert (
        strings(batch_size_problems(frames_per_batch=7, total_frames=7, num_envs=[3, None])) == []
    )


def test_names_are_the_callers():
    names = BatchSizeNames(frames_per_batch="collector.frames_per_batch")
    assert strings(
        batch_size_problems(frames_per_batch=6, total_frames=None, num_envs=4, names=names)
    ) == [
        "collector.frames_per_batch=6 is invalid: must be a multiple of the number of envs (4); "
        "use 4 or 8"
    ]

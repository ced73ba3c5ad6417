"""Helpers of the collector tests: which engines are here, Atari collection with and without
overlap compared batch for batch, and the trajectories of a ``trajs_per_batch`` batch."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from fleetrl import SyncDataCollector
from fleetrl.collectors.local.overlap import HalvedEnv
from fleetrl.config import AtariConfig
from fleetrl.envs.atari import AtariEnv
from policies import atari_row_policy

#: envpool has wheels for Linux x86_64 only (pyproject's marker)
HAVE_ENVPOOL = importlib.util.find_spec("envpool") is not None
needs_envpool = pytest.mark.skipif(not HAVE_ENVPOOL, reason="envpool is not installed here")


def engines(*names: str) -> list:
    """Engine names as test parameters, envpool's skipped where it is not installed."""
    return [pytest.param(n, marks=needs_envpool) if n == "envpool" else n for n in names]


# ------------------------------------------------------------------ overlapped collection

OVERLAP_ENVS = 4  # two halves of 2
OVERLAP_STEPS = 40  # per batch


def breakout(engine: str, **atari) -> AtariEnv:
    return AtariEnv("ALE/Breakout-v5", engine, AtariConfig(**atari), num_threads=1)


def collect_breakout(engine, overlap, *, batches=2, atari=None, policy=None, **kwargs):
    """``batches`` batches of Breakout with or without overlap; the batches and the state."""
    with SyncDataCollector(
        breakout(engine, **(atari or {})),
        policy or atari_row_policy(),
        frames_per_batch=OVERLAP_ENVS * OVERLAP_STEPS,
        total_frames=batches * OVERLAP_ENVS * OVERLAP_STEPS,
        num_envs=OVERLAP_ENVS,
        overlap=overlap,
        **kwargs,
    ) as c:
        assert c.overlap is overlap
        assert isinstance(c.env, HalvedEnv) is overlap
        c.set_seed(3)
        out = list(c)
        state = c.state_dict()
    return out, state


def assert_same_batches(got, want) -> None:
    """The same batches: sizes, keys and every value."""
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.batch_size == b.batch_size
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        for key in b.keys(True, True):
            assert torch.equal(a[key], b[key]), key


# ------------------------------------------------------------------ trajs_per_batch


def whole_trajectories(batch) -> list[list[float]]:
    """Each row's valid observations, after checking the row is one whole trajectory."""
    mask = batch["collector", "mask"]
    rows = []
    for i in range(batch.shape[0]):
        n = int(mask[i].sum())
        assert mask[i, :n].all() and not mask[i, n:].any()  # valid steps first, then padding
        done = batch["next", "done"][i, :, 0]
        assert done[:n].tolist() == [False] * (n - 1) + [True]  # ends once, at its last step
        assert not done[n:].any() and (batch["observation"][i, n:] == 0).all()  # zero padding
        assert batch["collector", "traj_ids"][i, :n].unique().numel() == 1
        assert batch["collector", "worker_id"][i, :n].unique().numel() == 1
        rows.append(batch["observation"][i, :n, 0].tolist())
    return rows


# ------------------------------------------------------------------ replacements that die


def assert_keep_dying_gives_up(make_collector, sync: bool, budget_file: str, cause: str) -> None:
    """A worker whose replacement dies too, with ``max_restart_attempts=1``: the collector
    raises ``WorkerLostError`` naming the worker and the attempts, its books stay exact
    (served, owed, in flight), and the caller can go on to exactly the budget.

    ``make_collector``: ``RayCollector`` or its in-process partial; ``cause``: what the last
    death's own text says (a Ray actor death, or the simulated one).
    """
    import re

    from fakes import ExitOnBuild, counting, kill_worker
    from fleetrl.collectors import frames_in
    from fleetrl.distributed.workers import GAVE_UP_MSG
    from fleetrl.errors import WorkerError, WorkerLostError
    from policies import constant_policy

    factory = ExitOnBuild(budget_file, length=5, sleep=0.001)
    gave_up = GAVE_UP_MSG.split("Last cause")[0].format(attempts=1, max_attempts=1)
    with make_collector(
        [factory, counting(5, sleep=0.001)],
        constant_policy(1),
        frames_per_batch=40,
        total_frames=400,
        sync=sync,
        prefetch=1,
        max_restart_attempts=1,
    ) as c:
        seen = [frames_in(c.next()) for _ in range(2)]
        factory.arm(1)
        kill_worker(c, 0)
        with pytest.raises(
            WorkerLostError, match="collector worker 0 was lost: " + re.escape(gave_up)
        ) as info:
            for _ in range(10):
                seen.append(frames_in(c.next()))
        assert isinstance(info.value, WorkerError)
        assert info.value.worker_id == 0 and info.value.attempts == 1
        assert cause in info.value.cause.lower()  # the last death's own cause
        # the books are exact: what was served, and what is still owed (the lost task too)
        assert c.frames == sum(seen) and c.remaining_frames == 400 - sum(seen)
        in_flight = 40 if sync else 2 * 40  # one round of two shares / one task per worker
        assert c.stats()["pending"]["frames"] == min(in_flight, 400 - sum(seen))
        # the caller goes on: a new series of attempts, and exactly the budget
        seen.extend(frames_in(b) for b in c)
        stats = c.stats()
    assert sum(seen) == 400 and len(seen) == 10
    assert stats["frames"] == 400 == sum(stats["frames_per_worker"].values())
    assert stats["restarts"] == {0: 2, 1: 0}
    assert stats["pending"] == {"tasks": 0, "frames": 0}

"""Ray workers build each C++ engine in their own process: ALE's vector env and envpool for
Atari, envpool for MuJoCo; and the vector envs a user's factory builds there keep the
episode-boundary contract. The engines themselves: tests/unit/envs/."""

from __future__ import annotations

import pytest
import torch

import fakes
from collecting import engines, needs_envpool
from fleetrl import MujocoEnv, RayCollector
from fleetrl.config import AtariConfig
from fleetrl.envs.atari import (
    AtariEnv,
)


def one_ray_batch(spec):
    """One batch of 48 frames from one Ray collector stepping 2 envs of ``spec``, with random
    actions: 24 steps per env, so 10-step episodes end twice per env."""
    with RayCollector(
        spec,
        None,
        frames_per_batch=48,
        total_frames=48,
        num_collectors=1,
        num_workers_per_collector=2,
    ) as collector:
        (batch,) = list(collector)
    return batch


@pytest.mark.parametrize("engine", engines("ale_vector", "envpool"))
def test_ray_workers_build_the_engine(ray_session, engine):
    spec = AtariEnv("ALE/Pong-v5", engine, AtariConfig(max_episode_frames=4 * 10), num_threads=1)
    batch = one_ray_batch(spec)
    assert batch.numel() == 48
    assert batch["observation"].dtype == torch.uint8  # uint8 across Ray too
    assert batch["observation"].shape[-3:] == (4, 84, 84)
    truncated = batch["next", "truncated"][..., 0]
    assert int(truncated.sum()) == 4  # 2 envs x 24 steps: ends at steps 10 and 20


@needs_envpool
def test_ray_workers_build_envpool_mujoco(ray_session):
    spec = MujocoEnv("HalfCheetah-v5", "envpool", max_episode_steps=10, num_threads=1)
    batch = one_ray_batch(spec)
    assert batch.numel() == 48 and batch["observation"].dtype == torch.float32
    assert batch["action"].shape[-1] == 6
    assert int(batch["next", "truncated"].sum()) == 4  # 2 envs x 24 steps: ends at 10 and 20
    assert not batch["next", "terminated"].any()  # HalfCheetah never falls


# ------------------------------------------------ user-built vector envs, built by workers


#: factories from fakes (pickled by value: the workers do not import tests/)
USER_FACTORIES = {
    "gymnasium-sync-next": (fakes.next_step_boundary_envs, "exact", 3, 20),
    "ale-AtariVectorEnv-same": (fakes.same_step_breakout, "atari", 2, 400),
    "envpool-gymnasium": (fakes.envpool_breakout, "atari", 2, 400),
}


@pytest.mark.parametrize(
    "case",
    [  # with the e2e tests: in the fast suite the same make_env runs in-process (unit)
        pytest.param("gymnasium-sync-next", marks=pytest.mark.e2e),
        pytest.param("ale-AtariVectorEnv-same", marks=pytest.mark.e2e),
        pytest.param("envpool-gymnasium", marks=[pytest.mark.e2e, needs_envpool]),
    ],
)
def test_a_user_factory_built_by_ray_workers_keeps_the_episode_contract(ray_session, case):
    """Two Ray collectors, each building the factory's vector env in its worker; each
    collector's half of the batch keeps the contract."""
    from boundaries import (
        assert_episode_contract,
        exact_starts,
        exact_successor,
        fresh_stacks,
        stack_slides,
    )

    factory, family, envs, steps = USER_FACTORIES[case]
    checks = {"exact": (exact_successor, exact_starts), "atari": (stack_slides, fresh_stacks)}
    frames = 2 * envs * steps
    with RayCollector(
        factory, None, frames_per_batch=frames, total_frames=frames, num_collectors=2
    ) as collector:
        (batch,) = list(collector)
    assert batch.batch_size == (envs, 2 * steps)  # the collectors' batches, end to end in time
    ends = 0
    for part in batch.split(steps, dim=1):  # each collector's own
        ends += assert_episode_contract(part, *checks[family], frames=envs * steps)
    assert ends >= 2

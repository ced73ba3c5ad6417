"""The Atari engines: episode boundaries, preprocessing parity, configs, Ray workers.

Real ALE games in each engine (gymnasium, ale-py's vector env, envpool), a few
envs and a few hundred agent steps each.
"""

from __future__ import annotations

import pytest
import torch

from fleetrl import RayCollector
from fleetrl.config import AtariConfig
from fleetrl.envs.atari import (
    AtariEnv,
)

try:
    import envpool  # noqa: F401  (no wheel outside Linux x86_64: pyproject's marker)

    HAVE_ENVPOOL = True
except ImportError:
    HAVE_ENVPOOL = False
needs_envpool = pytest.mark.skipif(not HAVE_ENVPOOL, reason="envpool is not installed here")


def _engines(*names: str) -> list:
    return [pytest.param(n, marks=needs_envpool) if n == "envpool" else n for n in names]


@pytest.mark.parametrize("engine", _engines("ale_vector", "envpool"))
def test_ray_workers_build_the_engine(ray_session, engine):
    spec = AtariEnv("ALE/Pong-v5", engine, AtariConfig(max_episode_frames=4 * 10), num_threads=1)
    with RayCollector(
        spec,
        None,
        frames_per_batch=48,
        total_frames=48,
        num_collectors=1,
        num_workers_per_collector=2,
    ) as collector:
        (batch,) = list(collector)
    assert batch.numel() == 48
    assert batch["observation"].dtype == torch.uint8  # uint8 across Ray too
    assert batch["observation"].shape[-3:] == (4, 84, 84)
    truncated = batch["next", "truncated"][..., 0]
    assert int(truncated.sum()) == 4  # 2 envs x 24 steps: ends at steps 10 and 20

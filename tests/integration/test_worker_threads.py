"""Every worker process pins torch to one thread unless told otherwise, seen from inside."""

from __future__ import annotations

import pytest
import torch

from fleetrl.collectors import RayCollector
from fleetrl.errors import ConfigError
from fleetrl.learners import GradWorker
from fleetrl.setup.load import config_from_dict
from policies import threads_probe


def threads_seen(**kwargs) -> set[int]:
    collector = RayCollector(
        "CartPole-v1",
        threads_probe(),
        frames_per_batch=8,
        total_frames=8,
        num_collectors=1,
        num_workers_per_collector=2,
        sync=True,
        # Ray would give an actor of 2 CPUs OMP_NUM_THREADS=2: the pin must override it
        remote_configs={"num_cpus": 2},
        **kwargs,
    )
    try:
        return {int(n) for batch in collector for n in batch["num_threads"].flatten()}
    finally:
        collector.shutdown()


@pytest.mark.usefixtures("ray_session")
def test_collector_workers_act_on_one_thread_by_default():
    assert threads_seen() == {1}


@pytest.mark.usefixtures("ray_session")
def test_collector_workers_take_the_threads_they_are_told():
    assert threads_seen(num_threads=2) == {2}


def test_grad_worker_pins_torch_threads_from_its_config():
    config = config_from_dict(
        {"algorithm": "ppo"},
        [
            "collector.num_collectors=0",
            "env.num_envs=2",
            "collector.frames_per_batch=16",
            "ppo.num_mini_batch=1",
            "scheme.num_threads_per_grad_worker=2",
        ],
    )
    try:
        GradWorker(config, index=0, seed=0)
        assert torch.get_num_threads() == 2
        config.scheme.num_threads_per_grad_worker = 1
        GradWorker(config, index=0, seed=0)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(1)  # conftest's setting for the rest of the session


@pytest.mark.parametrize("key", ["collector.num_threads", "scheme.num_threads_per_grad_worker"])
def test_thread_counts_below_one_are_config_errors(key):
    with pytest.raises(ConfigError) as info:
        config_from_dict({"algorithm": "ppo"}, [f"{key}=0"])
    assert info.value.problems == [f"{key}=0 is invalid: must be >= 1, or null for torch's default"]
    assert config_from_dict({"algorithm": "ppo"}, [f"{key}=null"]) is not None


@pytest.mark.usefixtures("ray_session")
def test_collector_workers_left_alone_keep_rays_thread_count():
    """Why the pin matters: Ray starts a 2-CPU actor with 2 torch threads."""
    assert threads_seen(num_threads=None) == {2}

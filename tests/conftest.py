from __future__ import annotations

import os
import sys
import warnings

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
warnings.filterwarnings("ignore", category=UserWarning)
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def ray_session():
    """One real local Ray instance for the whole test session, with a few logical CPUs."""
    import ray
    from ray import cloudpickle

    import fakes
    import policies

    # test helpers travel to the workers by value: workers do not import tests/
    cloudpickle.register_pickle_by_value(fakes)
    cloudpickle.register_pickle_by_value(policies)
    if not ray.is_initialized():
        ray.init(
            address="local",  # always a fresh local instance, never a stray cluster
            num_cpus=4,
            include_dashboard=False,
            logging_level="ERROR",
            log_to_driver=False,
            configure_logging=False,
            # the fakes' gymnasium ids, registered in every worker (they do not import tests/)
            runtime_env={"worker_process_setup_hook": fakes.register_fake_envs},
        )
    yield ray
    ray.shutdown()

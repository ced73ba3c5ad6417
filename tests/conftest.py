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

    if not ray.is_initialized():
        ray.init(
            num_cpus=4,
            include_dashboard=False,
            logging_level="ERROR",
            log_to_driver=False,
            configure_logging=False,
        )
    yield ray
    ray.shutdown()

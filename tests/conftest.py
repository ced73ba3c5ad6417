"""The test pyramid (see the README's Tests):

- ``tests/unit`` runs without Ray (``ray.init`` is refused there): workers run on the
  in-process backend (``backend="inprocess"``, ``trainer.backend=inprocess``);
- ``tests/integration`` runs on one real local Ray instance for the session;
- ``tests/e2e`` (marker ``e2e``, added here to every test in it) runs whole jobs.
  ``make test`` runs ``-m "not e2e"``; a slow variant of an integration test may carry
  the marker too, and then runs with ``make test-all`` only.

A test that needs a GPU carries the marker ``cuda``: ``make test`` and ``make test-all``
collect it everywhere, and it is skipped here ("needs CUDA") where torch sees no GPU.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))  # the helpers: fakes, policies, runs, schemes
# the benchmark scripts, whose helpers some tests check
sys.path.insert(1, os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))
TESTS = Path(__file__).parent
UNIT, INTEGRATION, E2E = TESTS / "unit", TESTS / "integration", TESTS / "e2e"
NO_RAY = "tests/unit run without Ray: a test that needs it belongs in tests/integration"
NEEDS_CUDA = pytest.mark.skip(reason="needs CUDA")
STANDALONE_WITH_RAY = (
    "a test marked standalone runs beside the Ray tests and may not use the session's Ray "
    "(ray_session): remove the marker, or start a Ray of its own in its processes"
)


def _under(item, folder: Path) -> bool:
    return folder in Path(str(item.fspath)).parents


def _fixtures(item) -> tuple[str, ...]:
    return tuple(getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(items):
    cuda = torch.cuda.is_available()
    for item in items:
        if _under(item, E2E):
            item.add_marker(pytest.mark.e2e)
        if not cuda and item.get_closest_marker("cuda") is not None:
            item.add_marker(NEEDS_CUDA)
    # make test-all runs the standalone tests in a process of their own, beside the Ray
    # layer: one that used the session's Ray there would start a second instance
    for item in items:
        if item.get_closest_marker("standalone") and "ray_session" in _fixtures(item):
            raise pytest.UsageError(f"{item.nodeid}: {STANDALONE_WITH_RAY}")


@pytest.fixture(autouse=True)
def _layer(request, monkeypatch):
    """Unit tests may not start Ray; integration tests get the session's Ray instance."""
    if _under(request.node, UNIT):
        import ray

        def refused(*args, **kwargs):
            raise AssertionError(NO_RAY)

        monkeypatch.setattr(ray, "init", refused)
    elif _under(request.node, INTEGRATION):
        request.getfixturevalue("ray_session")


warnings.filterwarnings("ignore", category=UserWarning)
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def ray_session():
    """One real local Ray instance for the whole test session, with a few logical CPUs."""
    import ray
    from ray import cloudpickle

    import fakes
    import policies

    # test helpers travel to the workers by value, as a module workers cannot import would
    # (the fakes' env ids import fakes by name: see below)
    cloudpickle.register_pickle_by_value(fakes)
    cloudpickle.register_pickle_by_value(policies)
    if not ray.is_initialized():
        # the fakes' gymnasium ids are written "fakes:<name>": a worker that builds one
        # imports fakes, which registers them. tests/ is on the workers' path through the
        # environment Ray's processes inherit, not a runtime_env: with one, Ray starts every
        # worker through a setup process first (~0.4 s of CPU each, some 30 per session)
        path = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), path]))
        try:
            ray.init(
                address="local",  # always a fresh local instance, never a stray cluster
                num_cpus=4,
                include_dashboard=False,
                logging_level="ERROR",
                log_to_driver=False,
                configure_logging=False,
            )
        finally:
            if path is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = path
    from fleetrl.distributed.backends import warm_workers

    # a worker's process is reused by the next worker of its kind: tests start hundreds of
    # workers, and a process start (importing torch, tensordict, torchrl) costs ~4.5 s
    warm_workers(True)
    yield ray
    from fleetrl.distributed import warm

    if os.environ.get("FLEETRL_WARM_STATS"):
        pool = warm.POOL
        print(
            f"\nwarm workers: {pool.started} started, {pool.reused} reused, {pool.evicted} "
            f"ended for room, {len(pool.live)} still running; not reused: {pool.refused}"
        )
    warm_workers(False)
    ray.shutdown()


@pytest.fixture
def update_worker():
    """Builds UpdateWorkers (gradient workers on the config's backend) and shuts them down."""
    from fleetrl.learners import UpdateWorker
    from fleetrl.setup.build import make_algorithm

    workers = []

    def make(config, algorithm=None, modules=None):
        algorithm = algorithm or make_algorithm(config, config.trainer.seed, **(modules or {}))
        uw = UpdateWorker(config, algorithm, seed=config.trainer.seed, modules=modules)
        workers.append(uw)
        return uw

    yield make
    for uw in workers:
        uw.shutdown()

"""RayBackend.wait keeps the Backend contract: of the calls done, the first given come back.

``ray.wait(refs, num_returns=1)`` picks among the refs done by then in no set order; a
learner slower than its collectors would be served their batches out of issue order
(the first-ready lag bound's flake in tests/integration/test_stale_batches.py)."""

from __future__ import annotations

import pytest

from fakes import ProcessProbe
from fleetrl.distributed.backends import RayBackend


@pytest.mark.usefixtures("ray_session")
def test_wait_returns_the_first_given_of_the_calls_done():
    backend = RayBackend()
    worker = backend.start(ProcessProbe, "waits", options={"num_cpus": 0})
    try:
        for _ in range(20):
            refs = [worker.call("info") for _ in range(6)]
            backend.get(refs[-1])  # a worker runs its calls in order: all are done
            ready, rest = backend.wait(refs, num_returns=1)
            assert ready == refs[:1] and rest == refs[1:]
            ready, rest = backend.wait(refs[::-1], num_returns=2, timeout=0)
            assert ready == refs[:-3:-1] and rest == refs[-3::-1]
        assert backend.wait([], num_returns=1) == ([], [])
    finally:
        backend.kill(worker)

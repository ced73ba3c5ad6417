"""An elastic fleet (``num_collectors`` a range, or ``"auto"``): its bounds, the checks of
a range in arguments and in configs, a worker that retires and hands its tasks on, and a
sync round shared by whole env steps over the fleet, on the in-process backend. On a
multi-node Ray cluster, growing and shrinking: tests/e2e/test_elastic_fleet.py."""

from __future__ import annotations

import functools
import re

import pytest

from fakes import counting
from fleetrl import ConfigError, RayCollector
from fleetrl.distributed.backends import InProcessBackend, SimulatedDeath
from fleetrl.distributed.workers import Retire, WorkerGroup, WorkerSlot
from fleetrl.fleet_size import FLEET_SIZE_ALLOWED, FleetSize
from fleetrl.setup.load import load_config
from runs import ROOT

RayCollector = functools.partial(RayCollector, backend="inprocess")
QUIET = ["logging.tensorboard=false", "logging.progress_bar=false"]


@pytest.mark.parametrize(
    ("value", "bounds"),
    [
        (3, (3, 3)),
        ("2-8", (2, 8)),
        (" 2 - 8 ", (2, 8)),
        ([2, 8], (2, 8)),
        ((1, 1), (1, 1)),
        ("auto", (1, None)),
        ("AUTO", (1, None)),
        ("3-auto", (3, None)),
        ("8-2", None),
        ("0-4", None),
        (0, None),
        (-1, None),
        (True, None),
        (2.5, None),
        ("many", None),
        ([1, 2, 3], None),
    ],
)
def test_a_fleet_size_is_an_int_a_range_or_auto(value, bounds):
    if bounds is None:
        with pytest.raises(ValueError, match="^" + re.escape(FLEET_SIZE_ALLOWED)):
            FleetSize.parse(value)
        return
    size = FleetSize.parse(value)
    assert (size.min, size.max) == bounds
    assert size.elastic == (bounds[0] != bounds[1])


def test_a_range_in_process_starts_its_maximum_and_shares_each_round_by_whole_steps():
    with RayCollector(
        counting(), None, frames_per_batch=100, total_frames=1000, num_collectors="2-3", sync=True
    ) as collector:
        assert collector.num_collectors == 3  # this process holds any number: the maximum
        batches = list(collector)
        fleet = collector.stats()["fleet"]
    assert [tuple(b.shape) for b in batches] == [(3, 1, 34)] * 10  # 34 + 33 + 33 steps
    assert [int(b["collector", "mask"].sum()) for b in batches] == [100] * 10
    assert [b["collector", "mask"].sum(-1).tolist() for b in batches[:1]] == [[[34], [33], [33]]]
    assert fleet == {"size": 3, "min": 2, "max": 3, "joining": 0, "joined": 1, "left": 0}


def test_a_range_is_refused_where_it_cannot_work_before_any_worker_starts():
    with pytest.raises(ConfigError) as err:
        RayCollector([counting(), counting()], None, frames_per_batch=10, num_collectors="2-4")
    assert (
        "create_env_fn='<list of 2>' is invalid: a list holds one value per collector, and "
        "num_collectors=2-4 is a range: pass one value that every worker gets (a worker that "
        "joins copies the first's)"
    ) in str(err.value)
    with pytest.raises(ConfigError, match="'auto' counts the Ray cluster's room for workers"):
        RayCollector(counting(), None, frames_per_batch=10, num_collectors="auto")
    with pytest.raises(ConfigError, match="cannot use inference='server' yet"):
        RayCollector(
            counting(), None, frames_per_batch=10, num_collectors="1-2", inference="server"
        )
    with pytest.raises(ConfigError) as err:
        RayCollector(counting(), None, frames_per_batch=10, num_collectors="4-2")
    assert f"num_collectors='4-2' is invalid: {FLEET_SIZE_ALLOWED}" in str(err.value)


def test_a_config_takes_a_range_and_refuses_it_where_it_cannot_work():
    cfg = load_config(
        ROOT / "configs" / "ppo_cartpole.yaml",
        [
            *QUIET,
            "collector.num_collectors=2-8",
            "collector.frames_per_batch=2056",
            "env.num_envs=4",
        ],
    )
    assert cfg.collector.fleet == FleetSize(2, 8)
    assert cfg.uses_ray
    with pytest.raises(ConfigError) as err:
        load_config(
            ROOT / "configs" / "ppo_cartpole.yaml",
            [
                *QUIET,
                "collector.num_collectors=auto",
                "trainer.backend=inprocess",
                "scheme.num_grad_workers=2",
            ],
        )
    text = str(err.value)
    assert "collector.num_collectors='auto' counts the Ray cluster's room" in text
    assert "scheme.num_grad_workers=2 is invalid: a range of collectors feeds the " in text
    with pytest.raises(ConfigError) as err:
        load_config(
            ROOT / "configs" / "ppo_cartpole.yaml", [*QUIET, "collector.num_collectors=8-2"]
        )
    assert (
        "collector.num_collectors='8-2' is invalid: must be >= 0 (0: local, no Ray), a range "
        "'MIN-MAX' with 1 <= MIN <= MAX (e.g. '2-8'), or 'auto'"
    ) in str(err.value)


class Echo:
    """Answers ``run(x)`` with ``(its id, x)``; the first of id 0 dies at its 2nd call."""

    calls = 0

    def __init__(self, index):
        self.index = index

    def run(self, x):
        if self.index == 0:
            Echo.calls += 1
            if Echo.calls == 2:
                raise SimulatedDeath("its node is gone")
        return self.index, x


def test_a_worker_that_retires_hands_its_tasks_to_a_live_one():
    backend = InProcessBackend()

    def ready(slots):
        if any(s.incarnation > 0 for s in slots):
            raise Retire  # no node can host the replacement

    group = WorkerGroup(
        backend,
        role="echo",
        start=lambda slot: backend.start(Echo, slot.index),
        issue=lambda slot, task: slot.actor.call("run", task),
        ready=ready,
        rehome=lambda pending: group.active[0],
    )
    first, second = group.add([WorkerSlot(0), WorkerSlot(1)])
    a, b = group.submit(first, "a"), group.submit(first, "b")
    assert group.get(a) == (0, "a")
    assert group.get(b) is None  # worker 0 died: it retired, and b went to worker 1
    assert group.get(b) == (1, "b")
    assert first.retired and first.actor is None
    assert group.active == [second]
    group.revive_dead()  # a retired slot is not started again
    assert first.actor is None

"""Decoupled off-policy training (collector.decoupled) on Ray: the learner keeps to its
update ratio and publishes on time. The CLI run: tests/e2e/test_decoupled_cli.py; the config
checks: tests/unit/learners/test_decoupled_checks.py."""

from __future__ import annotations

import pytest

from fleetrl import load_config
from fleetrl.learners.decoupled import DecoupledLearner, allowed_updates
from fleetrl.setup.build import make_algorithm
from runs import DECOUPLED_DQN, DECOUPLED_TINY

pytestmark = pytest.mark.usefixtures("ray_session")


def test_learner_never_exceeds_the_ratio_and_takes_every_update_it_allows():
    cfg = load_config(
        DECOUPLED_DQN,
        [*DECOUPLED_TINY, "trainer.total_frames=448", "trainer.weight_update_interval=3"],
    )
    algorithm = make_algorithm(cfg, 0)
    learner = DecoupledLearner(cfg, algorithm, seed=1)
    steps_at: list[tuple[int, int, int]] = []  # (version before, steps, allowed then)
    published: list[int] = []
    update_on, publish = algorithm.update_on, learner.collection.publish

    in_flight: list[int] = []  # sample calls issued and not yet received, at each update
    calls = {"asked": 0, "received": 0}
    request, receive = learner.buffer.request, learner.buffer.receive

    def counted_request(n):
        calls["asked"] += 1
        return request(n)

    def counted_receive(ref):
        calls["received"] += 1
        return receive(ref)

    def counted_update(minibatches):
        minibatches = list(minibatches)
        steps_at.append((learner.version, len(minibatches), learner.allowed()))
        in_flight.append(calls["asked"] - calls["received"])
        return update_on(minibatches)

    def counted_publish():
        published.append(learner.version)
        return publish()

    algorithm.update_on, learner.collection.publish = counted_update, counted_publish
    learner.buffer.request, learner.buffer.receive = counted_request, counted_receive
    frames, rows = 0, []
    try:
        while (result := learner.run_iteration()) is not None:
            frames += result.frames
            rows.append(result)
        written = learner.buffer.write_count()
    finally:
        learner.shutdown()
    assert frames == 448 == written == learner.written
    # each iteration takes in a whole batch's frames or more; the last may hold the remainder
    assert all(r.frames >= 64 for r in rows[:-1])
    # no step is taken before the ratio allows it, and every step allowed is taken
    assert all(before + steps <= allowed for before, steps, allowed in steps_at)
    total = allowed_updates(448, start=64, updates_per_batch=4, frames_per_batch=64)
    assert total == 24 and learner.version == 24 == sum(s for _, s, _ in steps_at)
    # weights every 3 batches' worth of updates, 4 each (a sample call of up to 8 never runs
    # past a publish)
    assert published == [12, 24]
    assert all(before // 12 == (before + steps - 1) // 12 for before, steps, _ in steps_at)
    # the actor samples the next minibatches while the learner updates
    assert in_flight == [1] * len(steps_at)
    assert rows[-1].metrics["train/policy_version"] == 24

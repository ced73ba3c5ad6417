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

    def counted_update(minibatches):
        minibatches = list(minibatches)
        steps_at.append((learner.version, len(minibatches), learner.allowed()))
        return update_on(minibatches)

    def counted_publish():
        published.append(learner.version)
        return publish()

    algorithm.update_on, learner.collection.publish = counted_update, counted_publish
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
    # weights every 3 updates (a sample call never runs past a publish)
    assert published == list(range(3, 25, 3))
    assert rows[-1].metrics["train/policy_version"] == 24

"""Resume with Ray collectors is approximate, and says so in one log line (exact resume:
tests/unit/test_resume.py)."""

from __future__ import annotations

import pytest

from fleetrl.run.checkpoint import latest_checkpoint, load_checkpoint
from runs import PPO_LOCAL, approximate_lines, split_run


#: about 7 s: runs with make test-all (marker e2e), so make test stays within 6 min
@pytest.mark.e2e
def test_resume_with_ray_collection_says_it_is_approximate(tmp_path, caplog, ray_session):
    from fleetrl.learners.central import APPROX_RAY_MSG

    args = [
        *PPO_LOCAL,
        "collector.num_collectors=1",
        "env.num_envs=2",
        "collector.frames_per_batch=64",
        "ppo.num_epochs=1",
        "ppo.num_mini_batch=1",
        "trainer.test_every=0",
    ]
    run = split_run(tmp_path, caplog, args, 128, 256)
    lines = approximate_lines(caplog)
    assert len(lines) == 1 and APPROX_RAY_MSG.format(n=1) in lines[0]
    state = load_checkpoint(latest_checkpoint(run))
    assert state["collector"] is None and state["iterations"] == 4

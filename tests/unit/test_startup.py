"""Constructor-to-first-batch: ``Trainer.startup_s``, printed by ``fleetrl train``.

``benchmarks/time_to_solve.py`` reads the figure from the CLI's summary line.
"""

from __future__ import annotations

import time

from fleetrl import Trainer, load_config
from runs import ROOT, STARTUP_RUN


def test_startup_is_set_by_the_first_batch_and_lies_within_the_run(tmp_path):
    config = load_config(
        ROOT / "configs" / "ppo_cartpole.yaml", [*STARTUP_RUN, "collector.num_collectors=0"]
    )
    before = time.perf_counter()
    trainer = Trainer(config, run_dir=tmp_path / "run")
    assert trainer.startup_s is None  # no batch yet
    metrics = trainer.train()
    whole = time.perf_counter() - before
    assert metrics["train/frames"] == 512
    # the first batch arrived before the second (last) iteration began
    assert 0 < trainer.startup_s < whole - metrics["time/iteration_s"]

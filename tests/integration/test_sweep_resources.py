"""A sweep whose trial the cluster can never place is refused before Tune waits on it."""

from __future__ import annotations

import pytest

from fleetrl import ConfigError, load_config, tune
from runs import ROOT


def test_a_trial_bigger_than_the_cluster_is_refused_in_config_keys(tmp_path):
    # the session's Ray has 4 CPUs: 1 for the trial's learner + 4 collectors x 1 CPU = 5
    config = load_config(
        ROOT / "configs" / "ppo_cartpole.yaml",
        [
            "collector.num_collectors=4",
            "collector.num_cpus_per_collector=1",
            "tune.search={ppo.lr: 'grid(1e-3, 3e-4)'}",
            f"tune.dir={tmp_path / 'sweep'}",
        ],
    )
    with pytest.raises(ConfigError) as err:
        tune(config)
    assert len(err.value.problems) == 1  # said once
    assert str(err.value.problems[0]) == (
        "each trial of the sweep is a placement group of 5 CPU (1 CPU for the trial's learner, then "
        "its workers': collector.num_collectors=4 x collector.num_cpus_per_collector=1) and "
        "the Ray cluster has 4, so no trial would ever start; lower "
        "collector.num_cpus_per_collector (e.g. 0), collect in the trial "
        "(collector.num_collectors=0), or attach to a bigger cluster with collector.address"
    )
    assert not (tmp_path / "sweep" / "trials").exists()  # no trial started

"""The settings, curve readings and raw loop of ``benchmarks/marl.py`` (no training here)."""

from __future__ import annotations

import math

import pytest
import torch

from marl import (
    CONFIG,
    RawLoop,
    actor_mlp,
    hyperparameters,
    package_of,
    profile_table,
    return_at,
    shared_return,
    smoothed,
    time_to_return,
)


def test_the_torchrl_loop_trains_with_fleetrls_settings():
    # the loop reads the YAML without fleetrl: its numbers must be the ones fleetrl runs with
    from fleetrl import load_config

    config = load_config(str(CONFIG))
    hp, algo = hyperparameters(), config.algo
    for key in (
        "lr",
        "gamma",
        "gae_lambda",
        "clip_epsilon",
        "entropy_coef",
        "critic_coef",
        "num_epochs",
        "num_mini_batch",
        "max_grad_norm",
        "hidden_sizes",
        "share_params",
        "normalize_advantage",
        "clip_value",
    ):
        assert hp[key] == getattr(algo, key), key
    assert hp["env_id"] == config.env.id == "mpe2:simple_spread_v3"
    assert hp["num_envs"] == config.env.num_envs
    assert hp["frames_per_batch"] == config.collector.frames_per_batch
    assert hp["return_window"] == config.trainer.return_window


CURVE = [
    [2000, float("nan"), 1.0],
    [4000, -30.0, 2.0],
    [6000, -24.0, 3.0],
    [8000, -18.0, 4.0],
    [10000, -15.0, 5.0],
]


def test_smoothed_averages_each_point_with_the_ones_before_and_drops_missing_returns():
    assert smoothed(CURVE, 2) == [
        [4000, -30.0, 2.0],
        [6000, -27.0, 3.0],
        [8000, -21.0, 4.0],
        [10000, -16.5, 5.0],
    ]
    assert smoothed(CURVE, 1)[0] == [4000, -30.0, 2.0]


def test_return_at_equal_frames_reads_the_last_point_at_or_before():
    assert return_at(CURVE, 10000, 3) == pytest.approx(-19.0)
    assert return_at(CURVE, 9999, 3) == pytest.approx(-24.0)
    assert return_at(CURVE, 3000, 3) is None


def test_time_to_the_shared_return_is_the_first_smoothed_point_reaching_it():
    finals = {"a": return_at(CURVE, 10000, 2), "b": -20.0, "c": None}
    assert shared_return(finals) == -20.0
    assert time_to_return(CURVE, -20.0, 2) == 5.0  # -21.0 at 4 s is short of it
    assert time_to_return(CURVE, -27.0, 2) == 3.0
    assert time_to_return(CURVE, -10.0, 2) is None
    assert shared_return({"a": None}) is None


def test_the_raw_loop_steps_the_envs_with_the_mappo_actor():
    from fleetrl.algorithms import MAPPO, MAPPOConfig
    from fleetrl.envs.pettingzoo import PettingZooId

    env = PettingZooId("mpe2:simple_spread_v3", {"max_cycles": 25}).build()
    mappo = MAPPO(MAPPOConfig(), env)
    env.close()
    net = actor_mlp(mappo.policy)
    loop = RawLoop(net, num_envs=2, chunk=25)
    assert loop.run_for(0.0) > 0
    assert loop.act_buf.shape == (25, 2, 3) and 0 <= loop.act_buf.min() <= loop.act_buf.max() < 5
    assert loop.done_buf[-1].all() and not loop.done_buf[:-1].any()  # 25-step episodes
    with torch.no_grad():
        logp = torch.distributions.Categorical(logits=net(loop.obs_buf)).log_prob(loop.act_buf)
    torch.testing.assert_close(logp, loop.logp_buf)
    assert not math.isnan(float(loop.rew_buf.sum()))


def test_profile_entries_are_summed_by_package():
    site = "/x/.venv/lib/python3.11/site-packages"
    assert package_of(f"{site}/mpe2/_mpe_utils/core.py", "step") == "mpe2"
    assert package_of("/work/main/src/fleetrl/envs/pettingzoo.py", "_step") == "fleetrl"
    assert package_of(f"{site}/tensordict/_td.py", "_set_str") == "tensordict"
    assert package_of(f"{site}/torchrl/envs/batched_envs.py", "_step") == "torchrl"
    assert package_of("~", "<built-in method torch.stack>") == "torch (C)"
    assert package_of("~", "<method 'astype' of 'numpy.ndarray' objects>") == "numpy (C)"
    assert package_of("~", "<built-in method builtins.isinstance>") == "built-ins (C)"
    assert package_of("/usr/lib/python3.11/copy.py", "deepcopy") == "other Python"


def test_the_profile_table_is_per_frame_costliest_first():
    profiles = {
        "fleetrl": {"own_s": {"tensordict": 0.4, "mpe2": 0.3}, "frames": 1000},
        "raw": {"own_s": {"mpe2": 0.5, "other Python": 0.1}, "frames": 2000},
    }
    header, rows = profile_table(profiles)
    assert header == ["own time of", "fleetrl, us/frame", "raw, us/frame"]
    assert rows == [
        ["tensordict", "400.0", "0.0"],
        ["mpe2", "300.0", "250.0"],
        ["other Python", "0.0", "50.0"],
        ["all", "700.0", "300.0"],
    ]


def test_a_live_collector_counts_valid_frames_per_round():
    from tensordict import TensorDict

    from common import LiveCollector

    batches = [TensorDict({"x": torch.zeros(4)}, [4]) for _ in range(3)]
    masked = TensorDict({"collector": {"mask": torch.tensor([True, False, True])}}, [3])

    class Fake:
        def __init__(self):
            self.stopped = False
            self.served = 0

        def __iter__(self):
            while True:
                self.served += 1
                yield masked if self.served % 2 else batches[0]

        def shutdown(self):
            self.stopped = True

    live = LiveCollector(Fake)
    assert live.collector.served == 1 and live.first_batch_s >= 0
    live.run(2)  # one drained, then a full batch (4 frames) and a masked one (2 of 3)
    assert (live.collector.served, live.last_frames) == (4, 6)
    undrained = LiveCollector(Fake, drain=False)
    assert undrained.run_for(0.0) > 0 and undrained.last_frames in (2, 4)
    assert undrained.collector.served == 2
    live.shutdown()
    assert live.collector.stopped


def test_run_json_reads_the_last_line_and_says_why_a_run_failed():
    import sys

    from common import run_json

    result, wall = run_json([sys.executable, "-c", "print('noise'); print('{\"a\": 1}')"])
    assert result == {"a": 1} and wall > 0
    with pytest.raises(RuntimeError, match=r"exited 3:\n.*boom"):
        run_json([sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"])


def test_the_shared_return_is_the_pair_s_and_a_resummary_recomputes_it(tmp_path, monkeypatch):
    import json
    import shutil

    import common
    import marl

    # RLlib's lower return does not lower the pair's shared return
    assert shared_return({"fleetrl": -20.0, "torchrl": -21.0, "rllib": -28.0}) == -21.0
    assert shared_return({"rllib": -28.0, "other": -30.0}) == -30.0
    shutil.copy(common.RESULTS_DIR / "marl.json", tmp_path / "marl.json")
    monkeypatch.setattr(common, "RESULTS_DIR", tmp_path)
    marl.resummarize()
    data = json.loads((tmp_path / "marl.json").read_text())
    assert "recomputed" in data["resummarized"]
    per_seed = data["learning"]["per_seed"][0]
    pair = [per_seed["return"][n] for n in ("fleetrl", "torchrl")]
    assert per_seed["shared_return"] == min(pair)
    assert "wall time to the shared return, fleetrl / torchrl" in data["targets"]
    assert any(t["title"].startswith("targets") for t in data["tables"])

"""The settings, log reading and tables of ``benchmarks/atari_peer.py`` (no training here: a
sitting is two hours on this machine)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
import torch

from atari_peer import (
    GAME,
    SF_COLLECTION_FLAGS,
    SF_REQUIREMENTS,
    SF_RUNNER,
    compare,
    first_reach,
    fleetrl_params,
    parse_sf_log,
    sf_summary,
    steady_rate,
)

ROOT = Path(__file__).resolve().parents[2]


def stamp(epoch: float) -> str:
    """A Sample Factory log line's prefix for ``epoch`` (local time, milliseconds)."""
    ms = round((epoch % 1) * 1000)
    return f"\x1b[36m[{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(epoch))},{ms:03d}][42]"


START = 1_795_000_000.0


def sf_log(reports, *, result=True) -> str:
    """A Sample Factory log: ``reports`` of (seconds since start, agent steps, return)."""
    lines = [f"SF_START {START}"]
    for since, frames, ret in reports:
        lines.append(
            f"{stamp(START + since)} Fps is (10 sec: 1.0, 60 sec: 1.0, 300 sec: 1.0). "
            f"Total num frames: {frames}. Throughput: 0: 1.0. Samples: {frames}.\x1b[0m"
        )
        lines.append(f"{stamp(START + since)} Avg episode reward: [(0, '{ret}')]\x1b[0m")
    lines += [
        f"{stamp(START + 100)} Learner 0 profile tree view:",
        "misc: 0.0001, prepare_batch: 7.7291",
        "train: 81.7198",
        "  calculate_losses: 19.9417",
        f"{stamp(START + 100)} RolloutWorker_w0 profile tree view:",
        "wait_for_trajectories: 0.0015, env_step: 4.0663, overhead: 0.1427",
        f"{stamp(START + 100)} Collected {{0: 31744}}, FPS: 247.1",
    ]
    if result:
        lines.append('SF_RESULT {"status": 0, "wall_s": 101.5, "params": 1686696}')
    return "\n".join(lines)


def test_the_sample_factory_log_gives_the_curve_with_seconds_since_its_start():
    r = parse_sf_log(sf_log([(10.0, 0, 0.0), (15.5, 1024, 0.833), (21.0, 3072, 1.4)]))
    assert r["curve"] == [[0, 0.0, 10.0], [1024, 0.833, 15.5], [3072, 1.4, 21.0]]
    assert r["marks"] == [[0, 10.0], [1024, 15.5], [3072, 21.0]]
    assert (r["frames"], r["status"], r["wall_s"], r["params"]) == (3072, 0, 101.5, 1686696)
    # its own timing lines, by process; the nested entries too
    assert r["profiles"]["Learner 0"]["train"] == pytest.approx(81.7198)
    assert r["profiles"]["Learner 0"]["calculate_losses"] == pytest.approx(19.9417)
    assert r["profiles"]["RolloutWorker_w0"]["env_step"] == pytest.approx(4.0663)
    assert "Collected" not in r["profiles"]  # a stamped line ends the tree before it


def test_a_sample_factory_summary_is_refused_without_its_result_line():
    text = sf_log([(10.0, 1024, 1.0), (20.0, 2048, 2.0)], result=False)
    with pytest.raises(RuntimeError, match="did not finish"):
        sf_summary(text)
    s = sf_summary(sf_log([(10.0, 1024, 1.0), (20.0, 2048, 2.0), (30.0, 4096, 3.0)]))
    assert (s["score"], s["frames"]) == (3.0, 4096)
    assert s["frames_per_s"] == pytest.approx(4096 / 101.5)
    # past the first fifth of the steps (1,024 at 10 s) to the last (4,096 at 30 s)
    assert s["steady_frames_per_s"] == pytest.approx((4096 - 1024) / 20)


def test_the_steady_rate_leaves_out_the_warm_up():
    marks = [[0, 0.0], [100, 50.0], [300, 60.0], [1000, 95.0]]
    assert steady_rate(marks) == pytest.approx((1000 - 300) / 35)
    assert steady_rate(marks, warmup=0.05) == pytest.approx((1000 - 100) / 45)


def test_the_time_to_a_return_is_the_first_point_reaching_it():
    curve = [[100, 1.0, 10.0], [200, 2.5, 20.0], [300, 2.0, 30.0], [400, 3.0, 40.0]]
    assert first_reach(curve, 2.5) == 20.0
    assert first_reach(curve, 3.0) == 40.0
    assert math.isnan(first_reach(curve, 3.5))


def test_the_tables_pair_the_runs_by_seed():
    fl = {
        0: {"curve": [[250, 2.0, 10.0], [500, 4.0, 20.0]], "score": 4.0, "frames_per_s": 50},
        1: {"curve": [[250, 1.0, 10.0], [500, 2.0, 30.0]], "score": 2.0, "frames_per_s": 30},
    }
    sf = {
        0: {"curve": [[250, 1.0, 40.0], [500, 3.0, 80.0]], "score": 3.0, "frames_per_s": 20},
        1: {"curve": [[250, 2.0, 40.0], [500, 3.0, 60.0]], "score": 3.0, "frames_per_s": 20},
    }
    c = compare(fl, sf, 500)
    at_end = [r for r in c["returns"] if r[1] == 500]
    assert at_end == [[0, 500, 4.0, 3.0, 1.0], [1, 500, 2.0, 3.0, -1.0]]
    assert c["median_final_difference"] == 0.0
    # seed 0 shares 3.0: fleetrl first reaches it at 20 s, SF at 80 s; seed 1 shares 2.0
    assert c["shared"] == [[0, 3.0, 20.0, 80.0, 0.25], [1, 2.0, 30.0, 40.0, 0.75]]
    assert c["median_time_ratio"] == pytest.approx(0.5)
    assert c["rate_ratio"] == pytest.approx(40 / 20)


def test_a_shared_torso_is_counted_once(tmp_path):
    torso = torch.zeros(32, 4, 8, 8)
    state = {
        "entropy_coeff": torch.tensor(0.01),
        "actor_network_params.module.0.torso.weight": torso,
        "actor_network_params.module.1.weight": torch.zeros(4, 512),
        "critic_network_params.module.0.weight": torso,  # the same tensor: shared
        "critic_network_params.module.1.weight": torch.zeros(1, 512),
        # a per-pixel observation normalizer's statistics: buffers, not parameters
        "actor_network_params.module.0.norm.count": torch.zeros((), dtype=torch.float64),
        "actor_network_params.module.0.norm.mean": torch.zeros(4, 84, 84, dtype=torch.float64),
        "actor_network_params.module.0.norm.m2": torch.zeros(4, 84, 84, dtype=torch.float64),
    }
    (tmp_path / "checkpoints").mkdir()
    torch.save(
        {"algorithm": {"loss_module": state}},
        tmp_path / "checkpoints" / "checkpoint_000000000512.pt",
    )
    assert fleetrl_params(tmp_path) == 32 * 4 * 8 * 8 + 4 * 512 + 512


def test_sample_factory_plays_fleetrls_game_settings():
    """Its runner registers the env with what fleetrl's env.atari defaults are."""
    from fleetrl.config import AtariConfig

    atari = AtariConfig()
    runner = SF_RUNNER.read_text()
    assert (atari.frame_skip, atari.frame_stack, atari.screen_size) == (4, 4, 84)
    assert f"repeat_action_probability={atari.repeat_action_probability}" in runner
    assert f"noop_max={atari.noop_max}" in runner
    assert not atari.terminal_on_life_loss and "EpisodicLife" not in runner
    assert "ClipReward" not in runner and "FireReset" not in runner
    assert "--summaries_use_frameskip=False" in runner  # agent steps, not emulator frames
    assert "--stats_avg=20" in runner  # the same score: the last 20 episodes' mean
    assert GAME == "ALE/Breakout-v5"


def test_the_sample_factory_venv_takes_torchs_cpu_wheel_first():
    assert SF_REQUIREMENTS[0] == "torch==2.13.0"
    assert "sample-factory==2.1.1" in SF_REQUIREMENTS
    assert {"numpy<2", "gymnasium==0.29.1", "ale-py==0.9.1"} <= set(SF_REQUIREMENTS)
    # collection alone: its learner at 1 epoch x 1 minibatch of 1,024 (a sixteenth)
    assert set(SF_COLLECTION_FLAGS) >= {"--num_epochs=1", "--num_batches_per_epoch=1"}
    assert ".sf-venv" in (ROOT / ".gitignore").read_text()

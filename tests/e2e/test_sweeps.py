"""Real sweeps on Ray Tune: ASHA over 4 trials, PBT copying and perturbing, Ctrl-C and resume.

Each trial is a real fleetrl run of PPO on CartPole collecting locally (one CPU
per trial), on the session's Ray instance (4 CPUs) or, for the CLI, the one the
``fleetrl tune`` process starts.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import fleetrl
from fleetrl import load_config, tune
from fleetrl.run.metrics import read_metrics
from runs import ROOT

CARTPOLE = str(ROOT / "configs" / "ppo_cartpole.yaml")
FPB = 256
TOTAL = 2048
TINY = [
    "collector.num_collectors=0",
    "env.num_envs=4",
    f"collector.frames_per_batch={FPB}",
    "ppo.num_mini_batch=2",
    "ppo.num_epochs=2",
    "trainer.target_return=null",
    f"trainer.total_frames={TOTAL}",
    "trainer.test_every=0",
    "trainer.checkpoint_every=2",
    "logging.tensorboard=false",
    "logging.plot=false",
]


@pytest.fixture
def ray4(ray_session):
    return ray_session


def frames_of(run_dir: Path) -> list[int]:
    return [int(r["train/frames"]) for r in read_metrics(run_dir / "metrics.csv")]


def test_an_asha_sweep_runs_every_trial_and_writes_its_results(ray4, tmp_path):
    spec = "{ppo.lr: 'loguniform(1e-4, 1e-2)', ppo.clip_epsilon: 'choice(0.1, 0.2, 0.3)'}"
    config = load_config(
        CARTPOLE,
        [
            *TINY,
            f"tune.search={spec}",
            "tune.samples=4",
            "tune.scheduler=asha",
            f"tune.grace_frames={2 * FPB}",
            f"tune.dir={tmp_path / 'sweep'}",
        ],
    )
    result = tune(config)
    assert not result.interrupted
    assert len(result.trials) == 4
    for trial in result.trials:
        frames = frames_of(trial.run_dir)
        assert frames == list(range(FPB, trial.frames + 1, FPB))  # every row, once
        assert set(trial.params) == {"ppo.lr", "ppo.clip_epsilon"}
        assert 1e-4 <= trial.params["ppo.lr"] <= 1e-2
        assert trial.params["ppo.clip_epsilon"] in (0.1, 0.2, 0.3)
        run_config = load_config(trial.run_dir / "config.yaml")
        assert run_config.algo.lr == trial.params["ppo.lr"]
        if trial.status == "completed":
            assert trial.frames == TOTAL
        else:
            assert trial.status == "stopped early"
            assert 2 * FPB <= trial.frames < TOTAL
        assert trial.best == max(
            r["train/episode_return"] for r in read_metrics(trial.run_dir / "metrics.csv")
        )
    bests = [t.best for t in result.trials]
    assert bests == sorted(bests, reverse=True)
    best = load_config(result.best_config)  # ready for fleetrl train
    assert best.algo.lr == result.best.params["ppo.lr"]
    assert best.algo.clip_epsilon == result.best.params["ppo.clip_epsilon"]
    assert best.tune == fleetrl.Config().tune and best.logging.run_dir is None
    lines = (tmp_path / "sweep" / "trials.csv").read_text().splitlines()
    assert lines[0] == "trial,ppo.clip_epsilon,ppo.lr,best,frames,wall_s,status"
    assert len(lines) == 5
    assert (tmp_path / "sweep" / "learning_curves.png").stat().st_size > 0
    table = result.table().splitlines()
    assert len(table) == 5 and table[0].split()[:3] == ["trial", "ppo.clip_epsilon", "ppo.lr"]


def test_an_asha_sweep_ranks_trials_on_their_latest_evaluation(ray4, tmp_path):
    # evaluations every other iteration: the rows between have no eval/ columns
    config = load_config(
        CARTPOLE,
        [
            *TINY,
            "trainer.test_every=2",
            "trainer.num_test_episodes=2",
            "env.max_episode_steps=50",
            "tune.search={ppo.lr: 'grid(1e-3, 3e-4)'}",
            "tune.samples=1",
            "tune.scheduler=asha",
            f"tune.grace_frames={4 * FPB}",
            "tune.metric=eval/return_mean",
            f"tune.dir={tmp_path / 'eval'}",
        ],
    )
    result = tune(config)
    assert not result.errors and len(result.trials) == 2
    for trial in result.trials:
        rows = read_metrics(trial.run_dir / "metrics.csv")
        evaluated = [r["eval/return_mean"] for r in rows if "eval/return_mean" in r]
        assert len(evaluated) == len(rows) // 2 and trial.best == max(evaluated)
        assert trial.status in ("completed", "stopped early")


def test_pbt_copies_a_better_trial_and_perturbs_its_values(ray4, tmp_path):
    config = load_config(
        CARTPOLE,
        [
            *TINY,
            "trainer.total_frames=3072",
            "tune.search={ppo.lr: 'loguniform(1e-5, 1e-2)'}",
            "tune.samples=4",
            "tune.scheduler=pbt",
            "tune.synchronous=true",  # every decision waits for all 4: the bottom one copies
            f"tune.perturbation_frames={4 * FPB}",
            f"tune.dir={tmp_path / 'pbt'}",
        ],
    )
    result = tune(config)
    copies = [t for t in result.trials if (t.run_dir / "exploits.jsonl").exists()]
    assert copies, "PBT never copied a trial"
    for trial in result.trials:
        assert frames_of(trial.run_dir) == list(range(FPB, 3072 + 1, FPB))
    # a copy made before the last batch (PBT may also copy at the last result, with nothing
    # trained after it: which decision copies depends on the trials' returns)
    exploits = [
        (t, json.loads(line))
        for t in copies
        for line in (t.run_dir / "exploits.jsonl").read_text().splitlines()
    ]
    before_end = [(t, e) for t, e in exploits if e["frames"] < 3072]
    assert before_end, f"PBT copied trials only at the end: {[e for _, e in exploits]}"
    trial, exploit = before_end[0]
    source = tmp_path / "pbt" / "trials" / exploit["from_trial"]
    assert source.is_dir() and source != trial.run_dir
    # the copy's history up to the copy is the source's, row for row
    copied = [
        r
        for r in read_metrics(trial.run_dir / "metrics.csv")
        if r["train/frames"] <= exploit["frames"]
    ]
    original = [
        r for r in read_metrics(source / "metrics.csv") if r["train/frames"] <= exploit["frames"]
    ]
    assert [r["train/episode_return"] for r in copied] == [
        r["train/episode_return"] for r in original
    ]
    # and it trained on with a perturbed learning rate, the one its metrics log
    rows = read_metrics(trial.run_dir / "metrics.csv")
    after = [r["train/lr"] for r in rows if r["train/frames"] > exploit["frames"]]
    before = [r["train/lr"] for r in original]
    assert after and not math.isclose(after[0], before[-1], rel_tol=1e-3)


@pytest.mark.standalone  # the CLI starts its own Ray
def test_a_sweep_stopped_by_ctrl_c_resumes_and_completes(tmp_path):
    sweep = tmp_path / "sweep"
    src = str(Path(fleetrl.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": src}
    # long enough that neither trial ends before both have a checkpoint Tune kept (trial
    # actors start seconds apart), short enough to finish after the resume: a trial of 400
    # batches trained in 15 s alone on this machine; a checkpoint every 4 batches (not 2)
    total = 240 * FPB
    args = [
        sys.executable,
        "-m",
        "fleetrl.cli",
        "tune",
        CARTPOLE,
        *TINY,
        f"trainer.total_frames={total}",
        "trainer.checkpoint_every=4",
        "--search",
        "ppo.lr=grid(1e-3, 3e-4)",
        "--samples",
        "1",
        "--dir",
        str(sweep),
        "--max-concurrent",
        "2",
    ]
    # the output goes to a file: Tune's status lines would fill a pipe nobody reads yet
    out = tmp_path / "out.txt"
    with out.open("w") as log:
        proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    # wait until both trials wrote a checkpoint Tune kept
    while time.monotonic() < deadline and proc.poll() is None:
        kept = list(sweep.glob("run_trial_*/checkpoint_*"))
        if len({p.parent for p in kept}) >= 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None, out.read_text()[-3000:]
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    err = out.read_text()
    assert proc.returncode == 130, err[-3000:]
    assert f"fleetrl tune --resume {sweep}" in err
    stopped = {p.name: frames_of(p) for p in (sweep / "trials").iterdir()}
    assert len(stopped) == 2 and all(f[-1] < total for f in stopped.values())

    resumed = subprocess.run(
        [sys.executable, "-m", "fleetrl.cli", "tune", "--resume", str(sweep)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for name in stopped:
        # each trial ends at its budget with every row once: nothing lost, nothing twice
        assert frames_of(sweep / "trials" / name) == list(range(FPB, total + 1, FPB))
    lines = (sweep / "trials.csv").read_text().splitlines()
    assert len(lines) == 3 and all(line.endswith(",completed") for line in lines[1:])
    assert yaml.safe_load((sweep / "best.yaml").read_text())["ppo"]["lr"] in (1e-3, 3e-4)


def test_trials_that_fail_are_reported_with_their_error(ray4, tmp_path):
    config = load_config(
        CARTPOLE,
        [
            *TINY,
            "trainer.total_frames=512",
            "tune.search={ppo.lr: 'grid(1e-3, 3e-4)'}",
            "tune.samples=1",
            "tune.metric=loss/nothing",  # a column no PPO row has
            f"tune.dir={tmp_path / 'bad'}",
        ],
    )
    result = tune(config)
    assert len(result.errors) == 2 and result.best is None
    for trial in result.errors:
        error_file = Path(trial.status.removeprefix("error (see ").removesuffix(")"))
        assert "tune.metric='loss/nothing' is invalid: this run's metrics rows have no such" in (
            error_file.read_text()
        )
    assert not (tmp_path / "bad" / "best.yaml").exists()


def test_a_team_sweep_ranks_trials_on_one_groups_return(ray4, tmp_path):
    """MAPPO on simple_tag (two teams), a grid over the learning rate, ranked on the
    predators' own return column: each trial's best is that column's maximum."""
    pytest.importorskip("mpe2")
    fpb, total, metric = 200, 800, "train/group_return/adversary"
    config = load_config(
        ROOT / "configs" / "mappo_simple_tag.yaml",
        [
            "collector.num_collectors=0",
            "env.num_envs=4",
            f"collector.frames_per_batch={fpb}",
            "mappo.num_epochs=2",
            f"trainer.total_frames={total}",
            "trainer.test_every=0",
            "logging.tensorboard=false",
            "logging.plot=false",
            "tune.search={mappo.lr: 'grid(1e-3, 3e-4)'}",
            "tune.samples=1",
            f"tune.metric={metric}",
            f"tune.dir={tmp_path / 'teams'}",
        ],
    )
    result = tune(config)
    assert not result.interrupted and len(result.trials) == 2
    assert {t.params["mappo.lr"] for t in result.trials} == {1e-3, 3e-4}
    for trial in result.trials:
        assert trial.status == "completed" and trial.frames == total
        rows = read_metrics(trial.run_dir / "metrics.csv")
        assert [int(r["train/frames"]) for r in rows] == list(range(fpb, total + 1, fpb))
        assert trial.best == max(r[metric] for r in rows)
        assert {"train/group_return/adversary", "train/group_return/agent"} <= set(rows[0])
    bests = [t.best for t in result.trials]
    assert bests == sorted(bests, reverse=True)
    assert load_config(result.best_config).algo.lr == result.best.params["mappo.lr"]

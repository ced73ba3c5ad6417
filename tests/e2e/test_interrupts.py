"""A real ``fleetrl train`` process, stopped by Ctrl-C, SIGTERM or SIGKILL, then resumed.

The run collects locally (``collector.num_collectors=0``: no Ray) with a budget
it never reaches; the test signals it once its files show the state wanted.
The waits have generous limits only so that a broken run fails instead of
hanging; nothing asserts how long anything took.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fleetrl
from fleetrl.cli import main
from fleetrl.run.checkpoint import checkpoint_paths, load_checkpoint
from runs import ROOT

pytestmark = pytest.mark.standalone  # local collection: no Ray

FPB = 128
LOCAL = [
    "collector.num_collectors=0",
    "env.num_envs=4",
    f"collector.frames_per_batch={FPB}",
    "ppo.num_mini_batch=2",
    "ppo.num_epochs=1",
    "trainer.target_return=null",
    "trainer.total_frames=100000000",
    "trainer.test_every=0",
    "trainer.keep_checkpoints=2",
    "logging.progress_bar=false",
    "logging.plot=false",
]


def start(run: Path, *args: str) -> subprocess.Popen:
    config = str(ROOT / "configs" / "ppo_cartpole.yaml")
    src = str(Path(fleetrl.__file__).parents[1])
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetrl.cli",
            "train",
            config,
            *LOCAL,
            *args,
            "--run-dir",
            str(run),
        ],
        env={**os.environ, "PYTHONPATH": src},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def whole_rows(run: Path) -> list[list[str]]:
    """metrics.csv's complete lines (a killed writer may leave a cut last one), header first."""
    path = run / "metrics.csv"
    text = path.read_text() if path.exists() else ""
    return [line.split(",") for line in text.splitlines(keepends=True) if line.endswith("\n")]


def frames_logged(run: Path) -> list[int]:
    rows = whole_rows(run)
    if not rows:
        return []
    column = rows[0].index("train/frames")
    return [int(float(r[column])) for r in rows[1:]]


def checkpoint_frames(run: Path) -> list[int]:
    return [int(p.stem.split("_")[1]) for p in checkpoint_paths(run / "checkpoints")]


def wait_until(proc: subprocess.Popen, ready, what: str, limit_s: float = 240) -> None:
    deadline = time.monotonic() + limit_s
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"the run exited ({proc.returncode}) before {what}:\n{proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the run never got to {what}:\n{proc.communicate()[1]}")
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_writes_a_final_checkpoint_and_resume_logs_no_frame_twice(tmp_path, sig, capsys):
    run = tmp_path / "run"
    proc = start(run, "trainer.checkpoint_every=0")  # the signal's checkpoint is the only one
    wait_until(proc, lambda: len(frames_logged(run)) >= 2, "two metrics rows")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 128 + sig, err
    logged = frames_logged(run)
    stopped_at = logged[-1]
    assert logged == list(range(FPB, stopped_at + 1, FPB))
    assert f"received {sig.name}: stopping after this iteration" in err
    assert (
        f"fleetrl train: stopped by {sig.name} at {stopped_at:,} frames; checkpoint written" in err
    )
    assert "Traceback" not in err
    assert checkpoint_frames(run) == [stopped_at]
    state = load_checkpoint(run / "checkpoints" / f"checkpoint_{stopped_at:012d}.pt")
    assert (state["frames"], state["iterations"]) == (stopped_at, stopped_at // FPB)

    budget = stopped_at + 2 * FPB
    assert main(["train", "--resume", str(run), f"trainer.total_frames={budget}"]) == 0
    assert frames_logged(run) == list(range(FPB, budget + 1, FPB))  # each frame count once
    assert f"frames {budget:,}" in capsys.readouterr().out


def same_value(text: str) -> float | str:
    """A logged value, compared as a float; NaN (a column the scheme has no value for) as
    itself, since NaN != NaN."""
    value = float(text)
    return "nan" if math.isnan(value) else value


def test_sigkill_between_checkpoints_then_resume_keeps_every_row_up_to_the_checkpoint(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    proc = start(run, "trainer.checkpoint_every=2", "logging.tensorboard=true")

    def rows_past_a_checkpoint() -> bool:
        saved = checkpoint_frames(run)
        return bool(saved) and frames_logged(run)[-1:] > saved[-1:]

    while True:  # freeze the run where it has rows past its newest checkpoint, then kill it
        wait_until(proc, rows_past_a_checkpoint, "rows past a checkpoint")
        proc.send_signal(signal.SIGSTOP)
        if rows_past_a_checkpoint():
            break
        proc.send_signal(signal.SIGCONT)
    before = whole_rows(run)
    saved = checkpoint_frames(run)[-1]
    proc.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert frames_logged(run)[-1] > saved

    budget = frames_logged(run)[-1] + 2 * FPB
    assert main(["train", "--resume", str(run), f"trainer.total_frames={budget}"]) == 0
    after = whole_rows(run)
    assert frames_logged(run) == list(range(FPB, budget + 1, FPB))  # each frame count once
    # the rows up to the checkpoint are the killed run's own, value for value
    header = before[0]
    kept = [dict(zip(header, r)) for r in before[1 : saved // FPB + 1]]
    assert [
        {k: same_value(v) for k, v in zip(after[0], r) if k in header and v != ""}
        for r in after[1 : saved // FPB + 1]
    ] == [{k: same_value(v) for k, v in r.items() if v != ""} for r in kept]
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    steps = [e.step for e in events.Scalars("train/frames")]
    assert steps == list(range(FPB, budget + 1, FPB))  # no step twice in TensorBoard either


def test_a_second_signal_stops_at_once_and_handlers_are_restored():
    from fleetrl.run.run_control import StopOnSignal

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    stop = StopOnSignal()
    with pytest.raises(KeyboardInterrupt), stop:
        os.kill(os.getpid(), signal.SIGTERM)  # handled at once: the main thread runs Python
        assert stop.received is signal.SIGTERM
        os.kill(os.getpid(), signal.SIGINT)
        pytest.fail("the second signal did not stop the run")
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before

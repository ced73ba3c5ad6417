"""MetricLogger: appended rows, trimmed on resume, damaged rows discarded, TensorBoard purged."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fleetrl.run.metrics import MetricLogger


def row(frames: int, **extra: float) -> dict[str, float]:
    return {"train/frames": frames, "train/episode_return": frames / 64, **extra}


def lines(run: Path) -> list[str]:
    return (run / "metrics.csv").read_text().splitlines()


def test_rows_are_appended_and_flushed_as_logged(tmp_path):
    log = MetricLogger(tmp_path, tensorboard=False)
    log.log(64, row(64))
    inode = (tmp_path / "metrics.csv").stat().st_ino
    log.log(128, row(128))
    log.log(192, row(192))
    # flushed: another reader sees every row while the logger still holds the file
    assert lines(tmp_path) == [
        "train/episode_return,train/frames",
        "1.0,64",
        "2.0,128",
        "3.0,192",
    ]
    assert (tmp_path / "metrics.csv").stat().st_ino == inode  # appended, never rewritten
    log.close()


def test_a_new_metric_rewrites_the_file_once_with_the_wider_header(tmp_path):
    log = MetricLogger(tmp_path, tensorboard=False)
    log.log(64, row(64))
    log.log(128, row(128, **{"eval/return_mean": 9.5}))
    inode = (tmp_path / "metrics.csv").stat().st_ino
    log.log(192, row(192))
    log.log(256, row(256, **{"eval/return_mean": 11.0}))
    assert (tmp_path / "metrics.csv").stat().st_ino == inode
    assert lines(tmp_path) == [
        "eval/return_mean,train/episode_return,train/frames",
        ",1.0,64",  # the rewrite keeps each cell's text as written (it read "64.0" before)
        "9.5,2.0,128",
        ",3.0,192",
        "11.0,4.0,256",
    ]
    assert [r.get("eval/return_mean") for r in log.read_rows()] == [None, 9.5, None, 11.0]
    log.close()


def test_n_iterations_append_n_rows_without_rewriting_with_declared_columns(tmp_path):
    path = tmp_path / "metrics.csv"
    log = MetricLogger(tmp_path, tensorboard=False, columns=["eval/return_mean"])
    inode = path.stat().st_ino
    written = []
    for i in range(1, 7):  # an evaluation every 3rd row: its column was declared up front
        extra = {"eval/return_mean": i * 1.5} if i % 3 == 0 else {}
        log.log(64 * i, row(64 * i, **extra))
        text = path.read_bytes()
        assert text.startswith(b"".join(written))  # the earlier bytes as they were
        written = [text]
        assert path.stat().st_ino == inode  # the same file, appended to
    log.close()
    assert lines(tmp_path) == [
        "eval/return_mean,train/episode_return,train/frames",
        *[f"{i * 1.5 if i % 3 == 0 else ''},{i / 1.0},{64 * i}" for i in range(1, 7)],
    ]
    assert [r.get("eval/return_mean") for r in log.read_rows()] == [
        None,
        None,
        4.5,
        None,
        None,
        9.0,
    ]


def test_a_resume_truncation_keeps_the_old_cells_text_byte_identical(tmp_path):
    path = tmp_path / "metrics.csv"
    log = MetricLogger(tmp_path, tensorboard=False)
    for frames, value in ((64, 768), (128, 0.1 + 0.2), (192, 1e-05), (256, -3)):
        log.log(frames, {"train/frames": frames, "loss/x": value, "train/lr": 2.5e-4})
    log.close()
    before = path.read_bytes()
    kept = b"".join(before.splitlines(keepends=True)[:3])  # the header and two rows
    assert b"768," in kept and b"0.30000000000000004" in kept
    resumed = MetricLogger(tmp_path, tensorboard=False, resume_frames=128)
    assert path.read_bytes() == kept  # truncated once; every kept cell as it was written
    resumed.log(192, {"train/frames": 192, "loss/x": 7, "train/lr": 2.5e-4})
    resumed.close()
    assert path.read_bytes() == kept + b"7,192,0.00025\n"


def test_a_resume_with_nothing_past_the_checkpoint_does_not_rewrite(tmp_path):
    path = tmp_path / "metrics.csv"
    log = MetricLogger(tmp_path, tensorboard=False)
    for frames in (64, 128):
        log.log(frames, row(frames))
    log.close()
    inode, before = path.stat().st_ino, path.read_bytes()
    resumed = MetricLogger(tmp_path, tensorboard=False, resume_frames=128)
    resumed.log(192, row(192))
    resumed.close()
    assert path.stat().st_ino == inode
    assert path.read_bytes() == before + b"3.0,192\n"


def test_a_new_run_starts_the_file_afresh(tmp_path):
    (tmp_path / "metrics.csv").write_text("train/frames\n64\n128\n")
    log = MetricLogger(tmp_path, tensorboard=False)
    log.log(32, row(32))
    log.close()
    assert [r["train/frames"] for r in log.read_rows()] == [32.0]


def test_resume_drops_rows_past_the_checkpoint(tmp_path, caplog):
    log = MetricLogger(tmp_path, tensorboard=False)
    for frames in (64, 128, 192, 256, 320):
        log.log(frames, row(frames))
    log.close()
    with caplog.at_level(logging.WARNING, logger="fleetrl.run.metrics"):
        resumed = MetricLogger(tmp_path, tensorboard=False, resume_frames=192)
    assert (
        f"{tmp_path / 'metrics.csv'}: dropping 2 rows logged past the checkpoint's 192 frames"
        in (caplog.text)
    )
    resumed.log(256, row(256, **{"loss/objective": 0.5}))
    resumed.close()
    assert [r["train/frames"] for r in resumed.read_rows()] == [64, 128, 192, 256]
    assert resumed.read_rows()[-1]["loss/objective"] == 0.5


@pytest.mark.parametrize(
    ("tail", "problem"),
    [
        ("3.0,19", "cut short"),  # killed in the middle of the last write
        ("3.0\n", "1 values for 2 columns"),
        ("3.0,1\x0092\n", "could not convert string to float"),
    ],
)
def test_a_damaged_last_row_is_discarded_with_a_warning(tmp_path, caplog, tail, problem):
    (tmp_path / "metrics.csv").write_text(
        "train/episode_return,train/frames\n1.0,64\n2.0,128\n" + tail
    )
    with caplog.at_level(logging.WARNING, logger="fleetrl.run.metrics"):
        log = MetricLogger(tmp_path, tensorboard=False, resume_frames=192)
    assert f"{tmp_path / 'metrics.csv'} line 4 is damaged ({problem}" in caplog.text
    log.log(192, row(192))
    log.close()
    assert lines(tmp_path) == [
        "train/episode_return,train/frames",
        "1.0,64",  # the resume's rewrite keeps each cell's text (it read "64.0" before)
        "2.0,128",
        "3.0,192",
    ]


def test_tensorboard_resumes_at_the_checkpoint_step_without_duplicates(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = MetricLogger(tmp_path, tensorboard=True)
    for frames in (64, 128, 192, 256):
        log.log(frames, row(frames))
    log.close()
    resumed = MetricLogger(tmp_path, tensorboard=True, resume_frames=128)
    for frames in (192, 256, 320):
        resumed.log(frames, row(frames, **{"train/episode_return": -frames}))
    resumed.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    points = [(e.step, e.value) for e in events.Scalars("train/episode_return")]
    assert points == [(64, 1.0), (128, 2.0), (192, -192.0), (256, -256.0), (320, -320.0)]


def test_logging_after_close_appends(tmp_path):
    log = MetricLogger(tmp_path, tensorboard=False)
    log.log(64, row(64))
    log.close()
    log.sync()  # Trainer.checkpoint() after train()
    log.log(128, row(128))  # a second Trainer.train() on the same trainer
    log.close()
    assert lines(tmp_path) == ["train/episode_return,train/frames", "1.0,64", "2.0,128"]

"""``fleetrl report RUN``: the summary and time breakdown of a run, read from metrics.csv."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetrl.cli import main
from fleetrl.run.metrics import read_metrics
from fleetrl.run.report import (
    NO_RUN_MSG,
    breakdown,
    collection,
    learning,
    segment_starts,
    wall_seconds,
)
from runs import LOCAL, ROOT

#: four iterations of 100 frames with known times (a gradient-worker run's parts)
HEADER = (
    "train/frames,train/episode_return,eval/return_mean,train/policy_lag,train/policy_lag_max,"
    "train/dropped_batches,train/dropped_gradients,train/grad_workers_restarted,"
    "time/elapsed_s,time/iteration_s,time/collect_s,time/learn_s,time/grad_s,time/update_s,"
    "time/broadcast_s,time/eval_s,time/checkpoint_s\n"
)
#: wall 3 + 1.5 + 1 + 1.5 = 7 s, iterations 5 s: parts 4.75 s, loop 0.25 s; between them
#: evaluations 0.5 s, a checkpoint 0.25 s, the rest (start-up) 1.25 s
ROWS = [
    "100,10,,1,2,0,1,0,3.0,2.0,1.0,nan,0.5,0.25,0.0,0.25,0.0\n",
    "200,20,15,2,3,1,0,0,4.5,1.0,0.5,nan,0.25,0.25,0.0,0.0,0.0\n",
    "300,30,,1,2,0,0,1,5.5,1.0,0.5,nan,0.25,0.25,0.0,0.25,0.25\n",
    "400,25,40,2,4,0,0,1,7.0,1.0,0.5,nan,0.25,0.25,0.0,0.0,0.0\n",
]


def written_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text(HEADER + "".join(ROWS))
    return run


def test_the_report_of_known_rows(tmp_path, capsys):
    run = written_run(tmp_path)
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert out == (
        f"run {run}: 4 iterations, 400 frames in 7.0 s (57 frames/s)\n"
        "training return: last 25.0, best 30.0; last evaluation 40.0\n"
        "policy lag (optimizer steps): mean 1.50, max 4; dropped batches 1, dropped gradients "
        "1, gradient workers restarted 1\n"
        "\n"
        "frames/s over the run:\n"
        "             0 -          100          33\n"
        "           100 -          200          67\n"
        "           200 -          300         100\n"
        "           300 -          400          67\n"
        "\n"
        "where the time went (7.0 s of training, start-up included):\n"
        "  part          seconds   share\n"
        "  collect          2.50   35.7%\n"
        "  gradients        1.25   17.9%\n"
        "  apply            1.00   14.3%\n"
        "  loop             0.25    3.6%\n"
        "  evaluate         0.50    7.1%\n"
        "  checkpoint       0.25    3.6%\n"
        "  outside          1.25   17.9%\n"
        "\n"
        f"plot: {run / 'time.png'}\n"
    )
    assert (run / "time.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


#: the same run's collection and update, part by part (the schema's newer columns)
PARTS_HEADER = "time/env_s,time/policy_s,time/pack_s,time/weights_s,time/transfer_s,time/unpack_s,"
PARTS_HEADER += "time/prepare_s"
PARTS_ROW = "0.5,0.25,0.125,0.0,0.0625,0.0625,0.25"


def test_the_report_splits_collection_and_the_update_into_their_parts(tmp_path, capsys):
    run = written_run(tmp_path)
    lines = [f"{line},{PARTS_ROW}\n" for line in (HEADER + "".join(ROWS)).splitlines()]
    lines[0] = f"{HEADER.strip()},{PARTS_HEADER}\n"
    (run / "metrics.csv").write_text("".join(lines))
    assert main(["report", str(run), "--no-plot"]) == 0
    out = capsys.readouterr().out
    # what was there before is unchanged: the new tables follow it
    assert "  outside          1.25   17.9%\n\n" in out
    assert out.split("  outside          1.25   17.9%\n")[1] == (
        "\n"
        "collection, part by part (4.00 s of the collectors' own time; the learner waited "
        "2.50 s for batches):\n"
        "  part          seconds   share\n"
        "  env              2.00   50.0%\n"
        "  policy           1.00   25.0%\n"
        "  pack             0.50   12.5%\n"
        "  weights          0.00    0.0%\n"
        "  transfer         0.25    6.2%\n"
        "  unpack           0.25    6.2%\n"
        "\n"
        "gradients, part by part:\n"  # gradient workers: no learn_s, preparing is in grad_s
        "  part          seconds   share\n"
        "  prepare          1.00   80.0%\n"
    )


def test_the_wall_time_of_a_resumed_run_adds_its_segments(tmp_path):
    run = written_run(tmp_path)
    lines = (run / "metrics.csv").read_text().splitlines(keepends=True)
    # resumed after the second row: elapsed_s restarts (2.0 s, start-up included)
    lines[3] = lines[3].replace(",5.5,", ",2.0,")
    lines[4] = lines[4].replace(",7.0,", ",3.5,")
    assert lines[3] != ROWS[2] and lines[4] != ROWS[3]
    (run / "metrics.csv").write_text("".join(lines))
    assert wall_seconds(read_metrics(run / "metrics.csv")) == [3.0, 1.5, 2.0, 1.5]
    # elapsed_s is taken before a row's evaluation: a segment's last one is added to it
    lines[2] = lines[2].replace(",0.0,0.0\n", ",0.5,0.0\n")
    (run / "metrics.csv").write_text("".join(lines))
    assert wall_seconds(read_metrics(run / "metrics.csv")) == [3.0, 2.0, 2.0, 1.5]


def test_a_resume_whose_first_elapsed_is_larger_than_the_last_kept_starts_a_segment(
    tmp_path, capsys
):
    # a run of 6 s to 200 frames, resumed from its checkpoint there for 12 s more (start-up
    # included); the resume's first row is at 8 s, past the 6 s of the row before it
    header = "train/frames,time/elapsed_s,time/fps,time/iteration_s\n"
    segments = [(0, [(100, 3.0), (200, 6.0)]), (200, [(300, 8.0), (400, 12.0)])]
    rows = [
        f"{frames},{elapsed!r},{(frames - start) / elapsed!r},1.0\n"
        for start, segment in segments
        for frames, elapsed in segment
    ]
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text(header + "".join(rows))
    read = read_metrics(run / "metrics.csv")
    assert segment_starts(read) == [True, False, True, False]
    assert wall_seconds(read) == [3.0, 3.0, 8.0, 4.0]
    assert main(["report", str(run), "--no-plot"]) == 0
    assert capsys.readouterr().out.startswith(
        f"run {run}: 4 iterations, 400 frames in 18.0 s (22 frames/s)\n"
    )


def test_a_real_resumed_run_has_a_segment_per_train(tmp_path):
    from fleetrl import Trainer, load_config

    config = str(ROOT / "configs" / "ppo_cartpole.yaml")
    args = [*LOCAL, "collector.frames_per_batch=128", "trainer.total_frames=384"]
    Trainer(load_config(config, args), run_dir=tmp_path / "run").train()
    Trainer.from_run_dir(tmp_path / "run", ["trainer.total_frames=640"]).train()
    rows = read_metrics(tmp_path / "run" / "metrics.csv")
    assert [r["train/frames"] for r in rows] == [128, 256, 384, 512, 640]
    assert segment_starts(rows) == [True, False, False, True, False]


def test_the_plot_goes_where_asked_or_nowhere(tmp_path, capsys):
    run = written_run(tmp_path)
    assert main(["report", str(run), "--plot", str(tmp_path / "t.png")]) == 0
    assert (tmp_path / "t.png").is_file() and not (run / "time.png").exists()
    assert main(["report", str(run), "--no-plot"]) == 0
    assert "plot:" not in capsys.readouterr().out.split("where the time went")[-1]
    assert not (run / "time.png").exists()


def test_a_real_run_is_reported_and_its_parts_add_up(tmp_path, capsys):
    run = tmp_path / "ppo"
    config = str(ROOT / "configs" / "ppo_cartpole.yaml")
    args = [*LOCAL, "collector.frames_per_batch=128", "trainer.total_frames=384"]
    assert main(["train", config, *args, "--run-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"run {run}: 3 iterations, 384 frames in ")
    rows = read_metrics(run / "metrics.csv")
    parts = breakdown(rows)
    assert [p.name for p in parts][:2] == ["collect", "learn"]  # the central learner's parts
    assert sum(p.share for p in parts) == pytest.approx(1.0)
    # local collection has no weights, transfer or unpacking to time
    assert [p.name for p in collection(rows)] == ["env", "policy", "pack"]
    assert sum(p.share for p in collection(rows)) == pytest.approx(1.0)
    whole, split = learning(rows)
    assert whole == "learn" and [p.name for p in split] == ["prepare", "optimize"]
    assert sum(p.share for p in split) == pytest.approx(1.0)
    assert "collection, part by part (" in out and "learn, part by part:" in out
    assert (run / "time.png").is_file()


def test_a_directory_that_is_not_a_run_is_refused_naming_it(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    started = tmp_path / "started"
    started.mkdir()
    (started / "metrics.csv").write_text(HEADER)
    for run, why in [
        (tmp_path / "nowhere", "it is not a directory"),
        (empty, "it holds no metrics.csv"),
        (started, "its metrics.csv has no rows yet"),
    ]:
        assert main(["report", str(run)]) == 2
        assert capsys.readouterr().err == (
            f"fleetrl report: {NO_RUN_MSG.format(run=str(run), why=why)}\n"
        )


def test_a_plot_path_that_cannot_be_written_is_refused_before_any_work(tmp_path, capsys):
    run = written_run(tmp_path)
    bad = tmp_path / "missing" / "t.png"
    assert main(["report", str(run), "--plot", str(bad)]) == 2
    assert capsys.readouterr().err == (
        f"fleetrl report: --plot='{bad}' is invalid: directory '{bad.parent}' does not exist; "
        "choose a path in a writable directory\n"
    )
    assert main(["report", str(run), "--plot", str(tmp_path / "t.jpg")]) == 2
    assert "the plot is a PNG file, its name ends in .png" in capsys.readouterr().err

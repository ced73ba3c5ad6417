"""Experiment tracking: a run in MLflow (a real local file store) and W&B (offline), read back.

Each run is tiny (ppo_cartpole.yaml, local collection, 256-frame batches); the
tracked runs are read back from what the trackers wrote: MLflow through
``MlflowClient``, W&B from the offline run's ``run-<id>.wandb`` file (its
records, :func:`wandb_records`).
"""

from __future__ import annotations

import csv
import json
import logging
import os
import signal
import struct
import sys
import threading
import time
from pathlib import Path

import pytest

from fleetrl import ConfigError, Trainer, load_config
from fleetrl.extras import pip_install
from fleetrl.run.tracking import (
    BACKLOG_ROWS,
    MAX_SKIP,
    TRACKER_BACK,
    TRACKER_END_FAILED,
    TRACKER_FAILED,
    TRACKER_MISSED,
    TRACKER_START_FAILED,
    TRACKING_FILE,
    RunEnd,
    Tracker,
    Trackers,
)
from fleetrl.setup import parse_config
from fleetrl.setup.verify import TRACKER_EXTRA_MSG
from runs import ROOT

CONFIG = ROOT / "configs" / "ppo_cartpole.yaml"
#: one evaluation, filmed, at the second (last) iteration: videos/eval_000000000512.mp4
FILMED = [
    "trainer.test_every=2",
    "trainer.num_test_episodes=2",
    "env.max_episode_steps=50",
    "logging.video_every=1",
]
TINY = [
    "collector.num_collectors=0",
    "collector.frames_per_batch=256",
    "trainer.total_frames=512",
    "trainer.test_every=0",
    "trainer.target_return=null",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]


@pytest.fixture(autouse=True)
def _hermetic(tmp_path, monkeypatch):
    """No tracker reads or writes outside tmp_path, or reaches the network."""
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "WANDB_PROJECT", "WANDB_MODE"):
        monkeypatch.delenv(name, raising=False)
    # set, then deleted: the variable the MLflow tracker sets is undone after the test
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "unset")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home"))


def _mlflow(tmp_path: Path) -> list[str]:
    return ["logging.mlflow=true", f"logging.mlflow_uri={(tmp_path / 'mlruns').as_uri()}"]


def _csv_frames(run_dir: Path) -> list[float]:
    with (run_dir / "metrics.csv").open() as f:
        return [float(row["train/frames"]) for row in csv.DictReader(f)]


def _mlflow_run(run_dir: Path):
    from mlflow.tracking import MlflowClient

    record = json.loads((run_dir / TRACKING_FILE).read_text())["mlflow"]
    client = MlflowClient(tracking_uri=record["tracking_uri"])
    return client, client.get_run(record["run_id"])


# ------------------------------------------------------------------ MLflow


def test_mlflow_holds_the_config_every_row_the_curve_and_the_checkpoint(tmp_path):
    config = load_config(CONFIG, [*TINY, *FILMED, *_mlflow(tmp_path), "logging.plot=true"])
    trainer = Trainer(config, run_dir=tmp_path / "run")
    trainer.train()

    client, run = _mlflow_run(trainer.run_dir)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "run"
    assert client.get_experiment(run.info.experiment_id).name == "fleetrl"
    params = run.data.params
    assert params["ppo.lr"] == str(config.algo.lr)
    assert params["trainer.total_frames"] == "512"
    assert params["logging.mlflow"] == "true"
    assert params["env.atari.frame_stack"] == str(config.env.atari.frame_stack)
    # one point per metrics.csv row, at step train/frames
    history = client.get_metric_history(run.info.run_id, "train/frames")
    frames = _csv_frames(trainer.run_dir)
    assert frames == [256.0, 512.0]
    assert [(m.step, m.value) for m in history] == [(int(f), f) for f in frames]
    assert len(client.get_metric_history(run.info.run_id, "loss/critic")) == 2
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert artifacts == {"config.yaml", "learning_curve.png", "videos"}
    videos = [a.path for a in client.list_artifacts(run.info.run_id, "videos")]
    assert videos == ["videos/eval_000000000512.mp4"]
    assert (trainer.run_dir / videos[0]).is_file()
    assert run.data.tags["checkpoint"] == str(trainer.last_checkpoint.resolve())
    assert trainer.last_checkpoint.name == "checkpoint_000000000512.pt"
    # a folder as tracking URI is a file store, which MLflow 3.10+ allows only when asked
    assert os.environ["MLFLOW_ALLOW_FILE_STORE"] == "true"


def test_a_resumed_run_continues_the_same_mlflow_run(tmp_path):
    run_dir = tmp_path / "run"
    Trainer(load_config(CONFIG, [*TINY, *_mlflow(tmp_path)]), run_dir=run_dir).train()
    _, first = _mlflow_run(run_dir)

    resumed = Trainer.from_run_dir(run_dir, ["trainer.total_frames=1024"])
    resumed.train()

    client, run = _mlflow_run(run_dir)
    assert run.info.run_id == first.info.run_id
    assert len(client.search_runs([run.info.experiment_id])) == 1  # no second run
    assert run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "train/frames")
    assert [m.step for m in history] == [256, 512, 768, 1024]
    assert _csv_frames(run_dir) == [256.0, 512.0, 768.0, 1024.0]
    # parameters cannot change in MLflow: the resumed run's new budget is a tag
    assert run.data.params["trainer.total_frames"] == "512"
    assert run.data.tags["resumed.trainer.total_frames"] == "1024"
    assert run.data.tags["checkpoint"].endswith("checkpoint_000000001024.pt")


def test_a_run_stopped_by_a_signal_is_killed_in_mlflow_and_resumes_running(tmp_path):
    run_dir = tmp_path / "run"
    overrides = [*TINY, *_mlflow(tmp_path), "trainer.total_frames=25600"]
    trainer = Trainer(load_config(CONFIG, overrides), run_dir=run_dir)

    def stop_after_the_first_row() -> None:  # the handler is installed before the first row
        while len(_csv_lines(run_dir)) < 2:
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop_after_the_first_row, daemon=True).start()
    trainer.train()
    assert trainer.interrupted is signal.SIGTERM and trainer.frames < 25600
    client, run = _mlflow_run(run_dir)
    assert run.info.status == "KILLED"
    assert run.data.tags["checkpoint"] == str(trainer.last_checkpoint.resolve())

    resumed = Trainer.from_run_dir(run_dir, ["trainer.total_frames=" + str(trainer.frames + 256)])
    _, running = _mlflow_run(run_dir)
    resumed.train()
    _, run = _mlflow_run(run_dir)
    assert run.info.run_id == running.info.run_id and run.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/frames")]
    assert steps == list(range(256, trainer.frames + 512, 256))


def _csv_lines(run_dir: Path) -> list[str]:
    path = run_dir / "metrics.csv"
    return path.read_text().splitlines() if path.exists() else []


def test_a_run_that_cannot_start_its_tracker_leaves_nothing_behind(tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")  # the file store cannot be made under a file
    overrides = [*TINY, "logging.mlflow=true", f"logging.mlflow_uri={blocker / 'mlruns'}"]
    run_dir = tmp_path / "run"
    trainer = Trainer(load_config(CONFIG, overrides), run_dir=run_dir)
    with pytest.raises(ConfigError) as err:
        trainer.train()
    uri = (blocker / "mlruns").as_uri()
    assert str(err.value) == TRACKER_START_FAILED.format(
        name="mlflow",
        err=f"NotADirectoryError: [Errno 20] Not a directory: '{blocker / 'mlruns'}'",
        where=f"logging.mlflow_uri (here {uri!r}) and the server it names",
    )
    assert not run_dir.exists()


def test_a_tracker_that_cannot_start_aborts_the_ones_started_before_it(tmp_path):
    from mlflow.tracking import MlflowClient

    # W&B refuses this project name at start (the config checks refuse it earlier; parsed
    # only here, to reach the tracker)
    config, problems = parse_config(
        {"algorithm": "ppo"},
        [*_mlflow(tmp_path), "logging.wandb=true", "logging.wandb_mode=offline",
         "logging.wandb_project=a/b"],
    )  # fmt: skip
    assert not problems
    trackers = Trackers(config, tmp_path)
    with pytest.raises(ConfigError, match="Invalid project name 'a/b'"):
        trackers.start()
    assert not (tmp_path / TRACKING_FILE).exists() and trackers.running == []
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("fleetrl")
    runs = client.search_runs([experiment.experiment_id], run_view_type=3)  # ViewType.ALL
    assert [r.info.lifecycle_stage for r in runs] == ["deleted"]


def test_a_tracker_that_keeps_failing_is_warned_once_and_still_ended(tmp_path, caplog):
    from mlflow.tracking import MlflowClient

    config, _ = parse_config({"algorithm": "ppo"}, _mlflow(tmp_path))
    trackers = Trackers(config, tmp_path)
    trackers.start()
    run_id = json.loads((tmp_path / TRACKING_FILE).read_text())["mlflow"]["run_id"]
    trackers.log_row({"train/frames": 256, "loss/critic": 1.0})
    # the run goes away under it (deleted in another client): MLflow refuses further logging
    MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri()).delete_run(run_id)
    with caplog.at_level(logging.WARNING, logger="fleetrl.run.tracking"):
        trackers.log_row({"train/frames": 512, "loss/critic": 2.0})
        trackers.log_row({"train/frames": 768, "loss/critic": 3.0})
        trackers.finish(RunEnd.FINISHED, None)
    said = [(r.msg, r.args[:2]) for r in caplog.records]
    assert said == [
        (TRACKER_FAILED, ("mlflow", 512)),
        (TRACKER_MISSED, ("mlflow", 2)),  # the rows at 512 and 768, never logged
        (TRACKER_END_FAILED, ("mlflow", "MlflowException")),  # finish() reached it
    ]
    assert caplog.records[1].args[2:] == (512, 768, 0)
    assert trackers.running == []


def test_a_transient_tracker_failure_loses_no_row_and_the_run_still_ends(tmp_path, caplog):
    from mlflow.exceptions import MlflowException

    config, _ = parse_config({"algorithm": "ppo"}, _mlflow(tmp_path))
    trackers = Trackers(config, tmp_path)
    trackers.start()
    (tracker,) = trackers.running
    real = tracker.client.log_batch
    failures = iter([MlflowException("503 Service Unavailable")])

    def log_batch_once_failing(*args, **kwargs):
        err = next(failures, None)
        if err is not None:
            raise err
        return real(*args, **kwargs)

    tracker.client.log_batch = log_batch_once_failing
    checkpoint = tmp_path / "checkpoints" / "checkpoint_000000000768.pt"
    with caplog.at_level(logging.INFO, logger="fleetrl.run.tracking"):
        for frames in (256, 512, 768):
            trackers.log_row({"train/frames": frames, "loss/critic": frames / 256})
        trackers.finish(RunEnd.FINISHED, checkpoint)
    said = [(r.msg, r.args[:3]) for r in caplog.records]
    assert said == [
        (TRACKER_FAILED, ("mlflow", 256, "MlflowException")),
        (TRACKER_BACK, ("mlflow", 512, 1)),
    ]
    client, run = _mlflow_run(tmp_path)
    # the row that failed was logged with the next one, and the run ended as it did
    history = client.get_metric_history(run.info.run_id, "loss/critic")
    assert sorted((m.step, m.value) for m in history) == [(256, 1.0), (512, 2.0), (768, 3.0)]
    assert run.info.status == "FINISHED"
    assert run.data.tags["checkpoint"] == str(checkpoint.resolve())


class _Flaky(Tracker):
    """A tracker whose first ``failures`` calls to log fail (None: every one); it records
    the frames of the row each call tried (a file: None), what it logged, how it ended."""

    name = "flaky"

    def __init__(self, failures: int | None = None):
        self.failures, self.tries, self.logged, self.ended = failures, [], [], None

    def start(self, record, config):
        return {}

    def _try(self, frames) -> None:
        self.tries.append(frames)
        if self.failures is None or len(self.tries) <= self.failures:
            raise ConnectionError("no answer")
        self.logged.append(frames)

    def log_row(self, row):
        self._try(row["train/frames"])

    def log_file(self, path, folder):
        self._try(None)

    def finish(self, end, checkpoint):
        self.ended = end


def _flaky_trackers(tmp_path, tracker: Tracker) -> Trackers:
    config, _ = parse_config({"algorithm": "ppo"})
    trackers = Trackers(config, tmp_path)
    trackers.trackers = [tracker]
    trackers.start()
    return trackers


def test_a_failing_tracker_logs_what_it_missed_in_order_when_it_answers_again(tmp_path, caplog):
    flaky = _Flaky(failures=3)
    trackers = _flaky_trackers(tmp_path, flaky)
    with caplog.at_level(logging.INFO, logger="fleetrl.run.tracking"):
        for frames in range(1, 11):
            trackers.log_row({"train/frames": frames})
        trackers.finish(RunEnd.KILLED, None)
    # the tries at rows 1, 2 and 4 fail (each on the oldest row it missed); row 8's logs all
    assert flaky.tries[:4] == [1, 1, 1, 1]
    assert flaky.logged == list(range(1, 11))
    assert [(r.msg, r.args[:2]) for r in caplog.records] == [
        (TRACKER_FAILED, ("flaky", 1)),
        (TRACKER_BACK, ("flaky", 8)),
    ]
    assert caplog.records[1].args[2] == 7  # rows 1 to 7, missed before row 8
    assert flaky.ended is RunEnd.KILLED and trackers.running == []


def test_a_dead_tracker_is_tried_ever_less_often_and_what_it_lost_is_counted(tmp_path, caplog):
    dead = _Flaky()
    trackers = _flaky_trackers(tmp_path, dead)
    rows = BACKLOG_ROWS + 100
    tried_at = []
    with caplog.at_level(logging.WARNING, logger="fleetrl.run.tracking"):
        for frames in range(1, rows + 1):
            before = len(dead.tries)
            trackers.log_row({"train/frames": frames})
            tried_at += [frames] * (len(dead.tries) - before)
        trackers.log_file(tmp_path / "learning_curve.png")
        trackers.finish(RunEnd.FINISHED, None)
    # a try after 1, 2, 4, ... rows, at most MAX_SKIP apart; and one last try at the end
    assert tried_at == [1, 2, 4, 8, 16, 32, *range(MAX_SKIP, rows + 1, MAX_SKIP)]
    assert len(dead.tries) == len(tried_at) + 1
    assert dead.ended is RunEnd.FINISHED
    # the oldest rows went from the full backlog: counted with the rest, from the first one
    assert [(r.msg, r.args[:3]) for r in caplog.records] == [
        (TRACKER_FAILED, ("flaky", 1, "ConnectionError")),
        (TRACKER_MISSED, ("flaky", rows, 1)),
    ]
    assert caplog.records[1].args[3:] == (rows, 1)  # the last row's frames, and one file


def test_a_run_that_exits_cleanly_is_finished_in_mlflow(tmp_path):
    # a trial that ASHA or PBT stops ends with Ray Tune's sys.exit(0) in on_iteration
    config = load_config(CONFIG, [*TINY, *_mlflow(tmp_path), "trainer.checkpoint_every=1"])
    trainer = Trainer(config, run_dir=tmp_path / "run")

    def stopped_by_the_scheduler(row, checkpoint) -> None:
        sys.exit(0)

    with pytest.raises(SystemExit):
        trainer.train(on_iteration=stopped_by_the_scheduler)
    _, run = _mlflow_run(trainer.run_dir)
    assert run.info.status == "FINISHED"
    assert run.data.tags["checkpoint"] == str(trainer.last_checkpoint.resolve())
    assert trainer.last_checkpoint.name == "checkpoint_000000000256.pt"


@pytest.mark.parametrize(
    ("err", "end"),
    [
        (SystemExit(0), RunEnd.FINISHED),
        (SystemExit(None), RunEnd.FINISHED),
        (SystemExit(1), RunEnd.FAILED),
        (SystemExit("bad config"), RunEnd.FAILED),  # sys.exit(text): exit status 1
        (KeyboardInterrupt(), RunEnd.KILLED),
        (RuntimeError("boom"), RunEnd.FAILED),
    ],
)
def test_how_an_exception_ends_a_run(err, end):
    assert RunEnd.of(err) is end


# ------------------------------------------------------------------ W&B


def wandb_records(path: Path) -> list:
    """The records of a W&B run file (``run-<id>.wandb``): a LevelDB-style log of
    ``wandb.proto`` Records in 32 KiB blocks, after a 7-byte header (``:W&B``, magic, version).
    """
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    block, pos, pending, out = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a chunk header: padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:  # zeros to the end of the block
            pos += left
            continue
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, or LAST of FIRST/MIDDLE/LAST
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
            pending = b""
    return out


def _key(item) -> str:
    """An item's name: ``key``, or its ``nested_key`` parts joined (``train/frames``)."""
    return item.key or "/".join(item.nested_key)


def _wandb_session(folder: Path) -> dict:
    """One offline session's run id, config, history rows, summary, saved files, exit code.

    W&B's service process writes the file: under load its last records can land a moment
    after ``finish()`` returned, so the file is read until it holds the session's exit
    record (its last), for at most 20 s."""
    deadline = time.monotonic() + 20
    while True:
        found = _read_wandb_session(folder)
        if found["exit"] is not None or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def _read_wandb_session(folder: Path) -> dict:
    (path,) = folder.glob("run-*.wandb")
    found: dict = {"config": {}, "history": [], "summary": {}, "files": [], "exit": None}
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            found["id"] = record.run.run_id
            found["project"] = record.run.project
        elif kind == "config":
            found["config"].update(
                {_key(i): json.loads(i.value_json) for i in record.config.update}
            )
        elif kind == "history":
            found["history"].append(
                {_key(i): json.loads(i.value_json) for i in record.history.item}
            )
        elif kind == "summary":
            found["summary"].update(
                {_key(i): json.loads(i.value_json) for i in record.summary.update}
            )
        elif kind == "files":
            found["files"] += [f.path for f in record.files.files]
        elif kind == "exit":
            found["exit"] = record.exit.exit_code
    return found


def test_wandb_offline_holds_the_config_rows_and_checkpoint_and_resume_keeps_its_id(tmp_path):
    run_dir = tmp_path / "run"
    wandb = ["logging.wandb=true", "logging.wandb_mode=offline", "logging.plot=true"]
    config = load_config(CONFIG, [*TINY, *FILMED, *wandb])
    trainer = Trainer(config, run_dir=run_dir)
    trainer.train()

    (folder,) = (run_dir / "wandb").glob("offline-run-*")
    first = _wandb_session(folder)
    recorded = json.loads((run_dir / TRACKING_FILE).read_text())["wandb"]
    assert first["id"] == recorded["run_id"] and folder.name.endswith(f"-{first['id']}")
    assert first["project"] == recorded["project"] == "fleetrl"
    assert first["config"]["ppo"]["lr"] == config.algo.lr
    assert first["config"]["trainer"]["total_frames"] == 512
    assert [row["train/frames"] for row in first["history"]] == _csv_frames(run_dir)
    assert first["summary"]["checkpoint"] == str(trainer.last_checkpoint.resolve())
    assert {"learning_curve.png", "videos/eval_000000000512.mp4"} <= set(first["files"])
    assert (folder / "files" / "learning_curve.png").exists()
    assert (folder / "files" / "videos" / "eval_000000000512.mp4").exists()
    assert first["exit"] == 0

    Trainer.from_run_dir(run_dir, ["trainer.total_frames=1024"]).train()
    sessions = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(sessions) == 2
    second = _wandb_session(next(s for s in sessions if s != folder))
    assert second["id"] == first["id"]  # the same W&B run, continued
    assert second["config"]["trainer"]["total_frames"] == 1024
    assert [row["train/frames"] for row in second["history"]] == [768, 1024]
    assert second["summary"]["checkpoint"].endswith("checkpoint_000000001024.pt")


def test_wandb_disabled_tracks_nothing_and_records_no_run(tmp_path):
    overrides = [*TINY, "logging.wandb=true", "logging.wandb_mode=disabled"]
    Trainer(load_config(CONFIG, overrides), run_dir=tmp_path / "run").train()
    assert json.loads((tmp_path / "run" / TRACKING_FILE).read_text()) == {"wandb": {}}
    assert not (tmp_path / "run" / "wandb").exists()


# ------------------------------------------------------------------ config checks


@pytest.mark.parametrize("key", ["mlflow", "wandb"])
def test_a_tracker_whose_package_is_missing_is_refused_naming_the_key_and_extra(key, monkeypatch):
    monkeypatch.setitem(sys.modules, key, None)  # as if not installed: find_spec says None
    with pytest.raises(ConfigError) as err:
        load_config(CONFIG, [*TINY, f"logging.{key}=true", "env.num_envs=0"])
    expected = TRACKER_EXTRA_MSG.format(key=key, extra=key, module=key, install=pip_install(key))
    assert expected in err.value.problems  # with every other problem, at once
    assert "env.num_envs=0 is invalid: must be > 0" in err.value.problems
    assert expected.startswith(f"logging.{key}=true needs the {key} extra: pip install ")
    # the extra's own packages, which install however fleetrl was installed
    package = {"mlflow": "'mlflow-skinny>=2.16'", "wandb": "'wandb>=0.18'"}[key]
    assert f"extra: pip install {package} (No module named" in expected


def test_an_unknown_wandb_mode_or_project_is_refused_with_the_allowed_values():
    with pytest.raises(ConfigError) as err:
        load_config(CONFIG, ["logging.wandb_mode=foo", "logging.wandb_project=team/x"])
    assert err.value.problems == [
        "logging.wandb_mode='foo' is invalid: must be one of ['online', 'offline', 'disabled']",
        "logging.wandb_project='team/x' is invalid: must be null or a name without any of "
        "/ \\ # ? % :",
    ]

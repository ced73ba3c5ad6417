"""Trackers: a run's config, metrics rows and files, also in MLflow and Weights & Biases.

:class:`Trackers` is what the Trainer talks to: it starts the run in each
tracker the config asks for (``logging.mlflow``, ``logging.wandb``), logs the
config as parameters, every metrics row, files (``learning_curve.png``,
``videos/eval_<frames>.mp4``), and at the end the final checkpoint's path and
how the run ended (:class:`RunEnd`). Each tracker is a :class:`Tracker`:
:class:`MlflowTracker` and :class:`WandbTracker`.

**One run, resumed or not.** The tracked runs' ids are written to
``tracking.json`` in the run directory when the run starts; a resumed run
(``fleetrl train --resume RUN_DIR``) reads them back and continues the same
tracked runs, in the store they live in (the MLflow tracking URI, the W&B
project and entity recorded there win over the config and the environment).

**metrics.csv stays the source of truth.** The Trainer logs a row to the CSV
first, then to the trackers. A tracker that fails mid-run (a server that does
not answer, a full disk) says so in one warning and training goes on: the CSV
keeps every row. The tracker stays in the run: the rows and files it missed
wait (up to :data:`BACKLOG_ROWS`) and are logged, oldest first, when it answers
again; while it fails it is tried again after 1, 2, 4, ... more rows or files
(at most :data:`MAX_SKIP`), so a server that hangs does not hold up every
iteration. The run's end is sent to every tracker started, after one last try
at what it missed; what it never logged is counted in a warning then. What can
be known before the run (a bad ``logging.wandb_mode``, a missing package) is
refused up front by :func:`fleetrl.setup.verify`; a tracker that cannot start
its run stops the run from starting, before its first batch, with a
ConfigError naming its key. A resumed run logs again the frames between its
checkpoint and the crash (the CSV drops them): W&B plots against
``train/frames``, so the points are redrawn; MLflow cannot delete metrics, so
its history holds both.

**torchrl's loggers.** :class:`WandbTracker` uses torchrl's ``WandbLogger``
(``wandb.init`` with ``id=`` and ``resume="allow"``, the config, the metrics),
with ``override_global_step=True`` so that it adds none of its per-group step
counters, and ``mode=`` rather than its ``offline`` flag, which sets
``WANDB_MODE`` for the whole process. :class:`MlflowTracker` does not use
torchrl's ``MLFlowLogger``: that one always starts a new run through MLflow's
process-global fluent API and cannot continue a resumed run's id; it is built
on ``mlflow.tracking.MlflowClient`` instead.

Examples:
    >>> from fleetrl.setup import parse_config
    >>> config, _ = parse_config({"algorithm": "ppo", "logging": {"tensorboard": False}})
    >>> params = flat_params(config)
    >>> params["ppo.lr"], params["logging.tensorboard"], params["ppo.hidden_sizes"]
    ('0.0003', 'false', '[64, 64]')
    >>> [t.name for t in Trackers(config, "runs/x").trackers]
    []
"""

from __future__ import annotations

import enum
import json
import logging
import math
import numbers
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from fleetrl.config import Config, LoggingConfig, WandbMode
from fleetrl.errors import ConfigError
from fleetrl.setup.parse import config_to_dict

__all__ = [
    "DEFAULT_EXPERIMENT",
    "TRACKER_BACK",
    "TRACKER_END_FAILED",
    "TRACKER_FAILED",
    "TRACKER_MISSED",
    "TRACKER_START_FAILED",
    "TRACKING_FILE",
    "MlflowTracker",
    "RunEnd",
    "Tracker",
    "Trackers",
    "WandbTracker",
    "flat_params",
    "mlflow_tracking_uri",
]

logger = logging.getLogger(__name__)

#: the file in the run directory that holds the tracked runs' ids
TRACKING_FILE = "tracking.json"
#: the MLflow experiment and W&B project when the config and the environment name none
DEFAULT_EXPERIMENT = "fleetrl"
TRACKER_FAILED = (
    "%s tracking failed at %d frames (%s: %s); training goes on, what it misses is logged "
    "when it answers again, and metrics.csv keeps every row"
)
TRACKER_BACK = "%s tracking answers again at %d frames: logged the %d rows and files it missed"
TRACKER_MISSED = (
    "%s tracking never logged %d rows (frames %d to %d) and %d files: metrics.csv and the run "
    "directory hold them"
)
TRACKER_END_FAILED = (
    "%s tracking could not record the run's end (%s: %s): its run may show as running; "
    "metrics.csv and the run directory hold everything"
)
#: rows (and files) a failing tracker keeps to log when it answers again; older ones are lost
BACKLOG_ROWS = 1000
#: at most this many rows (or files) between two tries of a tracker that keeps failing
MAX_SKIP = 64
TRACKER_START_FAILED = (
    "logging.{name}=true could not start the run's tracking ({err}); check {where}, or set "
    "logging.{name}=false"
)
#: the MLflow tag and W&B summary key that hold the final checkpoint's path
CHECKPOINT_KEY = "checkpoint"
FRAMES = "train/frames"


class RunEnd(str, enum.Enum):
    """How a run ended, as each tracker records it."""

    FINISHED = "finished"  # its budget or its target return reached, or a clean exit
    KILLED = "killed"  # stopped by a signal (a checkpoint written) or by Ctrl-C twice
    FAILED = "failed"  # an error ended it

    @classmethod
    def of(cls, err: BaseException) -> RunEnd:
        """How an exception that ends a run ends it.

        ``SystemExit`` with code 0 or None is a clean exit: a sweep's trial that ASHA or PBT
        stops ends so (Ray Tune's ``sys.exit(0)``), and is finished, as Ray's own MLflow and
        W&B callbacks record a stopped trial; another code is a failure.

        Examples:
            >>> RunEnd.of(SystemExit(0)), RunEnd.of(SystemExit(2)), RunEnd.of(KeyboardInterrupt())
            (<RunEnd.FINISHED: 'finished'>, <RunEnd.FAILED: 'failed'>, <RunEnd.KILLED: 'killed'>)
        """
        if isinstance(err, SystemExit) and err.code in (0, None):
            return cls.FINISHED
        return cls.KILLED if isinstance(err, KeyboardInterrupt) else cls.FAILED


def flat_params(config: Config) -> dict[str, str]:
    """The resolved config as ``section.key`` -> text (YAML-style: ``true``, ``null``, ``[64,
    64]``): the parameters a tracker logs."""
    flat: dict[str, str] = {}

    def walk(data: dict[str, Any], prefix: str) -> None:
        for name, value in data.items():
            if isinstance(value, dict) and value:  # a nested section (env.atari); {} is a value
                walk(value, f"{prefix}{name}.")
            else:
                flat[f"{prefix}{name}"] = value if isinstance(value, str) else json.dumps(value)

    walk(config_to_dict(config), "")
    return flat


def mlflow_tracking_uri(uri: str | None) -> str:
    """The tracking URI ``logging.mlflow_uri`` means: the key, else ``MLFLOW_TRACKING_URI``,
    else ``./mlruns``; a folder (a plain path or a ``file:`` URI) as an absolute ``file:``
    URI, so that a run resumed from another directory finds its store."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or "./mlruns"
    parsed = urlparse(uri)
    if parsed.scheme == "":
        return Path(uri).expanduser().resolve().as_uri()
    if parsed.scheme == "file":
        return Path(parsed.path).resolve().as_uri()
    return uri


class Tracker:
    """One tracking service's run. Subclasses start or continue it, log and end it."""

    #: the logging key that turns it on, and its section in tracking.json
    name = ""
    #: the keys (and values) that say where the tracked run goes, for messages
    where = ""

    def start(self, record: dict[str, Any] | None, config: Config) -> dict[str, Any]:
        """Start the run, or continue the one ``record`` (its tracking.json section) names;
        log ``config``. Returns what to record for a resume."""
        raise NotImplementedError

    def log_row(self, row: dict[str, float]) -> None:
        """Log one metrics row (finite numbers only), at its ``train/frames``."""
        raise NotImplementedError

    def log_file(self, path: Path, folder: str | None) -> None:
        """Keep a file of the run (``folder``: where in the run directory it lies)."""
        raise NotImplementedError

    def finish(self, end: RunEnd, checkpoint: Path | None) -> None:
        """Record the final checkpoint's path and how the run ended."""
        raise NotImplementedError

    def abort(self) -> None:
        """End a run whose training never started (see :meth:`Trackers.start`)."""
        self.finish(RunEnd.FAILED, None)


class MlflowTracker(Tracker):
    """The run in MLflow, through ``MlflowClient``: the config as parameters, each row as
    metrics at step ``train/frames``, files as artifacts, the checkpoint's path as a tag.

    A folder as tracking URI is a local file store, which MLflow 3.10 and later refuse unless
    ``MLFLOW_ALLOW_FILE_STORE=true``: :meth:`start` sets that variable (where it is unset) for
    such a URI, and for no other. MLflow's parameters cannot change: a resumed run's changed
    values (e.g. ``trainer.total_frames``) go to tags ``resumed.<key>``.
    """

    name = "mlflow"

    def __init__(self, logging_config: LoggingConfig, run_dir: Path):
        self.run_dir = run_dir
        self.uri = mlflow_tracking_uri(logging_config.mlflow_uri)
        self.experiment = (
            logging_config.mlflow_experiment
            or os.environ.get("MLFLOW_EXPERIMENT_NAME")
            or DEFAULT_EXPERIMENT
        )
        self.run_id = ""
        self._created = False
        self.where = f"logging.mlflow_uri (here {self.uri!r}) and the server it names"

    def start(self, record: dict[str, Any] | None, config: Config) -> dict[str, Any]:
        from mlflow.tracking import MlflowClient

        uri = record["tracking_uri"] if record else self.uri
        if urlparse(uri).scheme == "file":
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = client = MlflowClient(tracking_uri=uri)
        params, tags = flat_params(config), {}
        if record:
            run = client.get_run(record["run_id"])
            client.update_run(run.info.run_id, status="RUNNING")
            logged = run.data.params
            tags = {f"resumed.{k}": v for k, v in params.items() if k in logged and logged[k] != v}
            params = {k: v for k, v in params.items() if k not in logged}
        else:
            run = client.create_run(
                self._experiment_id(),
                run_name=self.run_dir.name,
                tags={"fleetrl.run_dir": str(self.run_dir.resolve())},
            )
            self._created = True
        self.run_id = run.info.run_id
        self._log_params(params, tags)
        if (self.run_dir / "config.yaml").is_file():
            client.log_artifact(self.run_id, str(self.run_dir / "config.yaml"))
        return {
            "run_id": self.run_id,
            "experiment_id": run.info.experiment_id,
            "tracking_uri": uri,
        }

    def _experiment_id(self) -> str:
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(self.experiment)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(self.experiment)
        except MlflowException:  # created meanwhile by another run (a sweep's trials)
            found = self.client.get_experiment_by_name(self.experiment)
            if found is None:
                raise
            return found.experiment_id

    def _log_params(self, params: dict[str, str], tags: dict[str, str]) -> None:
        from mlflow.entities import Param, RunTag

        # log_batch takes at most 100 parameters and 100 tags a call
        items = [Param(k, v) for k, v in params.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i : i + 100])
        marks = [RunTag(k, v) for k, v in tags.items()]
        for i in range(0, len(marks), 100):
            self.client.log_batch(self.run_id, tags=marks[i : i + 100])

    def log_row(self, row: dict[str, float]) -> None:
        from mlflow.entities import Metric

        stamp, step = int(time.time() * 1000), int(row[FRAMES])
        metrics = [Metric(k, float(v), stamp, step) for k, v in row.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def log_file(self, path: Path, folder: str | None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path=folder)

    def finish(self, end: RunEnd, checkpoint: Path | None) -> None:
        try:
            if checkpoint is not None:
                self.client.set_tag(self.run_id, CHECKPOINT_KEY, str(Path(checkpoint).resolve()))
        finally:  # the status above all: a run left RUNNING reads as one still training
            self.client.set_terminated(self.run_id, end.name)

    def abort(self) -> None:
        if self._created:  # a run with nothing in it: gone, as the run directory is
            self.client.delete_run(self.run_id)
        else:
            super().abort()


class WandbTracker(Tracker):
    """The run in Weights & Biases, through torchrl's ``WandbLogger``: the config, each row
    against ``train/frames``, files saved to the run, the checkpoint's path in its summary.

    The run's W&B files go to ``<run_dir>/wandb/`` (an offline run's too, for ``wandb sync``).
    Rows are logged without ``step=``: W&B drops a row whose step is below the run's, which a
    resumed run's first rows are (they follow the checkpoint, not the crash). Every metric is
    plotted against ``train/frames`` instead (``define_metric``). W&B's client cannot mark a
    run killed: an interrupted run ends with exit code 130 (shown as failed) until resumed.
    """

    name = "wandb"

    def __init__(self, logging_config: LoggingConfig, run_dir: Path):
        self.run_dir = run_dir
        self.project = (
            logging_config.wandb_project or os.environ.get("WANDB_PROJECT") or DEFAULT_EXPERIMENT
        )
        self.entity = logging_config.wandb_entity
        self.mode = WandbMode(logging_config.wandb_mode).value
        self.where = (
            f"logging.wandb_project (here {self.project!r}), logging.wandb_entity and your W&B "
            "login (wandb login)"
        )

    def start(self, record: dict[str, Any] | None, config: Config) -> dict[str, Any]:
        from torchrl.record.loggers.wandb import WandbLogger

        record = record or {}
        self.logger = WandbLogger(
            exp_name=self.run_dir.name,
            save_dir=str(self.run_dir),
            id=record.get("run_id"),  # None: a new run, its id made by W&B
            project=record.get("project", self.project),
            entity=record.get("entity", self.entity),
            mode=self.mode,
            log_env_packages=False,  # every installed package's version: slow, and not asked
        )
        self.run = run = self.logger.experiment
        run.define_metric(FRAMES)
        run.define_metric("*", step_metric=FRAMES)
        # nested sections: W&B shows them as section.key, as the other trackers name them
        self.logger.log_hparams(config_to_dict(config))
        if self.mode == WandbMode.DISABLED.value:  # a stand-in run: its id names no W&B run
            return record
        return {"run_id": run.id, "project": run.project, "entity": run.entity or None}

    def log_row(self, row: dict[str, float]) -> None:
        self.logger.log_metrics(row, override_global_step=True)

    def log_file(self, path: Path, folder: str | None) -> None:
        base = self.run_dir if folder is not None else path.parent
        self.run.save(str(path), base_path=str(base), policy="now")

    def finish(self, end: RunEnd, checkpoint: Path | None) -> None:
        if checkpoint is not None:
            self.run.summary[CHECKPOINT_KEY] = str(Path(checkpoint).resolve())
        self.run.finish(exit_code={RunEnd.FINISHED: 0, RunEnd.KILLED: 130}.get(end, 1))


#: logging key -> its tracker
TRACKERS: dict[str, type[Tracker]] = {"mlflow": MlflowTracker, "wandb": WandbTracker}


class _Backlog:
    """What a tracker missed while it failed, and when to try it again.

    Args:
        limit: the calls kept; the oldest go (counted) when more come.
    """

    def __init__(self, limit: int = BACKLOG_ROWS):
        #: the calls it missed, oldest first: (method, arguments, the row's frames or None)
        self.calls: deque[tuple[Callable[..., None], tuple[Any, ...], int | None]] = deque()
        self.limit = limit
        #: failed tries in a row (0: it answers)
        self.failures = 0
        #: calls to let pass before the next try
        self.wait = 0
        #: the rows that went from a full backlog (how many, the first's and last's frames)
        self.lost_rows, self.lost_first, self.lost_last = 0, 0, 0
        #: the files that went from a full backlog
        self.lost_files = 0

    def add(self, method: Callable[..., None], args: tuple[Any, ...], frames: int | None) -> None:
        self.calls.append((method, args, frames))
        if len(self.calls) > self.limit:
            _, _, gone = self.calls.popleft()
            if gone is None:
                self.lost_files += 1
            else:  # the oldest first: the first one lost holds the lowest frames
                self.lost_first = gone if not self.lost_rows else self.lost_first
                self.lost_rows, self.lost_last = self.lost_rows + 1, gone

    def failed(self) -> None:
        """One more failed try: the next after 1, 2, 4, ... (at most MAX_SKIP) more calls."""
        self.failures += 1
        self.wait = min(2 ** min(self.failures - 1, 30), MAX_SKIP) - 1

    def missed(self) -> tuple[int, int, int, int]:
        """The rows it never logged (how many, the first's and last's frames) and files."""
        frames = [f for _, _, f in self.calls if f is not None]
        rows = self.lost_rows + len(frames)
        first = self.lost_first if self.lost_rows else (frames[0] if frames else 0)
        last = frames[-1] if frames else self.lost_last
        files = self.lost_files + len(self.calls) - len(frames)
        return rows, first, last, files


class Trackers:
    """The trackers a run's config asks for, fanned out; the Trainer's one seam to them.

    Nothing is imported or contacted until :meth:`start` (the Trainer calls it once its
    learner runs, so a run that cannot start leaves no tracked run behind). A tracker that
    fails stays in the run (see the module docstring): what it misses is logged when it
    answers again, and :meth:`finish` reaches every tracker started.

    Args:
        config: the run's config (``logging.mlflow``, ``logging.wandb`` and their keys).
        run_dir: the run directory: ``tracking.json`` is read and written there.

    Examples:
        >>> import tempfile
        >>> from fleetrl.setup import parse_config
        >>> config, _ = parse_config({"algorithm": "ppo", "logging": {"mlflow": True}})
        >>> trackers = Trackers(config, tempfile.mkdtemp())
        >>> [t.name for t in trackers.trackers], trackers.running
        (['mlflow'], [])
    """

    def __init__(self, config: Config, run_dir: str | Path):
        self.config = config
        self.run_dir = Path(run_dir)
        #: every tracker the config asks for
        self.trackers: list[Tracker] = [
            cls(config.logging, self.run_dir)
            for key, cls in TRACKERS.items()
            if getattr(config.logging, key) is True
        ]
        #: the trackers started and not finished since (failing ones too)
        self.running: list[Tracker] = []
        self._backlogs: dict[Tracker, _Backlog] = {}
        self._frames = 0

    @property
    def path(self) -> Path:
        return self.run_dir / TRACKING_FILE

    def records(self) -> dict[str, Any]:
        """What tracking.json holds: tracker name -> the ids of its run (empty: none yet)."""
        return json.loads(self.path.read_text()) if self.path.is_file() else {}

    def start(self) -> None:
        """Start each tracker's run, or continue the one tracking.json names; record them.

        A tracker that cannot start raises a ConfigError naming its key and the error; the
        ones started before it are aborted (a new MLflow run deleted, a resumed one marked
        failed; a W&B run ended as failed).
        """
        if not self.trackers:
            return
        records = self.records()
        started: list[Tracker] = []
        try:
            for tracker in self.trackers:
                records[tracker.name] = tracker.start(records.get(tracker.name), self.config)
                started.append(tracker)
        except BaseException as err:
            for done in started:
                self._end(done, done.abort)
            if not isinstance(err, Exception):  # Ctrl-C
                raise
            text = TRACKER_START_FAILED.format(
                name=tracker.name, err=f"{type(err).__name__}: {err}", where=tracker.where
            )
            raise ConfigError([text]) from err
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(records, indent=2) + "\n")
        os.replace(tmp, self.path)
        self.running = started
        self._backlogs = {tracker: _Backlog() for tracker in started}

    def log_row(self, row: dict[str, Any]) -> None:
        """Log a metrics row (its finite numbers) to every running tracker."""
        self._frames = int(row.get(FRAMES, self._frames))
        if not self.running:  # none asked for: the common case
            return
        numbers_only = {
            k: v
            for k, v in row.items()
            if isinstance(v, numbers.Real) and math.isfinite(v)  # as TensorBoard: no NaN
        }
        for tracker in self.running:
            self._send(tracker, tracker.log_row, (numbers_only,), self._frames)

    def log_file(self, path: str | Path) -> None:
        """Keep a file of the run in every running tracker, where it lies in the run
        directory (``videos/eval_<frames>.mp4`` under ``videos``)."""
        path = Path(path)
        try:
            folder = path.parent.resolve().relative_to(self.run_dir.resolve()).as_posix()
        except ValueError:  # outside the run directory: kept at the top
            folder = None
        for tracker in self.running:
            self._send(tracker, tracker.log_file, (path, None if folder == "." else folder), None)

    def finish(self, end: RunEnd, checkpoint: Path | None) -> None:
        """End every running tracker's run: ``end``, and the final checkpoint's path.

        A tracker that failed gets one last try at what it missed first; what it never
        logged is counted in a warning. Every tracker is reached, whatever the others do.
        """
        for tracker in self.running:
            backlog = self._backlogs[tracker]
            if backlog.calls:
                self._retry(tracker, backlog, missed=len(backlog.calls))
            rows, first, last, files = backlog.missed()
            if rows or files:
                logger.warning(TRACKER_MISSED, tracker.name, rows, first, last, files)
            self._end(tracker, tracker.finish, end, checkpoint)
        self.running = []

    def _send(
        self,
        tracker: Tracker,
        method: Callable[..., None],
        args: tuple[Any, ...],
        frames: int | None,
    ) -> None:
        """A tracker's call that must not stop training: a failure is said once, and the
        call waits in the tracker's backlog, after the ones it missed before."""
        backlog = self._backlogs[tracker]
        backlog.add(method, args, frames)
        if backlog.wait > 0:  # failing: not tried for a while, so a hanging server costs less
            backlog.wait -= 1
            return
        self._retry(tracker, backlog, missed=len(backlog.calls) - 1)

    def _retry(self, tracker: Tracker, backlog: _Backlog, *, missed: int) -> None:
        """Log the backlog, oldest first, up to the first call that fails (``missed``: the
        calls in it from before this try)."""
        while backlog.calls:
            method, args, _ = backlog.calls[0]
            try:
                method(*args)
            except Exception as err:
                if backlog.failures == 0:  # the first failure since it answered
                    logger.warning(
                        TRACKER_FAILED, tracker.name, self._frames, type(err).__name__, err
                    )
                backlog.failed()
                return
            backlog.calls.popleft()
        if backlog.failures:
            logger.info(TRACKER_BACK, tracker.name, self._frames, missed)
        backlog.failures = backlog.wait = 0

    def _end(self, tracker: Tracker, method: Callable[..., None], *args: Any) -> None:
        """End a tracker's run; a failure is said and the other trackers are still ended."""
        try:
            method(*args)
        except Exception as err:
            logger.warning(TRACKER_END_FAILED, tracker.name, type(err).__name__, err)

"""MetricLogger: one row per training iteration to ``metrics.csv``, and TensorBoard.

The CSV survives crashes:

- A row is appended and flushed as it is logged (cost: one short write), so
  logging is linear in run length: the columns are fixed at the first row,
  which holds the metric schema and the ``columns`` declared up front (the
  Trainer declares ``eval/*`` when it will evaluate). Only a metric name that
  is in neither rewrites the file, once, atomically, with the wider header.
- A rewrite (that one, or a resume's below) keeps every earlier cell's text
  as written: ``768`` stays ``768``, never ``768.0``.
- :meth:`MetricLogger.sync` fsyncs the file; the Trainer calls it before each
  checkpoint, so every row up to a checkpoint's frame count is on disk before
  the checkpoint is.
- On resume (``resume_frames``: the loaded checkpoint's frame count), rows with
  ``train/frames`` past it are dropped, with one rewrite, and none when there
  is nothing to drop: the resumed run logs those frames again. A damaged row (a half-written last line after a kill) is discarded
  with a warning. TensorBoard resumes at the same step: its writer purges
  every point logged past the checkpoint, so no step appears twice.

Examples:
    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp())
    >>> log = MetricLogger(run, tensorboard=False)
    >>> log.log(64, {"train/frames": 64, "train/episode_return": 9.5})
    >>> log.log(128, {"train/frames": 128, "train/episode_return": 11.0})
    >>> log.close()
    >>> [r["train/frames"] for r in MetricLogger(run, tensorboard=False, resume_frames=64).read_rows()]
    [64.0]
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["MetricLogger", "read_metrics"]

logger = logging.getLogger(__name__)

FRAMES_KEY = "train/frames"
DAMAGED_ROW = "%s line %d is damaged (%s); discarding it"
DROPPED_ROWS = "%s: dropping %d rows logged past the checkpoint's %d frames"


class MetricLogger:
    """CSV (always) and TensorBoard (optional) with the same metric names.

    Args:
        run_dir: the run directory; writes ``metrics.csv`` and ``tensorboard/`` there.
        tensorboard: also write TensorBoard events.
        resume_frames: the frame count of the checkpoint a resumed run starts
            from; ``None`` for a new run, which starts ``metrics.csv`` afresh.
        columns: metric names known before the first row (``eval/*`` of a run
            that evaluates later): they join the header from the first row on,
            empty until logged, so they never widen the file later.
    """

    def __init__(
        self,
        run_dir: Path,
        tensorboard: bool,
        resume_frames: int | None = None,
        *,
        columns: Iterable[str] = (),
    ):
        self.path = Path(run_dir) / "metrics.csv"
        self.fields: list[str] = []
        self._columns = frozenset(columns)
        if resume_frames is not None and self.path.exists():
            self._trim(resume_frames)
        else:
            self.path.write_text("")
        self._file = self.path.open("a", newline="")
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: TensorBoard discards this log dir's points at steps >= it,
            # the ones logged past the checkpoint by the run that crashed
            log_dir = Path(run_dir) / "tensorboard"
            purge = None
            if resume_frames is not None:
                purge = resume_frames + 1
                _wait_past_event_files(log_dir)
            self.writer = SummaryWriter(str(log_dir), purge_step=purge)

    # ------------------------------------------------------------- writing
    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Append one row (flushed, not fsynced) and its TensorBoard points at ``step``."""
        if self._file.closed:  # logging again after close(), e.g. a second train()
            self._file = self.path.open("a", newline="")
        if not self.fields:  # the first row: its columns and the declared ones are the header
            self.fields = sorted({*self._columns, *metrics})
            self._append(_header_line(self.fields), metrics)
        elif not set(metrics) <= set(self.fields):
            self._widen(sorted({*self.fields, *metrics}), metrics)
        else:
            self._append("", metrics)
        if self.writer is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    self.writer.add_scalar(key, value, step)

    def _append(self, header: str, metrics: dict[str, Any]) -> None:
        # the row (with the header, for the first) in one write, so a kill can only cut its tail
        self._file.write(header + _csv_line(self.fields, metrics))
        self._file.flush()

    def sync(self) -> None:
        """Put every row logged so far on disk (and flush TensorBoard's events)."""
        if not self._file.closed:  # close() synced it already
            self._file.flush()
            os.fsync(self._file.fileno())
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if not self._file.closed:
            self.sync()
            self._file.close()
        if self.writer is not None:
            self.writer.close()

    def _trim(self, resume_frames: int) -> None:
        """Keep the whole rows up to the checkpoint; rewrites the file (once) only if any went."""
        rows, fields = _read_rows(self.path)
        kept = [r for r in rows if r.values.get(FRAMES_KEY, math.inf) <= resume_frames]
        if len(kept) < len(rows):
            logger.warning(DROPPED_ROWS, self.path, len(rows) - len(kept), resume_frames)
        self.fields = fields
        whole = "".join([_header_line(fields) if fields else ""] + [r.line for r in kept])
        if whole != self.path.read_text():  # rows past the checkpoint, or damaged ones
            self._replace(whole)

    def _widen(self, fields: list[str], metrics: dict[str, Any]) -> None:
        """Rewrite the file once with a wider header; every earlier cell keeps its text."""
        self._file.flush()
        rows, _ = _read_rows(self.path)
        self.fields = fields
        header = _header_line(fields)
        self._replace(
            header + "".join(_csv_line(fields, r.cells) for r in rows) + _csv_line(fields, metrics)
        )

    def _replace(self, text: str) -> None:
        # temporary file, fsync, rename: a crash leaves the old file or the new one
        if not self._file_closed():
            self._file.close()
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with tmp.open("w", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._file = self.path.open("a", newline="")

    def _file_closed(self) -> bool:
        return not hasattr(self, "_file") or self._file.closed

    # ------------------------------------------------------------- reading
    def read_rows(self) -> list[dict[str, float]]:
        """Every row in ``metrics.csv`` so far, values as floats (empty cells left out)."""
        if not self._file_closed():
            self._file.flush()
        return [r.values for r in _read_rows(self.path)[0]]


def read_metrics(path: str | Path) -> list[dict[str, float]]:
    """Every row of a ``metrics.csv``, values as floats (empty cells left out; a damaged
    row, e.g. the half-written last one of a killed run, is skipped with a warning)."""
    return [r.values for r in _read_rows(Path(path))[0]]


class _Row(NamedTuple):
    line: str
    """the row's line in the file, as written."""
    cells: dict[str, str]
    """each column's text, as written."""
    values: dict[str, float]
    """each non-empty cell as a float."""


def _read_rows(path: Path) -> tuple[list[_Row], list[str]]:
    """Rows and header of ``path``; damaged rows are discarded with a warning."""
    text = path.read_text() if path.exists() else ""
    lines = text.splitlines(keepends=True)
    if not lines:
        return [], []
    if not lines[0].endswith("\n"):
        logger.warning(DAMAGED_ROW, path, 1, "the header was cut short")
        return [], []
    fields = next(csv.reader([lines[0]]))
    rows: list[_Row] = []
    for number, line in enumerate(lines[1:], start=2):
        cells = next(csv.reader([line]), [])
        problem = None
        if not line.endswith("\n"):  # every row is written with its line end in one write
            problem = "cut short"
        elif len(cells) != len(fields):
            problem = f"{len(cells)} values for {len(fields)} columns"
        else:
            try:
                values = {k: float(v) for k, v in zip(fields, cells) if v != ""}
            except ValueError as err:
                problem = str(err)
        if problem is not None:
            logger.warning(DAMAGED_ROW, path, number, problem)
            continue
        rows.append(_Row(line, dict(zip(fields, cells)), values))
    return rows, fields


def _wait_past_event_files(log_dir: Path) -> None:
    """Wait (at most a second) until a new event file's name sorts after the existing ones.

    TensorBoard reads a log dir's event files in name order, and a name starts
    with the second it was created: a resumed run's file must not share that
    second with the run it resumes, or its points (and its purge) come first.
    """
    seconds = [
        int(p.name.split(".")[3])
        for p in log_dir.glob("events.out.tfevents.*")
        if p.name.split(".")[3:4] and p.name.split(".")[3].isdigit()
    ]
    delay = max(seconds, default=0) + 1 - time.time()
    if delay > 0:
        time.sleep(delay)


def _csv_line(fields: list[str], row: dict[str, Any]) -> str:
    out = io.StringIO()
    csv.DictWriter(out, fieldnames=fields, lineterminator="\n").writerow(row)
    return out.getvalue()


def _header_line(fields: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(fields)
    return out.getvalue()

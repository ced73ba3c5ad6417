"""A training run's surroundings: its directory, the stop signals, the progress bar.

- :class:`RunDir` names and makes the run directory and, for a run that never
  started, removes again what it added (never what was there before).
- :class:`StopOnSignal` turns SIGINT and SIGTERM into a flag the Trainer loop
  reads between iterations; a second signal stops at once.
- :class:`ProgressBar` is a tqdm bar over frames (one frames/s figure: the last
  iterations'), or nothing when disabled.

Examples:
    >>> import tempfile
    >>> run = RunDir(Path(tempfile.mkdtemp()) / "runs" / "a")
    >>> sorted(p.name for p in run.path.iterdir())
    ['checkpoints']
    >>> run.remove_created()
    >>> run.path.parent.exists()
    False
"""

from __future__ import annotations

import logging
import math
import shutil
import signal
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from fleetrl.config import Config
from fleetrl.errors import ConfigError
from fleetrl.run.report import PARTS

__all__ = ["ProgressBar", "RunDir", "StopOnSignal", "default_run_dir"]

logger = logging.getLogger(__name__)

STOPPING = (
    "received %s: stopping after this iteration and writing a checkpoint "
    "(send it again to stop at once, without one)"
)


def default_run_dir(config: Config) -> Path:
    """``runs/<run_name>_<time>``, for a run given no directory: ``logging.run_name`` (the
    config file's name, which :func:`~fleetrl.setup.load_config` sets), or
    ``<algorithm>_<env>`` for a config built in code.

    Examples:
        >>> from fleetrl.setup.load import config_from_dict, load_config
        >>> default_run_dir(load_config("configs/ppo_cartpole.yaml")).name[:13]
        'ppo_cartpole_'
        >>> default_run_dir(config_from_dict({"env": {"id": "CartPole-v1"}})).name[:16]
        'ppo_CartPole-v1_'
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = config.logging.run_name
    if not name:
        env_name = config.env.id.replace("/", "-")  # ALE/Pong-v5: one directory, not two
        name = f"{config.algorithm}_{env_name}"
    return Path("runs") / f"{name}_{stamp}"


RUN_DIR_MSG = (
    "run_dir={run_dir!r} is invalid: it cannot be made ({err}); choose a path in a writable "
    "directory (fleetrl train --run-dir DIR, or logging.run_dir)"
)


class RunDir:
    """Makes ``path`` and ``checkpoints/`` in it, remembering what it created.

    That is the topmost folder it created (None if ``path`` existed) and the
    entries ``path`` held before, which :meth:`remove_created` never removes.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        missing = [p for p in (self.path, *self.path.parents) if not p.exists()]
        self._before = frozenset() if missing else frozenset(self.path.iterdir())
        self._top = missing[-1] if missing else None
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            (self.path / "checkpoints").mkdir(exist_ok=True)
            probe = self.path / "checkpoints" / ".writable"  # /proc makes folders it refuses
            probe.touch()
            probe.unlink()
        except OSError as err:
            self.remove_created()
            raise ConfigError(
                [RUN_DIR_MSG.format(run_dir=str(self.path), err=err.strerror or err)]
            ) from None

    def remove_created(self) -> None:
        """Remove what this run added to the disk, for a run that never started."""
        if self._top is not None:
            shutil.rmtree(self._top, ignore_errors=True)
            return
        if not self.path.is_dir():
            return
        for entry in set(self.path.iterdir()) - self._before:
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


class StopOnSignal:
    """SIGINT and SIGTERM set :attr:`received`, which the loop checks between iterations.

    Stopping mid-iteration would checkpoint an algorithm that has learned from
    a batch its frame count does not include; a second signal still stops at once.
    Handlers are only installed from the main thread (Python allows no other).
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: signal.Signals | None = None
        self._previous: dict[signal.Signals, Any] = {}

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            self.__exit__()
            raise KeyboardInterrupt
        self.received = signal.Signals(signum)
        logger.warning(STOPPING, self.received.name)


class ProgressBar:
    """tqdm bar over frames with a live view of the last iterations, or nothing when
    disabled or when stderr is not a terminal (a log file gets the metrics, not a bar).

    The postfix holds the recent return, one frames/s figure, the policy lag and where
    the time of the last :attr:`WINDOW` iterations went (``collect``, ``learn``: the
    central learner's update, or the gradient workers' computing and applying, and
    ``publish``, each a share of the iterations' time; the rest is the loop). The rate is
    measured here over the same iterations (the first from the bar's start, after the
    learner started); tqdm's own rate, an average of another span that disagreed with
    it, is not shown.
    """

    #: iterations the live figures are measured over
    WINDOW = 10
    #: tqdm's default layout without its rate
    BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]"
    #: the shares shown: name -> the time/ columns it adds up
    SHARES = {
        "collect": (PARTS["collect"],),
        "learn": (PARTS["learn"], PARTS["gradients"], PARTS["apply"]),
        "publish": (PARTS["publish"],),
    }

    def __init__(self, config: Config, initial: int, *, interactive: bool | None = None):
        """``interactive``: whether to draw (None: when stderr is a terminal)."""
        self.bar = None
        #: (time, frames) at the last WINDOW + 1 updates
        self._marks: deque[tuple[float, int]] = deque(maxlen=self.WINDOW + 1)
        #: each of the last WINDOW iterations' seconds per share, and its whole time
        self._times: deque[tuple[dict[str, float], float]] = deque(maxlen=self.WINDOW)
        if interactive is None:
            interactive = sys.stderr.isatty()
        if config.logging.progress_bar and interactive:
            from tqdm import tqdm

            self.bar = tqdm(
                total=config.trainer.total_frames,
                initial=initial,
                unit="frame",
                unit_scale=True,
                dynamic_ncols=True,
                desc=f"{config.algorithm} {config.env.id}",
                bar_format=self.BAR_FORMAT,
            )
            self._marks.append((time.perf_counter(), initial))

    def rate(self) -> float:
        """Frames per second over the last :attr:`WINDOW` iterations (nan before the first)."""
        (t0, n0), (t1, n1) = self._marks[0], self._marks[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else float("nan")

    def shares(self) -> dict[str, float]:
        """Each share's part of the last :attr:`WINDOW` iterations' time (empty before any)."""
        whole = sum(w for _, w in self._times)
        if not whole > 0:
            return {}
        return {name: sum(s[name] for s, _ in self._times) / whole for name in self.SHARES}

    def update(self, frames: int, metrics: dict[str, float]) -> None:
        if self.bar is None:
            return
        self._marks.append((time.perf_counter(), self._marks[-1][1] + frames))
        parts = {
            name: sum(_finite(metrics.get(c, math.nan)) for c in columns)
            for name, columns in self.SHARES.items()
        }
        self._times.append((parts, _finite(metrics.get("time/iteration_s", math.nan))))
        postfix = {
            "return": f"{metrics['train/episode_return']:.1f}",
            "fps": f"{self.rate():,.0f}",
        }
        lag = metrics.get("train/policy_lag", math.nan)
        if math.isfinite(lag):
            postfix["lag"] = f"{lag:.1f}"
        postfix.update({name: f"{share:.0%}" for name, share in self.shares().items()})
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(frames)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0

"""Checkpoint files: atomic save, verified load, the newest one that loads, rotation.

What goes *into* a checkpoint is gathered by the Trainer
(:meth:`~fleetrl.run.trainer.Trainer.checkpoint`) and put together here by
:class:`RunCheckpoints`, which adds the random state and, on resume, hands
it back in the order a bit-exact resume needs (:class:`Resumption`). The
functions below write and read the files, so that a crash at any moment
leaves a run directory that ``--resume`` and ``fleetrl eval`` can use:

- :func:`save_checkpoint` writes to a temporary file, fsyncs it, renames it
  into place with :func:`os.replace` and fsyncs the folder. It then loads the
  new file back, and only once that succeeds deletes checkpoints past
  ``keep``: an older good checkpoint is never deleted while the newest is
  unverified.
- :func:`load_checkpoint` loads with ``torch.load(weights_only=True)`` (no code
  runs from the file) and turns every way a file can fail to be a fleetrl
  checkpoint (empty, truncated, random bytes, a pickle that ``weights_only``
  refuses, a torch file without fleetrl's keys) into one
  :class:`~fleetrl.errors.CheckpointError` line that names the file.
- :func:`newest_checkpoint` returns the newest checkpoint in a folder that
  loads, with a warning naming each damaged file it skips.

Examples:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> state = {"algorithm": {}, "frames": 64, "iterations": 1, "episodes": 0, "config": {}}
    >>> save_checkpoint(state, folder, keep=2).name
    'checkpoint_000000000064.pt'
    >>> path, loaded = newest_checkpoint(folder)
    >>> loaded["frames"]
    64
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fleetrl.distributed.runtime import human_bytes
from fleetrl.errors import CheckpointError

__all__ = [
    "CHECKPOINT_GLOB",
    "CUSTOM_MODULES_HINT",
    "REQUIRED_KEYS",
    "Resumption",
    "RunCheckpoints",
    "checkpoint_name",
    "checkpoint_paths",
    "file_size",
    "latest_checkpoint",
    "load_checkpoint",
    "newest_checkpoint",
    "save_checkpoint",
]

#: why a run's state may not fit the networks its config builds, and what to do then
CUSTOM_MODULES_HINT = (
    "; a run trained with your own modules (Trainer(config, actor=...)) resumes and evaluates "
    "in Python with them: Trainer.from_run_dir(run_dir, actor=...), then "
    "fleetrl.run.evaluate.evaluate"
)

logger = logging.getLogger(__name__)

CHECKPOINT_GLOB = "checkpoint_*.pt"
TMP_GLOB = ".checkpoint_*.pt.tmp"
# every fleetrl checkpoint has these; the Trainer may add more
REQUIRED_KEYS = ("algorithm", "frames", "iterations", "episodes", "config")
#: old key -> its name now; a checkpoint written before the rename loads as if written after

NOT_A_FILE = (
    "checkpoint {path} is invalid: no such file; pass a run directory or a checkpoint_*.pt file"
)
EMPTY = "checkpoint {path} is invalid: the file is empty (a write cut short); delete it"
UNREADABLE = (
    "checkpoint {path} is invalid: not a fleetrl checkpoint ({reason}); "
    "delete it or pass another checkpoint"
)
REFUSED = (
    "checkpoint {path} is invalid: not a fleetrl checkpoint (it holds objects that "
    "torch.load(weights_only=True) refuses: {reason}); nothing in it ran; delete it"
)
MISSING_KEYS = (
    "checkpoint {path} is invalid: not a fleetrl checkpoint (no {keys} in it); "
    "pass a checkpoint_*.pt written by fleetrl"
)
NO_CHECKPOINT = "no checkpoint in {folder}"
NONE_LOADS = (
    "no checkpoint in {folder} loads: all {count} are damaged ({names}); "
    "start a new run or restore a checkpoint there"
)
DAMAGED_SKIPPED = "skipping damaged checkpoint: %s"
SAVED = "checkpoint %s written: %s"
STALE_REMOVED = "removing checkpoints named past the new %s (left from before a resume): %s"
NOT_VERIFIED = (
    "checkpoint {path} did not load back after saving, so it was deleted and older "
    "checkpoints were kept: {reason}"
)
RESUME_INVALID = "resume={run_dir!r} is invalid: {err}"
APPROXIMATE_RESUME_MSG = (
    "resume from %s is approximate: %s. Frames, weights, optimizer and schedules continue; the "
    "run will not match one that never stopped"
)


def checkpoint_paths(folder: str | Path) -> list[Path]:
    """The checkpoint files in ``folder``, oldest first (names hold the zero-padded frame count)."""
    return sorted(Path(folder).glob(CHECKPOINT_GLOB))


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest checkpoint file in ``run_dir/checkpoints`` by name, loadable or not."""
    paths = checkpoint_paths(Path(run_dir, "checkpoints"))
    return paths[-1] if paths else None


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    # torch's first sentence says what failed; the rest is advice about torch.load
    return f"{type(err).__name__}: {text[0].split('. ')[0]}" if text else type(err).__name__


def _why_not_loadable(path: Path, err: BaseException) -> str:
    # torch's weights_only message is a paragraph; its one specific line says what it met
    lines = [line.strip() for line in str(err).splitlines()]
    refused = [line for line in lines if "GLOBAL" in line]
    if refused:
        return REFUSED.format(path=path, reason=refused[0])
    detail = [line for line in lines if line.startswith("Unsupported")]
    if detail:
        return UNREADABLE.format(path=path, reason=f"{type(err).__name__}: {detail[0]}")
    return UNREADABLE.format(path=path, reason=_one_line(err))


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a fleetrl checkpoint with ``weights_only=True`` (no code runs from the file).

    Raises:
        CheckpointError: one line naming ``path``, for a missing, empty, damaged
            or foreign file.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(NOT_A_FILE.format(path=path))
    if path.stat().st_size == 0:
        raise CheckpointError(EMPTY.format(path=path))
    try:
        with warnings.catch_warnings():  # e.g. "Detected pickle protocol 4": the error says more
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        # torch.load fails in many ways on bad input (RuntimeError from the zip reader,
        # EOFError, UnpicklingError, OSError, ValueError, ...): all mean "not loadable".
        raise CheckpointError(_why_not_loadable(path, err)) from None
    missing = [k for k in REQUIRED_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(MISSING_KEYS.format(path=path, keys=", ".join(map(repr, missing))))
    return state


def newest_checkpoint(folder: str | Path) -> tuple[Path, dict[str, Any]]:
    """The newest checkpoint in ``folder`` that loads, and its contents.

    Each damaged file on the way is skipped with a warning naming it.

    Raises:
        CheckpointError: naming ``folder`` when it holds no checkpoint, or none that loads.
    """
    folder = Path(folder)
    paths = checkpoint_paths(folder)
    if not paths:
        raise CheckpointError(NO_CHECKPOINT.format(folder=folder))
    for path in reversed(paths):
        try:
            return path, load_checkpoint(path)
        except CheckpointError as err:
            logger.warning(DAMAGED_SKIPPED, err)
    names = ", ".join(p.name for p in paths)
    raise CheckpointError(NONE_LOADS.format(folder=folder, count=len(paths), names=names))


def _fsync_dir(folder: Path) -> None:
    # the rename itself is only durable once the directory entry is on disk
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def checkpoint_name(frames: int) -> str:
    """The file name of the checkpoint at ``frames`` frames (sorts by frames)."""
    return f"checkpoint_{frames:012d}.pt"


def checkpoint_frames(path: str | Path) -> int:
    """The frame count a checkpoint file's name holds (:func:`checkpoint_name`'s inverse)."""
    return int(Path(path).stem.removeprefix("checkpoint_"))


def save_checkpoint(state: dict[str, Any], folder: str | Path, *, keep: int) -> Path:
    """Write ``state`` as ``folder/checkpoint_<frames>.pt`` atomically, verify it, then rotate.

    Loading the new file back costs one read of it per checkpoint; it is what
    makes deleting the older ones safe.

    Args:
        state: the checkpoint dict; needs ``REQUIRED_KEYS`` (``frames`` names the file).
        folder: the checkpoints folder (created if missing).
        keep: how many checkpoints to keep, the new one included (at least 1).

    Raises:
        CheckpointError: the new file did not load back; it is deleted and the
            older checkpoints are all kept.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(TMP_GLOB):  # left by a crash in the middle of a save
        stale.unlink(missing_ok=True)
    path = folder / checkpoint_name(int(state["frames"]))
    tmp = folder / f".{path.name}.tmp"
    with tmp.open("wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # atomic on POSIX: a reader sees the old file or the new one
    _fsync_dir(folder)
    try:
        load_checkpoint(path)
    except CheckpointError as err:
        path.unlink(missing_ok=True)
        raise CheckpointError(NOT_VERIFIED.format(path=path, reason=err)) from None
    paths = checkpoint_paths(folder)
    # Files named past the new one are left from a timeline this run resumed
    # away from (they did not load, or the run restarted): they are not newer.
    older = [p for p in paths if p.name < path.name]
    stale_newer = [p for p in paths if p.name > path.name]
    if stale_newer:
        logger.warning(STALE_REMOVED, path.name, ", ".join(p.name for p in stale_newer))
    for old in [*older[: max(0, len(older) - (max(1, keep) - 1))], *stale_newer]:
        old.unlink(missing_ok=True)
    logger.info(SAVED, path, file_size(path))
    return path


def file_size(path: str | Path) -> str:
    """A file's size for people: ``'14.6 MB'`` (decimal units, as ``ls -h --si``).

    Examples:
        >>> import tempfile
        >>> f = Path(tempfile.mkdtemp()) / "x"
        >>> _ = f.write_bytes(b"0" * 14_600_000)
        >>> file_size(f)
        '14.6 MB'
    """
    return human_bytes(Path(path).stat().st_size)


# ------------------------------------------------------------ a run's checkpoints


def numpy_rng_state() -> dict[str, Any]:
    """numpy's global random state as tensors and numbers (``weights_only`` loads it)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "kind": kind,
        "keys": torch.from_numpy(keys.astype(np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def set_numpy_rng_state(state: dict[str, Any]) -> None:
    """Put back numpy's global random state saved by :func:`numpy_rng_state`."""
    keys = state["keys"].numpy().astype(np.uint32)
    np.random.set_state(
        (state["kind"], keys, state["pos"], state["has_gauss"], state["cached_gaussian"])
    )


class Resumption:
    """What a resumed run takes from its checkpoint, and when.

    The Trainer puts the algorithm and the counters back at once, and torch's
    random state with :meth:`restore_torch_rng`. The collector's state waits
    for the next scheme, and the random state (torch's and numpy's) is put
    back a second time, last, by :meth:`continue_with`: building the scheme
    and the collector (its policy probe, env construction) drew random
    numbers that the run that never stopped did not draw.

    Args:
        path: the checkpoint file.
        state: its contents (:func:`load_checkpoint`).
    """

    def __init__(self, path: Path, state: dict[str, Any]):
        self.path = path
        self.state = state
        #: the gradient workers' own state (their replay buffers); None for the central learner
        self.replica_states: list[dict[str, Any]] | None = state["algorithm"].get("replicas")
        #: the local collector's state, for the next scheme only (None once it started)
        self.collector_state: dict[str, Any] | None = state.get("collector")
        self._rng: dict[str, Any] | None = {
            "torch": state["torch_rng"],
            "numpy": state.get("numpy_rng"),
        }

    @classmethod
    def newest(cls, run_dir: Path) -> Resumption:
        """The newest checkpoint of ``run_dir`` that loads; damaged newer ones are skipped.

        Raises:
            CheckpointError: naming ``resume=<run_dir>`` when none loads.
        """
        try:
            path, state = newest_checkpoint(Path(run_dir) / "checkpoints")
        except CheckpointError as err:
            raise CheckpointError(RESUME_INVALID.format(run_dir=str(run_dir), err=err)) from None
        return cls(path, state)

    def restore_torch_rng(self) -> None:
        """Put torch's global random state back as it was at the checkpoint."""
        torch.set_rng_state(self.state["torch_rng"])

    def continue_with(self, approximate: str | None) -> None:
        """The scheme stands: say if the resume is approximate, and put back the random state.

        Args:
            approximate: why the scheme cannot continue exactly (None: it can).
        """
        if self._rng is None:  # a second train() on the same trainer continues as it is
            return
        if approximate is not None:
            logger.warning(APPROXIMATE_RESUME_MSG, self.path, approximate)
        torch.set_rng_state(self._rng["torch"])
        if self._rng["numpy"] is not None:
            set_numpy_rng_state(self._rng["numpy"])
        self._rng = None
        self.collector_state = None


class RunCheckpoints:
    """The checkpoints of one run: what goes into one, written atomically and rotated.

    Args:
        run_dir: the run directory (checkpoints go to ``run_dir/checkpoints``).
        keep: how many checkpoints to keep (``trainer.keep_checkpoints``).
    """

    def __init__(self, run_dir: Path, *, keep: int):
        self.folder = Path(run_dir) / "checkpoints"
        self.keep = keep

    def save(
        self,
        *,
        algorithm: dict[str, Any],
        counters: dict[str, Any],
        collector: dict[str, Any] | None,
        config: dict[str, Any],
    ) -> Path:
        """Write one checkpoint with torch's and numpy's global random state as they are now.

        Args:
            algorithm: the algorithm's (or the scheme's) state dict.
            counters: ``frames``, ``iterations``, ``episodes``, ``recent_returns`` (and a
                multi-agent run's ``recent_group_returns``), ``eval_history``.
            collector: the local collector's envs and episodes (None: remote collectors or
                gradient workers).
            config: the run's config as a plain dict.
        """
        state = {
            "algorithm": algorithm,
            **counters,
            "torch_rng": torch.get_rng_state(),
            "numpy_rng": numpy_rng_state(),
            "collector": collector,
            "config": config,
        }
        return save_checkpoint(state, self.folder, keep=self.keep)

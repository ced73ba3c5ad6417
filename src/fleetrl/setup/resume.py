"""Resuming a run: the keys a resume cannot change, and a budget that is spent.

:func:`check_resume_overrides` gives the resumed run's config (its
``config.yaml`` with the command line's overrides) and refuses an override
that changes what the checkpoint depends on (:data:`FROZEN_ON_RESUME`);
:func:`check_budget` refuses a budget, set on resume, that the run has trained
already. Each speaks the config's language: the key, the value and the fix.

A run that trained its own budget is not refused: resuming it has nothing to do
(:class:`RunComplete`), which ``fleetrl train --resume`` reports with exit code 0,
so that a supervisor that resumes a run until it succeeds stops there, even
after a kill that came between the last checkpoint and the exit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetrl.config import FROZEN_ON_RESUME, Config
from fleetrl.errors import ConfigError
from fleetrl.setup.parse import config_to_dict, parse_config
from fleetrl.setup.verify.checked import check_config

__all__ = [
    "COMPLETE_MSG",
    "DONE_MSG",
    "FROZEN_MSG",
    "FROZEN_ON_RESUME",
    "STOPPED_MSG",
    "RunComplete",
    "check_budget",
    "check_resume_overrides",
]

COMPLETE_MSG = (
    "trainer.total_frames={total} is invalid: the run in {run_dir} is complete at {frames} "
    "frames; to train further, resume with a larger budget, e.g. "
    "trainer.total_frames={suggest}"
)
STOPPED_MSG = (
    "trainer.total_frames={total} is invalid: the run in {run_dir} stopped at {frames} frames, "
    "before its budget of {budget}; resume without trainer.total_frames to finish that "
    "budget, or with more than {frames} frames, e.g. trainer.total_frames={suggest}"
)
DONE_MSG = (
    "{run_dir} is complete at {frames} frames; nothing to do (to train further: fleetrl "
    "train --resume {run_dir} trainer.total_frames={suggest})"
)
FROZEN_MSG = (
    "{key}={value!r} is invalid on resume: the run in {run_dir} was started with "
    "{key}={before!r} and its checkpoint holds {what}; drop the override, or "
    "start a new run (fleetrl train CONFIG --run-dir NEW_DIR)"
)


def check_resume_overrides(
    saved: dict[str, Any], overrides: list[str] | None, run_dir: str | Path
) -> Config:
    """The resumed run's config: ``saved`` (its config.yaml) with ``overrides`` applied,
    verified once (the config returned carries its verification, as
    :func:`~fleetrl.setup.load.config_from_dict`'s does).

    Raises one ConfigError naming every override that changes a key of
    :data:`FROZEN_ON_RESUME`, with the value the run was started with. The keys are
    compared on the plain mappings (``saved`` and the overrides parsed, with the defaults
    of keys an older config.yaml lacks): ``saved`` itself is not verified.
    """
    after, parse_problems = parse_config(saved, overrides)
    checked = check_config(after, parse_problems)  # the one verification (or ConfigError)
    before, _ = parse_config(saved)
    old, new = config_to_dict(before), config_to_dict(after)
    problems = []
    for pattern, what in FROZEN_ON_RESUME.items():
        if "{algo}" in pattern and after.algorithm != before.algorithm:
            continue  # the new algorithm has none of the old one's section: "algorithm" says it
        key = pattern.format(algo=before.algorithm)
        was, now = _get(old, key), _get(new, key)
        if was != now:
            problems.append(
                FROZEN_MSG.format(key=key, value=now, before=was, run_dir=run_dir, what=what)
            )
    if problems:
        raise ConfigError(problems)
    return checked.config


def _get(data: dict[str, Any], key: str) -> Any:
    """The value at a dotted key; None where the config has no such key (``sac.model``)."""
    for part in key.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


class RunComplete(Exception):
    """Resuming a run that trained its own budget: there is nothing to do.

    Raised by :class:`~fleetrl.run.trainer.Trainer` (``resume=True``,
    :meth:`~fleetrl.run.trainer.Trainer.from_run_dir`) before anything is written;
    ``fleetrl train --resume`` prints it and exits 0. Not a
    :class:`~fleetrl.errors.FleetError`: no input was wrong.

    Args:
        run_dir: the run.
        frames: the frames it trained.
        budget: its ``trainer.total_frames``.
    """

    def __init__(self, run_dir: str | Path, frames: int, budget: int):
        super().__init__(DONE_MSG.format(run_dir=run_dir, frames=frames, suggest=frames + budget))
        self.run_dir, self.frames, self.budget = Path(run_dir), frames, budget

    def __reduce__(self) -> tuple[type, tuple[Path, int, int]]:
        # pickled (e.g. out of a Ray actor) with the arguments, not the message
        return type(self), (self.run_dir, self.frames, self.budget)


def check_budget(frames: int, cfg: Config, run_dir: str | Path, budget: int) -> None:
    """Refuse to resume a run that already trained ``trainer.total_frames`` frames.

    ``budget`` is the run's own ``trainer.total_frames`` (before this resume's overrides).
    A run that trained it, resumed with that budget, raises :class:`RunComplete`. A budget
    set on resume that the run has trained already is refused (ConfigError): it names
    the key the user set, and says how to finish a run stopped short of its own budget
    (a signal, a crash).
    """
    total = cfg.trainer.total_frames
    if frames < total:
        return
    if total == budget:  # the run's own budget, trained (gradient workers may go past it)
        raise RunComplete(run_dir, frames, budget)
    message = COMPLETE_MSG if frames >= budget else STOPPED_MSG
    suggest = frames + total if frames >= budget else budget
    raise ConfigError(
        [
            message.format(
                total=total, run_dir=run_dir, frames=frames, budget=budget, suggest=suggest
            )
        ]
    )

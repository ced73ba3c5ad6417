"""Hyperparameter sweeps on Ray Tune: each trial a fleetrl training run.

:func:`tune` runs the config's ``tune`` section (:class:`~fleetrl.config.TuneConfig`):
``samples`` trials, each a :class:`~fleetrl.run.trainer.Trainer` run of the rest of
the config with the ``tune.search`` keys drawn from their distributions
(:mod:`fleetrl.setup.search`), under a scheduler (``fifo``, ``asha``, ``pbt``)
and a searcher (``random``, ``optuna``). The sweep directory holds:

- ``sweep.yaml``: the config the sweep ran (with its ``tune`` section), for ``--resume``;
- ``trials/<trial id>/``: each trial's run directory (``config.yaml``, ``metrics.csv``,
  ``checkpoints/``; ``exploits.jsonl`` where PBT copied another trial into it);
- ``trials.csv``: one row per trial (its values, best metric, frames, wall time,
  status); ``best.yaml``: the best trial's config, ready for ``fleetrl train``;
  ``learning_curves.png``: every trial's metric against frames;
- Ray Tune's experiment state and the checkpoints it keeps (``trial_*``).

**Trials report and checkpoint through Tune.** A trial reports every metrics
row (``Trainer.train(on_iteration=...)``), with the checkpoint its run wrote at
that iteration; Tune keeps the newest two. A trial Tune restores (a resumed
sweep, a PBT copy) starts its run directory from that checkpoint and resumes,
with fleetrl's resume: exact where it is exact (local collection, the central
learner), approximate elsewhere (:doc:`the resume concepts page`). ASHA and PBT
compare trials on ``train/frames``, so trials with other batch sizes are
compared at equal experience.

**The metric reported is the latest known.** An evaluation's ``eval/*``
columns are in the rows of the iterations that evaluate (every
``trainer.test_every``): the rows between carry the last evaluation's value. A
trial's rows before its first evaluation have nothing to rank it on and are not
reported, since Tune's result check, ASHA, PBT and Optuna each need the metric
in every result; a checkpoint written then stays in the run directory but not
in Tune, so a resumed sweep starts that trial again.

**PBT** copies the checkpoint of a trial in the top quarter into one in the
bottom quarter, and perturbs the copied values (x0.8 or x1.2, or a new draw; a
``choice`` moves to a neighbouring value), each put back within its searched
range (``_SearchedRange``); it searches the keys a loaded algorithm can change:
``lr`` and the algorithm's tunable coefficients
(:attr:`fleetrl.algorithms.Algorithm.tunable`), which the copy sets after
loading. Each trial then checkpoints every ``tune.perturbation_frames``.

**Resources.** A trial asks Ray for a placement group: one CPU for its learner,
then one bundle per remote collector (``collector.num_cpus_per_collector``) and
per gradient worker (``scheme.num_cpus_per_grad_worker``, its resources, and its
own collectors). Its actors start inside it, so trials never take each other's
CPUs; ``tune.max_concurrent`` caps the trials at once below what the CPUs hold.

**Interrupts.** Ctrl-C stops the sweep once Tune has saved its state;
:func:`tune` with ``resume=True`` (``fleetrl tune --resume DIR``) continues it,
each unfinished trial from its last checkpoint.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fleetrl.config import Config, TuneMode, TuneScheduler, TuneSearcher
from fleetrl.distributed.backends import end_idle_workers
from fleetrl.distributed.runtime import start_ray
from fleetrl.errors import ConfigError, Problem
from fleetrl.extras import pip_install
from fleetrl.run.checkpoint import checkpoint_frames, checkpoint_paths, latest_checkpoint
from fleetrl.run.metrics import read_metrics
from fleetrl.run.report import wall_seconds
from fleetrl.setup.load import config_from_dict
from fleetrl.setup.parse import config_to_dict, deep_copy, parse_config, read_yaml_mapping
from fleetrl.setup.search import Dimension, Distribution, parse_dimension
from fleetrl.setup.verify.checked import check_config
from fleetrl.setup.verify.resources import check_trial_resources

__all__ = [
    "EMPTY_SEARCH_MSG",
    "MISSING_METRIC_MSG",
    "NOT_A_SWEEP_MSG",
    "TUNE_EXTRA_MSG",
    "SweepResult",
    "TrialSummary",
    "trial_bundles",
    "tune",
]

logger = logging.getLogger(__name__)

SWEEP_FILE = "sweep.yaml"
TRIALS_DIR = "trials"
ORIGIN_FILE = "origin.json"  # in a Tune checkpoint: the trial and frames it was written at
EXPLOITS_FILE = "exploits.jsonl"
EMPTY_SEARCH_MSG = (
    "tune.search={value!r} is invalid: a sweep needs at least one key to search, e.g. "
    "--search 'ppo.lr=loguniform(1e-4, 1e-2)' or a tune: search: section in the config"
)
NOT_A_SWEEP_MSG = (
    "resume={path!r} is invalid: no {file} there; give the directory a sweep wrote "
    "(fleetrl tune printed it)"
)
MISSING_METRIC_MSG = (
    "tune.metric={metric!r} is invalid: this run's metrics rows have no such column; "
    "its columns: {columns}"
)
STATUS_DONE = "completed"
TUNE_EXTRA_MSG = (
    f"{{what}} needs the tune extra: {pip_install('tune')} (No module named '{{module}}')"
)


@dataclass
class TrialSummary:
    """One trial of a sweep, read from its run directory."""

    trial_id: str
    params: dict[str, Any]
    """the searched keys' values (PBT: the last ones it trained with)."""
    best: float
    """the metric's best value over the trial's metrics rows (NaN: never logged)."""
    frames: int
    wall_s: float
    status: str
    """'completed', 'stopped early' (the scheduler stopped it), 'error: ...' or 'unfinished'."""
    run_dir: Path


@dataclass
class SweepResult:
    """What a sweep found: its trials, best first, and where it wrote.

    :func:`tune` returns one; a sweep run end to end is in the sweeps guide
    (``docs/guides/sweeps.md``, whose examples run in the tests).

    Examples:
        >>> from fleetrl.config import TuneMode
        >>> trials = [
        ...     TrialSummary("t1", {"ppo.lr": 1e-3}, 480.0, 8192, 9.5, "completed", Path("t1")),
        ...     TrialSummary("t0", {"ppo.lr": 1e-4}, 95.0, 2048, 2.5, "stopped early", Path("t0")),
        ... ]
        >>> result = SweepResult(Path("sweep"), "train/episode_return", TuneMode.MAX, trials)
        >>> result.best.trial_id, result.best_config.name, result.errors
        ('t1', 'best.yaml', [])
        >>> print(result.table())
        trial  ppo.lr  best train/episode_return  frames  wall s  status
        t1     0.001   480                        8,192   9.5     completed
        t0     0.0001  95                         2,048   2.5     stopped early"""

    directory: Path
    metric: str
    mode: TuneMode
    trials: list[TrialSummary] = field(default_factory=list)
    interrupted: bool = False
    """Ctrl-C stopped it before every trial finished (continue with ``resume=True``)."""

    @property
    def errors(self) -> list[TrialSummary]:
        """The trials that failed (their status names Tune's error file)."""
        return [t for t in self.trials if t.status.startswith("error")]

    @property
    def best(self) -> TrialSummary | None:
        scored = [t for t in self.trials if not math.isnan(t.best)]
        return scored[0] if scored else None

    @property
    def best_config(self) -> Path:
        return self.directory / "best.yaml"

    def table(self) -> str:
        """The trials as a text table, best first."""
        keys = sorted({k for t in self.trials for k in t.params})
        head = ["trial", *keys, f"best {self.metric}", "frames", "wall s", "status"]
        rows = [
            [
                t.trial_id,
                *(_short(t.params.get(k)) for k in keys),
                f"{t.best:.4g}",
                f"{t.frames:,}",
                f"{t.wall_s:.1f}",
                t.status,
            ]
            for t in self.trials
        ]
        widths = [max(len(str(c)) for c in col) for col in zip(head, *rows)]
        lines = [
            "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head, *rows]
        ]
        return "\n".join(lines)


def tune(config: Config | None = None, *, resume: str | Path | None = None) -> SweepResult:
    """Run the sweep ``config.tune`` describes, or continue the one in ``resume``.

    Args:
        config: a checked config with a ``tune`` section (``load_config`` of a file with
            ``tune:``, or with ``tune.*`` overrides); its other sections are every trial's.
        resume: a sweep directory to continue after Ctrl-C or a crash: finished trials are
            kept, the others continue from their last checkpoint.

    Returns:
        The trials (best first); ``best.yaml``, ``trials.csv`` and ``learning_curves.png``
        are written in the sweep directory.

    A config is checked before any trial starts (a real sweep: ``docs/guides/sweeps.md``):

    Examples:
        >>> from fleetrl import Config, ConfigError
        >>> try:
        ...     tune(Config())  # no tune.search: nothing to sweep
        ... except ConfigError as err:
        ...     print(err.problems[0].split(":")[0])
        tune.search={} is invalid
    """
    _check_installed(config)
    if (config is None) == (resume is None):
        raise ConfigError([Problem("config", text="give tune() a config or resume=DIR, not both")])
    if resume is not None:
        directory = Path(resume)
        if not (directory / SWEEP_FILE).is_file():
            raise ConfigError([NOT_A_SWEEP_MSG.format(path=str(resume), file=SWEEP_FILE)])
        config = config_from_dict(read_yaml_mapping(directory / SWEEP_FILE, "resume"))
    else:
        if not config.tune.search:
            raise ConfigError([EMPTY_SEARCH_MSG.format(value=config.tune.search)])
        directory = Path(config.tune.dir or _default_dir(config))
        if (directory / SWEEP_FILE).exists():
            raise ConfigError(
                [
                    f"tune.dir={str(directory)!r} is invalid: it holds a sweep already; "
                    f"continue it with fleetrl tune --resume {directory}, or choose another"
                ]
            )
    directory = directory.resolve()
    # Tune's warning that its state is saved often: trials checkpoint often, by design
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    started = start_ray({"address": config.collector.address})
    end_idle_workers()  # Tune's placement groups cannot end idle warm workers for room
    try:
        check_trial_resources(config, trial_bundles(config))
        from ray import tune as ray_tune
        from ray.tune import ExperimentAnalysis

        if resume is None:
            directory.mkdir(parents=True, exist_ok=True)
            (directory / SWEEP_FILE).write_text(
                yaml.safe_dump(config_to_dict(config), sort_keys=False)
            )
        trainable = _trainable(config, directory)
        if resume is not None:
            tuner = ray_tune.Tuner.restore(
                str(directory), trainable, resume_unfinished=True, resume_errored=True
            )
        else:
            tuner = _new_tuner(config, directory, trainable)
        tuner.fit()
        trials = ExperimentAnalysis(str(directory)).trials  # Tune's saved state, as it ended
        statuses = {t.trial_id: t.status for t in trials}
        errors = {t.trial_id: t.error_file for t in trials if t.error_file}
    finally:
        if started:
            import ray

            ray.shutdown()
    result = _summarize(config, directory, statuses, errors)
    _write_results(config, result)
    return result


def _check_installed(config: Config | None) -> None:
    """Ray Tune (and Optuna where asked for) are the ``tune`` extra's: refused by name."""
    missing = [m for m in ("pandas", "pyarrow") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError([TUNE_EXTRA_MSG.format(what="fleetrl tune", module=missing[0])])
    if (
        config is not None
        and config.tune.searcher == TuneSearcher.OPTUNA
        and importlib.util.find_spec("optuna") is None
    ):
        said = TUNE_EXTRA_MSG.format(what="tune.searcher='optuna'", module="optuna")
        raise ConfigError([said])


# ------------------------------------------------------------------ the Tuner
def trial_bundles(config: Config) -> list[dict[str, float]]:
    """The placement group one trial asks for: its learner's CPU, then its workers' (with
    ``collector.inference: server``, its inference servers' after its collectors)."""
    c, s = config.collector, config.scheme
    bundles: list[dict[str, float]] = [{"CPU": 1.0}]
    if config.trainer.backend != "ray":
        return bundles
    collectors = [{"CPU": float(c.num_cpus_per_collector)}] * c.fleet.min
    if c.inference == "server" and c.fleet.min > 0:  # central inference's servers
        server: dict[str, float] = {"CPU": float(c.num_cpus_per_inference_server)}
        if str(c.inference_device or "cpu").startswith("cuda"):
            server["GPU"] = 1.0 / c.num_inference_servers
        collectors = collectors + [server] * c.num_inference_servers
    if s.num_grad_workers > 1:
        for _ in range(s.num_grad_workers):
            worker = {"CPU": float(s.num_cpus_per_grad_worker), **s.grad_worker_resources}
            bundles += [worker, *collectors]
    else:
        bundles += collectors
    return [b for b in bundles if any(v > 0 for v in b.values())]


def _trainable(config: Config, directory: Path) -> Any:
    from ray import tune as ray_tune

    base = config_to_dict(config)
    runner = ray_tune.with_parameters(run_trial, base=base, directory=str(directory))
    bundles = trial_bundles(config)
    return ray_tune.with_resources(runner, ray_tune.PlacementGroupFactory(bundles))


def _new_tuner(config: Config, directory: Path, trainable: Any) -> Any:
    from ray import tune as ray_tune
    from ray.tune.search import BasicVariantGenerator

    t = config.tune
    dims = [parse_dimension(key, spec) for key, spec in t.search.items()]
    space = {d.key: d.domain() for d in dims}
    total = config.trainer.total_frames
    scheduler = None
    pbt = t.scheduler == TuneScheduler.PBT
    if t.scheduler == TuneScheduler.ASHA:
        from ray.tune.schedulers import ASHAScheduler

        grace = t.grace_frames or max(1, total // 10)
        scheduler = ASHAScheduler(time_attr="train/frames", max_t=total, grace_period=grace)
    elif pbt:
        scheduler = _pbt_scheduler(config)
    if t.searcher == TuneSearcher.OPTUNA:
        from ray.tune.search.optuna import OptunaSearch

        searcher = OptunaSearch(seed=t.seed)
    else:
        searcher = BasicVariantGenerator(random_state=t.seed)
    return ray_tune.Tuner(
        trainable,
        param_space=space,
        tune_config=ray_tune.TuneConfig(
            metric=t.metric,
            mode=t.mode.value,
            num_samples=t.samples,
            scheduler=scheduler,
            search_alg=searcher,
            max_concurrent_trials=t.max_concurrent,
            reuse_actors=True,  # PBT's copies, ASHA's next trials: no new process, no new import
        ),
        run_config=ray_tune.RunConfig(
            name=directory.name,
            storage_path=str(directory.parent),
            # PBT copies other trials' newest checkpoints: keep more, for trials that lag
            checkpoint_config=ray_tune.CheckpointConfig(num_to_keep=4 if pbt else 2),
            verbose=1,
        ),
    )


def _pbt_scheduler(config: Config) -> Any:
    """PBT over ``tune.search``: a ``choice`` perturbed to a neighbouring value (Tune would
    multiply it, leaving the choices), a range's perturbed values clamped to the range."""
    from ray.tune.schedulers import PopulationBasedTraining

    t = config.tune
    dims = [parse_dimension(key, spec) for key, spec in t.search.items()]
    mutations = {
        d.key: list(d.values) if d.kind == Distribution.CHOICE else d.domain() for d in dims
    }
    return PopulationBasedTraining(
        time_attr="train/frames",
        perturbation_interval=_perturbation_frames(
            t.perturbation_frames, config.trainer.total_frames
        ),
        hyperparam_mutations=mutations,
        custom_explore_fn=_SearchedRange(dims),
        synch=t.synchronous,
    )


class _SearchedRange:
    """PBT's ``custom_explore_fn``: each perturbed value of a range (``uniform``,
    ``loguniform``, ``randint``) put back within its bounds.

    Tune's PBT multiplies a value by 0.8 or 1.2 without bounds; a trial would then train
    on a value nobody searched, or one its config check refuses (``ppo.clip_epsilon``,
    ``sac.tau``). The searched range is also within what the config allows: its ends are
    checked before the sweep starts (:func:`fleetrl.setup.verify`).

    Args:
        dims: the searched keys; those that are not ranges are left as PBT set them.

    Examples:
        >>> clamp = _SearchedRange([parse_dimension("ppo.clip_epsilon", "uniform(0.1, 0.3)")])
        >>> clamp({"ppo.clip_epsilon": 0.36})
        {'ppo.clip_epsilon': 0.3}
        >>> _SearchedRange([parse_dimension("ppo.num_epochs", "randint(4, 16)")])(
        ...     {"ppo.num_epochs": 2})
        {'ppo.num_epochs': 4}
    """

    def __init__(self, dims: list[Dimension]):
        #: key -> (lowest, highest) value it may take (randint: its last int)
        self.bounds = {d.key: d.candidates() for d in dims if d.is_numeric_range}

    def __call__(self, config: dict[str, Any]) -> dict[str, Any]:
        for key, (low, high) in self.bounds.items():
            if key in config:
                config[key] = min(max(config[key], low), high)
        return config


def _perturbation_frames(perturbation_frames: int | None, total_frames: int) -> int:
    """``tune.perturbation_frames``, or its default: a quarter of the budget."""
    return perturbation_frames or max(1, total_frames // 4)


def _default_dir(config: Config) -> Path:
    env = config.env.id.replace("/", "_")
    return Path("runs") / f"tune_{config.algorithm}_{env}_{time.strftime('%Y%m%d-%H%M%S')}"


# ------------------------------------------------------------------ a trial
def run_trial(params: dict[str, Any], *, base: dict[str, Any], directory: str) -> None:
    """One trial (in its Ray Tune actor): the base config with ``params``, trained in
    ``directory/trials/<trial id>``, resumed from Tune's checkpoint where it gives one."""
    from ray import tune as ray_tune

    from fleetrl.distributed.runtime import pin_threads
    from fleetrl.run.trainer import Trainer

    pin_threads(1)
    # one line per checkpoint kept, from every trial, is Tune's bookkeeping, not the user's
    logging.getLogger("ray.train._internal.storage").setLevel(logging.WARNING)
    trial_id = ray_tune.get_context().get_trial_id()
    run_dir = Path(directory) / TRIALS_DIR / trial_id
    config = trial_config(base, params, run_dir)
    checkpoint = ray_tune.get_checkpoint()
    resume = False
    if checkpoint is not None:
        with checkpoint.as_directory() as source:
            _restore(Path(source), run_dir, trial_id)
        resume = True
    elif run_dir.exists():  # restarted before its first checkpoint: start again
        shutil.rmtree(run_dir)
    newest = latest_checkpoint(run_dir) if resume else None
    if newest is not None and checkpoint_frames(newest) >= config.trainer.total_frames:
        return  # PBT copied a trial that had finished: this one has finished with it
    trainer = Trainer(config, run_dir=run_dir, resume=resume)
    if resume:  # a PBT copy trains on with its own (perturbed) values
        algorithm = trainer.algorithm
        for key, value in params.items():
            section, _, name = key.partition(".")
            if section == config.algorithm and name in ("lr", *algorithm.tunable):
                algorithm.update_algorithm_parameter(name, value)
    metric = base.get("tune", {}).get("metric", config.tune.metric)
    reporter = _Reporter(
        metric,
        run_dir,
        trial_id,
        later=trainer.evaluator.columns,
        history=trainer.metrics.read_rows(),  # a restored trial's rows: its last evaluation
    )
    trainer.train(on_iteration=reporter)


def trial_config(base: dict[str, Any], params: dict[str, Any], run_dir: Path) -> Config:
    """A trial's config: ``base`` (a sweep's, ``config_to_dict``) with ``params`` set, writing to
    ``run_dir``, without a progress bar; under PBT it checkpoints every perturbation."""
    data = deep_copy(base)
    tune_section = data.pop("tune", {})
    for key, value in params.items():
        node = data
        *sections, name = key.split(".")
        for part in sections:
            node = node.setdefault(part, {})
        node[name] = value
    data.setdefault("logging", {}).update(run_dir=str(run_dir), progress_bar=False)
    config, problems = parse_config(data)
    per_iteration = config.collector.frames_per_batch * config.scheme.num_grad_workers
    # set before the config is verified (a batch size of 0 is the verification's to refuse)
    if tune_section.get("scheduler") == TuneScheduler.PBT.value and per_iteration > 0:
        interval = _perturbation_frames(
            tune_section.get("perturbation_frames"), config.trainer.total_frames
        )
        every = max(1, interval // per_iteration)
        if not config.trainer.checkpoint_every or config.trainer.checkpoint_every > every:
            config.trainer.checkpoint_every = every
    # verified once, as set: the trial's Trainer takes it without checking it again
    return check_config(config, problems).config


class _Reporter:
    """Reports each metrics row to Tune, with the checkpoint written at its iteration.

    The metric reported is the latest known: the row's, else the last one logged (an
    ``eval/*`` column is in the rows of the iterations that evaluate; a NaN, such as
    ``train/episode_return`` before the first episode ends, is not known either). A row
    before any value is known is not reported (see the module docstring); a metric that is
    neither in the row nor among the columns logged later is a ConfigError.

    Args:
        metric: ``tune.metric``.
        run_dir: the trial's run directory (its ``metrics.csv`` goes with each checkpoint).
        trial_id: Tune's id of the trial.
        later: columns that are in some rows only (the evaluations': ``Evaluator.columns``).
        history: the rows the run holds already (a restored trial's).
    """

    def __init__(
        self,
        metric: str,
        run_dir: Path,
        trial_id: str,
        *,
        later: Iterable[str] = (),
        history: Iterable[dict[str, float]] = (),
    ):
        self.metric, self.run_dir, self.trial_id = metric, run_dir, trial_id
        self.later = frozenset(later)
        #: the metric's latest value (None: not logged yet)
        self.latest: float | None = None
        for row in history:
            self._note(row)

    def _note(self, row: dict[str, float]) -> None:
        value = row.get(self.metric)
        if value is not None and not math.isnan(value):  # NaN: none yet (no episode ended)
            self.latest = value

    def __call__(self, row: dict[str, float], checkpoint: Path | None) -> None:
        from ray import tune as ray_tune

        if self.metric in row:
            self._note(row)
        elif self.metric not in self.later:
            columns = ", ".join(sorted({*row, *self.later}))
            raise ConfigError([MISSING_METRIC_MSG.format(metric=self.metric, columns=columns)])
        if self.latest is None:
            logger.debug("trial %s: no %s yet, row not reported", self.trial_id, self.metric)
            return
        metrics = {k: float(v) for k, v in row.items() if isinstance(v, (int, float))}
        metrics[self.metric] = float(self.latest)
        if checkpoint is None:
            ray_tune.report(metrics)
            return
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy2(checkpoint, Path(tmp) / checkpoint.name)
            shutil.copy2(self.run_dir / "metrics.csv", Path(tmp) / "metrics.csv")
            origin = {"trial": self.trial_id, "frames": int(row["train/frames"])}
            (Path(tmp) / ORIGIN_FILE).write_text(json.dumps(origin))
            ray_tune.report(metrics, checkpoint=ray_tune.Checkpoint.from_directory(tmp))


def _restore(source: Path, run_dir: Path, trial_id: str) -> None:
    """Put Tune's checkpoint in ``source`` where the trial's Trainer resumes from it."""
    origin = json.loads((source / ORIGIN_FILE).read_text())
    (saved,) = checkpoint_paths(source)
    checkpoints = run_dir / "checkpoints"
    copied = origin["trial"] != trial_id
    if copied or not (run_dir / "metrics.csv").exists():
        # another trial's checkpoint (PBT), or a run directory that is gone: its rows and state
        shutil.rmtree(checkpoints, ignore_errors=True)
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / "metrics.csv", run_dir / "metrics.csv")
    if copied:
        with (run_dir / EXPLOITS_FILE).open("a") as f:
            f.write(json.dumps({"from_trial": origin["trial"], "frames": origin["frames"]}) + "\n")
        logger.info(
            "trial %s continues from trial %s at %d frames",
            trial_id,
            origin["trial"],
            origin["frames"],
        )
    checkpoints.mkdir(parents=True, exist_ok=True)
    for newer in checkpoint_paths(checkpoints):  # written after Tune's: Tune's state wins
        if newer.name > saved.name:
            newer.unlink()
    if not (checkpoints / saved.name).exists():
        shutil.copy2(saved, checkpoints / saved.name)


# ------------------------------------------------------------------ results
def _summarize(
    config: Config, directory: Path, statuses: dict[str, str], errors: dict[str, str]
) -> SweepResult:
    t = config.tune
    result = SweepResult(directory, t.metric, t.mode)
    total = config.trainer.total_frames
    for trial_id, status in sorted(statuses.items()):
        run_dir = directory / TRIALS_DIR / trial_id
        rows = read_metrics(run_dir / "metrics.csv") if (run_dir / "metrics.csv").exists() else []
        values = [r[t.metric] for r in rows if not math.isnan(r.get(t.metric, math.nan))]
        best = (max if t.mode == TuneMode.MAX else min)(values) if values else math.nan
        frames = int(rows[-1].get("train/frames", 0)) if rows else 0
        params = _trial_params(run_dir, t.search)
        if status == "ERROR":
            said = f"error (see {errors.get(trial_id) or 'its Tune log'})"
        elif status == "TERMINATED":
            said = STATUS_DONE if frames >= total or _hit_target(config, rows) else "stopped early"
        else:
            said = "unfinished"
            result.interrupted = True
        wall = sum(wall_seconds(rows))
        result.trials.append(TrialSummary(trial_id, params, best, frames, wall, said, run_dir))
    sign = -1 if t.mode == TuneMode.MAX else 1
    result.trials.sort(key=lambda s: (math.isnan(s.best), sign * s.best if s.best == s.best else 0))
    return result


def _hit_target(config: Config, rows: list[dict[str, float]]) -> bool:
    target = config.trainer.target_return
    return (
        target is not None
        and bool(rows)
        and rows[-1].get("train/episode_return", -math.inf) >= target
    )


def _trial_params(run_dir: Path, search: dict[str, str]) -> dict[str, Any]:
    """The searched keys' values in the trial's config.yaml (what it last trained with)."""
    path = run_dir / "config.yaml"
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text())
    out = {}
    for key in search:
        node: Any = data
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        out[key] = node
    return out


def _write_results(config: Config, result: SweepResult) -> None:
    directory = result.directory
    lines = [",".join(["trial", *sorted(config.tune.search), "best", "frames", "wall_s", "status"])]
    for t in result.trials:
        values = [json.dumps(t.params.get(k)) for k in sorted(config.tune.search)]
        cells = [t.trial_id, *values, repr(t.best), str(t.frames), f"{t.wall_s:.3f}", t.status]
        lines.append(",".join(_csv_cell(c) for c in cells))
    (directory / "trials.csv").write_text("\n".join(lines) + "\n")
    best = result.best
    if best is not None:
        data = yaml.safe_load((best.run_dir / "config.yaml").read_text())
        data.pop("tune", None)
        data.get("logging", {}).pop("run_dir", None)
        data.get("logging", {}).pop("progress_bar", None)
        header = (
            f"# the best trial ({best.trial_id}) of the sweep in {directory}: best "
            f"{result.metric} {best.best:.4g} at {best.frames:,} frames\n"
            f"# train it: fleetrl train {result.best_config}\n"
        )
        result.best_config.write_text(header + yaml.safe_dump(data, sort_keys=False))
    _plot(result)


def _plot(result: SweepResult) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for t in result.trials:
        path = t.run_dir / "metrics.csv"
        rows = read_metrics(path) if path.exists() else []
        points = [
            (r["train/frames"], r[result.metric])
            for r in rows
            if "train/frames" in r and not math.isnan(r.get(result.metric, math.nan))
        ]
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, label=t.trial_id, linewidth=1)
    ax.set_xlabel("frames")
    ax.set_ylabel(result.metric)
    ax.set_title(f"sweep {result.directory.name}: {len(result.trials)} trials")
    if result.trials:
        ax.legend(fontsize="small", ncol=2)
    path = result.directory / "learning_curves.png"
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _csv_cell(text: str) -> str:
    return f'"{text}"' if any(c in text for c in ',"\n') else text

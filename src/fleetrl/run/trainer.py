"""Trainer: collect, learn, publish weights, evaluate, log, checkpoint.

The training itself runs in a :class:`~fleetrl.learners.Learner` chosen by
the config (:func:`~fleetrl.learners.make_learner`): the central learner (one
:class:`~fleetrl.algorithms.Algorithm` in this process fed by collectors,
publishing its weights every ``weight_update_interval`` batches), the
decoupled one, or gradient workers under an update worker (sync, async or
decentralized). The Trainer loop is the same for all of them. An *iteration* is one pass of that loop,
one metrics row (:attr:`Trainer.iterations`, ``train/iterations``); an
*update* is one optimizer step (the policy version, ``time/updates_per_s``).
Every ``test_every`` iterations the policy is
evaluated on separate test envs (:mod:`fleetrl.run.evaluate`); a run that stops at its
``target_return`` (judged on the training return, :meth:`Trainer.target_reached`) also
evaluates its final policy, in its last row, so its last evaluation is of the policy it
ends with. Metrics go to
``metrics.csv`` (and TensorBoard), grouped ``train/``, ``eval/``, ``loss/``,
``time/`` (a multi-agent run's ``train/episode_return`` is the team's, and each agent
group has ``train/group_return/<group>``); with ``logging.mlflow`` or ``logging.wandb``
also to MLflow or W&B, after the CSV (:mod:`fleetrl.run.tracking`). Checkpoints are written atomically and load with
``torch.load(weights_only=True)``.

Resume: a checkpoint holds the algorithm (weights, optimizer, replay buffer,
schedules), the counters, torch's and numpy's global random state at the
checkpoint and, for the central learner with local collection, the
collector's state (envs, episodes in progress, random-action generator).
There a resumed run is bit-exact: it ends with the same weights, optimizer
state, buffer and metrics rows as a run that never stopped. Elsewhere (Ray
collection, gradient workers, an env that cannot be saved) the collectors are
reseeded and start new episodes; the resume logs one line saying so.
"""

from __future__ import annotations

import logging
import signal
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from fleetrl.algorithms.base import NetworkMisfit
from fleetrl.config import Config
from fleetrl.distributed.runtime import RayStart, ray_running
from fleetrl.errors import CheckpointError, ConfigError
from fleetrl.learners import Learner, make_learner
from fleetrl.run.checkpoint import (
    CUSTOM_MODULES_HINT,
    Resumption,
    RunCheckpoints,
    checkpoint_name,
)
from fleetrl.run.evaluate import Evaluator, plot_learning_curve
from fleetrl.run.metrics import MetricLogger
from fleetrl.run.run_control import ProgressBar, RunDir, StopOnSignal, default_run_dir
from fleetrl.run.tracking import RunEnd, Trackers
from fleetrl.setup.build import make_algorithm
from fleetrl.setup.parse import config_to_dict, read_yaml_mapping
from fleetrl.setup.resume import check_budget, check_resume_overrides
from fleetrl.setup.verify import CheckedConfig, checked_config, resource_problems

__all__ = ["Trainer"]

logger = logging.getLogger(__name__)

RUN_EXISTS_MSG = (
    "run_dir={run_dir!r} is invalid: it holds a run already (its config.yaml); continue that "
    "run with fleetrl train --resume {run_dir} (Trainer.from_run_dir in Python), or choose "
    "another run directory"
)
STOPPED = "stopped by %s at %d frames; checkpoint written"
#: the log line of a run that stops at trainer.target_return: the target, the frames, what
#: it was judged on (:meth:`Trainer.target_judged_on`) and that value
TARGET_REACHED = "target return %s reached at %d frames, judged on %s: %.1f"
#: a multi-agent env's per-group columns: ``train/group_return/<group>``, the mean return of
#: the group's last ``trainer.return_window`` episodes (its agents' mean)
GROUP_RETURN_METRIC = "train/group_return"


class Trainer:
    """Trains ``config.algorithm`` on ``config.env`` with remote collectors.

    Args:
        config: a :class:`~fleetrl.config.Config` (one :func:`~fleetrl.setup.load_config`
            checked is not checked again, unless a key changed since), or a
            :class:`~fleetrl.setup.verify.CheckedConfig`.
        actor: an optional custom policy module (e.g. a recurrent policy) instead of the
            default network.
        critic: an optional custom value module instead of the default network.
        extra_modules: other modules the algorithm accepts (``qnet`` for DQN, ``qvalue`` for SAC).
        run_dir: where to write; default from ``config.logging.run_dir``, else
            ``runs/<logging.run_name>_<time>`` (:func:`~fleetrl.run.run_control.default_run_dir`).
        resume: continue the run in ``run_dir`` from its latest checkpoint; a run that
            trained its own budget raises :class:`~fleetrl.setup.resume.RunComplete`.

    Examples:
        Train PPO on CartPole with local collection (no Ray) for two batches:

        >>> import shutil, tempfile
        >>> from fleetrl import Trainer, load_config
        >>> config = load_config("configs/ppo_cartpole.yaml", [
        ...     "collector.num_collectors=0", "collector.frames_per_batch=256",
        ...     "trainer.total_frames=512", "trainer.test_every=0", "logging.progress_bar=false",
        ...     "logging.tensorboard=false", "logging.plot=false"])
        >>> trainer = Trainer(config, run_dir=tempfile.mkdtemp())
        >>> metrics = trainer.train()
        >>> trainer.frames, metrics["train/frames"]
        (512, 512)
        >>> sorted(p.name for p in (trainer.run_dir / "checkpoints").glob("*.pt"))
        ['checkpoint_000000000512.pt']
        >>> shutil.rmtree(trainer.run_dir)
    """

    def __init__(
        self,
        config: Config | CheckedConfig,
        *,
        actor: Any = None,
        critic: Any = None,
        run_dir: str | Path | None = None,
        resume: bool = False,
        extra_modules: dict[str, Any] | None = None,
    ):
        self._constructed_at = time.perf_counter()  # for startup_s
        #: seconds from the start of construction to the first batch's arrival, set by train()
        #: (gradient workers: to the end of their mean collection time in the first iteration)
        self.startup_s: float | None = None
        # everything that can refuse the run is checked before the run directory is made: a
        # config load_config (or a resume) checked is taken as checked; one built in code, or
        # changed since, is checked here. The env is resolved and described once, there.
        checked = checked_config(config)
        self.config = config = checked.config
        #: the run's env section resolved (:class:`~fleetrl.envs.engine.ResolvedEnv`)
        self.resolved_env = checked.env
        #: the env's spaces and engine (:class:`~fleetrl.envs.EnvSpec`), read once for the run
        self.env_spec = checked.spec
        self.run_dir = Path(run_dir or config.logging.run_dir or default_run_dir(config))
        modules = {k: v for k, v in (("actor", actor), ("critic", critic)) if v is not None}
        modules.update(extra_modules or {})
        self.modules = modules
        self.algorithm = make_algorithm(
            config, config.trainer.seed, env_spec=self.env_spec, **modules
        )
        #: the learner while :meth:`train` runs
        self.learner: Learner | None = None
        self.frames = 0
        self.iterations = 0  # loop iterations (metrics rows), not optimizer steps
        self.episodes = 0
        #: whether the last :meth:`train` stopped at ``trainer.target_return``
        self.reached_target = False
        self.recent_returns: deque[float] = deque(maxlen=config.trainer.return_window)
        #: a multi-agent env's: per agent group, its last ``return_window`` episode returns
        self.recent_group_returns: dict[str, deque[float]] = {}
        self.evaluator = Evaluator(config)
        #: the checkpoint this run resumed from (None: a new run)
        self.resumption: Resumption | None = None
        if resume:
            self._resume()
            budget = self.resumption.state["config"]["trainer"]["total_frames"]
            check_budget(self.frames, config, self.run_dir, budget)  # or RunComplete
            # after the budget check: a refused or needless resume never says "resumed" first
            logger.info(
                "resumed %s at %d frames, %d iterations",
                self.resumption.path,
                self.frames,
                self.iterations,
            )
        elif (self.run_dir / "config.yaml").exists():
            # a new run here would rewrite the old run's metrics and rotate out its checkpoints
            raise ConfigError([RUN_EXISTS_MSG.format(run_dir=str(self.run_dir))])
        self._made = RunDir(self.run_dir)  # what to remove if the run never starts
        self.checkpoints = RunCheckpoints(self.run_dir, keep=config.trainer.keep_checkpoints)
        #: the newest checkpoint this trainer wrote (None: none yet)
        self.last_checkpoint: Path | None = None
        self._checkpoint_s = 0.0  # writing checkpoints since the last metrics row
        (self.run_dir / "config.yaml").write_text(
            yaml.safe_dump(config_to_dict(config), sort_keys=False)
        )
        self.metrics = MetricLogger(
            self.run_dir,
            config.logging.tensorboard,
            resume_frames=self.frames if resume else None,
            columns=self.evaluator.columns,  # fixed from the first row: appended, never rewritten
        )
        #: MLflow and W&B, as logging.mlflow and logging.wandb ask; started by train()
        self.trackers = Trackers(config, self.run_dir)
        # Ray comes up in the background while the caller goes on (train() waits for it)
        self._ray_start = (
            RayStart({"address": config.collector.address}) if config.uses_ray else None
        )
        self._started_ray = False

    # ------------------------------------------------------------- resume
    def _resume(self) -> None:
        """Continue from the newest checkpoint that loads (damaged newer ones are skipped)."""
        self.resumption = resumption = Resumption.newest(self.run_dir)
        state = resumption.state
        try:
            self.algorithm.load_state_dict(state["algorithm"])
        except NetworkMisfit as err:
            raise CheckpointError(
                f"checkpoint {resumption.path} cannot be resumed: its algorithm state does not "
                f"fit a {self.config.algorithm} built from the run's config ({err})"
                + CUSTOM_MODULES_HINT
            ) from None
        self.frames, self.iterations, self.episodes = (
            state["frames"],
            state["iterations"],
            state["episodes"],
        )
        self.recent_returns.extend(state["recent_returns"])
        for name, returns in state.get("recent_group_returns", {}).items():
            self._group_window(name).extend(returns)
        self.evaluator.history = [tuple(x) for x in state["eval_history"]]
        resumption.restore_torch_rng()

    def _group_window(self, name: str) -> deque[float]:
        """The recent returns of agent group ``name`` (``train/group_return/<name>``)."""
        window = self.config.trainer.return_window
        return self.recent_group_returns.setdefault(name, deque(maxlen=window))

    @property
    def eval_history(self) -> list[tuple[int, float]]:
        """``(frames, mean return)`` of every evaluation of this run, resumed ones included."""
        return self.evaluator.history

    def checkpoint(self) -> Path:
        """Write a checkpoint atomically and keep the newest ``keep_checkpoints``.

        The metrics logged so far are put on disk first, so a resumed run finds
        every row up to the checkpoint. Older checkpoints are deleted only once
        the new one has loaded back (:func:`~fleetrl.run.checkpoint.save_checkpoint`).
        """
        if self.learner is not None:
            collector = self.learner.collector_state()
        else:  # not training: a resumed run's collector state is still to be used
            collector = self.resumption.collector_state if self.resumption else None
        started = time.perf_counter()
        self.metrics.sync()
        self.last_checkpoint = self.checkpoints.save(
            algorithm=(self.learner or self.algorithm).state_dict(),
            counters={
                "frames": self.frames,
                "iterations": self.iterations,
                "episodes": self.episodes,
                "recent_returns": list(self.recent_returns),
                "recent_group_returns": {k: list(v) for k, v in self.recent_group_returns.items()},
                "eval_history": [list(x) for x in self.eval_history],
            },
            collector=collector,
            config=config_to_dict(self.config),
        )
        self._checkpoint_s += time.perf_counter() - started  # logged with the next row
        return self.last_checkpoint

    def _unsaved(self) -> bool:
        """Whether the run went on since its newest checkpoint (or has none)."""
        if self.last_checkpoint is None:
            return True
        return self.last_checkpoint.name != checkpoint_name(self.frames)

    # ---------------------------------------------------------- schedules
    def _apply_schedules(self, target: Any) -> None:
        """Set what the algorithm's schedules say at this point of the run, on every replica."""
        progress = self.frames / self.config.trainer.total_frames
        for name, value in self.algorithm.scheduled(progress).items():
            target.update_algorithm_parameter(name, value)

    # --------------------------------------------------------------- loop
    def target_reached(self) -> bool:
        """Whether the run has reached ``trainer.target_return``: the mean return of the last
        ``return_window`` training episodes (not an evaluation's) is at least the target.
        Asked once per iteration, after the iteration's scheduled evaluation."""
        target = self.config.trainer.target_return
        window = self.config.trainer.return_window
        return (
            target is not None
            and len(self.recent_returns) >= window
            and sum(self.recent_returns) / len(self.recent_returns) >= target
        )

    def target_judged_on(self) -> str:
        """What :meth:`target_reached` compares with the target, in words (the log and
        ``fleetrl train``'s summary say it)."""
        window = self.config.trainer.return_window
        return f"the training return (the mean of the last {window} training episodes)"

    def make_learner(self) -> Learner:
        """The configured learner, starting from this trainer's algorithm and frame count."""
        return make_learner(
            self.config,
            self.algorithm,
            frames=self.frames,
            seed=self.config.trainer.seed + 7919 * self.iterations,
            modules=self.modules,
            env_spec=self.env_spec,
            replica_states=self.resumption.replica_states if self.resumption else None,
            collector_state=self.resumption.collector_state if self.resumption else None,
        )

    def _start_learner(self) -> Learner:
        """:meth:`make_learner`; if it fails, a run that never started leaves nothing behind.

        Ray, started in the background by the constructor, is waited for here,
        and the resources the run asks for are checked against it (in config
        keys). Some problems show only once Ray answers (a cluster address that
        does not answer, resources the run cannot have): what this Trainer
        created in the run directory is removed again.
        """
        try:
            if self._ray_start is not None:
                self._started_ray = self._ray_start.wait() or self._started_ray
                self._ray_start = None
                problems = resource_problems(self.config)  # now that Ray answers
                if problems:
                    raise ConfigError(problems)
            learner = self.make_learner()
            try:  # once the learner runs: a run that cannot start leaves no tracked run
                self.trackers.start()
            except BaseException:
                learner.shutdown()
                raise
            return learner
        except BaseException:
            self.metrics.close()
            self._made.remove_created()
            self._stop_ray()
            raise

    def _stop_ray(self) -> None:
        """Shut down a Ray instance this trainer started."""
        if self._started_ray and ray_running():
            import ray

            ray.shutdown()
        self._started_ray = False

    def train(
        self, *, on_iteration: Callable[[dict[str, float], Path | None], None] | None = None
    ) -> dict[str, float]:
        """Run until ``total_frames`` or the target return; returns the last metrics.

        ``on_iteration(row, checkpoint)`` is called after each iteration with its
        metrics row and the checkpoint written at its end (None: none); a sweep's
        trial reports both to Ray Tune there (:mod:`fleetrl.run.sweep`).

        The central learner stops at exactly ``total_frames``; gradient workers
        stop at the end of the first iteration at or past it.

        Ctrl-C (SIGINT) or SIGTERM stops the run at the end of the current
        iteration: a checkpoint is written, the metrics are put on disk, and
        ``train`` returns with :attr:`interrupted` set to the signal. A second
        signal stops at once (``KeyboardInterrupt``), without a checkpoint.
        """
        t = self.config.trainer
        self.interrupted: signal.Signals | None = None
        self.reached_target = False
        start = time.perf_counter()
        self.learner = learner = self._start_learner()
        progress = ProgressBar(self.config, self.frames)
        frames_at_start = self.frames
        last: dict[str, float] = {}
        if self.resumption is not None:
            self.resumption.continue_with(learner.approximate_resume)
        version_at_start = learner.version
        # installed after the learner starts: ray.init sets a SIGTERM handler of its own
        stop = StopOnSignal()
        try:
            stop.__enter__()
            while self.frames < t.total_frames:
                self._apply_schedules(learner)
                iteration_start = time.perf_counter()
                result = learner.run_iteration()
                if result is None:
                    break
                if self.startup_s is None:  # the batch arrived collect_s into the iteration
                    collect_s = result.metrics["time/collect_s"]
                    self.startup_s = iteration_start + collect_s - self._constructed_at
                self.frames += result.frames
                self.recent_returns.extend(result.returns)
                for name, returns in result.group_returns.items():
                    self._group_window(name).extend(returns)
                self.episodes += len(result.returns)
                self.iterations += 1
                elapsed = time.perf_counter() - start
                lengths = result.lengths
                last = {
                    "train/frames": self.frames,
                    "train/iterations": self.iterations,
                    "train/episodes": self.episodes,
                    "train/episode_return": _mean(self.recent_returns),
                    "train/episode_length": _mean(lengths) if lengths else float("nan"),
                    **{  # a multi-agent env's: train/episode_return is the team's
                        f"{GROUP_RETURN_METRIC}/{name}": _mean(returns)
                        for name, returns in self.recent_group_returns.items()
                    },
                    **self.algorithm.logged_parameters(),
                    "time/fps": (self.frames - frames_at_start) / elapsed,
                    "time/updates_per_s": (learner.version - version_at_start) / elapsed,
                    "time/elapsed_s": elapsed,
                    **result.metrics,
                    **result.info,
                }
                evaluate_start = time.perf_counter()
                evaluated = self.evaluator.due(self.iterations)
                if evaluated:
                    last.update(self._evaluate())
                # after this iteration's evaluation: a Trainer that judges on it sees it
                self.reached_target = self.target_reached()
                if self.reached_target:
                    logger.info(
                        TARGET_REACHED,
                        t.target_return,
                        self.frames,
                        self.target_judged_on(),
                        last["train/episode_return"],
                    )
                    if not evaluated and self.evaluator.enabled:
                        # the run ends here: its last evaluation is of its final policy, in
                        # this iteration's row (one row per iteration, as ever)
                        last.update(self._evaluate())
                # the time between iterations that fleetrl report can name
                last["time/eval_s"] = time.perf_counter() - evaluate_start
                last["time/checkpoint_s"], self._checkpoint_s = self._checkpoint_s, 0.0
                self.metrics.log(self.frames, last)
                self.trackers.log_row(last)  # after the CSV: a tracker's failure loses no row
                progress.update(result.frames, last)
                written = None
                if t.checkpoint_every and self.iterations % t.checkpoint_every == 0:
                    written = self.checkpoint()
                if on_iteration is not None:
                    on_iteration(last, written)
                # between iterations: the state is whole here
                if stop.received is not None or self.reached_target:
                    break
            if self._unsaved():  # while the learner runs: decentralized state lives in the workers
                self.checkpoint()
            if stop.received is not None:
                self.interrupted = stop.received
                logger.warning(STOPPED, stop.received.name, self.frames)
        except BaseException as err:  # an error, or a second signal: the tracked runs end too
            self.trackers.finish(RunEnd.of(err), self.last_checkpoint)
            raise
        finally:
            stop.__exit__()
            learner.shutdown()
            self.learner = None
            self._stop_ray()
            progress.close()
        try:
            if self.config.logging.plot:
                self.trackers.log_file(self.plot())
            self.metrics.close()
        finally:
            end = RunEnd.FINISHED if self.interrupted is None else RunEnd.KILLED
            self.trackers.finish(end, self.last_checkpoint)
        return last

    def _evaluate(self) -> dict[str, float]:
        policy = self.algorithm.policy
        metrics = self.evaluator(policy, frames=self.frames, iterations=self.iterations)
        if self.evaluator.video_due(self.iterations):  # logging.video_every
            video = self.evaluator.record_video(
                policy,
                frames=self.frames,
                iterations=self.iterations,
                run_dir=self.run_dir,
                writer=self.metrics.writer,
            )
            self.trackers.log_file(video.path)
        return metrics

    def plot(self) -> Path:
        """learning_curve.png: training return (and evaluation return) against frames."""
        return plot_learning_curve(
            self.metrics.read_rows(),
            self.eval_history,
            title=f"{self.config.algorithm.upper()} on {self.config.env.id}",
            path=self.run_dir / "learning_curve.png",
        )

    @classmethod
    def from_run_dir(
        cls, run_dir: str | Path, overrides: list[str] | None = None, **kwargs: Any
    ) -> Trainer:
        """Resume the run in ``run_dir`` with the config it was written with (plus overrides).

        Raises :class:`~fleetrl.setup.resume.RunComplete` where the run trained its budget
        and the overrides leave it as it is: there is nothing to do.
        """
        path = Path(run_dir) / "config.yaml"
        if not path.is_file():
            raise ConfigError([f"resume={str(run_dir)!r} is invalid: no config.yaml there"])
        config = check_resume_overrides(read_yaml_mapping(path, "resume"), overrides, run_dir)
        return cls(config, run_dir=run_dir, resume=True, **kwargs)


def _mean(values: Any) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")

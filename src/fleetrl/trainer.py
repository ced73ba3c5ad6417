"""Trainer: collect, learn, publish weights, evaluate, log, checkpoint.

The training itself runs in a :class:`~fleetrl.scheme.Scheme` chosen by the
config's ``scheme`` section: the central learner (one
:class:`~fleetrl.algorithms.Algorithm` in this process fed by collectors,
publishing its weights every ``weight_update_interval`` updates), or gradient
workers under an update worker (sync, async or decentralized). The Trainer
loop is the same for all of them. Every ``test_every`` updates the policy is
evaluated with deterministic actions on separate test envs. Metrics go to
``metrics.csv`` (and TensorBoard), grouped ``train/``, ``eval/``, ``loss/``,
``time/``. Checkpoints are written atomically and load with
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
import shutil
import signal
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from torchrl.envs.utils import ExplorationType

from fleetrl.build import make_algorithm
from fleetrl.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    newest_checkpoint,
    save_checkpoint,
)
from fleetrl.collectors import SyncDataCollector
from fleetrl.config import Config, Schedule, check_config, config_to_dict, read_yaml_mapping
from fleetrl.engines import env_spec
from fleetrl.errors import CheckpointError, ConfigError
from fleetrl.metrics import MetricLogger
from fleetrl.preflight import check_budget, check_resume_overrides, config_terms
from fleetrl.scheme import Scheme

__all__ = ["Trainer", "evaluate", "latest_checkpoint", "load_checkpoint"]

logger = logging.getLogger(__name__)

CHECKPOINT_GLOB = "checkpoint_*.pt"
RUN_EXISTS_MSG = (
    "run_dir={run_dir!r} is invalid: it holds a run already (its config.yaml); continue that "
    "run with fleetrl train --resume {run_dir} (Trainer.from_run_dir in Python), or choose "
    "another run directory"
)

APPROXIMATE_RESUME_MSG = (
    "resume from %s is approximate: %s. Frames, weights, optimizer and schedules continue; the "
    "run will not match one that never stopped"
)

STOPPING = (
    "received %s: stopping after this iteration and writing a checkpoint "
    "(send it again to stop at once, without one)"
)
STOPPED = "stopped by %s at %d frames; checkpoint written"


def evaluate(
    policy: Any,
    env_id: Any,
    num_episodes: int,
    *,
    seed: int = 0,
    max_episode_steps: int | None = None,
) -> torch.Tensor:
    """Returns of ``num_episodes`` episodes with deterministic actions (one env per episode).

    ``env_id``: a gymnasium id or an :class:`fleetrl.engines.AtariEnv` (the engine of training).
    """
    returns: list[float] = []
    with SyncDataCollector(
        env_id,
        policy,
        frames_per_batch=num_episodes * 100,
        num_envs=num_episodes,
        exploration_type=ExplorationType.DETERMINISTIC,
        max_frames_per_traj=max_episode_steps,
    ) as collector:
        collector.set_seed(seed)
        first_done: dict[int, float] = {}
        while len(first_done) < num_episodes:
            batch = collector.next()
            done = batch.get(("next", "done"))[..., 0]
            ret = batch.get(("next", "episode_return"))[..., 0]
            for env in range(num_episodes):
                if env in first_done:
                    continue
                ends = done[env].nonzero()
                if len(ends):
                    first_done[env] = float(ret[env, int(ends[0])])
        returns = [first_done[i] for i in range(num_episodes)]
    return torch.tensor(returns)


class Trainer:
    """Trains ``config.algorithm`` on ``config.env`` with remote collectors.

    Args:
        config: a validated :class:`~fleetrl.config.Config`.
        actor, critic: optional custom modules (e.g. a recurrent policy) instead of the default MLPs.
        extra_modules: other modules the algorithm accepts (``qnet`` for DQN, ``qvalue`` for SAC).
        run_dir: where to write; default from ``config.logging.run_dir`` or ``runs/<algo>_<env>_<time>``.
        resume: continue the run in ``run_dir`` from its latest checkpoint.

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
        config: Config,
        *,
        actor: Any = None,
        critic: Any = None,
        run_dir: str | Path | None = None,
        resume: bool = False,
        extra_modules: dict[str, Any] | None = None,
    ):
        self.config = config
        run_dir = run_dir or config.logging.run_dir
        if run_dir is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            env_name = config.env.id.replace("/", "-")  # ALE/Pong-v5: one directory, not two
            run_dir = Path("runs") / f"{config.algorithm}_{env_name}_{stamp}"
        self.run_dir = Path(run_dir)
        # everything that can refuse the run is checked before the run directory is made
        check_config(config)  # a Config built by hand was never validated
        modules = {k: v for k, v in (("actor", actor), ("critic", critic)) if v is not None}
        modules.update(extra_modules or {})
        self.modules = modules
        self.algorithm = make_algorithm(config, config.trainer.seed, **modules)
        self.scheme: Scheme | None = None
        self._replica_states: list[dict[str, Any]] | None = None
        # from a checkpoint, used once by the next scheme: its collector state and the
        # random state to restore after the scheme's construction consumed random numbers
        self._collector_state: dict[str, Any] | None = None
        self._rng_to_restore: dict[str, Any] | None = None
        self._resumed_from: Path | None = None
        self.frames = 0
        self.updates = 0
        self.episodes = 0
        self.recent_returns: deque[float] = deque(maxlen=config.trainer.return_window)
        self.eval_history: list[tuple[int, float]] = []
        self._base_lr = config.algo.lr
        self._base_clip = getattr(config.algo, "clip_epsilon", None)
        if resume:
            self._resume()
            check_budget(self.frames, config, self.run_dir)
        elif (self.run_dir / "config.yaml").exists():
            # a new run here would rewrite the old run's metrics and rotate out its checkpoints
            raise ConfigError([RUN_EXISTS_MSG.format(run_dir=str(self.run_dir))])
        self._created = _make_run_dir(self.run_dir)
        (self.run_dir / "config.yaml").write_text(
            yaml.safe_dump(config_to_dict(config), sort_keys=False)
        )
        self.metrics = MetricLogger(
            self.run_dir, config.logging.tensorboard, resume_frames=self.frames if resume else None
        )

    # ------------------------------------------------------------- resume
    def _resume(self) -> None:
        try:  # the newest checkpoint that loads; damaged newer ones are skipped with a warning
            path, state = newest_checkpoint(self.run_dir / "checkpoints")
        except CheckpointError as err:
            raise CheckpointError(f"resume={str(self.run_dir)!r} is invalid: {err}") from None
        self.algorithm.load_state_dict(state["algorithm"])
        self._replica_states = state["algorithm"].get("replicas")  # gradient workers' buffers
        self.frames, self.updates, self.episodes = (
            state["frames"],
            state["updates"],
            state["episodes"],
        )
        self.recent_returns.extend(state["recent_returns"])
        self.eval_history = [tuple(x) for x in state["eval_history"]]
        self._collector_state = state.get("collector")
        self._rng_to_restore = {"torch": state["torch_rng"], "numpy": state.get("numpy_rng")}
        self._resumed_from = path
        torch.set_rng_state(state["torch_rng"])
        logger.info("resumed %s at %d frames, %d updates", path, self.frames, self.updates)

    def checkpoint(self) -> Path:
        """Write a checkpoint atomically and keep the newest ``keep_checkpoints``.

        The metrics logged so far are put on disk first, so a resumed run finds
        every row up to the checkpoint. Older checkpoints are deleted only once
        the new one has loaded back (:func:`~fleetrl.checkpoint.save_checkpoint`).
        """
        state = {
            "algorithm": (self.scheme or self.algorithm).state_dict(),
            "frames": self.frames,
            "updates": self.updates,
            "episodes": self.episodes,
            "recent_returns": list(self.recent_returns),
            "eval_history": [list(x) for x in self.eval_history],
            "torch_rng": torch.get_rng_state(),
            "numpy_rng": _numpy_rng_state(),
            # the local collector's envs and episodes (None: remote collectors or gradient workers)
            "collector": (
                self.scheme.collector_state() if self.scheme is not None else self._collector_state
            ),
            "config": config_to_dict(self.config),
        }
        self.metrics.sync()
        return save_checkpoint(
            state, self.run_dir / "checkpoints", keep=self.config.trainer.keep_checkpoints
        )

    # ---------------------------------------------------------- schedules
    def _apply_schedules(self, target: Any) -> None:
        t = self.config.trainer
        progress = min(1.0, self.frames / t.total_frames)
        if t.lr_schedule == Schedule.LINEAR:
            target.update_algorithm_parameter("lr", max(1e-8, self._base_lr * (1.0 - progress)))
        clip_schedule = getattr(self.config.algo, "clip_schedule", Schedule.CONSTANT)  # PPO's
        if clip_schedule == Schedule.LINEAR and self._base_clip is not None:
            target.update_algorithm_parameter(
                "clip_epsilon", max(1e-3, self._base_clip * (1.0 - progress))
            )

    # --------------------------------------------------------------- loop
    def target_reached(self) -> bool:
        target = self.config.trainer.target_return
        window = self.config.trainer.return_window
        return (
            target is not None
            and len(self.recent_returns) >= window
            and sum(self.recent_returns) / len(self.recent_returns) >= target
        )

    def make_scheme(self) -> Scheme:
        """The configured scheme, starting from this trainer's algorithm and frame count."""
        return Scheme(
            self.config,
            self.algorithm,
            frames=self.frames,
            seed=self.config.trainer.seed + 7919 * self.updates,
            modules=self.modules,
            replica_states=self._replica_states,
            collector_state=self._collector_state,
        )

    def _start_scheme(self) -> Scheme:
        """:meth:`make_scheme`; if it fails, a run that never started leaves nothing behind.

        The collectors and workers find some problems only once Ray answers
        (resources, a cluster address): what this Trainer created in the run
        directory is removed again, and the collectors' problems are said in
        config keys.
        """
        try:
            return self.make_scheme()
        except BaseException as err:
            self.metrics.close()
            _remove_created(self.run_dir, self._created)
            if isinstance(err, ConfigError):
                raise config_terms(err, self.config) from None
            raise

    def train(self) -> dict[str, float]:
        """Run until ``total_frames`` or the target return; returns the last metrics.

        The central learner stops at exactly ``total_frames``; gradient workers
        stop at the end of the first iteration at or past it.

        Ctrl-C (SIGINT) or SIGTERM stops the run at the end of the current
        iteration: a checkpoint is written, the metrics are put on disk, and
        ``train`` returns with :attr:`interrupted` set to the signal. A second
        signal stops at once (``KeyboardInterrupt``), without a checkpoint.
        """
        t = self.config.trainer
        self.interrupted: signal.Signals | None = None
        start = time.perf_counter()
        self.scheme = scheme = self._start_scheme()
        progress = _progress_bar(self.config, self.frames)
        frames_at_start = self.frames
        last: dict[str, float] = {}
        self._continue_from_checkpoint(scheme)
        version_at_start = scheme.learner.version
        # installed after the scheme starts: ray.init sets a SIGTERM handler of its own
        stop = _StopOnSignal()
        try:
            stop.__enter__()
            while self.frames < t.total_frames:
                self._apply_schedules(scheme)
                result = scheme.run_iteration()
                if result is None:
                    break
                self.frames += result["frames"]
                self.recent_returns.extend(result["returns"])
                self.episodes += len(result["returns"])
                self.updates += 1
                elapsed = time.perf_counter() - start
                lengths = result["lengths"]
                last = {
                    "train/frames": self.frames,
                    "train/updates": self.updates,
                    "train/episodes": self.episodes,
                    "train/episode_return": _mean(self.recent_returns),
                    "train/episode_length": _mean(lengths) if lengths else float("nan"),
                    "train/lr": self.algorithm.lr,
                    "time/fps": (self.frames - frames_at_start) / elapsed,
                    "time/updates_per_s": (scheme.learner.version - version_at_start) / elapsed,
                    "time/elapsed_s": elapsed,
                    **result["metrics"],
                    **result["info"],
                }
                if hasattr(self.algorithm, "clip_epsilon"):
                    last["train/clip_epsilon"] = self.algorithm.clip_epsilon
                if t.test_every and self.updates % t.test_every == 0:
                    last.update(self._evaluate())
                self.metrics.log(self.frames, last)
                progress.update(result["frames"], last)
                if t.checkpoint_every and self.updates % t.checkpoint_every == 0:
                    self.checkpoint()
                if stop.received is not None:  # between iterations: the state is whole here
                    break
                if self.target_reached():
                    logger.info(
                        "target return %s reached at %d frames", t.target_return, self.frames
                    )
                    break
            self.checkpoint()  # while the scheme runs: decentralized state lives in the workers
            if stop.received is not None:
                self.interrupted = stop.received
                logger.warning(STOPPED, stop.received.name, self.frames)
        finally:
            stop.__exit__()
            scheme.shutdown()
            self.scheme = None
            progress.close()
        if self.config.logging.plot:
            self.plot()
        self.metrics.close()
        return last

    def _continue_from_checkpoint(self, scheme: Scheme) -> None:
        """After a resume: say if it is approximate, and put back the checkpoint's random state.

        The random state goes back last: building the networks, the scheme and
        the collector (its policy probe, env construction) drew random numbers
        that the run that never stopped did not draw.
        """
        if self._resumed_from is not None and scheme.approximate_resume is not None:
            logger.warning(APPROXIMATE_RESUME_MSG, self._resumed_from, scheme.approximate_resume)
        self._resumed_from = None
        if self._rng_to_restore is not None:
            torch.set_rng_state(self._rng_to_restore["torch"])
            if self._rng_to_restore["numpy"] is not None:
                _set_numpy_rng_state(self._rng_to_restore["numpy"])
            self._rng_to_restore = None
        self._collector_state = None

    def _evaluate(self) -> dict[str, float]:
        t = self.config.trainer
        # evaluation seeds torch for its own envs; training's random stream must not notice
        numpy_state = np.random.get_state()
        with torch.random.fork_rng(devices=[]):
            returns = evaluate(
                self.algorithm.policy,
                env_spec(self.config.env),
                t.num_test_episodes,
                seed=t.seed + 100_003 + self.updates,
                max_episode_steps=self.config.env.max_episode_steps,
            )
        np.random.set_state(numpy_state)
        mean = float(returns.mean())
        self.eval_history.append((self.frames, mean))
        return {"eval/return_mean": mean, "eval/return_std": float(returns.std(unbiased=False))}

    def plot(self) -> Path:
        """learning_curve.png: training return (and evaluation return) against frames."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        rows = [r for r in self.metrics.read_rows() if "train/frames" in r]
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(
            [r["train/frames"] for r in rows],
            [r.get("train/episode_return", float("nan")) for r in rows],
            label="train (mean of recent episodes)",
        )
        if self.eval_history:
            ax.plot(*zip(*self.eval_history), "o-", label="eval (deterministic)")
        ax.set_xlabel("frames")
        ax.set_ylabel("episode return")
        ax.set_title(f"{self.config.algorithm.upper()} on {self.config.env.id}")
        ax.legend()
        ax.grid(alpha=0.3)
        path = self.run_dir / "learning_curve.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path

    @classmethod
    def from_run_dir(
        cls, run_dir: str | Path, overrides: list[str] | None = None, **kwargs: Any
    ) -> Trainer:
        """Resume the run in ``run_dir`` with the config it was written with (plus overrides)."""
        path = Path(run_dir) / "config.yaml"
        if not path.is_file():
            raise ConfigError([f"resume={str(run_dir)!r} is invalid: no config.yaml there"])
        config = check_resume_overrides(read_yaml_mapping(path, "resume"), overrides, run_dir)
        return cls(config, run_dir=run_dir, resume=True, **kwargs)


def _numpy_rng_state() -> dict[str, Any]:
    """numpy's global random state as tensors and numbers (``weights_only`` loads it)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "kind": kind,
        "keys": torch.from_numpy(keys.astype(np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def _set_numpy_rng_state(state: dict[str, Any]) -> None:
    keys = state["keys"].numpy().astype(np.uint32)
    np.random.set_state(
        (state["kind"], keys, state["pos"], state["has_gauss"], state["cached_gaussian"])
    )


def _make_run_dir(run_dir: Path) -> tuple[Path | None, frozenset[Path]]:
    """Make ``run_dir`` and ``checkpoints/`` in it; returns what :func:`_remove_created` needs.

    That is the topmost folder this call created (None if ``run_dir`` existed),
    and the entries ``run_dir`` held before (which are never removed).
    """
    missing = [p for p in (run_dir, *run_dir.parents) if not p.exists()]
    before = frozenset() if missing else frozenset(run_dir.iterdir())
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "checkpoints").mkdir(exist_ok=True)
    return (missing[-1] if missing else None), before


def _remove_created(run_dir: Path, created: tuple[Path | None, frozenset[Path]]) -> None:
    """Remove what this run added to the disk, for a run that never started."""
    top, before = created
    if top is not None:
        shutil.rmtree(top, ignore_errors=True)
        return
    for entry in set(run_dir.iterdir()) - before:
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


class _StopOnSignal:
    """SIGINT and SIGTERM set :attr:`received`, which the loop checks between iterations.

    Stopping mid-iteration would checkpoint an algorithm that has learned from
    a batch its frame count does not include; a second signal still stops at once.
    Handlers are only installed from the main thread (Python allows no other).
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: signal.Signals | None = None
        self._previous: dict[signal.Signals, Any] = {}

    def __enter__(self) -> _StopOnSignal:
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


def _mean(values: Any) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


class _progress_bar:
    """tqdm bar over frames with fps and recent return, or nothing when disabled."""

    def __init__(self, config: Config, initial: int):
        self.bar = None
        if config.logging.progress_bar:
            from tqdm import tqdm

            self.bar = tqdm(
                total=config.trainer.total_frames,
                initial=initial,
                unit="frame",
                unit_scale=True,
                dynamic_ncols=True,
                desc=f"{config.algorithm} {config.env.id}",
            )

    def update(self, frames: int, metrics: dict[str, float]) -> None:
        if self.bar is not None:
            self.bar.set_postfix(
                {
                    "return": f"{metrics['train/episode_return']:.1f}",
                    "fps": f"{metrics['time/fps']:,.0f}",
                },
                refresh=False,
            )
            self.bar.update(frames)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

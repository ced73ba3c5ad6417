"""Evaluation: episodes on separate envs, and the learning curve.

:func:`evaluate` runs ``num_episodes`` episodes, one env per episode, acting with
sampled or deterministic actions (``trainer.eval_actions``, :func:`eval_exploration`),
and returns their returns; ``fleetrl eval`` calls it on a
checkpoint. :class:`Evaluator` is the Trainer's side: every
``trainer.test_every`` training iterations (and at the last iteration of a run that
stops at its target) it evaluates the current policy
without touching training's random stream, and keeps the history of
``(frames, mean return)`` that checkpoints hold and :func:`plot_learning_curve`
draws. Every ``logging.video_every`` evaluations it also films the episodes
the evaluation played (:meth:`Evaluator.record_video`, :mod:`fleetrl.collectors.video`).

Examples:
    Two episodes of a random policy (``None``), each cut at 20 steps:

    >>> returns = evaluate(None, "CartPole-v1", 2, seed=0, max_episode_steps=20)
    >>> returns.shape, bool((returns > 0).all() and (returns <= 20).all())
    (torch.Size([2]), True)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torchrl.envs.utils import ExplorationType

from fleetrl.algorithms import ALGORITHMS
from fleetrl.collectors import SyncDataCollector
from fleetrl.config import EVAL_METRICS, Config, EvalActions
from fleetrl.envs.make import create_env_fn
from fleetrl.keys import DONE_KEY, EPISODE_END_KEY, EPISODE_RETURN_KEY

if TYPE_CHECKING:
    from fleetrl.collectors.video import Video

__all__ = ["EVAL_METRICS", "Evaluator", "eval_exploration", "evaluate", "plot_learning_curve"]

logger = logging.getLogger(__name__)

#: evaluation seeds are this far from the training seed, so the two never share envs' streams
EVAL_SEED_OFFSET = 100_003


def eval_exploration(config: Config, actions: EvalActions | str | None = None) -> ExplorationType:
    """How a run's evaluations act: ``actions`` (default: ``trainer.eval_actions``), where
    ``auto`` is the algorithm's own choice (``Algorithm.eval_actions``).

    Examples:
        >>> from fleetrl.setup.load import config_from_dict
        >>> eval_exploration(config_from_dict({"algorithm": "ppo"})).name
        'RANDOM'
        >>> eval_exploration(config_from_dict({"algorithm": "dqn"})).name
        'DETERMINISTIC'
        >>> eval_exploration(config_from_dict({"algorithm": "ppo"}), "deterministic").name
        'DETERMINISTIC'
    """
    chosen = EvalActions(actions if actions is not None else config.trainer.eval_actions)
    if chosen is EvalActions.AUTO:
        chosen = ALGORITHMS[config.algorithm].eval_actions
    if chosen is EvalActions.SAMPLE:
        return ExplorationType.RANDOM
    return ExplorationType.DETERMINISTIC


def evaluate(
    policy: Any,
    env_id: Any,
    num_episodes: int,
    *,
    seed: int = 0,
    max_episode_steps: int | None = None,
    exploration_type: ExplorationType = ExplorationType.DETERMINISTIC,
) -> torch.Tensor:
    """Returns of ``num_episodes`` episodes (one env per episode).

    ``env_id``: a gymnasium id or an :class:`fleetrl.envs.AtariEnv` (the engine of training),
    or a multi-agent env's id (a :class:`~fleetrl.envs.pettingzoo.PettingZooId`): its
    returns are the team's (:mod:`fleetrl.collectors.local.grouped`).
    ``exploration_type``: ``DETERMINISTIC`` (the distribution's deterministic action) or
    ``RANDOM`` (actions sampled from it, torch seeded with ``seed`` for them).
    """
    returns: list[float] = []
    with SyncDataCollector(
        env_id,
        policy,
        frames_per_batch=num_episodes * 100,
        num_envs=num_episodes,
        exploration_type=exploration_type,
        max_frames_per_traj=max_episode_steps,
    ) as collector:
        collector.set_seed(seed)
        if exploration_type is not ExplorationType.DETERMINISTIC:
            torch.manual_seed(seed)  # the sampled actions: the same episodes for the same seed
        first_done: dict[int, float] = {}
        while len(first_done) < num_episodes:
            batch = collector.next()
            if batch.ndim == 1:  # one torchrl env without batch dims: a [time] batch
                batch = batch.unsqueeze(0)
            # a multi-agent env's team episode ends at episode_end (any of its dones)
            end_key = EPISODE_END_KEY if EPISODE_END_KEY in batch.keys(True) else DONE_KEY
            done = batch.get(end_key)[..., 0]
            ret = batch.get(EPISODE_RETURN_KEY)[..., 0]
            for env in range(num_episodes):
                if env in first_done:
                    continue
                ends = done[env].nonzero()
                if len(ends):
                    first_done[env] = float(ret[env, int(ends[0])])
        returns = [first_done[i] for i in range(num_episodes)]
    return torch.tensor(returns)


class Evaluator:
    """The Trainer's evaluations: when they are due, and their history.

    Args:
        config: the run's config (``trainer.test_every``, ``trainer.num_test_episodes``,
            ``trainer.seed``, ``env``).
        history: ``(frames, mean return)`` of earlier evaluations (from a checkpoint).
    """

    def __init__(self, config: Config, history: list[tuple[int, float]] | None = None):
        self.config = config
        self.history: list[tuple[int, float]] = list(history or [])

    @property
    def enabled(self) -> bool:
        """Whether this run evaluates at all (``trainer.test_every`` > 0)."""
        return bool(self.config.trainer.test_every)

    @property
    def columns(self) -> tuple[str, ...]:
        """The metrics this run's evaluations will log (none when it never evaluates)."""
        return EVAL_METRICS if self.enabled else ()

    def due(self, iterations: int) -> bool:
        """Whether the iteration that brought the count to ``iterations`` ends with an evaluation."""
        every = self.config.trainer.test_every
        return bool(every) and iterations % every == 0

    def __call__(self, policy: Any, *, frames: int, iterations: int) -> dict[str, float]:
        """Evaluate ``policy``; returns the ``eval/`` metrics and records the mean in :attr:`history`."""
        t = self.config.trainer
        with _own_random_stream():
            returns = evaluate(
                policy,
                create_env_fn(self.config.env),
                t.num_test_episodes,
                seed=t.seed + EVAL_SEED_OFFSET + iterations,
                max_episode_steps=self.config.env.max_episode_steps,
                exploration_type=eval_exploration(self.config),
            )
        mean = float(returns.mean())
        self.history.append((frames, mean))
        return dict(zip(EVAL_METRICS, (mean, float(returns.std(unbiased=False)))))

    def video_due(self, iterations: int) -> bool:
        """Whether the evaluation at ``iterations`` is one that ``logging.video_every`` records."""
        every = self.config.logging.video_every
        return (
            bool(every)
            and self.due(iterations)
            and (iterations // self.config.trainer.test_every) % every == 0
        )

    def record_video(
        self, policy: Any, *, frames: int, iterations: int, run_dir: Path, writer: Any = None
    ) -> Video:
        """Record ``logging.video_episodes`` episodes to ``run_dir/videos/eval_<frames>.mp4``
        (and to TensorBoard through ``writer``), acting as the evaluations do.

        With deterministic actions, episode ``i`` is the one this iteration's evaluation
        played on its env ``i``; with sampled ones it starts from the same state and draws
        its own actions.
        A file of that name is never replaced (a resumed run that evaluates at the
        same frames again writes ``eval_<frames>_2.mp4``).
        """
        from fleetrl.collectors.video import TB_VIDEO_TAG, add_tensorboard_clip, record_video

        path = _free_video_path(Path(run_dir) / "videos", frames)
        t = self.config.trainer
        with _own_random_stream():
            video = record_video(
                policy,
                create_env_fn(self.config.env),
                path,
                num_episodes=self.config.logging.video_episodes,
                seed=t.seed + EVAL_SEED_OFFSET + iterations,
                max_episode_steps=self.config.env.max_episode_steps,
                clip=writer is not None,
                exploration_type=eval_exploration(self.config),
            )
        if writer is not None:
            add_tensorboard_clip(writer, TB_VIDEO_TAG, video, frames)
        logger.info("evaluation video %s: %d frames", video.path, video.frames)
        return video


@contextlib.contextmanager
def _own_random_stream() -> Iterator[None]:
    """Evaluation seeds torch (and numpy) for its own envs; training's random stream must not
    notice."""
    numpy_state = np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        yield
    np.random.set_state(numpy_state)


def _free_video_path(videos: Path, frames: int) -> Path:
    """``videos/eval_<frames>.mp4`` (12 digits, as checkpoints), or with ``_2``, ``_3``, ...
    when a file of that name exists already: an earlier video is never replaced."""
    videos.mkdir(parents=True, exist_ok=True)
    stem = f"eval_{frames:012d}"
    path, k = videos / f"{stem}.mp4", 1
    while path.exists():
        k += 1
        path = videos / f"{stem}_{k}.mp4"
    return path


def plot_learning_curve(
    rows: list[dict[str, float]],
    history: list[tuple[int, float]],
    *,
    title: str,
    path: Path,
) -> Path:
    """Draw training return (and evaluation return) against frames into ``path`` (a PNG).

    Args:
        rows: metrics rows (``train/frames``, ``train/episode_return``).
        history: ``(frames, mean return)`` of the evaluations.
        title: the figure's title.
        path: where to write.
    """
    import matplotlib  # only the plot needs it: imported here, not at start-up

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if "train/frames" in r]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(
        [r["train/frames"] for r in rows],
        [r.get("train/episode_return", float("nan")) for r in rows],
        label="train (mean of recent episodes)",
    )
    if history:
        ax.plot(*zip(*history), "o-", label="eval")
    ax.set_xlabel("frames")
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

"""Checks of single config keys and of simple cross-key rules, for :mod:`fleetrl.config`.

:data:`RANGES` holds the allowed range of each single key, with the words
a problem is reported in; the ``validate_*`` functions check rules that
tie a few keys together (the batch-size rule of :mod:`fleetrl.batch_sizes`
in config keys, the collector's preemption and overlap options). They add
problems to a :class:`~fleetrl.typed_yaml.Checks`; :func:`fleetrl.config.check_config`
runs them all and raises one :class:`~fleetrl.errors.ConfigError`.

Examples:
    >>> ok, allowed = RANGES["env.num_envs"]
    >>> ok(0), allowed
    (False, 'must be > 0')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fleetrl.batch_sizes import BatchSizeNames, batch_size_problems
from fleetrl.typed_yaml import Checks

if TYPE_CHECKING:  # the config dataclasses import this module
    from fleetrl.config import CollectorConfig, Config

__all__ = [
    "CONFIG_NAMES",
    "RANGES",
    "validate_batch_sizes",
    "validate_collector",
    "validate_decoupled",
    "validate_device",
    "validate_normalization",
    "validate_overlap",
    "validate_video",
]

#: the batch-size rule in config keys (fleetrl.batch_sizes)
CONFIG_NAMES = BatchSizeNames(
    frames_per_batch="collector.frames_per_batch",
    total_frames="trainer.total_frames",
    num_collectors="collector.num_collectors",
    sync="collector.sync=true",
)


def _at_least(low: float, *, null: bool = False) -> Callable[[Any], bool]:
    return lambda v: (null and v is None) or (v is not None and v >= low)


def _above(low: float, *, null: bool = False) -> Callable[[Any], bool]:
    return lambda v: (null and v is None) or (v is not None and v > low)


#: the ranges of single keys (the cross-key rules: validate_* here, _validate in fleetrl.config)
RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "env.num_envs": (_above(0), "must be > 0"),
    "env.max_episode_steps": (_above(0, null=True), "must be > 0, or null for the env's own limit"),
    "env.clip_observation": (_above(0, null=True), "must be > 0, or null: off"),
    "env.clip_reward": (_above(0, null=True), "must be > 0, or null: off"),
    "collector.num_collectors": (_at_least(0), "must be >= 0 (0: local, no Ray)"),
    "collector.prefetch": (_at_least(0), "must be >= 0"),
    "collector.num_threads": (_at_least(1, null=True), "must be >= 1, or null for torch's default"),
    "collector.num_cpus_per_collector": (_at_least(0), "must be >= 0"),
    "collector.max_policy_lag": (_at_least(0, null=True), "must be null (no bound) or >= 0"),
    "collector.decoupled_frames_ahead": (_above(0, null=True), "must be > 0, or null"),
    "collector.max_restart_attempts": (
        _at_least(0),
        "must be >= 0 (0: a collector worker's death ends the run)",
    ),
    "collector.fraction_samples": (lambda v: 0 < v <= 1, "must be in (0, 1]"),
    "collector.fraction_workers": (lambda v: 0 < v <= 1, "must be in (0, 1]"),
    "collector.compress": (lambda v: v in (None, "lz4", "zstd"), "must be null, 'lz4' or 'zstd'"),
    "collector.overlap": (
        lambda v: v in (None, True, False, "auto", "on", "off"),
        "must be auto (or null), on (or true) or off (or false)",
    ),
    "trainer.weight_update_interval": (_above(0), "must be > 0"),
    "trainer.num_test_episodes": (_above(0), "must be > 0"),
    "trainer.return_window": (_above(0), "must be > 0"),
    "trainer.keep_checkpoints": (_above(0), "must be > 0"),
    # gymnasium refuses negative seeds, but only once the envs reset, after start-up
    "trainer.seed": (_at_least(0), "must be >= 0"),
    "trainer.test_every": (_at_least(0), "must be >= 0 (0: off)"),
    "trainer.checkpoint_every": (_at_least(0), "must be >= 0 (0: off)"),
    "logging.video_every": (_at_least(0, null=True), "must be >= 0 (0 or null: no videos)"),
    "logging.video_episodes": (_above(0), "must be > 0"),
    "scheme.num_grad_workers": (_at_least(1), "must be >= 1"),
    "scheme.max_policy_lag": (_at_least(0), "must be >= 0"),
    "scheme.num_threads_per_grad_worker": (
        _at_least(1, null=True),
        "must be >= 1, or null for torch's default",
    ),
    "scheme.max_restart_attempts": (
        _at_least(0),
        "must be >= 0 (0: a gradient worker's death ends the run)",
    ),
    "scheme.num_cpus_per_grad_worker": (_at_least(0), "must be >= 0"),
    "scheme.collective_timeout_s": (_above(0), "must be > 0"),
}


def validate_collector(c: CollectorConfig, check: Checks) -> None:
    for name in ("fraction_samples", "fraction_workers"):
        value = getattr(c, name)
        if 0 < value < 1:
            check(
                c.sync and c.num_collectors >= 2,
                name,
                value,
                "preempts straggling remote collectors: needs collector.sync=true and "
                "collector.num_collectors >= 2",
            )


def validate_overlap(cfg: Config, check: Checks) -> None:
    c, e = cfg.collector, cfg.env
    if c.overlap in ("on", True):
        check(
            e.engine in ("ale_vector", "envpool") and e.num_envs >= 2 and e.num_envs % 2 == 0,
            "collector.overlap",
            c.overlap,
            "steps two halves of a C++ Atari engine: needs env.engine 'ale_vector' or "
            f"'envpool' and an even env.num_envs >= 2 (here env.engine={e.engine!r}, "
            f"env.num_envs={e.num_envs}); use auto or off",
        )


def validate_video(cfg: Config, check: Checks) -> None:
    """Evaluation videos need evaluations, and imageio-ffmpeg to write them."""
    every = cfg.logging.video_every
    if not isinstance(every, int) or every <= 0:
        return
    check(
        cfg.trainer.test_every > 0,
        "logging.video_every",
        every,
        "records every N-th evaluation: needs trainer.test_every > 0 "
        f"(here trainer.test_every={cfg.trainer.test_every})",
    )
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError as err:
        check(False, "logging.video_every", every, f"needs pip install 'fleetrl[video]' ({err})")


#: what ``collector.decoupled: true`` needs, said after the value
DECOUPLED_NEEDS = {
    "algorithm": "collector.decoupled=true needs an off-policy algorithm ({allowed}): the "
    "learner samples a replay buffer the collectors write",
    "collector.num_collectors": "collector.decoupled=true needs remote collectors (>= 1): "
    "they write into the replay buffer actor",
    "scheme.num_grad_workers": "collector.decoupled=true runs the central learner: needs 1",
    "collector.max_policy_lag": "collector.decoupled=true writes every batch into the replay "
    "buffer as it is collected: needs null",
}


def validate_decoupled(cfg: Config, check: Checks, classes: dict[str, type]) -> None:
    """``collector.decoupled: true``: remote collectors, an off-policy algorithm, the central
    learner, no lag bound."""
    if not cfg.collector.decoupled:
        return
    off_policy = sorted(name for name, cls in classes.items() if not cls.on_policy)
    cls = classes.get(cfg.algorithm)
    check(
        cls is None or not cls.on_policy,
        "algorithm",
        cfg.algorithm,
        DECOUPLED_NEEDS["algorithm"].format(allowed=", ".join(off_policy)),
    )
    c = cfg.collector
    check(
        c.num_collectors >= 1,
        "collector.num_collectors",
        c.num_collectors,
        DECOUPLED_NEEDS["collector.num_collectors"],
    )
    check(
        cfg.scheme.num_grad_workers == 1,
        "scheme.num_grad_workers",
        cfg.scheme.num_grad_workers,
        DECOUPLED_NEEDS["scheme.num_grad_workers"],
    )
    check(
        c.max_policy_lag is None,
        "collector.max_policy_lag",
        c.max_policy_lag,
        DECOUPLED_NEEDS["collector.max_policy_lag"],
    )


def validate_batch_sizes(cfg: Config, check: Checks) -> None:
    """The one batch-size rule (fleetrl.batch_sizes), in config keys."""
    c, t = cfg.collector, cfg.trainer
    check(c.frames_per_batch > 0, "collector.frames_per_batch", c.frames_per_batch, "must be > 0")
    check(t.total_frames > 0, "trainer.total_frames", t.total_frames, "must be > 0")
    # a sync RayCollector splits each batch (decoupled collection is first ready)
    remote_sync = c.sync and c.num_collectors > 0 and not c.decoupled
    for problem in batch_size_problems(
        frames_per_batch=c.frames_per_batch,
        total_frames=t.total_frames,
        num_envs=cfg.env.num_envs if cfg.env.num_envs > 0 else None,
        split=c.num_collectors if remote_sync else 1,
        names=CONFIG_NAMES,
    ):
        key = problem.split("=", 1)[0]
        if not any(p.startswith(f"{key}=") for p in check.problems):
            check.problems.append(problem)


#: the algorithms whose default networks take an observation normalizer and whose
#: learners scale rewards (fleetrl.normalization)
NORMALIZING_ALGORITHMS = ("a2c", "appo", "impala", "ppo")


def validate_normalization(cfg: Config, check: Checks) -> None:
    """env.normalize_observation / env.normalize_reward: the algorithms whose default
    networks and learners take the statistics (fleetrl.normalization)."""
    e = cfg.env
    for name in ("normalize_observation", "normalize_reward"):
        if getattr(e, name) is not True:
            continue
        check(
            cfg.algorithm in NORMALIZING_ALGORITHMS,
            f"env.{name}",
            True,
            f"is supported for the algorithms {list(NORMALIZING_ALGORITHMS)}, not "
            f"algorithm={cfg.algorithm!r}; set env.{name}=false",
        )


DEVICE_PROBLEM = (
    "{reason}; use trainer.device=cpu, or 'cuda' (or 'cuda:N') on a machine with a GPU and a "
    "CUDA build of torch"
)


def validate_device(cfg: Config, check: Checks) -> None:
    """``trainer.device``: a torch device this machine has."""
    device = cfg.trainer.device
    import torch  # the config checks already need it for the env; the device needs it too

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as err:
        check(
            False, "trainer.device", device, DEVICE_PROBLEM.format(reason=f"not a device ({err})")
        )
        return
    if parsed.type == "cuda":
        available = torch.cuda.is_available()
        reason = "CUDA is not available here" if not available else ""
        if available and parsed.index is not None and parsed.index >= torch.cuda.device_count():
            reason = f"this machine has {torch.cuda.device_count()} CUDA device(s)"
        check(not reason, "trainer.device", device, DEVICE_PROBLEM.format(reason=reason))
    else:
        check(
            parsed.type == "cpu",
            "trainer.device",
            device,
            DEVICE_PROBLEM.format(reason="the learner runs on the CPU or a CUDA GPU"),
        )

"""Typed training configs, loaded from YAML with ``key=value`` overrides.

A config file has one section per dataclass below (``env``, ``collector``,
``trainer``, ``logging``) and one for the algorithm, named after it
(``ppo``, ``a2c``, ...). Overrides use dotted paths:
``fleetrl train configs/ppo_cartpole.yaml ppo.lr=1e-3 collector.num_collectors=4``.
Values are parsed as YAML (``1e-3``, ``true``, ``[64, 64]``).

A config is validated as a whole: :func:`load_config` reports every problem
at once (unknown keys with the closest known one, wrong types, out-of-range
values), each with the value and what is allowed.

Examples:
    >>> cfg = config_from_dict({"algorithm": "ppo", "env": {"id": "CartPole-v1"}})
    >>> cfg.algorithm, cfg.env.id, cfg.ppo.clip_epsilon
    ('ppo', 'CartPole-v1', 0.2)
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fleetrl.errors import ConfigError

__all__ = [
    "A2CConfig",
    "AtariConfig",
    "CollectorConfig",
    "Config",
    "DQNConfig",
    "EnvConfig",
    "LoggingConfig",
    "PPOConfig",
    "SACConfig",
    "SchemeConfig",
    "TrainerConfig",
    "check_config",
    "config_from_dict",
    "config_to_dict",
    "load_config",
    "read_yaml_mapping",
]


@dataclass
class AtariConfig:
    """Atari preprocessing, with one meaning in every engine (see :mod:`fleetrl.engines`).

    The defaults are the standard ones (Machado et al. 2018; CleanRL, SB3):
    84x84 grayscale, 4 frames per agent step max-pooled over the last two,
    4 stacked frames, up to 30 no-op starts, sticky actions as ALE v5.
    """

    frame_skip: int = 4
    """emulator frames per agent step (the action repeats; the last two frames are max-pooled)."""
    frame_stack: int = 4
    """frames stacked into one observation: shape (frame_stack, screen_size, screen_size)."""
    screen_size: int = 84
    """side of the square grayscale frame, resized with area interpolation."""
    noop_max: int = 30
    """up to this many no-op actions after each reset (0: none)."""
    terminal_on_life_loss: bool = False
    """end the episode at each life loss (gymnasium engine only: a new game starts)."""
    repeat_action_probability: float = 0.25
    """sticky actions: the emulator repeats the previous action with this probability."""
    full_action_space: bool = False
    """all 18 Atari actions instead of the game's minimal set."""
    max_episode_frames: int = 108_000
    """truncate an episode after this many emulator frames (ALE v5's 108,000 = 30 minutes);
    a multiple of frame_skip."""


@dataclass
class EnvConfig:
    id: str = "CartPole-v1"
    """gymnasium id of the training env (the test env uses the same id)."""
    num_envs: int = 8
    """envs stepped as one batch in each collector."""
    max_episode_steps: int | None = None
    """truncate episodes after this many steps (None: the env's own limit)."""
    engine: str = "gymnasium"
    """what steps Atari envs: 'gymnasium' (ALE envs in a gymnasium vector env), 'ale_vector'
    (ale-py's threaded C++ vector env) or 'envpool'; non-Atari envs use 'gymnasium'."""
    atari: AtariConfig = field(default_factory=AtariConfig)
    """Atari preprocessing (applies to ALE ids, e.g. ALE/Pong-v5, in every engine)."""


@dataclass
class CollectorConfig:
    num_collectors: int = 2
    """remote collector workers (Ray actors); 0 collects in the training process, without Ray."""
    frames_per_batch: int = 2048
    """frames per training batch (sync: summed over collectors)."""
    sync: bool = True
    """stack all collectors' batches (True) or serve the first ready (False)."""
    prefetch: int = 0
    """batches each worker may collect ahead of the learner (0: on-policy in sync mode;
    async lag is bounded only by max_policy_lag)."""
    num_cpus_per_collector: float = 1.0
    """Ray CPUs reserved per collector."""
    compress: str | None = None
    """None, 'lz4' or 'zstd': compress batches sent by workers."""
    fraction_samples: float = 1.0
    """sync, remote collectors: a preempted straggler stops once it holds this fraction of its share."""
    fraction_workers: float = 1.0
    """sync, remote collectors: preempt the stragglers once this fraction of collectors finished."""
    address: str | None = None
    """Ray cluster address to attach to (None: the running instance or a new local one)."""
    max_policy_lag: int | None = None
    """remote collectors: a batch more than this many weight versions old is collected again
    (None: no bound; async lag otherwise grows with collectors and slow workers)."""
    max_restart_attempts: int = 3
    """remote collectors: replacements of a dead collector worker tried in a row."""
    num_threads: int | None = 1
    """remote collectors: torch threads in each worker process (null: torch's default; one
    because workers share the cores, and two threads made CNN inference many times slower)."""
    overlap: str | bool | None = "auto"
    """step one half of the envs while the policy acts on the other: 'auto' (or null) where
    measured faster (env.engine ale_vector or envpool, an even env.num_envs), 'on' (or true)
    required, 'off' (or false)."""


@dataclass
class TrainerConfig:
    total_frames: int = 500_000
    """stop after this many frames."""
    target_return: float | None = None
    """stop once the mean return of the last ``return_window`` training episodes reaches this."""
    return_window: int = 20
    """training episodes averaged for ``train/episode_return`` and the target."""
    seed: int = 0
    """seed of torch, the envs and the collectors."""
    weight_update_interval: int = 1
    """publish weights to the collectors every this many updates."""
    test_every: int = 10
    """evaluate every this many updates (0: never)."""
    num_test_episodes: int = 10
    """episodes per evaluation, deterministic actions."""
    checkpoint_every: int = 20
    """write a checkpoint every this many updates (0: only at the end)."""
    keep_checkpoints: int = 3
    """checkpoints kept on disk (the newest)."""
    lr_schedule: str = "constant"
    """'constant' or 'linear' (decays to 0 at total_frames)."""
    clip_schedule: str = "constant"
    """'constant' or 'linear' decay of PPO's clip epsilon."""


@dataclass
class SchemeConfig:
    """The distributed training scheme (PyTorchRL's): gradient workers and the update worker.

    Each gradient worker owns its collectors (the ``collector`` section applies
    to each: ``num_collectors: 0`` collects inside the gradient worker) and a
    replica of the algorithm. ``num_grad_workers: 1`` is the central learner in
    the driver process.
    """

    num_grad_workers: int = 1
    """gradient workers (Ray actors); 1: the central learner, in this process."""
    grad_communication: str = "sync"
    """'sync': average all workers' gradients per step; 'async': apply them first ready."""
    decentralized_update: bool = False
    """all-reduce gradients among the workers (gloo) and step every replica (DD-PPO)."""
    max_policy_lag: int = 4
    """async: drop gradients computed on weights more than this many versions old."""
    num_cpus_per_grad_worker: float = 1.0
    """Ray CPUs reserved per gradient worker."""
    grad_worker_resources: dict[str, float] = field(default_factory=dict)
    """custom Ray resources per gradient worker, e.g. {node_b: 1}."""
    collective_timeout_s: float = 300.0
    """decentralized: how long an all-reduce waits for a missing worker before failing."""
    max_restart_attempts: int = 3
    """sync/async: replacements of a dead gradient worker tried in a row (doubling wait)."""
    num_threads_per_grad_worker: int | None = 1
    """torch threads in each gradient worker process (null: torch's default)."""


@dataclass
class LoggingConfig:
    run_dir: str | None = None
    """where logs and checkpoints go (None: runs/<algorithm>_<env>_<time>)."""
    tensorboard: bool = True
    """write TensorBoard event files beside the CSV."""
    progress_bar: bool = True
    """show a progress bar on the terminal."""
    plot: bool = True
    """save learning_curve.png at the end."""


@dataclass
class PPOConfig:
    lr: float = 3e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_epsilon: float = 0.2
    """PPO ratio clipping."""
    entropy_coef: float = 0.0
    """entropy bonus coefficient."""
    critic_coef: float = 0.5
    """value loss coefficient."""
    num_epochs: int = 4
    """passes over each batch."""
    num_mini_batch: int = 4
    """minibatches per epoch."""
    normalize_advantage: bool = True
    """normalize advantages per minibatch."""
    clip_value: float | None = None
    """clip the value update to this range around the old value (None: off)."""
    max_grad_norm: float | None = 0.5
    """clip the gradient norm (None: off)."""
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    """hidden layers of the actor and critic MLPs."""
    model: str = "auto"
    """default network: 'auto' (cnn for 3-D uint8 observations, else mlp), 'mlp', 'cnn'
    (Nature CNN) or 'impala' (IMPALA ResNet); modules passed in code win."""


@dataclass
class A2CConfig:
    lr: float = 7e-4
    """RMSprop/Adam learning rate."""
    gamma: float = 0.99
    """discount factor."""
    gae_lambda: float = 1.0
    """GAE lambda (1.0: n-step returns)."""
    entropy_coef: float = 0.01
    """entropy bonus coefficient."""
    critic_coef: float = 0.5
    """value loss coefficient."""
    max_grad_norm: float | None = 0.5
    """clip the gradient norm (None: off)."""
    normalize_advantage: bool = False
    """normalize advantages per batch."""
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    """hidden layers of the actor and critic MLPs."""
    model: str = "auto"
    """default network: 'auto' (cnn for 3-D uint8 observations, else mlp), 'mlp', 'cnn'
    (Nature CNN) or 'impala' (IMPALA ResNet); modules passed in code win."""


@dataclass
class DQNConfig:
    lr: float = 5e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """discount factor."""
    double_dqn: bool = True
    """double-DQN targets."""
    buffer_size: int = 50_000
    """replay buffer capacity (frames)."""
    batch_size: int = 128
    """transitions per gradient step."""
    learning_starts: int = 2_000
    """frames collected before the first gradient step."""
    updates_per_batch: int = 16
    """gradient steps after each collected batch."""
    target_update_interval: int = 250
    """gradient steps between hard target-network updates."""
    eps_init: float = 1.0
    """initial epsilon of epsilon-greedy."""
    eps_end: float = 0.05
    """final epsilon."""
    eps_anneal_frames: int = 30_000
    """frames over which epsilon decays linearly."""
    max_grad_norm: float | None = 10.0
    """clip the gradient norm (None: off)."""
    hidden_sizes: list[int] = field(default_factory=lambda: [128, 128])
    """hidden layers of the Q network."""
    model: str = "auto"
    """default network: 'auto' (cnn for 3-D uint8 observations, else mlp), 'mlp', 'cnn'
    (Nature CNN) or 'impala' (IMPALA ResNet); modules passed in code win."""


@dataclass
class SACConfig:
    lr: float = 3e-4
    """Adam learning rate (actor, Q networks, temperature)."""
    gamma: float = 0.99
    """discount factor."""
    tau: float = 0.005
    """soft target-update rate."""
    alpha_init: float = 1.0
    """initial entropy temperature (learned)."""
    buffer_size: int = 100_000
    """replay buffer capacity (frames)."""
    batch_size: int = 256
    """transitions per gradient step."""
    start_steps: int = 5_000
    """frames of uniform random actions before the policy acts and learning starts."""
    updates_per_batch: int = 64
    """gradient steps after each collected batch."""
    max_grad_norm: float | None = None
    """clip the gradient norm (None: off)."""
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    """hidden layers of the actor and Q networks."""


#: algorithms that learn from the batch just collected (the others keep a replay buffer)
ON_POLICY = ("ppo", "a2c")
#: values of ``<algo>.model`` (fleetrl.algorithms.models.ModelKind; kept here so that
#: loading a config imports no torch)
MODEL_KINDS = ("auto", "mlp", "cnn", "impala")

ALGORITHM_CONFIGS: dict[str, type] = {
    "ppo": PPOConfig,
    "a2c": A2CConfig,
    "dqn": DQNConfig,
    "sac": SACConfig,
}


@dataclass
class Config:
    algorithm: str = "ppo"
    """which algorithm trains: one of the keys of ALGORITHM_CONFIGS."""
    env: EnvConfig = field(default_factory=EnvConfig)
    collector: CollectorConfig = field(default_factory=CollectorConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    scheme: SchemeConfig = field(default_factory=SchemeConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    a2c: A2CConfig = field(default_factory=A2CConfig)
    dqn: DQNConfig = field(default_factory=DQNConfig)
    sac: SACConfig = field(default_factory=SACConfig)

    @property
    def algo(self) -> Any:
        """The config section of the chosen algorithm."""
        return getattr(self, self.algorithm)


# ------------------------------------------------------------------ loading


def _type_ok(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is dict:
        key_hint, value_hint = typing.get_args(hint) or (Any, Any)
        return isinstance(value, dict) and all(
            _type_ok(k, key_hint) and _type_ok(v, value_hint) for k, v in value.items()
        )
    if origin is list:
        (inner,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(_type_ok(v, inner) for v in value)
    if hint is Any:
        return True
    return isinstance(value, hint)


def _fill(cls: type, data: dict[str, Any], prefix: str, problems: list[str]) -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    obj = cls()
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f"; did you mean '{prefix}{close[0]}'?" if close else f"; known: {names}"
            problems.append(f"{path} is not a config key{hint}")
            continue
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                problems.append(
                    f"{path}={value!r} is invalid: must be a mapping of {hint.__name__} fields"
                )
                continue
            setattr(obj, key, _fill(hint, value, f"{path}.", problems))
            continue
        if isinstance(value, int) and not isinstance(value, bool) and hint in (float, float | None):
            value = float(value)
        if not _type_ok(value, hint):
            problems.append(f"{path}={value!r} is invalid: must be {_hint_name(hint)}")
            continue
        setattr(obj, key, value)
    return obj


def _hint_name(hint: Any) -> str:
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")


def _check_finite(obj: Any, prefix: str, problems: list[str]) -> None:
    """Every float field must be a number: ``.nan`` and ``.inf`` pass ``> 0``-style checks."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            _check_finite(value, f"{prefix}{f.name}.", problems)
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{prefix}{f.name}={value!r} is invalid: must be a finite number")


def _validate(cfg: Config, problems: list[str]) -> None:
    def check(ok: bool, path: str, value: Any, allowed: str) -> None:
        # one problem per key: a .nan lr is not finite, and need not also be "not > 0"
        if not ok and not any(p.startswith(f"{path}=") for p in problems):
            problems.append(f"{path}={value!r} is invalid: {allowed}")

    _check_finite(cfg, "", problems)

    check(
        cfg.algorithm in ALGORITHM_CONFIGS,
        "algorithm",
        cfg.algorithm,
        f"must be one of {sorted(ALGORITHM_CONFIGS)}",
    )
    check(cfg.env.num_envs > 0, "env.num_envs", cfg.env.num_envs, "must be > 0")
    check(
        cfg.env.max_episode_steps is None or cfg.env.max_episode_steps > 0,
        "env.max_episode_steps",
        cfg.env.max_episode_steps,
        "must be > 0, or null for the env's own limit",
    )
    c, t = cfg.collector, cfg.trainer
    check(
        c.num_collectors >= 0,
        "collector.num_collectors",
        c.num_collectors,
        "must be >= 0 (0: local, no Ray)",
    )
    check(c.prefetch >= 0, "collector.prefetch", c.prefetch, "must be >= 0")
    check(
        c.num_threads is None or c.num_threads >= 1,
        "collector.num_threads",
        c.num_threads,
        "must be >= 1, or null for torch's default",
    )
    check(
        c.num_cpus_per_collector >= 0,
        "collector.num_cpus_per_collector",
        c.num_cpus_per_collector,
        "must be >= 0",
    )
    check(
        c.max_policy_lag is None or c.max_policy_lag >= 0,
        "collector.max_policy_lag",
        c.max_policy_lag,
        "must be null (no bound) or >= 0",
    )
    check(
        c.max_restart_attempts >= 0,
        "collector.max_restart_attempts",
        c.max_restart_attempts,
        "must be >= 0 (0: a collector worker's death ends the run)",
    )
    for name in ("fraction_samples", "fraction_workers"):
        value = getattr(c, name)
        check(0 < value <= 1, f"collector.{name}", value, "must be in (0, 1]")
        if value < 1:
            check(
                c.sync and c.num_collectors >= 2,
                f"collector.{name}",
                value,
                "preempts straggling remote collectors: needs collector.sync=true and "
                "collector.num_collectors >= 2",
            )
    _validate_scheme(cfg, check)
    check(
        c.compress in (None, "lz4", "zstd"),
        "collector.compress",
        c.compress,
        "must be null, 'lz4' or 'zstd'",
    )
    check(
        c.overlap in (None, True, False, "auto", "on", "off"),
        "collector.overlap",
        c.overlap,
        "must be auto (or null), on (or true) or off (or false)",
    )
    if c.overlap in ("on", True):
        e = cfg.env
        check(
            e.engine in ("ale_vector", "envpool") and e.num_envs >= 2 and e.num_envs % 2 == 0,
            "collector.overlap",
            c.overlap,
            "steps two halves of a C++ Atari engine: needs env.engine 'ale_vector' or "
            f"'envpool' and an even env.num_envs >= 2 (here env.engine={e.engine!r}, "
            f"env.num_envs={e.num_envs}); use auto or off",
        )
    per_round = max(
        1, c.num_collectors * cfg.env.num_envs if c.sync and c.num_collectors else cfg.env.num_envs
    )
    check(
        c.frames_per_batch > 0 and c.frames_per_batch % per_round == 0,
        "collector.frames_per_batch",
        c.frames_per_batch,
        f"must be a positive multiple of {per_round} "
        f"({'num_collectors x ' if c.sync else ''}env.num_envs), e.g. {max(per_round, c.frames_per_batch // per_round * per_round)}",
    )
    check(
        t.total_frames > 0 and t.total_frames % max(1, cfg.env.num_envs) == 0,
        "trainer.total_frames",
        t.total_frames,
        f"must be a positive multiple of env.num_envs ({cfg.env.num_envs})",
    )
    for name in (
        "weight_update_interval",
        "num_test_episodes",
        "return_window",
        "keep_checkpoints",
    ):
        check(getattr(t, name) > 0, f"trainer.{name}", getattr(t, name), "must be > 0")
    # gymnasium refuses negative seeds, but only once the envs reset, after start-up
    check(t.seed >= 0, "trainer.seed", t.seed, "must be >= 0")
    for name in ("test_every", "checkpoint_every"):
        check(getattr(t, name) >= 0, f"trainer.{name}", getattr(t, name), "must be >= 0 (0: off)")
    for name in ("lr_schedule", "clip_schedule"):
        check(
            getattr(t, name) in ("constant", "linear"),
            f"trainer.{name}",
            getattr(t, name),
            "must be 'constant' or 'linear'",
        )
    if cfg.algorithm in ALGORITHM_CONFIGS:
        algo = cfg.algo
        prefix = cfg.algorithm
        check(algo.lr > 0, f"{prefix}.lr", algo.lr, "must be > 0")
        check(0 < algo.gamma <= 1, f"{prefix}.gamma", algo.gamma, "must be in (0, 1]")
        if hasattr(algo, "gae_lambda"):  # on-policy only
            check(
                0 <= algo.gae_lambda <= 1,
                f"{prefix}.gae_lambda",
                algo.gae_lambda,
                "must be in [0, 1]",
            )
        check(
            all(h > 0 for h in algo.hidden_sizes),
            f"{prefix}.hidden_sizes",
            algo.hidden_sizes,
            "must be positive ints",
        )
        for name in (
            "buffer_size",
            "batch_size",
            "updates_per_batch",
            "target_update_interval",
            "eps_anneal_frames",
        ):
            if hasattr(algo, name):
                check(
                    getattr(algo, name) > 0, f"{prefix}.{name}", getattr(algo, name), "must be > 0"
                )
        _validate_algorithm_ranges(algo, prefix, check)
        if hasattr(algo, "model"):
            check(
                algo.model in MODEL_KINDS,
                f"{prefix}.model",
                algo.model,
                f"must be one of {list(MODEL_KINDS)}",
            )
        if isinstance(algo, DQNConfig):
            check(
                0 <= algo.eps_end <= algo.eps_init <= 1,
                "dqn.eps_end",
                algo.eps_end,
                "must satisfy 0 <= eps_end <= eps_init <= 1",
            )
        if isinstance(algo, SACConfig):
            check(0 < algo.tau <= 1, "sac.tau", algo.tau, "must be in (0, 1]")
        if isinstance(algo, PPOConfig):
            check(algo.clip_epsilon > 0, "ppo.clip_epsilon", algo.clip_epsilon, "must be > 0")
            check(algo.num_epochs > 0, "ppo.num_epochs", algo.num_epochs, "must be > 0")
            check(
                algo.num_mini_batch > 0 and c.frames_per_batch % algo.num_mini_batch == 0,
                "ppo.num_mini_batch",
                algo.num_mini_batch,
                f"must be > 0 and divide collector.frames_per_batch ({c.frames_per_batch})",
            )


def _validate_algorithm_ranges(algo: Any, prefix: str, check: Any) -> None:
    """Ranges of the fields several algorithms share (a field an algorithm lacks is skipped)."""
    for name in ("entropy_coef", "critic_coef", "learning_starts", "start_steps"):
        if hasattr(algo, name):
            value = getattr(algo, name)
            check(value >= 0, f"{prefix}.{name}", value, "must be >= 0")
    for name in ("max_grad_norm", "clip_value"):
        if hasattr(algo, name):
            value = getattr(algo, name)
            check(
                value is None or value > 0, f"{prefix}.{name}", value, "must be > 0, or null: off"
            )
    if hasattr(algo, "alpha_init"):
        check(algo.alpha_init > 0, f"{prefix}.alpha_init", algo.alpha_init, "must be > 0")


def _validate_scheme(cfg: Config, check: Any) -> None:
    s = cfg.scheme
    check(s.num_grad_workers >= 1, "scheme.num_grad_workers", s.num_grad_workers, "must be >= 1")
    check(
        s.grad_communication in ("sync", "async"),
        "scheme.grad_communication",
        s.grad_communication,
        "must be 'sync' or 'async'",
    )
    check(s.max_policy_lag >= 0, "scheme.max_policy_lag", s.max_policy_lag, "must be >= 0")
    check(
        s.num_threads_per_grad_worker is None or s.num_threads_per_grad_worker >= 1,
        "scheme.num_threads_per_grad_worker",
        s.num_threads_per_grad_worker,
        "must be >= 1, or null for torch's default",
    )
    check(
        s.max_restart_attempts >= 0,
        "scheme.max_restart_attempts",
        s.max_restart_attempts,
        "must be >= 0 (0: a gradient worker's death ends the run)",
    )
    check(
        s.num_cpus_per_grad_worker >= 0,
        "scheme.num_cpus_per_grad_worker",
        s.num_cpus_per_grad_worker,
        "must be >= 0",
    )
    for name, amount in s.grad_worker_resources.items():
        check(
            amount >= 0,
            f"scheme.grad_worker_resources.{name}",
            amount,
            "must be >= 0",
        )
    check(
        s.collective_timeout_s > 0,
        "scheme.collective_timeout_s",
        s.collective_timeout_s,
        "must be > 0",
    )
    if s.num_grad_workers == 1:
        # one worker at a level runs in the driver: the central learner, nothing distributed
        check(
            s.grad_communication == "sync",
            "scheme.grad_communication",
            s.grad_communication,
            "'async' needs scheme.num_grad_workers >= 2 (1 is the central learner)",
        )
        check(
            not s.decentralized_update,
            "scheme.decentralized_update",
            s.decentralized_update,
            "needs scheme.num_grad_workers >= 2 (1 is the central learner)",
        )
        return
    check(
        cfg.algorithm in ON_POLICY or s.grad_communication == "sync",
        "scheme.grad_communication",
        s.grad_communication,
        f"'async' runs the on-policy algorithms {list(ON_POLICY)}: a replica of "
        f"algorithm={cfg.algorithm!r} must see every update for its target network to follow "
        "the master's; use 'sync'",
    )
    check(
        not (s.decentralized_update and s.grad_communication == "async"),
        "scheme.decentralized_update",
        s.decentralized_update,
        "all-reduce is synchronous: needs scheme.grad_communication='sync'",
    )


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"ppo.lr=1e-3"`` -> (["ppo", "lr"], 0.001)."""
    if "=" not in text:
        raise ConfigError([f"override {text!r} is invalid: write key=value, e.g. ppo.lr=1e-3"])
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as err:
        raise ConfigError(
            [
                f"override {text!r} is invalid: its value is not YAML ({_yaml_problem(err)}); "
                "close brackets and quotes, e.g. ppo.hidden_sizes=[64, 64]"
            ]
        ) from None
    if isinstance(value, str):  # YAML reads "1e-3" as a string
        with contextlib.suppress(ValueError):
            value = float(value) if any(ch in value for ch in ".eE") else value
    return key.strip().split("."), value


def config_from_dict(data: dict[str, Any], overrides: list[str] | None = None) -> Config:
    """Build and validate a Config; raises one ConfigError listing every problem.

    Besides types and ranges, the env is checked: ``env.id`` must be a
    registered gymnasium id whose env can be made, and its actions must suit
    the algorithm (see :func:`fleetrl.preflight.check_env`).
    """
    if data is not None and not isinstance(data, dict):
        raise ConfigError([f"config={data!r} is invalid: must be a mapping of config sections"])
    data = _deep_copy(data or {})
    problems: list[str] = []
    for text in overrides or []:
        try:
            path, value = parse_override(text)
        except ConfigError as err:
            problems.extend(err.problems)
            continue
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                problems.append(f"override {text!r} is invalid: {part} is not a section")
                break
        else:
            node[path[-1]] = value
    cfg = _fill(Config, data, "", problems)  # a field with a bad type keeps its default...
    check_config(cfg, problems)  # ...so the range checks can run on the rest at the same time
    return cfg


def check_config(cfg: Config, problems: list[str] | None = None) -> None:
    """Check ranges and the env of a Config (one built by hand too); one ConfigError for all.

    Args:
        cfg: the config.
        problems: problems found before (e.g. unknown keys), reported with the rest.
    """
    problems = list(problems or [])
    _validate(cfg, problems)
    from fleetrl.engines import check_engine_config

    check_engine_config(cfg.env, problems)
    from fleetrl.preflight import check_env  # gymnasium and torchrl: imported when first needed

    check_env(cfg, problems)
    if problems:
        raise ConfigError(problems)


def read_yaml_mapping(path: str | Path, arg: str) -> dict[str, Any]:
    """The mapping a YAML file holds; ConfigError naming ``arg`` and the file otherwise.

    Refuses a missing file, a YAML syntax error (with its line and column), an
    empty file (which would silently train the defaults) and a file that holds
    something other than a mapping.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError([f"{arg}={str(path)!r} is invalid: no such file"])
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(
            [f"{arg}={str(path)!r} is invalid: {path} is not valid YAML ({_yaml_problem(err)})"]
        ) from None
    if data is None:
        raise ConfigError(
            [
                f"{arg}={str(path)!r} is invalid: {path} holds no settings; a config names at "
                "least the algorithm and env.id (start from one in configs/)"
            ]
        )
    if not isinstance(data, dict):
        raise ConfigError(
            [
                f"{arg}={str(path)!r} is invalid: {path} must hold a mapping of config sections "
                f"(algorithm, env, collector, ...), not a {type(data).__name__}"
            ]
        )
    return data


def load_config(path: str | Path, overrides: list[str] | None = None) -> Config:
    """Load a YAML config file, apply ``key=value`` overrides, validate everything."""
    return config_from_dict(read_yaml_mapping(path, "config"), overrides)


def _yaml_problem(err: yaml.YAMLError) -> str:
    """'<problem> at line L, column C' of a YAML error (lines counted from 1)."""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    context = getattr(err, "context", None)
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{context + ': ' if context else ''}{problem}{where}"


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """Plain dict (YAML- and ``torch.load(weights_only=True)``-safe)."""
    return dataclasses.asdict(cfg)


def _deep_copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _deep_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_deep_copy(v) for v in data]
    return data

"""Typed training configs, loaded from YAML with ``key=value`` overrides.

A config file has one section per dataclass below (``env``, ``collector``,
``trainer``, ``scheme``, ``logging``) and one for the algorithm, named after
it (``ppo``, ``a2c``, ...). Each algorithm owns its section: the dataclass and
its validation live in its file (``fleetrl/algorithms/ppo.py`` defines
``PPOConfig``), and the registry :data:`fleetrl.algorithms.ALGORITHMS` maps a
name to the algorithm class, which knows its config class. A :class:`Config`
holds the chosen algorithm's section only: ``config.algo``, also reachable by
its name (``config.ppo`` when ``algorithm: ppo``). Overrides use dotted paths:
``fleetrl train configs/ppo_cartpole.yaml ppo.lr=1e-3 collector.num_collectors=4``.
Values are parsed as YAML (``1e-3``, ``true``, ``[64, 64]``).

Modes and schedules are Enums inside (:class:`Schedule`,
:class:`GradCommunication`, ``ModelKind``), written as their values in YAML
and on the command line. A config is validated as a whole: every problem is
reported at once, with the value and what is allowed.

Sections of other algorithms in a file (an older run's ``config.yaml``, or a
file switched with ``algorithm=...``) are dropped with one logged warning, and
so is ``trainer.clip_schedule`` (now ``ppo.clip_schedule``, where its value
moves); an override naming either is an error, as it would change nothing.

Examples:
    >>> cfg = config_from_dict({"algorithm": "ppo", "env": {"id": "CartPole-v1"}})
    >>> cfg.algorithm, cfg.env.id, cfg.ppo.clip_epsilon
    ('ppo', 'CartPole-v1', 0.2)
    >>> sorted(config_to_dict(cfg))
    ['algorithm', 'collector', 'env', 'logging', 'ppo', 'scheme', 'trainer']
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetrl.config_checks import (
    RANGES,
    validate_batch_sizes,
    validate_collector,
    validate_decoupled,
    validate_device,
    validate_normalization,
    validate_overlap,
    validate_video,
)
from fleetrl.errors import ConfigError
from fleetrl.typed_yaml import (
    Checks,
    check_fields,
    deep_copy,
    enum_of,
    enum_value,
    fill_dataclass,
    parse_override,
    read_yaml_mapping,
    to_plain,
)

__all__ = [
    "AlgorithmConfig",
    "AtariConfig",
    "Checks",
    "CollectorConfig",
    "Config",
    "EnvConfig",
    "GradCommunication",
    "LoggingConfig",
    "Schedule",
    "SchemeConfig",
    "TrainerConfig",
    "check_config",
    "config_from_dict",
    "config_to_dict",
    "load_config",
    "read_yaml_mapping",
]

log = logging.getLogger(__name__)

OTHER_SECTION_MSG = (
    "{key} is invalid here: the {section} section belongs to algorithm={section!r} and this "
    "config trains algorithm={algorithm!r}; set {algorithm}.{rest} instead, or train {section} "
    "with algorithm={section}"
)
MOVED_KEY_MSG = "{key} is invalid: it moved to {new}; write {new}={value} instead"
IGNORED_WARNING = (
    "config: ignored %s (this config trains algorithm=%r and holds only its section; a run's "
    "config.yaml now keeps just that one)"
)
UNKNOWN_ATTR_MSG = (
    "config.{name}: this config trains algorithm={algorithm!r} and holds only its section "
    "(config.{algorithm}, also config.algo)"
)
#: keys that moved: old dotted key -> (the new key, the algorithm it applies to)
MOVED_KEYS = {"trainer.clip_schedule": ("ppo.clip_schedule", "ppo")}


class Schedule(str, enum.Enum):
    """How a hyperparameter changes over a run."""

    CONSTANT = "constant"
    LINEAR = "linear"  # decays to 0 at trainer.total_frames


class GradCommunication(str, enum.Enum):
    """How the update worker combines the gradient workers' gradients."""

    SYNC = "sync"  # average every worker's gradients per step
    ASYNC = "async"  # apply each worker's gradients first ready


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
    """what steps the envs: 'gymnasium' (a gymnasium vector env), 'ale_vector' (ale-py's
    threaded C++ vector env; Atari only) or 'envpool' (C++; Atari and MuJoCo ids, e.g.
    HalfCheetah-v5); other envs use 'gymnasium'."""
    atari: AtariConfig = field(default_factory=AtariConfig)
    """Atari preprocessing (applies to ALE ids, e.g. ALE/Pong-v5, in every engine)."""
    normalize_observation: bool = False
    """normalize observations by running mean and variance merged from every collector's
    frames on the learner, published with the weights (fleetrl.normalization; PPO, A2C,
    IMPALA, APPO with mlp networks, central learner)."""
    clip_observation: float | None = 10.0
    """clip normalized observations to [-clip, clip] (null: off); CleanRL clips to 10."""
    normalize_reward: bool = False
    """divide the rewards learned from by the running std of the per-env discounted return
    (gamma: the algorithm's), merged from every collector's frames; episode returns stay raw."""
    clip_reward: float | None = 10.0
    """clip scaled rewards to [-clip, clip] (null: off); CleanRL clips to 10."""


@dataclass
class CollectorConfig:
    num_collectors: int = 2
    """remote collector workers (Ray actors); 0 collects in the training process, without Ray."""
    frames_per_batch: int = 2048
    """frames per training batch (sync: summed over collectors)."""
    sync: bool = True
    """stack all collectors' batches (True) or serve the first ready (False). RayCollector's
    own default is False, torchrl's; a training run defaults to the on-policy setting."""
    prefetch: int = 0
    """batches each worker may collect ahead of the learner (0: on-policy in sync mode;
    async lag is bounded only by max_policy_lag). RayCollector's own default is 1, for
    throughput; a training run defaults to no lag, which on-policy algorithms need."""
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
    decoupled: bool = False
    """off-policy (dqn, sac), central learner: the remote collectors write straight into a
    replay buffer actor and keep collecting while the learner samples and updates, at
    updates_per_batch / frames_per_batch updates per frame written (first ready: collector.sync
    is not used); weights are published every trainer.weight_update_interval updates."""
    decoupled_frames_ahead: int | None = None
    """decoupled: frames the collectors may write beyond what the learner's updates so far
    need at the ratio; past it no new task is issued until the learner catches up (null: one
    frames_per_batch per collector)."""


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
    """publish weights to the collectors every this many batches learned from
    (collector.decoupled: every this many updates)."""
    test_every: int = 10
    """evaluate every this many training iterations (0: never). An iteration is one metrics
    row: one batch for the central learner, one batch per gradient worker under a scheme."""
    num_test_episodes: int = 10
    """episodes per evaluation, deterministic actions."""
    checkpoint_every: int = 20
    """write a checkpoint every this many training iterations (0: only at the end)."""
    keep_checkpoints: int = 3
    """checkpoints kept on disk (the newest)."""
    device: str = "cpu"
    """the learner's device: 'cpu', or 'cuda' (or 'cuda:N') on a machine with a GPU; the
    collectors keep their own (the CPU)."""


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
    grad_communication: GradCommunication = GradCommunication.SYNC
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
    video_every: int | None = None
    """every this many evaluations also record ``video_episodes`` deterministic episodes to
    ``videos/eval_<frames>.mp4`` and (with ``tensorboard``) ``eval/video`` (0 or null: never); needs
    ``trainer.test_every`` > 0 and the ``video`` extra (imageio, imageio-ffmpeg)."""
    video_episodes: int = 1
    """episodes in each such video (episode i seeded as the evaluation's env i)."""


@dataclass
class AlgorithmConfig:
    """Base of the algorithms' config sections (each defined in its algorithm's file).

    The fields here are every algorithm's; a subclass declares its own (each
    with a doc line) and extends :meth:`validate` with its ranges and
    cross-checks. The fields every algorithm has besides these (``lr``,
    ``gamma``, ``hidden_sizes``, ``max_grad_norm``) are checked here too.
    """

    lr_schedule: Schedule = Schedule.CONSTANT
    """'constant' or 'linear' (the learning rate decays to 0 at trainer.total_frames)."""
    compile: bool | dict[str, Any] = False
    """run the update step under torch.compile: true, or a dict of torch.compile keyword
    arguments (e.g. {mode: max-autotune}); the first step compiles (logged once)."""
    cudagraphs: bool = False
    """capture the (compiled) update step in a CUDA graph: needs trainer.device=cuda."""

    def __post_init__(self) -> None:
        # an Enum field set by value in code (model="cnn") becomes its member, as from YAML
        for name, hint in typing.get_type_hints(type(self)).items():
            member = enum_value(hint, getattr(self, name)) if enum_of(hint) else None
            if member is not None:  # an unknown value is left for the checks to report
                setattr(self, name, member)

    def validate(self, config: Config, check: Checks) -> None:
        """Append this section's problems (``check`` prefixes the keys with the section)."""
        check(self.lr > 0, "lr", self.lr, "must be > 0")
        check(0 < self.gamma <= 1, "gamma", self.gamma, "must be in (0, 1]")
        check(
            all(h > 0 for h in self.hidden_sizes),
            "hidden_sizes",
            self.hidden_sizes,
            "must be positive ints",
        )
        check(
            self.max_grad_norm is None or self.max_grad_norm > 0,
            "max_grad_norm",
            self.max_grad_norm,
            "must be > 0, or null: off",
        )
        device = config.trainer.device
        check(
            not self.cudagraphs or str(device).startswith("cuda"),
            "cudagraphs",
            self.cudagraphs,
            f"CUDA graphs capture GPU work and the learner runs on trainer.device={device!r}; "
            "set trainer.device=cuda on a machine with a GPU, or use "
            f"{config.algorithm}.compile=true on the CPU",
        )


@dataclass
class Config:
    """A whole training run: env, collectors, trainer, scheme, logging and one algorithm."""

    algorithm: str = "ppo"
    """which algorithm trains: a key of fleetrl.algorithms.ALGORITHMS."""
    env: EnvConfig = field(default_factory=EnvConfig)
    collector: CollectorConfig = field(default_factory=CollectorConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    scheme: SchemeConfig = field(default_factory=SchemeConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    algo: AlgorithmConfig | None = None
    """the chosen algorithm's section (None: its defaults), written under its name (``ppo:``)
    in YAML and reachable by it (``config.ppo``)."""

    def __post_init__(self) -> None:
        cls = _algorithm_classes().get(self.algorithm)
        if self.algo is None and cls is not None:
            self.algo = cls.config_class()

    def __getattr__(self, name: str) -> Any:
        # called only when normal lookup fails: config.ppo is the chosen section by its name
        algorithm = self.__dict__.get("algorithm")
        if algorithm is not None and name == algorithm:
            return self.__dict__.get("algo")
        if algorithm is not None and name in _algorithm_classes():
            raise AttributeError(UNKNOWN_ATTR_MSG.format(name=name, algorithm=algorithm))
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def algorithm_class(self) -> type | None:
        """The algorithm class of ``algorithm`` (None when the name is unknown)."""
        return _algorithm_classes().get(self.algorithm)


def _algorithm_classes() -> dict[str, type]:
    # the registry imports torch and torchrl; imported when first needed, and the
    # algorithm files import this module for their config base
    from fleetrl.algorithms import ALGORITHMS

    return ALGORITHMS


# ------------------------------------------------------------------ loading


def _validate(cfg: Config, problems: list[str]) -> None:
    check = Checks(problems)
    for f in dataclasses.fields(cfg):  # finite floats, Enum values, in every section
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            check_fields(value, check.section(cfg.algorithm if f.name == "algo" else f.name))
    classes = _algorithm_classes()
    check(cfg.algorithm in classes, "algorithm", cfg.algorithm, f"must be one of {sorted(classes)}")
    for key, (ok, allowed) in RANGES.items():
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        check(ok(value), key, value, allowed)
    validate_collector(cfg.collector, check.section("collector"))
    validate_overlap(cfg, check)
    validate_video(cfg, check)
    validate_decoupled(cfg, check, classes)
    validate_normalization(cfg, check)
    validate_batch_sizes(cfg, check)
    validate_device(cfg, check)
    _validate_scheme(cfg, check.section("scheme"))
    cls = classes.get(cfg.algorithm)
    if cls is None:
        return
    if not isinstance(cfg.algo, cls.config_class):
        got = type(cfg.algo).__name__
        check(False, cfg.algorithm, got, f"must be a {cls.config_class.__name__}")
        return
    cfg.algo.validate(cfg, check.section(cfg.algorithm))


def _validate_scheme(cfg: Config, check: Checks) -> None:
    s = cfg.scheme
    mode = enum_value(GradCommunication, s.grad_communication)
    for name, amount in s.grad_worker_resources.items():
        check(amount >= 0, f"grad_worker_resources.{name}", amount, "must be >= 0")
    if s.num_grad_workers == 1:
        # one worker at a level runs in the driver: the central learner, nothing distributed
        check(
            mode is not GradCommunication.ASYNC,
            "grad_communication",
            s.grad_communication,
            "'async' needs scheme.num_grad_workers >= 2 (1 is the central learner)",
        )
        check(
            not s.decentralized_update,
            "decentralized_update",
            s.decentralized_update,
            "needs scheme.num_grad_workers >= 2 (1 is the central learner)",
        )
        return
    classes = _algorithm_classes()
    on_policy = [name for name, cls in classes.items() if cls.on_policy]
    cls = classes.get(cfg.algorithm)
    check(
        cls is None or cls.on_policy or mode is not GradCommunication.ASYNC,
        "grad_communication",
        s.grad_communication,
        f"'async' runs the on-policy algorithms {on_policy}: a replica of "
        f"algorithm={cfg.algorithm!r} must see every update for its target network to follow "
        "the master's; use 'sync'",
    )
    check(
        not (s.decentralized_update and mode is GradCommunication.ASYNC),
        "decentralized_update",
        s.decentralized_update,
        "all-reduce is synchronous: needs scheme.grad_communication='sync'",
    )


def config_from_dict(data: dict[str, Any], overrides: list[str] | None = None) -> Config:
    """Build and validate a Config; raises one ConfigError listing every problem.

    Besides types and ranges, the env is checked: ``env.id`` must be a
    registered gymnasium id whose env can be made, and its actions must suit
    the algorithm (see :func:`fleetrl.preflight.check_env`). Sections of other
    algorithms, and keys that moved, are dropped with one logged warning (see
    the module docstring); overrides naming them are problems.
    """
    if data is not None and not isinstance(data, dict):
        raise ConfigError([f"config={data!r} is invalid: must be a mapping of config sections"])
    data = deep_copy(data or {})
    problems: list[str] = []
    parsed = []
    for text in overrides or []:
        try:
            parsed.append((text, *parse_override(text)))
        except ConfigError as err:
            problems.extend(err.problems)
    algorithm = data.get("algorithm", Config.algorithm)
    for _, path, value in parsed:
        if path == ["algorithm"]:
            algorithm = value
    _drop_other_sections(data, algorithm)
    for text, path, value in parsed:
        problem = _override_problem(path, value, algorithm)
        if problem:
            problems.append(problem)
            continue
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                problems.append(f"override {text!r} is invalid: {part} is not a section")
                break
        else:
            node[path[-1]] = value
    cfg = _fill_config(data, problems)  # a field with a bad type keeps its default...
    check_config(cfg, problems)  # ...so the range checks can run on the rest at the same time
    return cfg


def _fill_config(data: dict[str, Any], problems: list[str]) -> Config:
    classes = _algorithm_classes()
    algorithm = data.get("algorithm", Config.algorithm)
    cls = classes.get(algorithm) if isinstance(algorithm, str) else None
    section = data.pop(algorithm, {}) if cls is not None else {}
    cfg = fill_dataclass(Config, data, "", problems, hidden=("algo",))
    if cls is None:
        cfg.algo = None  # the unknown name is reported by the range checks
    elif not isinstance(section, dict):
        problems.append(
            f"{algorithm}={section!r} is invalid: must be a mapping of "
            f"{cls.config_class.__name__} fields"
        )
        cfg.algo = cls.config_class()
    else:
        cfg.algo = fill_dataclass(cls.config_class, section, f"{algorithm}.", problems)
    return cfg


def _drop_other_sections(data: dict[str, Any], algorithm: Any) -> None:
    """Drop what a config of ``algorithm`` no longer holds; one warning names all of it."""
    dropped = []
    for key in [k for k in data if k in _algorithm_classes() and k != algorithm]:
        del data[key]
        dropped.append(f"the {key} section")
    for old, (new, owner) in MOVED_KEYS.items():
        section, name = old.split(".")
        if not isinstance(data.get(section), dict) or name not in data[section]:
            continue
        value = data[section].pop(name)
        new_section, new_name = new.split(".")
        if owner == algorithm and isinstance(data.setdefault(new_section, {}), dict):
            data[new_section].setdefault(new_name, value)
            dropped.append(f"{old} (moved to {new})")
        else:
            dropped.append(f"{old} (now {new}, for algorithm={owner})")
    if dropped:
        log.warning(IGNORED_WARNING, ", ".join(dropped), algorithm)


def _override_problem(path: list[str], value: Any, algorithm: Any) -> str | None:
    key = ".".join(path)
    if key in MOVED_KEYS:
        return MOVED_KEY_MSG.format(key=key, new=MOVED_KEYS[key][0], value=value)
    if len(path) > 1 and path[0] != algorithm and path[0] in _algorithm_classes():
        return OTHER_SECTION_MSG.format(
            key=key, section=path[0], algorithm=algorithm, rest=".".join(path[1:])
        )
    return None


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


def load_config(path: str | Path, overrides: list[str] | None = None) -> Config:
    """Load a YAML config file, apply ``key=value`` overrides, validate everything.

    Examples:
        >>> cfg = load_config("configs/ppo_cartpole.yaml", ["ppo.lr=3e-4", "env.num_envs=4"])
        >>> cfg.algorithm, cfg.env.id, cfg.env.num_envs, cfg.ppo.lr
        ('ppo', 'CartPole-v1', 4, 0.0003)
        >>> load_config("configs/ppo_cartpole.yaml", ["ppo.lr=-1"])
        Traceback (most recent call last):
        ...
        fleetrl.errors.ConfigError: ...ppo.lr=-1.0 is invalid: must be > 0...
    """
    return config_from_dict(read_yaml_mapping(path, "config"), overrides)


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """Plain dict (YAML- and ``torch.load(weights_only=True)``-safe): the sections and the
    chosen algorithm's, under its name; Enums as their values."""
    out = {
        f.name: to_plain(getattr(cfg, f.name)) for f in dataclasses.fields(cfg) if f.name != "algo"
    }
    if cfg.algo is not None:
        out[cfg.algorithm] = to_plain(cfg.algo)
    return out

"""Verify a config as a whole: every problem at once, in config keys, before any actor starts.

:func:`verify` ``(config, env_spec) -> [Problem]`` gathers every problem of a
:class:`~fleetrl.config.Config`: the type rules every field keeps (finite
floats, Enum values), the range of each key (:data:`RANGES`), the rules that
tie keys together (batch sizes, preemption, overlap, decoupling,
normalization, the learner's mode, the device), the algorithm section's own
checks, the engine's, and what the env's spaces (an
:class:`~fleetrl.envs.EnvSpec`) allow: the algorithm's kind of actions, a
convolutional network, normalization. Each :class:`~fleetrl.errors.Problem`
names the key, the value and what is allowed. What depends on the cluster
rather than the config (its CPUs and custom resources) is
:func:`resource_problems`'s, asked once Ray runs, before any actor starts.

:func:`describe` builds the env once to read its spaces (remembered per env
section, so a run and its checks build it once); :func:`check` runs both and
raises one :class:`~fleetrl.errors.ConfigError`.

Examples:
    >>> from fleetrl.setup import parse_config
    >>> config, _ = parse_config({"algorithm": "ppo", "env": {"num_envs": 0}})
    >>> [str(p) for p in verify(config, None)]
    ['env.num_envs=0 is invalid: must be > 0']
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import math
import typing
from collections.abc import Callable, Iterable
from typing import Any

import yaml

from fleetrl.algorithms import ALGORITHMS
from fleetrl.algorithms.models import NORMALIZE_CONV_MSG, ModelKind, conv_problems, resolve_model
from fleetrl.backends import BACKENDS
from fleetrl.batch_sizes import BatchSizeNames, batch_size_problems
from fleetrl.config import (
    EVAL_METRICS,
    AtariConfig,
    CollectorConfig,
    Config,
    LearnerMode,
    TuneConfig,
    TuneScheduler,
    TuneSearcher,
    enum_of,
    enum_value,
)
from fleetrl.envs.atari import is_atari_id
from fleetrl.envs.engine import engine_problems
from fleetrl.envs.make import create_env_fn
from fleetrl.envs.spec import EnvSpec, env_spec
from fleetrl.errors import ConfigError, Problem, Problems, shown
from fleetrl.runtime import human_bytes, physical_memory, resource_shortfalls
from fleetrl.setup.parse import allowed_values, config_to_dict, parse_config, to_plain
from fleetrl.setup.search import Distribution, parse_dimension, search_key

__all__ = [
    "ACTIONS_MSG",
    "DECOUPLED_NEEDS",
    "ENV_MAKE_MSG",
    "NODE_MSG",
    "RANGES",
    "RESOURCES_MSG",
    "TRACKERS",
    "TRACKER_EXTRA_MSG",
    "UNKNOWN_ENV_MSG",
    "check",
    "describe",
    "resource_problems",
    "verify",
]

UNKNOWN_ENV_MSG = (
    "env.id={env_id!r} is invalid: no gymnasium env is registered under that id; {hint}"
)
ENV_MAKE_MSG = (
    "env.id={env_id!r} is invalid: gymnasium.make({env_id!r}) failed ({err}); install what "
    "the env needs or choose another env.id"
)
ACTIONS_MSG = (
    "algorithm={algorithm!r} is invalid with env.id={env_id!r}: {name} needs {needs} actions "
    "and {env_id} has {has}; use algorithm={instead}, or an env with {needs} actions "
    "(e.g. env.id={example})"
)
TRACKER_EXTRA_MSG = (
    "logging.{key}=true needs the {extra} extra: pip install 'fleetrl[{extra}]' "
    "(No module named {module!r}); or set logging.{key}=false"
)
#: the experiment trackers (fleetrl.tracking): logging key -> (module imported, extra)
TRACKERS = {"mlflow": ("mlflow", "mlflow"), "wandb": ("wandb", "wandb")}
#: the characters W&B refuses in a project name
WANDB_PROJECT_FORBIDS = "/\\#?%:"
#: the algorithms that suit one kind of action space only
ACTION_KINDS = {
    "sac": ("continuous", "ppo or a2c", "Pendulum-v1"),
    "dqn": ("discrete", "ppo or a2c", "CartPole-v1"),
}
REPLAY_MEMORY_MSG = (
    "{algorithm}.buffer_size={size:,} is invalid on this machine: {buffers} of {size:,} "
    "transitions x {per} (the observation and the next one, {obs_shape} {dtype}, and the "
    "action, reward and flags) {verb} {need} of memory, and this machine has {have}; lower "
    "{algorithm}.buffer_size (e.g. {fit:,}: half the memory), or train on a machine with more"
)
RESOURCES_MSG = (
    "collector.num_collectors={count} is invalid here: {count} collectors x "
    "collector.num_cpus_per_collector={cpus:g} ask Ray for {asked:g} CPUs{have}; lower "
    "collector.num_cpus_per_collector (e.g. {suggest:g}), use fewer collectors, or attach to a "
    "bigger cluster with collector.address"
)
NODE_MSG = (
    "collector.num_cpus_per_collector={cpus:g} is invalid here: each collector asks Ray for "
    "{cpus:g} CPUs but no Ray node has more than {have:g}; lower "
    "collector.num_cpus_per_collector (e.g. {have:g})"
)
SERVER_CPUS_MSG = (
    "collector.num_cpus_per_inference_server={cpus:g} is invalid here: {servers} inference "
    "server(s) and the collectors ({collectors:g} CPUs) ask Ray for {asked:g} CPUs, and the "
    "Ray cluster has {have:g}; use 0 (the servers share the collectors' cores), fewer "
    "servers, or a lower collector.num_cpus_per_collector"
)
GRAD_WORKERS_MSG = (
    "scheme.num_grad_workers={g} is invalid: {g} gradient workers x {per:g} CPUs "
    "(scheme.num_cpus_per_grad_worker + collector.num_collectors x "
    "collector.num_cpus_per_collector) need {need:g} CPUs; the Ray cluster has {have:g}"
)
GRAD_WORKER_RESOURCES_MSG = (
    "scheme.grad_worker_resources={value!r} is invalid: {g} gradient workers x {amount:g} "
    "{name!r} need {need:g}; the Ray cluster has {have:g}"
)
DEVICE_PROBLEM = (
    "{reason}; use trainer.device=cpu, or 'cuda' (or 'cuda:N') on a machine with a GPU and a "
    "CUDA build of torch"
)
#: what ``collector.decoupled: true`` needs, said after the value
DECOUPLED_NEEDS = {
    "algorithm": "collector.decoupled=true needs an off-policy algorithm ({allowed}): the "
    "learner samples a replay buffer the collectors write",
    "collector.num_collectors": "collector.decoupled=true needs remote collectors (>= 1): "
    "they write into the replay buffer actor",
    "scheme.num_grad_workers": "collector.decoupled=true runs the central learner: needs 1",
    "collector.max_served_lag": "collector.decoupled=true writes every batch into the replay "
    "buffer as it is collected: needs null",
}
#: the algorithms whose default networks take an observation normalizer and whose
#: learners scale rewards (fleetrl.normalization)
NORMALIZING_ALGORITHMS = ("a2c", "appo", "impala", "ppo")
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


#: the ranges of single keys (the rules that tie keys together: the functions below)
RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "env.num_envs": (_above(0), "must be > 0"),
    "env.max_episode_steps": (_above(0, null=True), "must be > 0, or null for the env's own limit"),
    "env.clip_observation": (_above(0, null=True), "must be > 0, or null: off"),
    "env.clip_reward": (_above(0, null=True), "must be > 0, or null: off"),
    "collector.num_collectors": (_at_least(0), "must be >= 0 (0: local, no Ray)"),
    "collector.prefetch": (_at_least(0), "must be >= 0"),
    "collector.num_threads": (_at_least(1, null=True), "must be >= 1, or null for torch's default"),
    "collector.num_cpus_per_collector": (_at_least(0), "must be >= 0"),
    "collector.max_served_lag": (_at_least(0, null=True), "must be null (no bound) or >= 0"),
    "collector.decoupled_frames_ahead": (_above(0, null=True), "must be > 0, or null"),
    "collector.max_restart_attempts": (
        _at_least(0),
        "must be >= 0 (0: a collector worker's death ends the run)",
    ),
    "collector.fraction_samples": (lambda v: 0 < v <= 1, "must be in (0, 1]"),
    "collector.fraction_workers": (lambda v: 0 < v <= 1, "must be in (0, 1]"),
    "collector.compress": (lambda v: v in (None, "lz4", "zstd"), "must be null, 'lz4' or 'zstd'"),
    "collector.inference": (lambda v: v in ("local", "server"), "must be 'local' or 'server'"),
    "collector.num_inference_servers": (_at_least(1), "must be >= 1"),
    "collector.inference_transport": (lambda v: v in ("auto", "ray"), "must be 'auto' or 'ray'"),
    "collector.inference_max_batch": (_above(0, null=True), "must be > 0, or null: no bound"),
    "collector.inference_max_wait_ms": (_at_least(0), "must be >= 0 (milliseconds)"),
    "collector.num_cpus_per_inference_server": (_at_least(0), "must be >= 0"),
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
    "trainer.backend": (lambda v: v in BACKENDS, f"must be one of {list(BACKENDS)}"),
    "trainer.checkpoint_every": (_at_least(0), "must be >= 0 (0: off)"),
    "logging.video_every": (_at_least(0, null=True), "must be >= 0 (0 or null: no videos)"),
    "logging.video_episodes": (_above(0), "must be > 0"),
    "logging.wandb_project": (
        lambda v: v is None or not set(v) & set(WANDB_PROJECT_FORBIDS),
        "must be null or a name without any of " + " ".join(WANDB_PROJECT_FORBIDS),
    ),
    "scheme.num_grad_workers": (_at_least(1), "must be >= 1"),
    "scheme.max_gradient_lag": (_at_least(0), "must be >= 0"),
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
    "tune.samples": (_above(0), "must be > 0"),
    "tune.max_concurrent": (_above(0, null=True), "must be > 0, or null: as the CPUs allow"),
    "tune.grace_frames": (_above(0, null=True), "must be > 0, or null: total_frames / 10"),
    "tune.perturbation_frames": (_above(0, null=True), "must be > 0, or null: total_frames / 4"),
    "tune.seed": (_at_least(0), "must be >= 0"),
}


# ------------------------------------------------------------------ the whole


def verify(config: Config, env_spec: EnvSpec | None) -> list[Problem]:
    """Every problem of ``config`` (and, with its :class:`~fleetrl.envs.EnvSpec`, of what the
    env allows), in config keys; empty when it can run."""
    check = Problems()
    for f in dataclasses.fields(config):  # finite floats, Enum values, in every section
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            _check_fields(value, check.section(config.algorithm if f.name == "algo" else f.name))
    check(
        config.algorithm in ALGORITHMS,
        "algorithm",
        config.algorithm,
        f"must be one of {sorted(ALGORITHMS)}",
    )
    for key, (ok, allowed) in RANGES.items():
        section, name = key.split(".")
        value = getattr(getattr(config, section), name)
        check(ok(value), key, value, allowed)
    _collector(config, check)
    _inference(config, check)
    _overlap(config, check)
    _video(config, env_spec, check)
    _trackers(config, check)
    _decoupled(config, check)
    _normalization(config, check)
    _atari_section(config, check)
    _batch_sizes(config, check)
    _device(config, check)
    _scheme(config, check.section("scheme"))
    _algorithm(config, check)
    _tune(config, check)
    check.extend(Problem("env.engine", text=p) for p in engine_problems(config.env))
    if env_spec is not None:
        _spaces(config, env_spec, check)
    return list(check)


def describe(config: Config) -> tuple[EnvSpec | None, list[Problem]]:
    """The :class:`~fleetrl.envs.EnvSpec` of ``config.env`` (one env built, then closed), or
    the problems that keep it from being built (an unknown id, an engine that cannot step it).

    Remembered per env section: a run's checks, its algorithm and a resumed run's
    checks of the same section build the env once.
    """
    key = repr(to_plain(config.env))
    if key in _DESCRIBED:
        return _DESCRIBED[key], []
    problems = [Problem("env.engine", text=p) for p in engine_problems(config.env)]
    if problems:
        return None, problems  # the engine cannot be built as configured; its problems say why
    import gymnasium as gym

    env_id = config.env.id
    is_atari_id(env_id)  # registers the ALE ids, if ale-py is installed
    try:
        gym.spec(env_id)  # what the collectors look up
    except gym.error.Error:
        text = UNKNOWN_ENV_MSG.format(env_id=env_id, hint=_close_ids(env_id))
        return None, [Problem("env.id", text=text)]
    try:
        spec = env_spec(create_env_fn(config.env))
    # a registered env may fail to build for any reason of its own (a missing
    # dependency, a bad default argument): report it as a config problem
    except Exception as err:
        cause = f"{type(err).__name__}: {err}".rstrip(": ")
        return None, [Problem("env.id", text=ENV_MAKE_MSG.format(env_id=env_id, err=cause))]
    _DESCRIBED[key] = spec
    return spec, []


#: env section (its plain form) -> its spec, in this process
_DESCRIBED: dict[str, EnvSpec] = {}


def check(
    config: Config, env_spec: EnvSpec | None = None, problems: Iterable[Problem] = ()
) -> EnvSpec:
    """:func:`describe` the env (unless ``env_spec`` is given) and :func:`verify` the config;
    one ConfigError lists every problem (``problems`` found before first, e.g. unknown keys).

    A config built in code without its algorithm's section (``algo=None``) gets that
    section's defaults here.

    Returns the env's spec, for the run to build its networks with.
    """
    cls = ALGORITHMS.get(config.algorithm)
    if config.algo is None and cls is not None:  # built in code without its section: defaults
        config.algo = cls.config_class()
    found = list(problems)
    spec, env_problems = (env_spec, []) if env_spec is not None else describe(config)
    found += [p for p in verify(config, spec) if p not in found and not _said(p, found)]
    found += [p for p in env_problems if p not in found]
    if found:
        raise ConfigError(found)
    assert spec is not None
    return spec


def _said(problem: Problem, found: list[Problem]) -> bool:
    """A key that has a problem already gets no second one (a bad type, then its range)."""
    return problem.text is None and any(p.key == problem.key for p in found)


# ------------------------------------------------------------------ the parts


def _check_fields(obj: Any, check: Problems) -> None:
    """What holds for every field of a dataclass, nested ones too: a float is finite (``.nan``
    and ``.inf`` pass ``> 0``-style checks) and an Enum-typed field holds one of its values."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        enum_cls = enum_of(hints[f.name])
        if dataclasses.is_dataclass(value):
            _check_fields(value, check.section(f.name))
        elif isinstance(value, float) and not math.isfinite(value):
            check(False, f.name, value, "must be a finite number")
        elif enum_cls is not None:
            check(enum_value(enum_cls, value) is not None, f.name, value, allowed_values(enum_cls))


def _collector(config: Config, check: Problems) -> None:
    c = config.collector
    for name in ("fraction_samples", "fraction_workers"):
        value = getattr(c, name)
        if 0 < value < 1:
            check(
                c.sync and c.num_collectors >= 2,
                f"collector.{name}",
                value,
                "preempts straggling remote collectors: needs collector.sync=true and "
                "collector.num_collectors >= 2",
            )


#: collector keys that only central inference reads (their defaults: CollectorConfig's)
SERVER_ONLY = (
    "num_inference_servers",
    "inference_device",
    "inference_max_batch",
    "inference_max_wait_ms",
    "num_cpus_per_inference_server",
    "inference_transport",
)


def _inference(config: Config, check: Problems) -> None:
    """``collector.inference: server``: remote collectors, at least one per server, and a GPU
    where ``inference_device`` is CUDA; the server keys are refused with ``local``."""
    c = config.collector
    if c.inference != "server":
        if c.inference == "local":
            defaults = CollectorConfig()
            for key in SERVER_ONLY:
                value = getattr(c, key)
                check(
                    value == getattr(defaults, key),
                    f"collector.{key}",
                    value,
                    "only takes effect with collector.inference=server",
                )
        return
    check(
        c.num_collectors >= 1,
        "collector.inference",
        c.inference,
        "serves remote collectors: needs collector.num_collectors >= 1 (0 collects in this "
        "process, with the learner's own policy)",
    )
    if isinstance(c.num_inference_servers, int) and c.num_collectors >= 1:
        check(
            c.num_inference_servers <= c.num_collectors,
            "collector.num_inference_servers",
            c.num_inference_servers,
            f"must be <= collector.num_collectors={c.num_collectors}: each server serves at "
            "least one collector",
        )
    device = c.inference_device
    if device is not None:
        import torch

        try:
            parsed = torch.device(device)
        except (RuntimeError, TypeError):
            check.add(
                "collector.inference_device", device, "must be null (the CPU), 'cpu' or 'cuda'"
            )
            return
        if parsed.type == "cuda" and c.address is None:
            check(
                torch.cuda.is_available(),
                "collector.inference_device",
                device,
                "needs a GPU, and CUDA is not available here; use null (the CPU), or "
                "collector.address of a Ray cluster with a GPU",
            )


def _overlap(config: Config, check: Problems) -> None:
    c, e = config.collector, config.env
    if c.overlap in ("on", True):
        check(
            e.engine in ("ale_vector", "envpool") and e.num_envs >= 2 and e.num_envs % 2 == 0,
            "collector.overlap",
            c.overlap,
            "steps two halves of a C++ Atari engine: needs env.engine 'ale_vector' or "
            f"'envpool' and an even env.num_envs >= 2 (here env.engine={_shown(e.engine)!r}, "
            f"env.num_envs={e.num_envs}); use auto or off",
        )


def _video(config: Config, env_spec: EnvSpec | None, check: Problems) -> None:
    """Evaluation videos need evaluations, imageio-ffmpeg to write them, and an env that renders
    (tried where the env could be described)."""
    every = config.logging.video_every
    if not isinstance(every, int) or every <= 0:
        return
    check(
        config.trainer.test_every > 0,
        "logging.video_every",
        every,
        "records every N-th evaluation: needs trainer.test_every > 0 "
        f"(here trainer.test_every={config.trainer.test_every})",
    )
    if importlib.util.find_spec("imageio_ffmpeg") is None:
        check(
            False,
            "logging.video_every",
            every,
            "needs pip install 'fleetrl[video]' (No module named 'imageio_ffmpeg')",
        )
        return
    if env_spec is None:
        return
    problem = _rendering_problem(config)
    check(problem is None, "logging.video_every", every, problem or "")


def _trackers(config: Config, check: Problems) -> None:
    """``logging.mlflow`` / ``logging.wandb``: the package the tracker imports is installed
    (looked up, not imported: importing wandb or mlflow takes a second)."""
    for key, (module, extra) in TRACKERS.items():
        if getattr(config.logging, key) is True and importlib.util.find_spec(module) is None:
            check.say(
                f"logging.{key}", TRACKER_EXTRA_MSG.format(key=key, extra=extra, module=module)
            )


def _tune(config: Config, check: Problems) -> None:
    """The sweep's metric, and each searched key: a key this config has, a distribution that
    reads, and values (the bounds, every choice) that this config allows in its place."""
    t = config.tune
    if t == TuneConfig():
        return
    check(
        isinstance(t.metric, str) and t.metric.startswith(METRIC_PREFIXES),
        "tune.metric",
        t.metric,
        f"must be a metrics.csv column (starting {', '.join(METRIC_PREFIXES)}), e.g. "
        f"{TuneConfig.metric} or {EVAL_METRICS[0]}",
    )
    if isinstance(t.metric, str) and t.metric.startswith("eval/"):
        # an evaluation's columns are known: a sweep on another would fail every trial
        check(
            t.metric in EVAL_METRICS,
            "tune.metric",
            t.metric,
            f"evaluations log {' and '.join(EVAL_METRICS)}: use one of them",
        )
        check(
            config.trainer.test_every > 0,
            "tune.metric",
            t.metric,
            "is logged by evaluations: needs trainer.test_every > 0 "
            f"(here trainer.test_every={config.trainer.test_every})",
        )
    pbt = t.scheduler == TuneScheduler.PBT
    check(
        not t.synchronous or pbt,
        "tune.synchronous",
        t.synchronous,
        f"is PBT's: needs tune.scheduler=pbt (here {_shown(t.scheduler)!r})",
    )
    total = config.trainer.total_frames
    for key, scheduler, value in (
        ("grace_frames", TuneScheduler.ASHA, t.grace_frames),
        ("perturbation_frames", TuneScheduler.PBT, t.perturbation_frames),
    ):
        if t.scheduler == scheduler and isinstance(value, int) and value > 0:
            check(
                value < total,
                f"tune.{key}",
                value,
                f"must be < trainer.total_frames ({total}): a trial would end before its first "
                f"{scheduler.value} decision",
            )
    check(
        not (pbt and t.searcher == TuneSearcher.OPTUNA),
        "tune.searcher",
        _shown(t.searcher),
        "tune.scheduler=pbt explores by perturbing the trials it copies: use searcher random",
    )
    base = {k: v for k, v in config_to_dict(config).items() if k != "tune"}
    before = {str(p) for p in verify(parse_config(base)[0], None)}
    for key, spec in t.search.items():
        name = search_key(key)
        try:
            dim = parse_dimension(key, spec)
        except ConfigError as err:
            check.extend(err.details)
            continue
        if key == "algorithm" or key.split(".")[0] == "tune":
            check(False, name, spec, "the algorithm and the tune section cannot be searched")
            continue
        algo = ALGORITHMS.get(config.algorithm)
        # the tunables that are config keys too (DQN's epsilon is its schedule's value, set
        # from dqn.eps_init and dqn.eps_final: not a key a trial can be given)
        keys = {f.name for f in dataclasses.fields(config.algo)} if config.algo else set()
        names = [n for n in ("lr", *getattr(algo, "tunable", ())) if n in keys]
        tunable = [f"{config.algorithm}.{n}" for n in names]
        if pbt and key not in tunable:
            check(False, name, spec, PBT_KEYS_MSG.format(key=key, tunable=tunable))
            continue
        if dim.kind == Distribution.GRID and (pbt or t.searcher == TuneSearcher.OPTUNA):
            check(False, name, spec, "grid needs tune.searcher=random and no pbt: use choice")
            continue
        for value in dim.candidates():
            said = _candidate_problem(base, key, value, before)
            if said is not None:
                if dim.kind in FLOAT_DRAWS and "must be int" in said:
                    said += f" ({dim.kind.value} draws floats: use randint or choice)"
                check(False, name, spec, f"at {key}={shown(value)!r}: {said}")
                break


FLOAT_DRAWS = (Distribution.UNIFORM, Distribution.LOGUNIFORM)
#: the metrics.csv column groups a sweep's metric can be
METRIC_PREFIXES = ("train/", "eval/", "loss/", "time/")
PBT_KEYS_MSG = (
    "tune.scheduler=pbt copies a trial's checkpoint into trials with other values, and a "
    "loaded algorithm can change only its learning rate and tunable coefficients: search "
    "one of {tunable} with pbt, or {key} with asha or fifo"
)


def _candidate_problem(base: dict[str, Any], key: str, value: Any, before: set[str]) -> str | None:
    """What is wrong with ``base`` where ``key`` is ``value`` and not without it (None: fine)."""
    config, problems = parse_config(base, [f"{key}={yaml.safe_dump(to_plain(value)).strip()}"])
    if problems:
        return "; ".join(str(p) for p in problems)
    new = [str(p) for p in verify(config, None) if str(p) not in before]
    return "; ".join(new) if new else None


def _rendering_problem(config: Config) -> str | None:
    """Why the env of ``config.env`` cannot be filmed; tried once per env section."""
    key = repr(to_plain(config.env))
    if key not in _RENDERS:
        from fleetrl.video import rendering_problem

        try:
            _RENDERS[key] = rendering_problem(create_env_fn(config.env))
        except Exception as err:  # an env the engine checks refuse: said by env.engine
            _RENDERS[key] = f"{type(err).__name__}: {err}"
    return _RENDERS[key]


#: env section (its plain form) -> why it cannot be filmed (None: it can), in this process
_RENDERS: dict[str, str | None] = {}


def _decoupled(config: Config, check: Problems) -> None:
    """``collector.decoupled: true``: remote collectors, an off-policy algorithm, the central
    learner, no lag bound."""
    if not config.collector.decoupled:
        return
    off_policy = sorted(name for name, cls in ALGORITHMS.items() if not cls.on_policy)
    cls = ALGORITHMS.get(config.algorithm)
    check(
        cls is None or not cls.on_policy,
        "algorithm",
        config.algorithm,
        DECOUPLED_NEEDS["algorithm"].format(allowed=", ".join(off_policy)),
    )
    c, g = config.collector, config.scheme.num_grad_workers
    check(
        c.num_collectors >= 1,
        "collector.num_collectors",
        c.num_collectors,
        DECOUPLED_NEEDS["collector.num_collectors"],
    )
    check(g == 1, "scheme.num_grad_workers", g, DECOUPLED_NEEDS["scheme.num_grad_workers"])
    check(
        c.max_served_lag is None,
        "collector.max_served_lag",
        c.max_served_lag,
        DECOUPLED_NEEDS["collector.max_served_lag"],
    )


def _batch_sizes(config: Config, check: Problems) -> None:
    """The one batch-size rule (fleetrl.batch_sizes), in config keys."""
    c, t = config.collector, config.trainer
    check(c.frames_per_batch > 0, "collector.frames_per_batch", c.frames_per_batch, "must be > 0")
    check(t.total_frames > 0, "trainer.total_frames", t.total_frames, "must be > 0")
    # a sync RayCollector splits each batch (decoupled collection is first ready)
    remote_sync = c.sync and c.num_collectors > 0 and not c.decoupled
    for problem in batch_size_problems(
        frames_per_batch=c.frames_per_batch,
        total_frames=t.total_frames,
        num_envs=config.env.num_envs if config.env.num_envs > 0 else None,
        split=c.num_collectors if remote_sync else 1,
        names=CONFIG_NAMES,
    ):
        if not check.has(problem.key):
            check.extend([problem])


def _normalization(config: Config, check: Problems) -> None:
    """env.normalize_observation / env.normalize_reward: the algorithms whose default
    networks and learners take the statistics (fleetrl.normalization)."""
    for name in ("normalize_observation", "normalize_reward"):
        if getattr(config.env, name) is not True:
            continue
        check(
            config.algorithm in NORMALIZING_ALGORITHMS,
            f"env.{name}",
            True,
            f"is supported for the algorithms {list(NORMALIZING_ALGORITHMS)}, not "
            f"algorithm={config.algorithm!r}; set env.{name}=false",
        )


def _atari_section(config: Config, check: Problems) -> None:
    """env.atari.* preprocesses ALE games only: set for another env it would do nothing."""
    import gymnasium as gym

    if is_atari_id(config.env.id) or config.env.id not in gym.registry:
        return  # an unknown id is the problem to name (describe names it), not its section
    default = AtariConfig()
    for f in dataclasses.fields(default):
        value = getattr(config.env.atari, f.name)
        if value != getattr(default, f.name):
            check.add(
                f"env.atari.{f.name}",
                value,
                f"env.atari preprocesses ALE games (e.g. ALE/Pong-v5) and env.id="
                f"{config.env.id!r} is not one, so it would do nothing; remove the key",
            )


def _device(config: Config, check: Problems) -> None:
    """``trainer.device``: a torch device this machine has."""
    import torch

    device = config.trainer.device
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as err:
        reason = f"not a device ({err})"
        check(False, "trainer.device", device, DEVICE_PROBLEM.format(reason=reason))
        return
    if parsed.type == "cuda":
        reason = "CUDA is not available here" if not torch.cuda.is_available() else ""
        if not reason and parsed.index is not None and parsed.index >= torch.cuda.device_count():
            reason = f"this machine has {torch.cuda.device_count()} CUDA device(s)"
        check(not reason, "trainer.device", device, DEVICE_PROBLEM.format(reason=reason))
    else:
        reason = "the learner runs on the CPU or a CUDA GPU"
        check(parsed.type == "cpu", "trainer.device", device, DEVICE_PROBLEM.format(reason=reason))


def _scheme(config: Config, check: Problems) -> None:
    s = config.scheme
    for name, amount in s.grad_worker_resources.items():
        check(amount >= 0, f"grad_worker_resources.{name}", amount, "must be >= 0")
    update = enum_value(LearnerMode, s.update)
    if update is None:
        return  # reported as an invalid Enum value
    check(
        update is not LearnerMode.CENTRAL,
        "update",
        s.update,
        "must be 'sync', 'async' or 'decentralized' (the central learner is "
        "scheme.num_grad_workers=1)",
    )
    if s.num_grad_workers == 1:
        # one worker at a level runs in the driver: the central learner, nothing distributed
        check(
            update in (LearnerMode.SYNC, LearnerMode.CENTRAL),
            "update",
            s.update,
            f"{_shown(update)!r} needs scheme.num_grad_workers >= 2 (1 is the central learner)",
        )
        return
    check(
        update is not LearnerMode.DECENTRALIZED or config.trainer.backend == "ray",
        "update",
        s.update,
        "all-reduces among gradient worker processes: needs trainer.backend='ray' (here "
        f"{config.trainer.backend!r}, which runs every worker in this one process)",
    )
    on_policy = [name for name, cls in ALGORITHMS.items() if cls.on_policy]
    cls = ALGORITHMS.get(config.algorithm)
    check(
        cls is None or cls.on_policy or update is not LearnerMode.ASYNC,
        "update",
        s.update,
        f"'async' runs the on-policy algorithms {on_policy}: a replica of "
        f"algorithm={config.algorithm!r} must see every update for its target network to follow "
        "the master's; use 'sync'",
    )


def _algorithm(config: Config, check: Problems) -> None:
    cls = ALGORITHMS.get(config.algorithm)
    if cls is None:
        return
    if not isinstance(config.algo, cls.config_class):
        got = type(config.algo).__name__
        check(False, config.algorithm, got, f"must be a {cls.config_class.__name__}")
        return
    config.algo.validate(config, check.section(config.algorithm))


def _spaces(config: Config, spec: EnvSpec, check: Problems) -> None:
    """What the env's spaces allow: the algorithm's actions, a conv network, normalization."""
    model = getattr(config.algo, "model", None)
    if isinstance(model, ModelKind):
        for text in conv_problems(config.algorithm, model.value, config.env.id, spec):
            check.say(f"{config.algorithm}.model", text)
        if config.env.normalize_observation:
            kind = resolve_model(model, spec)
            if kind is not ModelKind.MLP:
                text = NORMALIZE_CONV_MSG.format(model=kind.value, shape=spec.obs_shape)
                check.say("env.normalize_observation", text)
    _replay_memory(config, spec, check)
    if config.algorithm not in ACTION_KINDS:
        return
    needs, instead, example = ACTION_KINDS[config.algorithm]
    if (needs == "discrete") == spec.discrete:
        return
    if spec.discrete:
        has = f"{spec.num_actions} discrete actions"
    elif spec.integer_actions:
        has = f"{spec.action_dim} integer actions (a MultiDiscrete or MultiBinary space)"
    else:
        has = f"continuous actions ({spec.action_dim}-dimensional)"
    text = ACTIONS_MSG.format(
        algorithm=config.algorithm,
        env_id=config.env.id,
        name=config.algorithm.upper(),
        needs=needs,
        has=has,
        instead=instead,
        example=example,
    )
    check.say("algorithm", text)


def _replay_memory(config: Config, spec: EnvSpec, check: Problems) -> None:
    """A replay buffer that cannot fit in this machine's memory (torchrl allocates the whole
    storage at the first write: the run would fail there, after its actors started).

    A cluster (``collector.address``) is not judged from here: its actors' nodes may differ.
    """
    size = getattr(config.algo, "buffer_size", None)
    if not isinstance(size, int) or size <= 0 or config.collector.address is not None:
        return
    have = physical_memory()
    if have is None:
        return
    obs = math.prod(spec.obs_shape or (spec.obs_dim,)) * (1 if spec.pixels else 4)
    per = 2 * obs + 8 * spec.action_dim + 32  # obs and next obs, action, reward, 3 flags, index
    # a buffer per gradient worker in the distributed scheme; one (the learner's or the
    # decoupled actor's) otherwise
    buffers = config.scheme.num_grad_workers if not config.collector.decoupled else 1
    need = buffers * size * per
    if need <= have:
        return
    text = REPLAY_MEMORY_MSG.format(
        algorithm=config.algorithm,
        size=size,
        buffers="one buffer" if buffers == 1 else f"{buffers} buffers (one per gradient worker)",
        per=human_bytes(per),
        obs_shape="x".join(str(d) for d in spec.obs_shape) or "1",
        dtype="uint8" if spec.pixels else "float32",
        verb="needs" if buffers == 1 else "need",
        need=human_bytes(need),
        have=human_bytes(have),
        fit=max(1, have // 2 // (buffers * per)),
    )
    check.say(f"{config.algorithm}.buffer_size", text)


def resource_problems(config: Config) -> list[Problem]:
    """Where Ray runs already: the CPUs (and custom resources) the run's workers ask for,
    against the cluster's (:func:`fleetrl.runtime.resource_shortfalls`), in config keys.
    Empty where Ray does not run yet, or the workers run in process."""
    if config.trainer.backend != "ray":
        return []
    c, s = config.collector, config.scheme
    check = Problems()
    if s.num_grad_workers > 1:
        per = s.num_cpus_per_grad_worker + c.num_collectors * c.num_cpus_per_collector
        if c.inference == "server" and c.num_collectors > 0:  # each worker's own servers
            per += c.num_inference_servers * c.num_cpus_per_inference_server
        request = {"CPU": per, **s.grad_worker_resources}
        for short in resource_shortfalls([request] * s.num_grad_workers):
            if short.request is not None:
                continue  # the totals say it in the config's terms
            if short.resource == "CPU":
                text = GRAD_WORKERS_MSG.format(
                    g=s.num_grad_workers, per=per, need=short.asked, have=short.have
                )
                check.say("scheme.num_grad_workers", text)
            else:
                text = GRAD_WORKER_RESOURCES_MSG.format(
                    value=s.grad_worker_resources,
                    g=s.num_grad_workers,
                    amount=s.grad_worker_resources[short.resource],
                    name=short.resource,
                    need=short.asked,
                    have=short.have,
                )
                check.say("scheme.grad_worker_resources", text)
        return list(check)
    if c.num_collectors == 0:
        return []
    requests = [{"CPU": c.num_cpus_per_collector}] * c.num_collectors
    for short in resource_shortfalls(requests):
        if short.request == 0:  # every collector asks the same: said once
            text = NODE_MSG.format(cpus=c.num_cpus_per_collector, have=short.have)
            check.say("collector.num_cpus_per_collector", text)
        elif short.request is None:
            text = RESOURCES_MSG.format(
                count=c.num_collectors,
                cpus=c.num_cpus_per_collector,
                asked=short.asked,
                have=f" but the Ray cluster has {short.have:g}",
                suggest=short.have / c.num_collectors
                if short.have
                else c.num_cpus_per_collector / 2,
            )
            check.say("collector.num_collectors", text)
    if c.inference == "server" and not list(check):
        servers = [{"CPU": c.num_cpus_per_inference_server}] * c.num_inference_servers
        for short in resource_shortfalls(requests + servers):
            if short.request is None and short.resource == "CPU":
                check.say(
                    "collector.num_cpus_per_inference_server",
                    SERVER_CPUS_MSG.format(
                        cpus=c.num_cpus_per_inference_server,
                        servers=c.num_inference_servers,
                        collectors=c.num_collectors * c.num_cpus_per_collector,
                        asked=short.asked,
                        have=short.have,
                    ),
                )
    return list(check)


def _close_ids(env_id: str) -> str:
    import gymnasium as gym

    by_lower = {name.lower(): name for name in gym.registry}
    close = difflib.get_close_matches(env_id.lower(), list(by_lower), n=3, cutoff=0.6)
    if close:
        return "did you mean " + " or ".join(repr(by_lower[c]) for c in close) + "?"
    return (
        "check the spelling (gymnasium.pprint_registry() lists the ids), or import the "
        "package that registers the env before the config is loaded"
    )


def _shown(value: Any) -> Any:
    return getattr(value, "value", value)

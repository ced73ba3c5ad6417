"""The rules of a config's keys: each key's range, and the rules that tie keys together.

:data:`RANGES` holds the range of single keys; the functions below each check one
concern (the collectors' preemption, central inference, overlap, the trackers,
decoupled collection, normalization, the batch sizes, the device, the learner's
mode, the algorithm's own section), adding each :class:`~fleetrl.errors.Problem`
to the :class:`~fleetrl.errors.Problems` they are given.
:func:`fleetrl.setup.verify.verify` runs them all, with the env's checks
(:mod:`fleetrl.setup.verify.env`) and the sweep's (:mod:`fleetrl.setup.verify.sweep`).

Examples:
    >>> from fleetrl.errors import ConfigError, Problems
    >>> from fleetrl.setup import parse_config
    >>> config, _ = parse_config({"algorithm": "ppo", "env": {"num_envs": 0}})
    >>> check = Problems()
    >>> range_rules(config, check)
    >>> [str(p) for p in check]
    ['env.num_envs=0 is invalid: must be > 0']
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from collections.abc import Callable
from typing import Any

from fleetrl.algorithms.sections import SECTIONS
from fleetrl.collectors.inference import config_problems
from fleetrl.collectors.remote.fleet_options import FLEET_CONFIG_KEYS, FleetOptions
from fleetrl.collectors.rollout_options import CONFIG_NAMES, RolloutOptions
from fleetrl.collectors.rules import COLLECTOR_KEYS, Audience
from fleetrl.config import Config, LearnerMode, enum_of, enum_value, type_hints
from fleetrl.distributed.backends import BACKENDS
from fleetrl.errors import ConfigError, Problems
from fleetrl.extras import pip_install
from fleetrl.fleet_size import FleetSize
from fleetrl.setup.parse import allowed_values

__all__ = [
    "CONFIG_NAMES",
    "DECOUPLED_NEEDS",
    "DEVICE_PROBLEM",
    "NORMALIZING_ALGORITHMS",
    "RANGES",
    "TRACKERS",
    "TRACKER_EXTRA_MSG",
    "WANDB_PROJECT_FORBIDS",
    "algorithm_rules",
    "batch_size_rules",
    "collector_rules",
    "config_rules",
    "decoupled_rules",
    "device_rules",
    "field_rules",
    "inference_rules",
    "normalization_rules",
    "overlap_rules",
    "range_rules",
    "scheme_rules",
    "shown_value",
    "tracker_rules",
]

TRACKER_EXTRA_MSG = (
    "logging.{key}=true needs the {extra} extra: {install} "
    "(No module named {module!r}); or set logging.{key}=false"
)
#: the experiment trackers (fleetrl.run.tracking): logging key -> (module imported, extra)
TRACKERS = {"mlflow": ("mlflow", "mlflow"), "wandb": ("wandb", "wandb")}
#: the characters W&B refuses in a project name
WANDB_PROJECT_FORBIDS = "/\\#?%:"

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
#: learners scale rewards (fleetrl.networks.normalization)
NORMALIZING_ALGORITHMS = ("a2c", "appo", "impala", "ppo")


def _fleet_size(value: Any) -> FleetSize | None:
    try:
        return FleetSize.parse(value, zero=True)
    except ValueError:
        return None


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
    "collector.num_collectors": (
        lambda v: _fleet_size(v) is not None,
        "must be >= 0 (0: local, no Ray), a range 'MIN-MAX' with 1 <= MIN <= MAX (e.g. '2-8'), "
        "or 'auto'",
    ),
    "collector.num_cpus_per_collector": (_at_least(0), "must be >= 0"),
    "collector.decoupled_frames_ahead": (_above(0, null=True), "must be > 0, or null"),
    # the keys RayCollector's arguments share: their rules, written once (fleetrl.collectors.rules)
    # and checked by the fleet's options when the config's are made (fleet_rules)
    **{rule.config_key: (rule.ok, rule.says(Audience.CONFIG)) for rule in COLLECTOR_KEYS},
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


def config_rules(config: Config, check: Problems) -> None:
    """Every rule of the keys that needs neither the env nor torch: the types and ranges,
    the rules that tie keys together, the algorithm's section. ``fleetrl train`` runs them
    before torch, torchrl or Ray is imported (:func:`fleetrl.setup.screen.screen_file`),
    so a typo or a value out of range is refused at once; :func:`device_rules` and the
    env's checks follow (:func:`fleetrl.setup.verify.verify`)."""
    range_rules(config, check)
    fleet_rules(config, check)
    collector_rules(config, check)
    inference_rules(config, check)
    overlap_rules(config, check)
    tracker_rules(config, check)
    decoupled_rules(config, check)
    normalization_rules(config, check)
    batch_size_rules(config, check)
    scheme_rules(config, check.section("scheme"))
    algorithm_rules(config, check)


def range_rules(config: Config, check: Problems) -> None:
    """Every section's field types (:func:`field_rules`), the algorithm's name, and the range
    of each key in :data:`RANGES`."""
    for f in dataclasses.fields(config):  # finite floats, Enum values, in every section
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            field_rules(value, check.section(config.algorithm if f.name == "algo" else f.name))
    check(
        config.algorithm in SECTIONS,
        "algorithm",
        config.algorithm,
        f"must be one of {sorted(SECTIONS)}",
    )
    for key, (ok, allowed) in RANGES.items():
        if key in FLEET_KEYS:  # the fleet's options check these when made (fleet_rules)
            continue
        section, name = key.split(".")
        value = getattr(getattr(config, section), name)
        check(ok(value), key, value, allowed)


#: the config keys :class:`~fleetrl.collectors.FleetOptions` checks when a config's are made
FLEET_KEYS = frozenset(f"collector.{name}" for name in FLEET_CONFIG_KEYS)


def fleet_rules(config: Config, check: Problems) -> None:
    """The fleet's options of the config's ``collector`` section, made (and so checked) once
    for the run: the collector takes the same object (:meth:`FleetOptions.from_config
    <fleetrl.collectors.FleetOptions.from_config>`). Their problems are said in config keys."""
    try:
        FleetOptions.from_config(config.collector)
    except ConfigError as err:
        check.extend(p for p in err.details if not check.has(p.key))


def field_rules(obj: Any, check: Problems) -> None:
    """What holds for every field of a dataclass, nested ones too: a float is finite (``.nan``
    and ``.inf`` pass ``> 0``-style checks) and an Enum-typed field holds one of its values."""
    hints = type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        enum_cls = enum_of(hints[f.name])
        if dataclasses.is_dataclass(value):
            field_rules(value, check.section(f.name))
        elif isinstance(value, float) and not math.isfinite(value):
            check(False, f.name, value, "must be a finite number")
        elif enum_cls is not None:
            check(enum_value(enum_cls, value) is not None, f.name, value, allowed_values(enum_cls))


ELASTIC_NEEDS = {
    "trainer.backend": "collector.num_collectors='auto' counts the Ray cluster's room for "
    "collectors: needs trainer.backend=ray",
    "scheme.num_grad_workers": "a range of collectors feeds the central learner: needs 1 "
    "(each gradient worker runs a fixed number of collectors)",
    "collector.inference": "a range of collectors cannot use collector.inference=server yet "
    "(the servers are placed for a fixed fleet): needs local",
}


def collector_rules(config: Config, check: Problems) -> None:
    """Preempting stragglers (``fraction_samples``, ``fraction_workers`` below 1): sync
    remote collection with two collectors or more. A range of collectors (an elastic fleet):
    the central learner, local inference, and Ray for ``auto``."""
    c = config.collector
    fleet = _fleet_size(c.num_collectors)
    if fleet is not None and fleet.elastic:
        backend, g = config.trainer.backend, config.scheme.num_grad_workers
        if fleet.max is None:
            check(backend == "ray", "trainer.backend", backend, ELASTIC_NEEDS["trainer.backend"])
        check(g == 1, "scheme.num_grad_workers", g, ELASTIC_NEEDS["scheme.num_grad_workers"])
        check(
            c.inference == "local",
            "collector.inference",
            c.inference,
            ELASTIC_NEEDS["collector.inference"],
        )
    for name in ("fraction_samples", "fraction_workers"):
        value = getattr(c, name)
        if 0 < value < 1:
            check(
                c.sync and c.fleet.min >= 2,
                f"collector.{name}",
                value,
                "preempts straggling remote collectors: needs collector.sync=true and "
                "collector.num_collectors >= 2",
            )


def inference_rules(config: Config, check: Problems) -> None:
    """Central inference's keys: the rules ``RayCollector`` applies to its arguments, written
    once (:mod:`fleetrl.collectors.inference.options`) and said here in config keys."""
    config_problems(config.collector, check)


def overlap_rules(config: Config, check: Problems) -> None:
    c, e = config.collector, config.env
    if c.overlap in ("on", True):
        check(
            e.engine in ("ale_vector", "envpool") and e.num_envs >= 2 and e.num_envs % 2 == 0,
            "collector.overlap",
            c.overlap,
            "steps two halves of a C++ Atari engine: needs env.engine 'ale_vector' or "
            f"'envpool' and an even env.num_envs >= 2 (here env.engine={shown_value(e.engine)!r}, "
            f"env.num_envs={e.num_envs}); use auto or off",
        )


def tracker_rules(config: Config, check: Problems) -> None:
    """``logging.mlflow`` / ``logging.wandb``: the package the tracker imports is installed
    (looked up, not imported: importing wandb or mlflow takes a second)."""
    for key, (module, extra) in TRACKERS.items():
        if getattr(config.logging, key) is True and importlib.util.find_spec(module) is None:
            check.say(
                f"logging.{key}",
                TRACKER_EXTRA_MSG.format(
                    key=key, extra=extra, module=module, install=pip_install(extra)
                ),
            )


def decoupled_rules(config: Config, check: Problems) -> None:
    """``collector.decoupled: true``: remote collectors, an off-policy algorithm, the central
    learner, no lag bound."""
    if not config.collector.decoupled:
        return
    off_policy = sorted(name for name, cls in SECTIONS.items() if not cls.on_policy)
    cls = SECTIONS.get(config.algorithm)
    check(
        cls is None or not cls.on_policy,
        "algorithm",
        config.algorithm,
        DECOUPLED_NEEDS["algorithm"].format(allowed=", ".join(off_policy)),
    )
    c, g = config.collector, config.scheme.num_grad_workers
    check(
        c.fleet.min >= 1,
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


def batch_size_rules(config: Config, check: Problems) -> None:
    """The one batch-size rule (fleetrl.batch_sizes), in config keys."""
    c, t = config.collector, config.trainer
    check(c.frames_per_batch > 0, "collector.frames_per_batch", c.frames_per_batch, "must be > 0")
    check(t.total_frames > 0, "trainer.total_frames", t.total_frames, "must be > 0")
    # made (and so checked) once for the run: its collector takes the same object
    try:
        RolloutOptions.from_config(config)
    except ConfigError as err:
        check.extend(p for p in err.details if not check.has(p.key))


def normalization_rules(config: Config, check: Problems) -> None:
    """env.normalize_observation / env.normalize_reward: the algorithms whose default
    networks and learners take the statistics (fleetrl.networks.normalization)."""
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


def device_rules(config: Config, check: Problems) -> None:
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


def scheme_rules(config: Config, check: Problems) -> None:
    """The learner's mode (``scheme.update``) against the workers, the backend and the
    algorithm; each gradient worker's custom resources (``check``: the scheme's section)."""
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
            f"{shown_value(update)!r} needs scheme.num_grad_workers >= 2 (1 is the central learner)",
        )
        return
    check(
        update is not LearnerMode.DECENTRALIZED or config.trainer.backend == "ray",
        "update",
        s.update,
        "all-reduces among gradient worker processes: needs trainer.backend='ray' (here "
        f"{config.trainer.backend!r}, which runs every worker in this one process)",
    )
    on_policy = [name for name, cls in SECTIONS.items() if cls.on_policy]
    cls = SECTIONS.get(config.algorithm)
    check(
        cls is None or cls.on_policy or update is not LearnerMode.ASYNC,
        "update",
        s.update,
        f"'async' runs the on-policy algorithms {on_policy}: a replica of "
        f"algorithm={config.algorithm!r} must see every update for its target network to follow "
        "the master's; use 'sync'",
    )


def algorithm_rules(config: Config, check: Problems) -> None:
    """The algorithm's section is its config class, and passes that class's own checks."""
    cls = SECTIONS.get(config.algorithm)
    if cls is None:
        return
    if not isinstance(config.algo, cls):
        got = type(config.algo).__name__
        check(False, config.algorithm, got, f"must be a {cls.__name__}")
        return
    config.algo.validate(config, check.section(config.algorithm))


def shown_value(value: Any) -> Any:
    """An Enum member as its value (as a config file writes it); anything else as it is."""
    return getattr(value, "value", value)

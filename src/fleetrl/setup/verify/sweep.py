"""A sweep's checks: its metric, its scheduler's keys, and each searched key's values.

:func:`tune_rules` checks a config's ``tune`` section before any trial starts:
the metric is a ``metrics.csv`` column the run logs, the scheduler's own keys
suit it, and each key of ``tune.search`` is a key the config has, with a
distribution that reads (:mod:`fleetrl.setup.search`) and values (the bounds,
every choice) that the whole config allows in its place, said at the value that
breaks it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from fleetrl.algorithms import ALGORITHMS
from fleetrl.config import EVAL_METRICS, Config, TuneConfig, TuneScheduler, TuneSearcher
from fleetrl.envs.engine import ResolvedEnv
from fleetrl.errors import ConfigError, Problem, Problems, shown
from fleetrl.setup.parse import with_value
from fleetrl.setup.search import Distribution, parse_dimension, search_key
from fleetrl.setup.verify.rules import shown_value

__all__ = ["FLOAT_DRAWS", "METRIC_PREFIXES", "PBT_KEYS_MSG", "Verify", "tune_rules"]

#: the whole config's checks, as :func:`fleetrl.setup.verify.verify` takes them
Verify = Callable[..., list[Problem]]

FLOAT_DRAWS = (Distribution.UNIFORM, Distribution.LOGUNIFORM)
#: the metrics.csv column groups a sweep's metric can be
METRIC_PREFIXES = ("train/", "eval/", "loss/", "time/")
PBT_KEYS_MSG = (
    "tune.scheduler=pbt copies a trial's checkpoint into trials with other values, and a "
    "loaded algorithm can change only its learning rate and tunable coefficients: search "
    "one of {tunable} with pbt, or {key} with asha or fifo"
)


def tune_rules(config: Config, env: ResolvedEnv, check: Problems, verify: Verify) -> None:
    """The sweep's metric, and each searched key: a key this config has, a distribution that
    reads, and values (the bounds, every choice) that this config allows in its place.

    ``verify``: the whole config's checks (:func:`fleetrl.setup.verify.verify`), run on
    the config with each candidate value; ``env``: the section resolved, reused by every
    candidate that leaves the env section as it is.
    """
    t = config.tune
    if t == TuneConfig():
        return
    check(
        not config.collector.fleet.elastic,
        "collector.num_collectors",
        config.collector.num_collectors,
        "a sweep's trials share the cluster, each with the collectors it reserves: needs an int",
    )
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
        f"is PBT's: needs tune.scheduler=pbt (here {shown_value(t.scheduler)!r})",
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
        shown_value(t.searcher),
        "tune.scheduler=pbt explores by perturbing the trials it copies: use searcher random",
    )
    base = dataclasses.replace(config, tune=TuneConfig())  # the candidates' checks skip this
    before = {str(p) for p in verify(base, None, env=env)}
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
            said = _candidate_problem(base, key, value, before, env, verify)
            if said is not None:
                if dim.kind in FLOAT_DRAWS and "must be int" in said:
                    said += f" ({dim.kind.value} draws floats: use randint or choice)"
                check(False, name, spec, f"at {key}={shown(value)!r}: {said}")
                break


def _candidate_problem(
    base: Config, key: str, value: Any, before: set[str], env: ResolvedEnv, verify: Verify
) -> str | None:
    """What is wrong with ``base`` where ``key`` is ``value`` and not without it (None: fine)."""
    config, problems = with_value(base, key, value)
    if problems:
        return "; ".join(str(p) for p in problems)
    same_env = not key.startswith("env.")
    new = [
        str(p) for p in verify(config, None, env=env if same_env else None) if str(p) not in before
    ]
    return "; ".join(new) if new else None

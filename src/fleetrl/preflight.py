"""Checks of a config against the world, made before a run starts or leaves a trace.

:mod:`fleetrl.config` checks types and ranges; the checks here need more than
the config: gymnasium's registry and the env itself (:func:`check_env`), the
run being resumed (:func:`check_resume_overrides`, :func:`check_budget`), and
what Ray answered when the collectors asked for their resources
(:func:`config_terms`). Each speaks the config's language: the key, the value
and the fix, never a Python argument the user did not write.

Examples:
    >>> problems = []
    >>> check_env(config_from_dict({"algorithm": "ppo"}), problems)
    >>> problems
    []
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from fleetrl.config import Config, config_from_dict, config_to_dict
from fleetrl.errors import ConfigError

__all__ = [
    "FROZEN_ON_RESUME",
    "check_budget",
    "check_env",
    "check_resume_overrides",
    "config_terms",
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
#: the algorithms that suit one kind of action space only
ACTION_KINDS = {
    "sac": ("continuous", "ppo or a2c", "Pendulum-v1"),
    "dqn": ("discrete", "ppo or a2c", "CartPole-v1"),
}
COMPLETE_MSG = (
    "trainer.total_frames={total} is invalid: the run in {run_dir} is complete at {frames} "
    "frames; to train further, resume with a larger budget, e.g. "
    "trainer.total_frames={suggest}"
)
FROZEN_MSG = (
    "{key}={value!r} is invalid on resume: the run in {run_dir} was started with "
    "{key}={before!r} and its checkpoint holds {what}; drop the override, or "
    "start a new run (fleetrl train CONFIG --run-dir NEW_DIR)"
)
#: keys a resumed run cannot change, and what in the checkpoint depends on each
#: (``{algo}``: the section of the run's algorithm)
FROZEN_ON_RESUME = {
    "algorithm": "that algorithm's networks and optimizer",
    "env.id": "networks sized for that env's spaces",
    "env.atari.frame_stack": "networks sized for that many stacked frames",
    "env.atari.screen_size": "networks sized for that frame size",
    "env.atari.full_action_space": "networks sized for that many actions",
    "scheme.num_grad_workers": "state for that many gradient workers",
    "{algo}.hidden_sizes": "networks of those sizes",
    "{algo}.model": "networks of that kind",
    "env.normalize_observation": "networks with (or without) observation statistics",
    "env.normalize_reward": "reward-scaling statistics (or none)",
}
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


def check_env(cfg: Config, problems: list[str]) -> None:
    """Append a problem if ``env.id`` is unknown, cannot be made, or does not suit the algorithm."""
    import gymnasium as gym

    from fleetrl.engines import env_spec, is_atari_id

    env_id = cfg.env.id
    if any(p.startswith(("env.engine=", "env.atari.")) for p in problems):
        return  # the engine cannot be built as configured; its problems say why
    is_atari_id(env_id)  # registers the ALE ids, if ale-py is installed
    try:
        gym.spec(env_id)  # what the collectors look up (fleetrl.envs.make_gym_vector_env)
    except gym.error.Error:
        problems.append(UNKNOWN_ENV_MSG.format(env_id=env_id, hint=_close_ids(env_id)))
        return
    from fleetrl.algorithms.models import env_info

    try:
        info = env_info(env_spec(cfg.env))
    # a registered env may fail to build for any reason of its own (a missing
    # dependency, a bad default argument): report it as a config problem
    except Exception as err:
        problems.append(
            ENV_MAKE_MSG.format(env_id=env_id, err=f"{type(err).__name__}: {err}".rstrip(": "))
        )
        return
    problems.extend(_model_problems(cfg, info))
    problems.extend(_normalization_problems(cfg, info))
    if cfg.algorithm not in ACTION_KINDS:
        return
    needs, instead, example = ACTION_KINDS[cfg.algorithm]
    if (needs == "discrete") == info.discrete:
        return
    has = (
        f"{info.num_actions} discrete actions"
        if info.discrete
        else f"continuous actions ({info.action_dim}-dimensional)"
    )
    problems.append(
        ACTIONS_MSG.format(
            algorithm=cfg.algorithm,
            env_id=env_id,
            name=cfg.algorithm.upper(),
            needs=needs,
            has=has,
            instead=instead,
            example=example,
        )
    )


def _model_problems(cfg: Config, info: Any) -> list[str]:
    """A conv ``<algo>.model`` on an env without image observations or discrete actions."""
    from fleetrl.algorithms.models import ModelKind, conv_problems

    model = getattr(cfg.algo, "model", None)
    if not isinstance(model, ModelKind):
        return []  # unset, or already reported as an invalid value
    return conv_problems(cfg.algorithm, model.value, cfg.env.id, info)


def _normalization_problems(cfg: Config, info: Any) -> list[str]:
    """``env.normalize_observation`` with a conv network (pixels are scaled inside it)."""
    from fleetrl.algorithms.models import NORMALIZE_CONV_MSG, ModelKind, resolve_model

    model = getattr(cfg.algo, "model", None)
    if not cfg.env.normalize_observation or not isinstance(model, ModelKind):
        return []
    kind = resolve_model(model, info)
    if kind is ModelKind.MLP:
        return []
    return [NORMALIZE_CONV_MSG.format(model=kind.value, shape=info.obs_shape)]


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


def check_resume_overrides(
    saved: dict[str, Any], overrides: list[str] | None, run_dir: str | Path
) -> Config:
    """The resumed run's config: ``saved`` (its config.yaml) with ``overrides`` applied.

    Raises one ConfigError naming every override that changes a key of
    :data:`FROZEN_ON_RESUME`, with the value the run was started with.
    """
    before = config_from_dict(saved)
    after = config_from_dict(saved, overrides)
    old, new = config_to_dict(before), config_to_dict(after)
    problems = []
    for pattern, what in FROZEN_ON_RESUME.items():
        if "{algo}" in pattern and after.algorithm != before.algorithm:
            continue  # the new algorithm has none of the old one's section: "algorithm" says it
        key = pattern.format(algo=before.algorithm)
        was, now = _get(old, key), _get(new, key)
        if was != now:
            problems.append(
                FROZEN_MSG.format(key=key, value=now, before=was, run_dir=run_dir, what=what)
            )
    if problems:
        raise ConfigError(problems)
    return after


def _get(data: dict[str, Any], key: str) -> Any:
    """The value at a dotted key; None where the config has no such key (``sac.model``)."""
    for part in key.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def check_budget(frames: int, cfg: Config, run_dir: str | Path) -> None:
    """Refuse to resume a run that already trained ``trainer.total_frames`` frames."""
    total = cfg.trainer.total_frames
    if frames >= total:
        raise ConfigError(
            [
                COMPLETE_MSG.format(
                    total=total, run_dir=run_dir, frames=frames, suggest=frames + total
                )
            ]
        )


def config_terms(err: ConfigError, cfg: Config) -> ConfigError:
    """``err`` with the collectors' resource problems said in config keys.

    :class:`~fleetrl.collectors.RayCollector` checks ``remote_configs``, its
    Python argument; a config user wrote ``collector.num_collectors`` and
    ``collector.num_cpus_per_collector``, which the Trainer turned into it.
    Other problems pass through unchanged.
    """
    c = cfg.collector
    problems = []
    for problem in err.problems:
        if not problem.startswith("remote_configs"):
            problems.append(problem)
            continue
        # the numbers Ray reported, when the message carries them
        node = re.search(r"no Ray node has more than ([\d.]+)", problem)
        total = re.search(r"cluster has ([\d.]+)", problem)
        if node:
            have = float(node.group(1))
            text = NODE_MSG.format(cpus=c.num_cpus_per_collector, have=have)
        else:
            have = float(total.group(1)) if total else None
            text = RESOURCES_MSG.format(
                count=c.num_collectors,
                cpus=c.num_cpus_per_collector,
                asked=c.num_collectors * c.num_cpus_per_collector,
                have=f" but the Ray cluster has {have:g}" if have is not None else "",
                suggest=have / c.num_collectors if have else c.num_cpus_per_collector / 2,
            )
        if text not in problems:
            problems.append(text)
    return ConfigError(problems)

"""The whole config, verified once: :func:`verify`, :func:`check` and :class:`CheckedConfig`.

:func:`verify` gathers every problem of a config, from its env section resolved
once (:func:`~fleetrl.envs.engine.resolve_env`): the rules of its keys
(:mod:`~fleetrl.setup.verify.rules`), the env's (:mod:`~fleetrl.setup.verify.env`)
and the sweep's (:mod:`~fleetrl.setup.verify.sweep`). :func:`check_config`
describes the env and verifies the config, raising one
:class:`~fleetrl.errors.ConfigError` that lists every problem, and returns a
:class:`CheckedConfig`: the config with its resolved env and its spec.

A config is verified once: :func:`~fleetrl.setup.load.load_config` (and
:func:`~fleetrl.setup.resume.check_resume_overrides`) check it, and the run
takes that verification (:func:`checked_config`) without checking again, for
as long as the config is as it was verified. The verification travels with the
config object itself (:meth:`~fleetrl.config.Config.verification`); a copy, a
pickled config (a Ray worker's), a config built in code or one changed since (any
key) is checked where its run starts. Nothing here changes a config's keys.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field

from fleetrl.config import Config
from fleetrl.envs.engine import ResolvedEnv, resolve_env
from fleetrl.envs.spec import EnvSpec
from fleetrl.errors import ConfigError, Problem, Problems
from fleetrl.setup.parse import with_algorithm_section
from fleetrl.setup.screen import said_already
from fleetrl.setup.verify.env import (
    atari_section_rules,
    describe_env,
    resolved_problem_key,
    space_rules,
    video_rules,
)
from fleetrl.setup.verify.rules import config_rules, device_rules
from fleetrl.setup.verify.sweep import tune_rules

__all__ = [
    "CheckedConfig",
    "check",
    "check_config",
    "checked_config",
    "resolved_env",
    "verified",
    "verify",
]


def verify(
    config: Config,
    env_spec: EnvSpec | None,
    *,
    env: ResolvedEnv | None = None,
    screened: bool = False,
) -> list[Problem]:
    """Every problem of ``config`` (and, with its :class:`~fleetrl.envs.EnvSpec`, of what the
    env allows), in config keys; empty when it can run.

    ``env``: ``config.env`` resolved already (:func:`~fleetrl.envs.engine.resolve_env`), where
    the caller has it; it is resolved here otherwise. ``screened``: the rules that need no
    env passed already (:func:`~fleetrl.setup.screen.screen`), and are not run again.
    """
    env = env if env is not None else resolve_env(config.env)
    check = Problems()
    if not screened:
        config_rules(config, check)
    video_rules(config, env, env_spec, check)
    atari_section_rules(config, env, check)
    device_rules(config, check)
    tune_rules(config, env, check, verify)
    check.extend(Problem(resolved_problem_key(p), text=p) for p in env.problems)
    if env_spec is not None:
        space_rules(config, env_spec, check)
    return list(check)


@dataclass(frozen=True)
class CheckedConfig:
    """A config verified as a whole, with what the verification read: its env section
    resolved (:class:`~fleetrl.envs.engine.ResolvedEnv`) and the env's spaces
    (:class:`~fleetrl.envs.EnvSpec`), for the run to build from.

    It holds while the config is as it was verified (:attr:`holds`); a config changed
    since is checked again where a run starts (:func:`checked_config`).

    Examples:
        >>> from fleetrl.setup import load_config
        >>> config = load_config("configs/ppo_cartpole.yaml")
        >>> checked = checked_config(config)  # load_config's verification, not a second one
        >>> checked.config is config, checked.env.kind.value, checked.spec.num_actions
        (True, 'gymnasium', 2)
        >>> config.env.num_envs = 4
        >>> checked.holds, verified(config)  # changed since: a run checks it again
        (False, None)
    """

    config: Config
    env: ResolvedEnv
    spec: EnvSpec
    #: the config as it was verified (a copy)
    snapshot: Config = field(repr=False, compare=False)

    @property
    def holds(self) -> bool:
        """Whether :attr:`config` is as it was verified (no key changed since)."""
        return self.config == self.snapshot


def check_config(
    config: Config,
    problems: Iterable[Problem] = (),
    *,
    env_spec: EnvSpec | None = None,
    screened: bool = False,
) -> CheckedConfig:
    """Resolve the env, describe it (unless ``env_spec`` is given) and :func:`verify` the
    config, once; one ConfigError lists every problem (``problems`` found before first, e.g.
    unknown keys). ``screened``: the config passed the rules that need no env already
    (:func:`~fleetrl.setup.screen.screen`). The verification is remembered for this
    config (:func:`verified`)."""
    env = resolve_env(config.env)
    found = list(problems)
    spec, env_problems = env_spec, []
    if spec is None and not env.problems:  # an engine's problems are verify's to say
        spec, env_problems = describe_env(env)
    found += [
        p
        for p in verify(config, spec, env=env, screened=screened)
        if p not in found and not said_already(p, found)
    ]
    found += [p for p in env_problems if p not in found]
    if found:
        raise ConfigError(found)
    assert spec is not None
    checked = CheckedConfig(config, env, spec, copy.deepcopy(config))
    _remember(checked)
    return checked


def check(
    config: Config, env_spec: EnvSpec | None = None, problems: Iterable[Problem] = ()
) -> EnvSpec:
    """:func:`check_config`, for the env's spec: describe the env (unless ``env_spec`` is
    given) and verify the config; one ConfigError lists every problem. ``config`` is not
    changed (a config built in code needs its algorithm's section, ``algo``)."""
    return check_config(config, problems, env_spec=env_spec).spec


def checked_config(config: Config | CheckedConfig) -> CheckedConfig:
    """The verification a run starts from: ``config``'s own where it was checked and has not
    changed since (:func:`load_config` checked it), else a new one.

    A config built in code without its algorithm's section (``algo=None``) gets the
    section's defaults first, in a copy (:func:`~fleetrl.setup.parse.with_algorithm_section`).
    """
    if isinstance(config, CheckedConfig):
        if config.holds:
            return config
        config = config.config
    return verified(config) or check_config(with_algorithm_section(config))


def verified(config: Config) -> CheckedConfig | None:
    """``config``'s verification, where it is as it was verified (None: never checked, or
    changed since)."""
    entry = config.verification
    if entry is None:
        return None
    env, spec, snapshot = entry
    if snapshot != config:
        return None
    return CheckedConfig(config, env, spec, snapshot)


def resolved_env(config: Config) -> ResolvedEnv:
    """``config.env`` resolved: its verification's (:func:`verified`), else resolved here
    (a config checked in another process: a Ray worker's)."""
    checked = verified(config)
    return checked.env if checked is not None else resolve_env(config.env)


def _remember(checked: CheckedConfig) -> None:
    checked.config.verification = (checked.env, checked.spec, checked.snapshot)

"""The env's checks: describe the env once, and what its spaces and kind allow.

:func:`describe` reads the :class:`~fleetrl.envs.EnvSpec` of a config's env
(one env built, then closed), from its section resolved once
(:func:`fleetrl.envs.engine.resolve_env`), or says what keeps it from being
built: the engine's problems, an unknown id (with the closest ids), an env that
fails to build, observation indices past the observation's last entry
(``env.observation_indices``). The rules here read the resolved env and the spec: the
``env.atari`` keys of an env that is no ALE game, evaluation videos of an env
that cannot render, and what the env's spaces allow (the algorithm's kind of
actions, a convolutional network, normalization, a replay buffer that fits in
memory). A multi-agent env (``EnvSpec.grouped``) trains with ``mappo`` or ``ippo`` only,
whose agent group its specs must fit, and the keys its run does not take yet are refused
by name (:func:`grouped_rules`); the single-agent rules of spaces do not apply to it.

Examples:
    >>> from fleetrl.setup import parse_config
    >>> config, _ = parse_config({"algorithm": "ppo", "env": {"id": "CartPole-v1"}})
    >>> spec, problems = describe(config)
    >>> spec.obs_shape, spec.num_actions, problems
    ((4,), 2, [])
    >>> config, _ = parse_config({"algorithm": "ppo", "env": {"id": "CartPol-v1"}})
    >>> [str(p) for p in describe(config)[1]]  # doctest: +ELLIPSIS
    ["env.id='CartPol-v1' is invalid: no gymnasium env is registered under that id; did you mean 'CartPole-v1'...?"]
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import math

from fleetrl.algorithms import MULTI_AGENT_ALGORITHMS
from fleetrl.algorithms.agent_groups import AgentGroupLayout
from fleetrl.algorithms.mappo import SINGLE_AGENT_MSG
from fleetrl.config import AtariConfig, Config
from fleetrl.distributed.runtime import human_bytes, physical_memory
from fleetrl.envs.engine import EnvKind, ResolvedEnv, resolve_env
from fleetrl.envs.partial import PartialEnv
from fleetrl.envs.probe import env_spec
from fleetrl.envs.registry import lookup_id
from fleetrl.envs.spec import EnvSpec
from fleetrl.errors import ConfigError, Problem, Problems
from fleetrl.extras import pip_install
from fleetrl.networks.models import (
    ModelKind,
    TorsoKind,
    conv_problems,
    torso_problems,
)

__all__ = [
    "ACTIONS_MSG",
    "ACTION_KINDS",
    "ENV_KWARGS_MSG",
    "ENV_MAKE_MSG",
    "GROUPED_KEY_MSG",
    "MULTI_AGENT_MSG",
    "REPLAY_MEMORY_MSG",
    "UNKNOWN_ENV_MSG",
    "atari_section_rules",
    "close_ids",
    "describe",
    "describe_env",
    "grouped_rules",
    "resolved_problem_key",
    "space_rules",
    "video_rules",
]

UNKNOWN_ENV_MSG = (
    "env.id={env_id!r} is invalid: no gymnasium env is registered under that id; {hint}"
)
ENV_MAKE_MSG = (
    "env.id={env_id!r} is invalid: gymnasium.make({env_id!r}) failed ({err}); install what "
    "the env needs or choose another env.id"
)
ENV_KWARGS_MSG = (
    "env.kwargs={kwargs!r} is invalid with env.id={env_id!r}: building the env with them "
    "failed ({err}); pass only arguments {env_id} takes (or install what it needs)"
)
ACTIONS_MSG = (
    "algorithm={algorithm!r} is invalid with env.id={env_id!r}: {name} needs {needs} actions "
    "and {env_id} has {has}; use algorithm={instead}, or an env with {needs} actions "
    "(e.g. env.id={example})"
)

MULTI_AGENT_MSG = (
    "algorithm={algorithm!r} is invalid with env.id={env_id!r}: {env_id} is a multi-agent env "
    "(agent groups {groups}) and {algorithm} trains single-agent envs; use algorithm=mappo or "
    "algorithm=ippo"
)
GROUPED_KEY_MSG = (
    "{key}={value!r} is invalid with env.id={env_id!r}, a multi-agent env: {why}; {fix}"
)

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


def describe(
    config: Config, env: ResolvedEnv | None = None
) -> tuple[EnvSpec | None, list[Problem]]:
    """The :class:`~fleetrl.envs.EnvSpec` of ``config.env`` (one env built, then closed), or
    the problems that keep it from being built (an engine that cannot step it, an unknown
    id, an env that fails to build).

    ``env``: the section resolved already (:func:`~fleetrl.envs.engine.resolve_env`), where
    the caller has it; it is resolved here otherwise.
    """
    env = env if env is not None else resolve_env(config.env)
    if env.problems:  # the engine cannot be built as configured; its problems say why
        return None, [Problem(resolved_problem_key(p), text=p) for p in env.problems]
    return describe_env(env)


def resolved_problem_key(text: str) -> str:
    """The key a problem of the resolved env names: env.observation_indices, env.kwargs
    (or one of its keys), env.id, or the engine."""
    if text.startswith("env.kwargs."):  # a key of the env's own arguments
        return text.split("=", 1)[0]
    for key in ("env.observation_indices", "env.kwargs", "env.id"):
        if text.startswith(key):
            return key
    return "env.engine"


def describe_env(env: ResolvedEnv) -> tuple[EnvSpec | None, list[Problem]]:
    """The spec of a resolved env whose engine can step it, or the problem of its id: one
    nothing is registered under, or an env that fails to build.

    Remembered per env built (:attr:`~fleetrl.envs.engine.ResolvedEnv.key`), in this
    process: a run and a resumed run of the same env build it once.
    """
    if env.key in _DESCRIBED:
        return _DESCRIBED[env.key], []
    env_id = env.env.id
    if not env.registered:  # what the collectors would look up
        text = UNKNOWN_ENV_MSG.format(env_id=env_id, hint=close_ids(env_id))
        return None, [Problem("env.id", text=text)]
    try:
        if isinstance(env.built_by, PartialEnv):  # indices past the observation's last entry
            texts = env.built_by.space_problems("env.observation_indices")
            if texts:
                return None, [Problem("env.observation_indices", text=t) for t in texts]
        spec = env_spec(env.create_env_fn)
    # a registered env may fail to build for any reason of its own (a missing
    # dependency, a bad default argument): report it as a config problem
    except Exception as err:
        cause = f"{type(err).__name__}: {err}".rstrip(": ")
        if env.env.kwargs:  # the env's arguments are the likelier cause: name them
            text = ENV_KWARGS_MSG.format(env_id=env_id, kwargs=env.env.kwargs, err=cause)
            return None, [Problem("env.kwargs", text=text)]
        return None, [Problem("env.id", text=ENV_MAKE_MSG.format(env_id=env_id, err=cause))]
    _DESCRIBED[env.key] = spec
    return spec, []


#: what builds an env (ResolvedEnv.key) -> its spec, in this process
_DESCRIBED: dict[str, EnvSpec] = {}


def atari_section_rules(config: Config, env: ResolvedEnv, check: Problems) -> None:
    """env.atari.* preprocesses ALE games only: set for another env it would do nothing."""
    if env.kind is EnvKind.ATARI or not env.registered:
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


def video_rules(
    config: Config, env: ResolvedEnv, env_spec: EnvSpec | None, check: Problems
) -> None:
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
            f"needs {pip_install('video')} (No module named 'imageio_ffmpeg')",
        )
        return
    if env_spec is None or (env_spec.grouped and env.kind is EnvKind.VMAS):  # grouped_rules
        return
    problem = _rendering_problem(env)
    check(problem is None, "logging.video_every", every, problem or "")


def _rendering_problem(env: ResolvedEnv) -> str | None:
    """Why the env cannot be filmed; tried once per env built."""
    if env.key not in _RENDERS:
        from fleetrl.collectors.video import rendering_problem

        try:
            _RENDERS[env.key] = rendering_problem(env.create_env_fn)
        except Exception as err:  # an env the engine checks refuse: said by env.engine
            _RENDERS[env.key] = f"{type(err).__name__}: {err}"
    return _RENDERS[env.key]


#: what builds an env (ResolvedEnv.key) -> why it cannot be filmed (None: it can), in this process
_RENDERS: dict[str, str | None] = {}


def grouped_rules(config: Config, spec: EnvSpec, check: Problems) -> None:
    """A multi-agent env (``spec.grouped``) trains with mappo or ippo, whose agent group its
    specs must fit; the keys a grouped run does not take yet are refused by name. A
    multi-agent algorithm on a single-agent env is refused too."""
    multi = config.algorithm in MULTI_AGENT_ALGORITHMS
    if spec.groups is None:
        if multi:
            text = SINGLE_AGENT_MSG.format(algo=config.algorithm, env_id=config.env.id)
            check.say("algorithm", text)
        return
    if not multi:
        text = MULTI_AGENT_MSG.format(
            algorithm=config.algorithm, env_id=config.env.id, groups=spec.groups.groups
        )
        check.say("algorithm", text)
    else:
        try:  # every group the networks are sized for: one observation each, supported actions
            AgentGroupLayout.every(spec.groups, algo=config.algorithm)
        except ConfigError as err:
            for text in err.problems:
                check.say("algorithm", text)
    for key, value, refused, why, fix in _grouped_keys(config):
        if refused:
            text = GROUPED_KEY_MSG.format(
                key=key, value=value, env_id=config.env.id, why=why, fix=fix
            )
            check.say(key, text)


def _grouped_keys(config: Config) -> list[tuple[str, object, bool, str, str]]:
    """(key, value, refused, why, fix) of each key a multi-agent run does not take yet."""
    e, c, every = config.env, config.collector, config.logging.video_every
    overlap = c.overlap in ("on", True)
    vmas = lookup_id(str(e.id))[0] is EnvKind.VMAS
    return [
        ("env.max_episode_steps", e.max_episode_steps, e.max_episode_steps is not None,
         "the grouped rollout keeps the env's own episode limit",
         "remove the key (null): MPE's parallel_env has max_cycles=25"),
        ("logging.video_every", every, isinstance(every, int) and every > 0 and vmas,
         "videos film gymnasium and PettingZoo envs, not VMAS scenarios yet (VMAS draws "
         "through pyglet)", "remove the key (null): evaluations (trainer.test_every) still run"),
        ("env.normalize_reward", e.normalize_reward, bool(e.normalize_reward),
         "rewards are per agent group, and reward scaling reads one reward per env",
         "set env.normalize_reward=false"),
        ("collector.overlap", c.overlap, overlap,
         "the grouped rollout steps every env at once", "set collector.overlap=auto or off"),
    ]  # fmt: skip


def space_rules(config: Config, spec: EnvSpec, check: Problems) -> None:
    """What the env's spaces allow: the algorithm's actions, a conv network, normalization."""
    grouped_rules(config, spec, check)
    if spec.grouped:  # the single-agent rules below read one agent's spaces
        return
    model = getattr(config.algo, "model", None)
    if isinstance(model, ModelKind):
        algo, torso = config.algorithm, getattr(config.algo, "torso", TorsoKind.AUTO)
        wrong_network = [
            *((f"{algo}.model", t) for t in conv_problems(algo, model.value, config.env.id, spec)),
            *(
                (f"{algo}.torso", t)
                for t in torso_problems(algo, model.value, torso, config.env.id, spec)
            ),
        ]
        for key, text in wrong_network:
            check.say(key, text)
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


def close_ids(env_id: str) -> str:
    """The registered ids closest to ``env_id``, said as a question; or where to look. An
    id in the ``module:Id`` form is looked up after importing its module (or says why that
    failed), and its suggestions keep the module."""
    import gymnasium as gym

    from fleetrl.envs.gymnasium import IdModuleError, registry_name

    try:
        name = registry_name(env_id)
    except IdModuleError as err:
        return (
            f"its module {err.module!r} cannot be imported ({err.reason}): install it, or put "
            "it on the PYTHONPATH of this process and of the Ray workers"
        )
    module, sep, _ = env_id.rpartition(":")
    by_lower = {registered.lower(): registered for registered in gym.registry}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)
    if close:
        said = [f"{module}{sep}{by_lower[c]}" for c in close]
        return "did you mean " + " or ".join(repr(c) for c in said) + "?"
    if sep:
        return f"importing {module!r} registers no env named {name!r}"
    return (
        "check the spelling (gymnasium.pprint_registry() lists the ids), or import the "
        "package that registers the env before the config is loaded, or name it with the "
        "module that registers it: 'my_module:MyEnv-v0'"
    )

"""What kind of env an id names: one look-up in gymnasium's registry.

gymnasium 1.x knows the ALE (Atari) ids only once ale-py has registered them;
:func:`register_ale` does that, and is the one place that does.
:func:`lookup_id` calls it first for an id that names an ALE game, then answers
with one registry look-up: the id's :class:`EnvKind` and whether anything is
registered under it. :func:`fleetrl.envs.engine.resolve_env` builds on it for a
config's whole ``env`` section.

An id may name the module that registers it, in gymnasium's ``module:Id`` form
(``my_envs:Maze-v0``): :func:`~fleetrl.envs.gymnasium.gym_spec` imports the module
first, in whichever process reads the id, so one's own env reaches Ray workers by its id
(the module must be importable there: installed, or on their ``PYTHONPATH``).

Examples:
    >>> lookup_id("CartPole-v1")
    (<EnvKind.GYMNASIUM: 'gymnasium'>, True)
    >>> lookup_id("ALE/Pong-v5")
    (<EnvKind.ATARI: 'atari'>, True)
    >>> lookup_id("CartPol-v1")
    (<EnvKind.GYMNASIUM: 'gymnasium'>, False)
"""

from __future__ import annotations

import enum
import importlib.util

import gymnasium as gym

from fleetrl.envs.gymnasium import gym_spec
from fleetrl.envs.mujoco import _MUJOCO_ENTRY_POINT

__all__ = [
    "ALE_ENTRY_POINT",
    "PETTINGZOO_PACKAGES",
    "EnvKind",
    "lookup_id",
    "names_ale_game",
    "names_pettingzoo_env",
    "register_ale",
]

#: the packages whose ``package:module`` ids name PettingZoo envs (``mpe2:simple_spread_v3``)
PETTINGZOO_PACKAGES = ("mpe2", "pettingzoo")

#: gymnasium ids of ALE games are served by this entry point
ALE_ENTRY_POINT = "ale_py.env:AtariEnv"


class EnvKind(str, enum.Enum):
    """What an env is, and so what builds it (:func:`fleetrl.envs.make_env`)."""

    ATARI = "atari"
    """a registered ALE game (``ALE/Pong-v5``), or an :class:`~fleetrl.envs.AtariEnv`"""
    MUJOCO = "mujoco"
    """a registered gymnasium MuJoCo env (``Hopper-v5``), or a :class:`~fleetrl.envs.MujocoEnv`"""
    GYMNASIUM = "gymnasium"
    """another gymnasium id (registered or not: :func:`lookup_id` says which)"""
    BUILT = "built"
    """an env built already: a gymnasium ``Env`` or ``VectorEnv``, an envpool env"""
    TORCHRL = "torchrl"
    """a torchrl ``EnvBase``"""
    VMAS = "vmas"
    """a VMAS scenario named ``vmas:<scenario>`` (``vmas:balance``): built by
    :class:`~fleetrl.envs.vmas.VmasId`"""
    PETTINGZOO = "pettingzoo"
    """a PettingZoo parallel env named ``package:module`` (``mpe2:simple_spread_v3``): built by
    :class:`~fleetrl.envs.pettingzoo.PettingZooId`"""
    CALLABLE = "callable"
    """a user's factory: what it returns is known once it is called"""


def register_ale() -> bool:
    """Register ale-py's ids with gymnasium (once per process); False where ale-py is not
    installed. A Ray worker is a new process: what it builds registers them again."""
    try:
        import ale_py
    except ImportError:
        return False
    if "ALE/Pong-v5" not in gym.registry:
        gym.register_envs(ale_py)
    return True


def names_ale_game(env_id: str) -> bool:
    """Whether ``env_id`` is written like an ALE id (``ALE/Pong-v5``, ``PongNoFrameskip-v4``):
    the ids worth registering ale-py's for (importing it costs a tenth of a second)."""
    return env_id.startswith("ALE/") or "NoFrameskip" in env_id or env_id.endswith("-v5")


def names_pettingzoo_env(env_id: str) -> bool:
    """Whether ``env_id`` is written ``package:module`` with a PettingZoo package
    (``mpe2:simple_spread_v3``, ``pettingzoo.butterfly:pistonball_v6``)."""
    package, sep, module = env_id.partition(":")
    return bool(sep and module) and package.split(".")[0] in PETTINGZOO_PACKAGES


def lookup_id(env_id: str) -> tuple[EnvKind, bool]:
    """The kind of env ``env_id`` names and whether it is registered, in one look-up (ale-py's
    ids registered first where ``env_id`` is written like one; a PettingZoo id is registered
    where its module can be found, not imported)."""
    if env_id.startswith("vmas:"):  # registered where VMAS is installed
        return EnvKind.VMAS, importlib.util.find_spec("vmas") is not None
    if names_pettingzoo_env(env_id):
        package, _, module = env_id.partition(":")
        try:
            found = importlib.util.find_spec(f"{package}.{module}") is not None
        except ImportError:  # the package itself is not installed
            found = False
        return EnvKind.PETTINGZOO, found
    if names_ale_game(env_id):
        register_ale()
    try:
        spec = gym_spec(env_id)
    except gym.error.Error:
        return EnvKind.GYMNASIUM, False
    entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
    if entry == ALE_ENTRY_POINT:
        return EnvKind.ATARI, True
    if entry.startswith(_MUJOCO_ENTRY_POINT):
        return EnvKind.MUJOCO, True
    return EnvKind.GYMNASIUM, True

"""The engine a config's env runs in: every problem of ``env.engine`` and ``env.atari``, at once.

``env.engine`` (an :class:`~fleetrl.config.EnvEngine`) names what steps the
envs: ``gymnasium`` for any env; ``ale_vector`` and ``envpool`` for Atari games
(:mod:`fleetrl.envs.atari`); ``envpool`` for gymnasium's MuJoCo ids too
(:mod:`fleetrl.envs.mujoco`). :func:`engine_problems` says what a config asks
that the engine cannot do, in config keys.

Examples:
    >>> from fleetrl.config import EnvConfig
    >>> engine_problems(EnvConfig(id="CartPole-v1", engine="envpool"))  # doctest: +ELLIPSIS
    ["env.engine='envpool' is invalid with env.id='CartPole-v1': the envpool engine steps ..."]
"""

from __future__ import annotations

from fleetrl.config import EnvConfig
from fleetrl.envs.atari import check_atari_engine, is_atari_id
from fleetrl.envs.mujoco import check_mujoco_engine, is_mujoco_id

__all__ = ["engine_problems"]


def engine_problems(env: EnvConfig) -> list[str]:
    """Every problem of stepping ``env.id`` in ``env.engine`` with ``env.atari``.

    An id no env is registered under has none here: which engines can step it is not known,
    and the unknown id is the problem to name (:func:`fleetrl.setup.verify.describe` names
    it, with the closest ids), not an engine that would not help.
    """
    problems: list[str] = []
    if not is_atari_id(env.id) and not _registered(env.id):
        return problems
    if not is_atari_id(env.id) and is_mujoco_id(env.id):  # envpool steps MuJoCo ids too
        check_mujoco_engine(env.id, env.engine, "env.", problems)
    else:
        check_atari_engine(env.id, env.engine, env.atari, "env.", problems)
    return problems


def _registered(env_id: str) -> bool:
    import gymnasium as gym

    try:
        gym.spec(env_id)
    except gym.error.Error:
        return False
    return True

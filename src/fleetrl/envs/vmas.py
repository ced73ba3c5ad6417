"""VMAS scenarios named by id, ``vmas:<scenario>`` (``vmas:balance``): what a config's ``env.id``
resolves to, built as torchrl's ``VmasEnv`` with the run's ``env.num_envs`` simulated as one
torch batch.

VMAS is installed with the ``marl`` extra. A scenario's arguments come from ``env.kwargs``
(``continuous_actions``, ``n_agents``, ...); ``env.kwargs.max_steps`` is required: a VMAS
episode has no limit of its own, and a run's evaluations wait for whole episodes.

Examples:
    >>> env = VmasId("vmas:balance", {"max_steps": 5}).make(2)
    >>> env.num_envs, list(env.groups)
    (2, ['agents'])
    >>> env.close()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleetrl.extras import pip_install

__all__ = [
    "VMAS_MAX_STEPS_MSG",
    "VMAS_SCENARIO_MSG",
    "VmasId",
    "names_vmas_env",
    "vmas_problems",
]

#: the prefix of a VMAS id
PREFIX = "vmas:"

VMAS_MAX_STEPS_MSG = (
    "env.kwargs.max_steps={value!r} is invalid with env.id={env_id!r}: a VMAS episode has no "
    "limit of its own, and evaluations wait for whole episodes; set a positive episode "
    "length, e.g. env.kwargs.max_steps=100"
)
VMAS_SCENARIO_MSG = (
    "env.id={env_id!r} is invalid: VMAS has no scenario {scenario!r}; its scenarios: {known}"
)
VMAS_MISSING_MSG = (
    "env.id={env_id!r} is invalid: VMAS is not installed; pip install 'vmas>=1.5' (the marl "
    f"extra's packages: {pip_install('marl')})"
)


def names_vmas_env(env_id: str) -> bool:
    """Whether ``env_id`` is written ``vmas:<scenario>``."""
    return env_id.startswith(PREFIX) and len(env_id) > len(PREFIX)


def scenarios() -> list[str] | None:
    """VMAS's scenario names (None: VMAS is not installed)."""
    try:
        import vmas
    except ImportError:
        return None
    return [*vmas.scenarios, *vmas.mpe_scenarios, *vmas.debug_scenarios]


def vmas_problems(env_id: str, kwargs: dict[str, Any]) -> list[str]:
    """What a config's ``env`` section gets wrong for a VMAS id: VMAS missing, an unknown
    scenario, no positive ``env.kwargs.max_steps``."""
    known = scenarios()
    if known is None:
        return [VMAS_MISSING_MSG.format(env_id=env_id)]
    problems = []
    scenario = env_id[len(PREFIX) :]
    if scenario not in known:
        problems.append(VMAS_SCENARIO_MSG.format(env_id=env_id, scenario=scenario, known=known))
    steps = kwargs.get("max_steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0:
        problems.append(VMAS_MAX_STEPS_MSG.format(value=steps, env_id=env_id))
    return problems


@dataclass(frozen=True)
class VmasId:
    """A VMAS scenario named by id, and its arguments: what :func:`~fleetrl.envs.make_env`
    builds for ``vmas:<scenario>`` (picklable: a Ray collector builds its own)."""

    #: ``vmas:<scenario>``
    env_id: str
    #: the scenario's arguments and ``VmasEnv``'s (``max_steps``, ``continuous_actions``, ...)
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def scenario(self) -> str:
        return self.env_id[len(PREFIX) :]

    def make(self, num_envs: int = 1) -> Any:
        """A :class:`~fleetrl.envs.GroupedEnv` of ``num_envs`` envs in one VMAS batch."""
        from torchrl.envs.libs.vmas import VmasEnv

        from fleetrl.envs.grouped import GroupedEnv

        return GroupedEnv(VmasEnv(scenario=self.scenario, num_envs=num_envs, **self.kwargs))

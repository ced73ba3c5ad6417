"""Save and restore MPE envs (mpe2's PettingZoo parallel envs), for exact resume.

As :mod:`fleetrl.envs.state` does for gymnasium's classic-control envs: a checkpoint loads
with ``torch.load(weights_only=True)``, so an env's state is written as tensors, ints,
floats, strings, lists and dicts, and only where we know what the state is:

- the parallel wrapper PettingZoo puts around the AEC env (``aec_to_parallel``: the agents
  alive) and the wrappers under it (``OrderEnforcingWrapper``: whether it was reset;
  ``AssertOutOfBoundsWrapper``: nothing);
- the raw env: the step count, the agents, their rewards and done flags, the agent whose
  turn it is and the agent selector's position, the actions of the cycle, and its random
  generator (``np_random``: what draws a reset's positions);
- the world: each entity's (agent's and landmark's) position and velocity, and each
  agent's communication state.

Only the scenarios whose episode lives in those alone are saved: ``simple``,
``simple_spread`` and ``simple_tag`` (their ``reset_world`` draws positions and nothing
else; others draw goals or colours per episode, which live in other attributes).
:func:`mpe_state` returns None for any other env: a resume then reseeds it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fleetrl.envs.state import rng_state, set_rng_state
from fleetrl.errors import EnvError

__all__ = ["MPE_SCENARIOS", "load_mpe_state", "mpe_state"]

#: the MPE scenarios whose episode state :func:`mpe_state` saves whole
MPE_SCENARIOS = ("simple", "simple_spread", "simple_tag")

#: the raw env's dicts of per-agent values
_AGENT_DICTS = ("rewards", "_cumulative_rewards", "terminations", "truncations")


def _layers(pz: Any) -> tuple[Any, list[Any], Any] | None:
    """(the parallel wrapper, the AEC wrappers, the raw env), or None for another env."""
    from pettingzoo.utils.conversions import aec_to_parallel_wrapper
    from pettingzoo.utils.wrappers import AssertOutOfBoundsWrapper, OrderEnforcingWrapper

    if type(pz) is not aec_to_parallel_wrapper:
        return None
    wrappers, env = [], pz.aec_env
    while type(env) in (OrderEnforcingWrapper, AssertOutOfBoundsWrapper):
        wrappers.append(env)
        env = env.env
    module = type(env).__module__
    scenario = module.rpartition(".")[2]
    if not module.startswith("mpe2.") or scenario not in MPE_SCENARIOS:
        return None
    return pz, wrappers, env


def _array(value: Any) -> torch.Tensor:
    return torch.from_numpy(np.array(value, copy=True))


def _action(value: Any) -> int | None:
    return None if value is None else int(value)


def mpe_state(pz: Any) -> dict[str, Any] | None:
    """The state of one MPE parallel env (see the module docstring), or None when it is
    another env or holds what is not saved (benchmark data, continuous actions)."""
    layers = _layers(pz)
    if layers is None:
        return None
    parallel, wrappers, raw = layers
    if raw.continuous_actions or any(raw.infos.values()):
        return None
    world = raw.world
    return {
        "scenario": type(raw).__module__,
        "parallel_agents": list(parallel.agents),
        "wrappers": [
            {"has_reset": bool(w._has_reset), "has_updated": bool(w._has_updated)}
            if hasattr(w, "_has_reset")
            else {}
            for w in wrappers
        ],
        "steps": int(raw.steps),
        "agents": list(raw.agents),
        **{name: {a: float(v) for a, v in getattr(raw, name).items()} for name in _AGENT_DICTS},
        "agent_selection": raw.agent_selection,
        "selector": [int(raw._agent_selector._current_agent), raw._agent_selector.selected_agent],
        "current_actions": [_action(a) for a in raw.current_actions],
        "np_random": rng_state(raw.np_random),
        "cam_range": float(raw.original_cam_range),
        "entities": [
            {
                "p_pos": _array(e.state.p_pos),
                "p_vel": _array(e.state.p_vel),
                **({"c": _array(e.state.c)} if hasattr(e.state, "c") else {}),
            }
            for e in world.entities
        ],
    }


def load_mpe_state(pz: Any, state: dict[str, Any]) -> None:
    """Restore what :func:`mpe_state` saved into an env built the same way."""
    layers = _layers(pz)
    built = "another env" if layers is None else type(layers[2]).__module__
    if layers is None or built != state["scenario"]:
        raise EnvError(
            f"env state={state['scenario']} from the checkpoint does not fit the env built now "
            f"({built}); resume with the env settings the run was checkpointed with (env.id)"
        )
    parallel, wrappers, raw = layers
    if len(raw.world.entities) != len(state["entities"]):
        raise EnvError(
            f"env state of {len(state['entities'])} entities from the checkpoint does not fit "
            f"the env built now ({len(raw.world.entities)}); resume with the run's env.kwargs"
        )
    parallel.agents = list(state["parallel_agents"])
    for wrapper, saved in zip(wrappers, state["wrappers"]):
        if saved:
            wrapper._has_reset, wrapper._has_updated = saved["has_reset"], saved["has_updated"]
    raw.steps = state["steps"]
    raw.agents = list(state["agents"])
    for name in _AGENT_DICTS:
        kind = bool if name in ("terminations", "truncations") else float
        setattr(raw, name, {a: kind(v) for a, v in state[name].items()})
    raw.infos = {a: {} for a in raw.agents}
    raw.agent_selection = state["agent_selection"]
    raw._agent_selector._current_agent, raw._agent_selector.selected_agent = state["selector"]
    raw.current_actions = list(state["current_actions"])
    raw.np_random = set_rng_state(raw.np_random, state["np_random"])
    raw.original_cam_range = state["cam_range"]
    for entity, saved in zip(raw.world.entities, state["entities"]):
        entity.state.p_pos = saved["p_pos"].numpy().copy()
        entity.state.p_vel = saved["p_vel"].numpy().copy()
        if "c" in saved:
            entity.state.c = saved["c"].numpy().copy()

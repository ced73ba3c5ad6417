"""How a :class:`~fleetrl.collectors.SyncDataCollector` acts: its policy, placed and probed once.

:func:`place_policy` puts the user's policy on ``policy_device`` (a copy: the
caller's module stays where it is). :func:`initial_states` says which
recurrent states and flags the policy reads besides the observation (torchrl's
LSTM/GRU primers, ``is_init``). :func:`set_up_acting` then runs the policy once
on the first step (torch's generator untouched) and returns a
:class:`ActingSetup`: what it writes (its output keys, shapes and dtypes, which
the rollout buffers are allocated from), how it must be fed (the env batch, or
one env at a time as torchrl feeds an unbatched env's policy), the recurrent
states it carries from step to step, how its action reaches the env (as
is, moved to the CPU, one-hot to index, reshaped to the spec), and whether it
acts on tensors (:mod:`fleetrl.networks.acting`). A pure function:
it reads the env and the step, and writes nothing of the collector's.
:func:`accelerate` compiles (or CUDA-graphs) the plan's call when asked.

A policy that writes no action, or an action the env cannot take, is refused
here with a :class:`~fleetrl.errors.PolicyError`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType as ExplorationType
from tensordict.nn import set_interaction_type as set_exploration_type
from torch import nn

from fleetrl.envs.base import BatchedEnv
from fleetrl.envs.torchrl_env import TorchRLEnv
from fleetrl.errors import PolicyError
from fleetrl.keys import ACTION_KEY, IS_INIT_KEY, NestedKey
from fleetrl.networks.acting import tensor_actor
from fleetrl.networks.policies import PerEnvPolicy, ReshapeAction, accelerated, module_device

__all__ = [
    "ACTION_SHAPE_MSG",
    "NO_ACTION_MSG",
    "ActingSetup",
    "accelerate",
    "initial_states",
    "place_policy",
    "set_up_acting",
]

NO_ACTION_MSG = (
    "policy={policy!r} did not write 'action' (it wrote {keys}); a policy must write the key "
    "'action', e.g. TensorDictModule(net, in_keys=['observation'], out_keys=['action'])"
)
ACTION_SHAPE_MSG = (
    "policy={policy!r} wrote an 'action' of shape {got} and dtype {dtype}; the env needs {want}"
)

_NONE = torch.empty(0)


@dataclass(frozen=True)
class ActingSetup:
    """How a collector calls its policy and what the policy writes (see the module docstring)."""

    #: the call made at every step, on the step TensorDict (the policy, or one env at a time)
    act: Callable[[TensorDictBase], TensorDictBase]
    #: what the policy writes besides what it reads, in order
    out_keys: list[NestedKey]
    #: per output key: its per-env shape and dtype (the rollout buffers' layout)
    out_specs: dict[NestedKey, tuple[tuple[int, ...], torch.dtype]]
    #: what the policy reads besides the observation (``is_init``, recurrent states): each
    #: step's value is recorded in the batch
    state_keys: list[NestedKey]
    #: (state key, output key): the recurrent states carried from step to step
    carried: list[tuple[NestedKey, NestedKey]]
    #: the policy reads ``is_init`` (True at each episode's first step)
    uses_is_init: bool
    #: turns the policy's action into the env's (None: as is)
    action_to_env: Callable[[torch.Tensor], torch.Tensor] | None


def place_policy(
    policy: Any, policy_device: torch.device | None
) -> tuple[Any, torch.device | None]:
    """The module the collector acts with, and the device it runs on.

    A policy living on another device than ``policy_device`` is copied there (the
    caller's module stays where it is); without ``policy_device``, the policy's own.
    """
    current = module_device(policy)
    if policy_device is not None and current is not None and current != policy_device:
        return copy.deepcopy(policy).to(policy_device), policy_device
    return policy, policy_device if policy_device is not None else current


def initial_states(policy: Any, num_envs: int) -> dict[NestedKey, torch.Tensor]:
    """What ``policy`` reads besides the observation, at an episode's start: torchrl's
    recurrent primers (zeros) and ``is_init`` (True)."""
    states: dict[NestedKey, torch.Tensor] = {}
    # only a module that makes primers has any: torchrl.modules.utils, imported for none,
    # would load all of torchrl.envs, .data and .modules (36 MB in each collector worker)
    if isinstance(policy, nn.Module) and any(
        hasattr(m, "make_tensordict_primer") for m in policy.modules()
    ):
        from torchrl.modules.utils import get_primers_from_module

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "No primers found" is the common case
            primers = get_primers_from_module(policy)
        if primers is not None:
            for primer in getattr(primers, "transforms", [primers]):  # one primer or a Compose
                for key in primer.primers.keys(True, True):
                    spec = primer.primers[key]
                    states[key] = torch.zeros(num_envs, *spec.shape, dtype=spec.dtype)
    if IS_INIT_KEY in list(getattr(policy, "in_keys", []) or []):
        states[IS_INIT_KEY] = torch.ones(num_envs, 1, dtype=torch.bool)
    return states


def set_up_acting(
    policy: Any,
    env: BatchedEnv,
    step: TensorDictBase,
    exploration_type: ExplorationType,
) -> ActingSetup:
    """Run ``policy`` once on ``step`` (torch's generator untouched) and say how to act with it.

    ``step`` is what the policy reads at the first step: the observation and the
    :func:`initial_states`; it is not changed.
    """
    # outputs are what the policy writes besides the observation (the states it reads are
    # recorded as inputs and, echoed in its output, as outputs too)
    in_keys = set(env.observation_spec)
    uses_is_init = IS_INIT_KEY in set(_leaf_keys(step))
    with (
        torch.random.fork_rng(devices=[]),
        torch.inference_mode(),
        set_exploration_type(exploration_type),
    ):
        act, out = _choose_feeding(policy, env, step)
    if not isinstance(out, TensorDictBase):
        raise PolicyError(
            f"policy={policy!r} returned {type(out).__name__}; it must return a TensorDict"
        )
    out_keys = [k for k in _leaf_keys(out) if k not in in_keys]
    if ACTION_KEY not in out_keys:
        raise PolicyError(NO_ACTION_MSG.format(policy=policy, keys=out_keys))
    if act is policy:  # on the env batch: on tensors where that is exactly the same call
        act = tensor_actor(policy, step, out_keys, exploration_type) or act
    action_to_env = _check_action(policy, env, out.get(ACTION_KEY))
    # ("next", k) outputs whose k the policy reads are carried to the next step (recurrent state)
    state_keys = [k for k in _leaf_keys(step) if k not in env.observation_spec]
    carried = [
        (inner, k)
        for k in out_keys
        if (inner := _strip_next(k)) is not None and inner in state_keys
    ]
    return ActingSetup(
        act=act,
        out_keys=out_keys,
        out_specs={k: (tuple(out.get(k).shape[1:]), out.get(k).dtype) for k in out_keys},
        state_keys=state_keys,
        carried=carried,
        uses_is_init=uses_is_init,
        action_to_env=action_to_env,
    )


def accelerate(
    plan: ActingSetup,
    policy: Any,
    *,
    compile_options: dict[str, Any] | None,
    cudagraph_options: dict[str, Any] | None,
    device: torch.device | None,
) -> ActingSetup:
    """The plan acting compiled (or CUDA-graphed) when asked, once its outputs are known."""
    if compile_options is None and cudagraph_options is None:
        return plan
    fast = accelerated(
        policy,
        compile_options=compile_options,
        cudagraph_options=cudagraph_options,
        device=device,
    )
    act = PerEnvPolicy(fast) if isinstance(plan.act, PerEnvPolicy) else fast
    return dataclasses.replace(plan, act=act)


def _choose_feeding(
    policy: Any, env: BatchedEnv, step: TensorDictBase
) -> tuple[Callable[[TensorDictBase], Any], Any]:
    """How the policy is called, and its output on ``step``.

    On the env batch, except for envs torchrl would feed one env at a time
    (an unbatched torchrl env, or fleetrl's copies of one): their policies
    are often built for one env's shapes (``RandomPolicy(env.action_spec)``),
    so they get one env's TensorDict per call. Copies use the batch when the
    policy's action fits it, which is one call per step instead of one per env.
    """
    if not env.unbatched_copies:
        return policy, policy(step.clone())
    per_env = PerEnvPolicy(policy)
    if env.batch_shape != torch.Size([]):
        want = (env.num_envs, *env.action_shape)
        try:
            out = policy(step.clone())
        except Exception:  # e.g. an action sampled from one env's spec set on the batch
            out = None
        if isinstance(out, TensorDictBase) and tuple(out.get(ACTION_KEY, _NONE).shape) == want:
            return policy, out
    return per_env, per_env(step.clone())


def _check_action(
    policy: Any, env: BatchedEnv, action: torch.Tensor
) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """Check the policy's action against the env and return its converter (None: as is)."""
    n = env.num_envs
    shape, dtype = tuple(action.shape), action.dtype
    on_cpu = action.device.type == "cpu"
    if not isinstance(env, TorchRLEnv) and env.num_actions is not None:
        if shape == (n,) and not dtype.is_floating_point:
            return None if on_cpu else _to_cpu
        if shape == (n, env.num_actions):
            return _argmax if on_cpu else _argmax_cpu
        want = (
            f"integer actions of shape ({n},) or one-hot actions of shape ({n}, {env.num_actions})"
        )
    else:
        want_shape = (n, *env.action_shape)
        if shape == want_shape:  # torchrl envs take actions as their spec says
            return None if on_cpu else _to_cpu
        want = f"actions of shape {want_shape} (num_envs, *action_shape)"
        if env.unbatched_copies:
            if shape[:1] == (n,) and math.prod(shape[1:]) == math.prod(env.action_shape):
                # torchrl's env reads e.g. a scalar for a [1] spec; we give it the spec's shape
                return ReshapeAction(want_shape)
            # the policy saw one env (torchrl's shapes): report what it wrote for one env
            shape = shape[1:]
            want = (
                f"actions of shape {tuple(env.action_shape)}: the env has no batch dims, so "
                "the policy is fed one env at a time, as torchrl feeds it"
            )
    raise PolicyError(ACTION_SHAPE_MSG.format(policy=policy, got=shape, dtype=dtype, want=want))


def _strip_next(key: NestedKey) -> NestedKey | None:
    """``("next", k)`` -> ``k``; anything else -> None."""
    if not (isinstance(key, tuple) and len(key) > 1 and key[0] == "next"):
        return None
    return key[1] if len(key) == 2 else key[1:]


def _leaf_keys(td: TensorDictBase) -> list[NestedKey]:
    return list(td.keys(include_nested=True, leaves_only=True))


def _to_cpu(action: torch.Tensor) -> torch.Tensor:
    return action.cpu()


def _argmax(action: torch.Tensor) -> torch.Tensor:
    return action.argmax(-1)


def _argmax_cpu(action: torch.Tensor) -> torch.Tensor:
    return action.argmax(-1).cpu()

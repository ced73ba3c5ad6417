"""A :class:`~fleetrl.collectors.SyncDataCollector`'s acting policy, set up once when it is built.

The user's policy is placed on ``policy_device`` (a copy: the caller's module
stays where it is), probed, and then compiled or CUDA-graphed when asked
(``compile_policy`` / ``cudagraph_policy``). The probe runs it once on the
first observation (torch's generator untouched) to learn what it writes (its
output keys, shapes and dtypes, which the rollout buffers are allocated
from), how it must be fed (the env batch, or one env at a time as torchrl
feeds an unbatched env's policy), the recurrent states it carries from step
to step, and how its action reaches the env (as is, moved to the CPU, one-hot
to index, reshaped to the spec).
A policy that writes no action, or an action the env cannot take, is
refused here with a :class:`~fleetrl.errors.PolicyError`.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torchrl.envs.utils import set_exploration_type

from fleetrl.envs.base import NestedKey
from fleetrl.envs.torchrl_env import TorchRLEnv
from fleetrl.errors import PolicyError
from fleetrl.policies import PerEnvPolicy, RandomPolicy, ReshapeAction, accelerated, module_device

if TYPE_CHECKING:
    from fleetrl.collectors.sync import SyncDataCollector

__all__ = [
    "ACTION_SHAPE_MSG",
    "NO_ACTION_MSG",
    "accelerate",
    "new_step_td",
    "probe_policy",
    "setup_policy",
]

NO_ACTION_MSG = (
    "policy={policy!r} did not write 'action' (it wrote {keys}); a policy must write the key "
    "'action', e.g. TensorDictModule(net, in_keys=['observation'], out_keys=['action'])"
)
ACTION_SHAPE_MSG = (
    "policy={policy!r} wrote an 'action' of shape {got} and dtype {dtype}; the env needs {want}"
)

_NONE = torch.empty(0)


def setup_policy(c: SyncDataCollector, user_policy: Any) -> None:
    """The acting policy: the user's (a copy on ``policy_device`` when it lives elsewhere) or random."""
    c._user_policy = user_policy
    c._random_policy = RandomPolicy(c.env.random_action)
    if user_policy is None:
        c.policy = c._random_policy
        return
    current = module_device(user_policy)
    if c.policy_device is not None and current is not None and current != c.policy_device:
        # Move a copy: the caller's module stays where it is.
        c.policy = copy.deepcopy(user_policy).to(c.policy_device)
    else:
        c.policy = user_policy
        if c.policy_device is None:
            c.policy_device = current


def accelerate(c: SyncDataCollector) -> None:
    """Compile (or CUDA-graph) the acting policy, once its outputs are known from the probe."""
    if c.policy is c._random_policy or (c._compile is None and c._cudagraph is None):
        return
    fast = accelerated(
        c.policy,
        compile_options=c._compile,
        cudagraph_options=c._cudagraph,
        device=c.policy_device,
    )
    c._act = PerEnvPolicy(fast) if isinstance(c._act, PerEnvPolicy) else fast


def new_step_td(c: SyncDataCollector, obs: dict[NestedKey, np.ndarray]) -> None:
    """Build the TensorDict the policy reads at every step.

    Observation tensors share memory with ``c._step_np``: refreshing the
    numpy arrays in place refreshes what the policy sees, at no allocation.
    """
    n = c.env.num_envs
    td = TensorDict(batch_size=[n])
    c._step_np: dict[NestedKey, np.ndarray] = {}
    for key, (shape, dtype) in c.env.observation_spec.items():
        arr = np.empty((n, *shape), dtype=dtype)
        arr[:] = obs[key]
        c._step_np[key] = arr
        td.set(key, torch.from_numpy(arr))
    c._step_td = td


def probe_policy(c: SyncDataCollector) -> None:
    """Run the policy once (RNG untouched) to learn its output keys and check its action."""
    obs = c.env.reset()
    new_step_td(c, obs)
    c._obs = obs
    in_keys = set(_leaf_keys(c._step_td))
    c._use_is_init = "is_init" in _policy_in_keys(c.policy)
    _add_recurrent_primers(c)
    if c._use_is_init:
        c._step_td.set("is_init", torch.ones(c.env.num_envs, 1, dtype=torch.bool))
    with (
        torch.random.fork_rng(devices=[]),
        torch.inference_mode(),
        set_exploration_type(c.exploration_type),
    ):
        c._act, out = _choose_feeding(c)
    if not isinstance(out, TensorDictBase):
        raise PolicyError(
            f"policy={c.policy!r} returned {type(out).__name__}; it must return a TensorDict"
        )
    out_keys = [k for k in _leaf_keys(out) if k not in in_keys]
    if "action" not in out_keys:
        raise PolicyError(NO_ACTION_MSG.format(policy=c.policy, keys=out_keys))
    c._action_to_env = _check_action(c, out.get("action"))
    # ("next", k) outputs whose k the policy reads are carried to the next step (recurrent state)
    state_keys = [k for k in _leaf_keys(c._step_td) if k not in c.env.observation_spec]
    c._carried = [
        (inner, k)
        for k in out_keys
        if (inner := _strip_next(k)) is not None and inner in state_keys
    ]
    c._state_keys = state_keys  # is_init and recurrent states: recorded as inputs
    c._out_specs = {k: (tuple(out.get(k).shape[1:]), out.get(k).dtype) for k in out_keys}
    c._out_keys = out_keys
    c._reset_episodes(obs)


def _choose_feeding(c: SyncDataCollector) -> tuple[Callable[[TensorDictBase], Any], Any]:
    """How the policy is called, and its output on the current step.

    On the env batch, except for envs torchrl would feed one env at a time
    (an unbatched torchrl env, or fleetrl's copies of one): their policies
    are often built for one env's shapes (``RandomPolicy(env.action_spec)``),
    so they get one env's TensorDict per call. Copies use the batch when the
    policy's action fits it, which is one call per step instead of one per env.
    """
    td = c._policy_input()
    if not c.env.unbatched_copies:
        return c.policy, c.policy(td.clone())
    per_env = PerEnvPolicy(c.policy)
    if c.env.batch_shape != torch.Size([]):
        want = (c.env.num_envs, *c.env.action_shape)
        try:
            out = c.policy(td.clone())
        except Exception:  # e.g. an action sampled from one env's spec set on the batch
            out = None
        if isinstance(out, TensorDictBase) and tuple(out.get("action", _NONE).shape) == want:
            return c.policy, out
    return per_env, per_env(td.clone())


def _add_recurrent_primers(c: SyncDataCollector) -> None:
    """Zero-initialise recurrent states the policy declares (torchrl's LSTM/GRU modules)."""
    if not isinstance(c.policy, nn.Module):
        return
    from torchrl.modules.utils import get_primers_from_module

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "No primers found" is the common case
        primers = get_primers_from_module(c.policy)
    if primers is None:
        return
    n = c.env.num_envs
    for primer in getattr(primers, "transforms", [primers]):  # one primer or a Compose
        for key in primer.primers.keys(True, True):
            spec = primer.primers[key]
            c._step_td.set(key, torch.zeros(n, *spec.shape, dtype=spec.dtype))


def _check_action(
    c: SyncDataCollector, action: torch.Tensor
) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """Check the policy's action against the env and return its converter (None: as is)."""
    env, n = c.env, c.env.num_envs
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
    raise PolicyError(ACTION_SHAPE_MSG.format(policy=c.policy, got=shape, dtype=dtype, want=want))


def _strip_next(key: NestedKey) -> NestedKey | None:
    """``("next", k)`` -> ``k``; anything else -> None."""
    if not (isinstance(key, tuple) and len(key) > 1 and key[0] == "next"):
        return None
    return key[1] if len(key) == 2 else key[1:]


def _leaf_keys(td: TensorDictBase) -> list[NestedKey]:
    return list(td.keys(include_nested=True, leaves_only=True))


def _policy_in_keys(policy: Any) -> list[NestedKey]:
    return list(getattr(policy, "in_keys", []) or [])


def _to_cpu(action: torch.Tensor) -> torch.Tensor:
    return action.cpu()


def _argmax(action: torch.Tensor) -> torch.Tensor:
    return action.argmax(-1)


def _argmax_cpu(action: torch.Tensor) -> torch.Tensor:
    return action.argmax(-1).cpu()

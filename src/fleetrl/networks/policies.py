"""Turn what a user passes as a policy into an acting module.

A policy is anything that maps a TensorDict to a TensorDict (a
``TensorDictModule`` or ``TensorDictSequential`` usually). A plain
``nn.Module`` is wrapped to read ``"observation"`` and write ``"action"``;
``None`` acts uniformly at random from the env's action space.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn

from fleetrl.errors import ConfigError, PolicyError, bad_value
from fleetrl.keys import ACTION_KEY, OBSERVATION_KEY

__all__ = [
    "HostPolicy",
    "PerEnvPolicy",
    "RandomPolicy",
    "ReshapeAction",
    "accelerated",
    "as_policy",
    "as_weights",
    "policy_weights",
    "to_device",
]

POLICY_TYPE_MSG = (
    "policy={value!r} is invalid: pass a TensorDictModule (or any callable mapping a TensorDict "
    "to a TensorDict), a plain nn.Module (wrapped to read 'observation' and write 'action'), "
    "or None for a uniform random policy"
)

WEIGHTS_TYPE_MSG = (
    "must be None (the collector's own policy), a policy module (nn.Module or "
    "TensorDictModule: its weights are taken), a TensorDict of weights "
    "(TensorDict.from_module(policy)) or a state_dict"
)


def as_weights(value: Any, arg: str = "policy_or_weights") -> TensorDictBase | None:
    """Weights from what torchrl's ``update_policy_weights_`` accepts, detached on the CPU.

    A module gives its parameters and buffers; a TensorDict is taken as is; a
    ``state_dict`` (flat dotted keys) is unflattened to the module layout.
    None stays None. A module without parameters gives None.

    Examples:
        >>> from torch import nn
        >>> sorted(as_weights(nn.Linear(3, 1)).keys())
        ['bias', 'weight']
    """
    if value is None:
        return None
    if isinstance(value, nn.Module):
        weights = TensorDict.from_module(value)
        if weights.is_empty():
            return None
    elif isinstance(value, TensorDictBase):
        weights = value
    elif isinstance(value, dict):
        weights = TensorDict(dict(value)).unflatten_keys(".")
    else:
        raise ConfigError([bad_value(arg, value, WEIGHTS_TYPE_MSG)])
    return weights.detach().cpu()


class RandomPolicy(TensorDictModuleBase):
    """Writes a uniformly random ``"action"`` drawn from the env's action space.

    Args:
        sample: a callable returning a batch of random actions (the env's
            ``random_action``); sampling happens on the CPU.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from fleetrl import RandomPolicy
        >>> policy = RandomPolicy(lambda: torch.randint(0, 2, (3,)))  # 3 envs, 2 actions
        >>> policy(TensorDict({}, [3]))["action"].shape
        torch.Size([3])
    """

    in_keys: list = []
    out_keys: list = [ACTION_KEY]

    def __init__(self, sample: Any):
        super().__init__()
        self.sample = sample

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict.set(ACTION_KEY, self.sample().to(tensordict.device or "cpu"))


def as_policy(policy: Any) -> Any:
    """Return an acting module for ``policy`` (``None`` stays ``None``: the
    collector builds a :class:`RandomPolicy` once it has an env).

    Examples:
        >>> from torch import nn
        >>> module = as_policy(nn.Linear(4, 2))
        >>> module.in_keys, module.out_keys
        (['observation'], ['action'])
    """
    if policy is None or isinstance(policy, TensorDictModuleBase):
        return policy
    if isinstance(policy, nn.Module):
        return TensorDictModule(policy, in_keys=[OBSERVATION_KEY], out_keys=[ACTION_KEY])
    if callable(policy):
        return policy
    raise PolicyError(POLICY_TYPE_MSG.format(value=policy))


def policy_weights(policy: Any) -> TensorDictBase | None:
    """The policy's parameters and buffers as a TensorDict (None when it has none)."""
    if not isinstance(policy, nn.Module):
        return None
    weights = TensorDict.from_module(policy)
    if weights.is_empty():
        return None
    return weights


def module_device(policy: Any) -> torch.device | None:
    """The device of the policy's first parameter, or None."""
    if isinstance(policy, nn.Module):
        for p in policy.parameters():
            return p.device
    return None


def to_device(module: nn.Module, device: torch.device) -> None:
    """Move a module, and the tensor arguments of its distributions (a TanhNormal's bounds),
    to ``device``."""
    module.to(device)
    for sub in module.modules():
        kwargs = getattr(sub, "distribution_kwargs", None)
        if isinstance(kwargs, dict):
            for key, value in list(kwargs.items()):
                if isinstance(value, torch.Tensor):
                    kwargs[key] = value.to(device)


class HostPolicy:
    """A CPU copy of a policy that lives on an accelerator (a CUDA learner's), for collectors
    that act on the CPU.

    :meth:`refresh` brings the policy's current weights (parameters and buffers)
    into the copy with one device-to-host copy per dtype, one in all for a
    ``float32`` network: they are concatenated on their device, copied to the
    host at once, and split into the copy's tensors there (in place: the copy's
    tensors stay the same objects). The copy is what a remote collector is
    given, and what it publishes from.

    Args:
        policy: the policy (an ``nn.Module``); it is not changed.

    Examples:
        >>> from torch import nn
        >>> policy = nn.Linear(3, 2)
        >>> host = HostPolicy(policy)
        >>> with torch.no_grad():
        ...     _ = policy.weight.fill_(1.0)
        >>> host.refresh()
        >>> bool((host.module.weight == 1.0).all()), host.module is not policy
        (True, True)
    """

    def __init__(self, policy: nn.Module):
        self.policy = policy
        self.module = copy.deepcopy(policy)
        to_device(self.module, torch.device("cpu"))
        target = TensorDict.from_module(self.module)
        self.keys = list(target.keys(include_nested=True, leaves_only=True))
        self.targets = [target.get(key) for key in self.keys]
        #: dtype -> the indices of the tensors of that dtype: one copy each
        self.groups: dict[torch.dtype, list[int]] = {}
        for i, tensor in enumerate(self.targets):
            self.groups.setdefault(tensor.dtype, []).append(i)

    def refresh(self) -> None:
        """Copy the policy's current weights into :attr:`module` (one device-to-host copy
        per dtype)."""
        source = TensorDict.from_module(self.policy)
        with torch.no_grad():
            for indices in self.groups.values():
                flat = torch.cat([source.get(self.keys[i]).reshape(-1) for i in indices]).cpu()
                parts = flat.split([self.targets[i].numel() for i in indices])
                for i, part in zip(indices, parts):
                    self.targets[i].copy_(part.view_as(self.targets[i]))


class PerEnvPolicy:
    """Calls a policy on one env's TensorDict at a time and stacks the outputs.

    This is how torchrl feeds an unbatched env's policy. Cost: one policy call
    per env per step plus one stack, so it is used only where the policy
    cannot take the batch (``SyncDataCollector`` decides once, when built).
    """

    def __init__(self, policy: Callable[[TensorDictBase], Any]):
        self.policy = policy

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        return torch.stack([self.policy(td[i]) for i in range(td.shape[0])], 0)


class ReshapeAction:
    """Gives the env actions in its spec's shape when the policy wrote the same values in another."""

    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape

    def __call__(self, action: torch.Tensor) -> torch.Tensor:
        return action.reshape(self.shape).cpu()


def accelerated(
    policy: Callable[[TensorDictBase], Any],
    *,
    compile_options: dict[str, Any] | None,
    cudagraph_options: dict[str, Any] | None,
    device: torch.device | None,
) -> Callable[[TensorDictBase], Any]:
    """The policy under ``torch.compile`` and/or tensordict's ``CudaGraphModule``, as torchrl's
    collectors wrap it for ``compile_policy`` / ``cudagraph_policy`` (None: that one is off).

    The wrapper calls the same module: its parameters are the module's, so weights
    copied into the module in place are the ones the wrapper acts with.
    """
    if compile_options is not None:
        policy = torch.compile(policy, **compile_options)
    if cudagraph_options is not None:
        from tensordict.nn import CudaGraphModule

        policy = CudaGraphModule(
            policy, in_keys=[], out_keys=[], device=device, **cudagraph_options
        )
    return policy

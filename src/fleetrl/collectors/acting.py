"""A probabilistic policy acting on tensors in the collector's per-step call.

At one env per collector (MuJoCo's shipped configs, any slow env), a step's policy
call is one small forward pass, and torch's share of it is small: calling a
``ProbabilisticActor`` as a TensorDict module adds the dispatch of two modules, the
reads and writes of their keys and the distribution built from a TensorDict, each
step. :class:`TensorActor` acts as the same actor on tensors: its network called on
the step's observation tensor, torch's distribution built from the outputs,
sampled and scored by torchrl's own ``sample_and_log_prob`` (or the sample and the
log-probability tensordict's module takes), the same outputs returned under the
same keys.

Taken only where the structure makes the two calls the same function (:meth:`of`), and
only after a probe (:func:`tensor_actor`): from the same generator states, the two calls
must give bit-identical outputs under the same keys. Anything else (another interaction
type than sampling, at evaluation) goes to the actor itself.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import (
    InteractionType,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from tensordict.nn.probabilistic import interaction_type
from torch import nn
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules.distributions.utils import sample_and_log_prob
from torchrl.modules.tensordict_module.probabilistic import SafeProbabilisticModule

from fleetrl.keys import NestedKey

__all__ = ["PROBES", "TensorActor", "tensor_actor"]

#: probes of the two calls, each from its own generator state: a sampled action of a
#: 2-action policy that came from another generator would agree with chance 1/2 per probe
PROBES = 8


def _no_hooks(module: nn.Module) -> bool:
    return not (module._forward_hooks or module._forward_pre_hooks)


class TensorActor:
    """A ``ProbabilisticActor`` of one plain ``TensorDictModule`` and its distribution, as
    one call on tensors that returns the actor's outputs (``{key: tensor}``).

    Args:
        actor: the actor (use :meth:`of`, which checks its structure).
    """

    def __init__(self, actor: ProbabilisticTensorDictSequential):
        first, prob = actor.module
        self.actor = actor
        self.net: nn.Module = first.module
        self.in_keys: list[NestedKey] = list(first.in_keys)
        self.net_keys: list[NestedKey] = list(first.out_keys)
        self.dist_class = prob.distribution_class
        self.dist_kwargs = dict(prob.distribution_kwargs or {})
        self.dist_keys = [k[-1] if isinstance(k, tuple) else k for k in prob.dist_keys]
        self.default_type = prob.default_interaction_type
        self.action_key: NestedKey = prob.dist_sample_keys[0]
        self.log_prob_key: NestedKey = prob.log_prob_key
        #: torchrl's module samples and scores one draw at once; tensordict's samples, then scores
        self.atomic = type(prob).forward is SafeProbabilisticModule.forward

    @classmethod
    def of(cls, policy: Any) -> TensorActor | None:
        """The tensor call of ``policy``, or None where its structure is another: exactly
        (a plain ``TensorDictModule`` of one ``nn.Module``, a probabilistic module with
        the module's forward, reading what the first wrote, sampling one action and
        writing its log-probability), with no hooks on the TensorDict modules, no sample
        count, no generator of its own and no composite distribution."""
        if not isinstance(policy, ProbabilisticTensorDictSequential):
            return None
        modules = list(policy.module)
        if len(modules) != 2 or getattr(policy, "return_composite", False):
            return None
        first, prob = modules
        plain = (
            isinstance(first, TensorDictModule)
            and type(first).forward is TensorDictModule.forward
            and isinstance(first.module, nn.Module)
            and not isinstance(first.module, TensorDictModule)
        )
        if not plain or not isinstance(prob, ProbabilisticTensorDictModule):
            return None
        if type(prob).forward not in (
            SafeProbabilisticModule.forward,
            ProbabilisticTensorDictModule.forward,
        ):
            return None
        if not type(policy).forward.__module__.startswith(("tensordict.", "torchrl.")):
            return None  # a user's subclass with a forward of its own
        if not all(_no_hooks(m) for m in (policy, first, prob)):
            return None  # e.g. torchrl's safe=True projection of the action onto its spec
        if (
            not prob.return_log_prob
            or prob.num_samples is not None
            or getattr(prob, "_generator", None) is not None
            or getattr(prob, "_generator_key", None) is not None
            or len(prob.dist_sample_keys) != 1
            or list(prob.in_keys) != list(first.out_keys)
        ):
            return None
        return cls(policy)

    def __call__(self, td: TensorDictBase) -> Any:
        kind = interaction_type() or self.default_type
        if kind is not InteractionType.RANDOM:
            return self.actor(td)  # the actor itself: a mode or a mean, at evaluation
        params = self.net(*(td.get(k) for k in self.in_keys))
        params = params if isinstance(params, tuple) else (params,)
        dist = self.dist_class(**dict(zip(self.dist_keys, params)), **self.dist_kwargs)
        if self.atomic:
            action, log_prob = sample_and_log_prob(dist, reparameterize=dist.has_rsample)
        else:
            action = dist.rsample() if dist.has_rsample else dist.sample()
            log_prob = dist.log_prob(action)
        out = dict(zip(self.net_keys, params))
        out[self.action_key] = action
        out[self.log_prob_key] = log_prob
        return out


def tensor_actor(
    policy: Any,
    step: TensorDictBase,
    out_keys: list[NestedKey],
    exploration_type: ExplorationType,
) -> TensorActor | None:
    """:class:`TensorActor` of ``policy`` where, from the same generator states, it gives
    exactly the policy's outputs on ``step`` (:data:`PROBES` times): the same keys
    (``out_keys``, what the policy writes), dtypes, shapes and values. Torch's generator
    is left as it was."""
    fast = TensorActor.of(policy)
    if fast is None:
        return None
    want_keys = set(out_keys)
    with (
        torch.inference_mode(),
        set_exploration_type(exploration_type),
        torch.random.fork_rng(devices=[]),
    ):
        for _ in range(PROBES):
            state = torch.get_rng_state()
            want = policy(step.clone())
            torch.set_rng_state(state)
            got = fast(step.clone())
            if not isinstance(got, dict) or set(got) != want_keys:
                return None
            if not all(_same(got[k], want.get(k)) for k in want_keys):
                return None
    return fast


def _same(a: Any, b: Any) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.dtype == b.dtype
        and a.shape == b.shape
        and bool(torch.equal(a, b))
    )

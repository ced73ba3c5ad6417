"""A probabilistic policy acting on tensors in the collector's per-step call.

At one env per collector (MuJoCo's shipped configs, any slow env), a step's policy
call is one small forward pass, and torch's share of it is small: calling a
``ProbabilisticActor`` as a TensorDict module adds the dispatch of two modules, the
reads and writes of their keys and the distribution built from a TensorDict, each
step. :class:`TensorActor` acts as the same actor on tensors: its network called on
the step's observation tensor, torch's distribution built from the outputs,
sampled and scored by torchrl's own ``sample_and_log_prob`` (or the sample and the
log-probability tensordict's module takes), the same outputs returned under the
same keys. For the distributions fleetrl's actors use, the draw and its score come
from the parameters directly, in the distribution's own operations
(:mod:`fleetrl.networks.sampling`), without building it. The network part may be one
module or a chain of them (:class:`TensorChain`: a multi-agent actor's stacked
observations, then torchrl's ``MultiAgentMLP``), and :class:`TeamActor` acts for a
sequence of such actors (one per agent group). The multi-agent rollout (:mod:`fleetrl.collectors.local.grouped`) writes the
outputs into its step.

The learners' updates call the same :class:`TensorNet` and :class:`TensorChain`
(:mod:`fleetrl.networks.heads`).

Taken only where the structure makes the two calls the same function (:meth:`of`), and
only after a probe (:func:`tensor_actor`): from the same generator states, the two calls
must give bit-identical outputs under the same keys. Anything else (another interaction
type than sampling, at evaluation) goes to the actor itself.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import (
    InteractionType,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
)
from tensordict.nn.probabilistic import interaction_type, set_interaction_type
from torch import nn

from fleetrl.keys import NestedKey
from fleetrl.networks.sampling import DirectSampler, direct_sampler

__all__ = [
    "PROBES",
    "TeamActor",
    "TensorActor",
    "TensorChain",
    "TensorNet",
    "plain_tensordict_module",
    "tensor_actor",
]

#: probes of the two calls, each from its own generator state: a sampled action of a
#: 2-action policy that came from another generator would agree with chance 1/2 per probe
PROBES = 8


def _no_hooks(module: nn.Module) -> bool:
    return not (module._forward_hooks or module._forward_pre_hooks)


def plain_tensordict_module(module: Any) -> bool:
    """A TensorDictModule whose forward is TensorDictModule's own (ValueOperator's too)."""
    return (
        isinstance(module, TensorDictModule)
        and type(module).forward is TensorDictModule.forward
        and isinstance(module.module, nn.Module)
        and not isinstance(module.module, TensorDictModule)
    )


class TensorNet:
    """The ``nn.Module`` of a plain ``TensorDictModule``, called on tensors.

    Examples:
        >>> from torchrl.modules import ValueOperator
        >>> net = TensorNet.of(ValueOperator(nn.Linear(3, 1), in_keys=["observation"]))
        >>> net.in_keys, net.out_keys, net(torch.zeros(5, 3))[0].shape
        (['observation'], ['state_value'], torch.Size([5, 1]))
    """

    def __init__(self, module: TensorDictModule):
        self.net = module.module
        self.in_keys = list(module.in_keys)
        self.out_keys = list(module.out_keys)

    @classmethod
    def of(cls, module: Any) -> TensorNet | None:
        """The tensor view of ``module``, or None when it is not a plain TensorDictModule."""
        return cls(module) if plain_tensordict_module(module) else None

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.net(*inputs)
        return out if isinstance(out, tuple) else (out,)


class TensorChain:
    """A ``TensorDictSequential`` of plain ``TensorDictModule`` s, called on tensors: each
    module gets the tensors of the keys it reads (the chain's inputs, or what a module
    before it wrote), and the chain returns those of ``out_keys``.

    Examples:
        >>> seq = TensorDictSequential(
        ...     TensorDictModule(nn.Linear(3, 4), in_keys=["observation"], out_keys=["hidden"]),
        ...     TensorDictModule(nn.Linear(4, 1), in_keys=["hidden"], out_keys=["value"]),
        ... )
        >>> chain = TensorChain.of(seq, out_keys=["value"])
        >>> chain.in_keys, chain(torch.zeros(5, 3))[0].shape
        (['observation'], torch.Size([5, 1]))
    """

    def __init__(self, nets: list[TensorNet], in_keys: list[Any], out_keys: list[Any]):
        self.nets, self.in_keys, self.out_keys = nets, in_keys, out_keys
        #: one module reading the chain's inputs and writing its outputs, in order: called
        #: as it is (no keys looked up per call)
        self._only: TensorNet | None = None
        if len(nets) == 1 and nets[0].in_keys == in_keys and nets[0].out_keys == out_keys:
            self._only = nets[0]

    @classmethod
    def of(cls, module: Any, out_keys: Sequence[Any] | None = None) -> TensorChain | None:
        """The tensor view of ``module`` (a plain TensorDictModule, or a TensorDictSequential
        of them that selects no outputs), returning ``out_keys`` (default: the last
        module's); None for a module of another structure."""
        if isinstance(module, TensorDictSequential):
            if type(module).forward is not TensorDictSequential.forward or getattr(
                module, "partial_tolerant", False
            ):
                return None
            nets = [TensorNet.of(m) for m in module.module]
        else:
            nets = [TensorNet.of(module)]
        if not nets or any(net is None for net in nets):
            return None
        written: set[Any] = set()
        for net in nets:
            written.update(net.out_keys)
        out = list(out_keys) if out_keys is not None else list(nets[-1].out_keys)
        if any(key not in written for key in out):
            return None
        return cls(nets, list(module.in_keys), out)

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self._only is not None:
            return self._only(*inputs)
        values = dict(zip(self.in_keys, inputs))
        for net in self.nets:
            values.update(zip(net.out_keys, net(*(values[k] for k in net.in_keys))))
        return tuple(values[k] for k in self.out_keys)


def _safe_forward() -> Callable[..., Any] | None:
    """torchrl's ``SafeProbabilisticModule.forward``, or None where ``torchrl.modules`` was never
    imported: then no module is one. Not imported here: torchrl.modules loads all of
    torchrl.envs and torchrl.data with it (36 MB in each collector worker)."""
    loaded = sys.modules.get("torchrl.modules.tensordict_module.probabilistic")
    safe = getattr(loaded, "SafeProbabilisticModule", None)
    return None if safe is None else safe.forward


class TensorActor:
    """A ``ProbabilisticActor`` of one plain ``TensorDictModule`` and its distribution, as
    one call on tensors that returns the actor's outputs (``{key: tensor}``).

    Args:
        actor: the actor (use :meth:`of`, which checks its structure).
    """

    def __init__(self, actor: ProbabilisticTensorDictSequential, net: TensorChain):
        prob = actor.module[1]
        self.actor = actor
        #: the network part (one module, or a chain of them), on tensors
        self.net = net
        self.in_keys: list[NestedKey] = list(net.in_keys)
        self.net_keys: list[NestedKey] = list(net.out_keys)
        self.dist_class = prob.distribution_class
        self.dist_kwargs = dict(prob.distribution_kwargs or {})
        #: the distribution's keywords, and the keys of the network outputs they take
        self.dist_keys = [k[-1] if isinstance(k, tuple) else k for k in prob.dist_keys]
        self.dist_in_keys: list[NestedKey] = list(prob.in_keys)
        self.default_type = prob.default_interaction_type
        self.action_key: NestedKey = prob.dist_sample_keys[0]
        self.log_prob_key: NestedKey = prob.log_prob_key
        #: torchrl's module samples and scores one draw at once; tensordict's samples, then scores
        self.atomic = type(prob).forward is _safe_forward()
        if self.atomic:  # torchrl.modules is loaded: the module is one of its classes
            from torchrl.modules.distributions.utils import sample_and_log_prob

            self._sample_and_log_prob = sample_and_log_prob
        #: the draw and its score without building the distribution (None: built each step)
        self.direct: DirectSampler | None = direct_sampler(
            self.dist_class, self.dist_kwargs, self.dist_keys, atomic=self.atomic
        )
        #: per distribution keyword, the position of its network output
        self._param_at = [
            (name, self.net_keys.index(key)) for name, key in zip(self.dist_keys, self.dist_in_keys)
        ]

    @classmethod
    def of(cls, policy: Any) -> TensorActor | None:
        """The tensor call of ``policy``, or None where its structure is another: exactly
        (a plain ``TensorDictModule`` of one ``nn.Module``, or a ``TensorDictSequential``
        of such modules, as the multi-agent actors' stacked observations and
        ``MultiAgentMLP``; then a probabilistic module with the module's forward, reading
        what the first part wrote, sampling one action and writing its log-probability),
        with no hooks on the TensorDict modules, no sample count, no generator of its own
        and no composite distribution."""
        if not isinstance(policy, ProbabilisticTensorDictSequential):
            return None
        modules = list(policy.module)
        if len(modules) != 2 or getattr(policy, "return_composite", False):
            return None
        first, prob = modules
        if not isinstance(prob, ProbabilisticTensorDictModule):
            return None
        parts = list(first.module) if isinstance(first, TensorDictSequential) else [first]
        net = TensorChain.of(first, out_keys=list(first.out_keys))
        if net is None:
            return None
        if type(prob).forward not in (_safe_forward(), ProbabilisticTensorDictModule.forward):
            return None
        if not type(policy).forward.__module__.startswith(("tensordict.", "torchrl.")):
            return None  # a user's subclass with a forward of its own
        if not all(_no_hooks(m) for m in (policy, first, *parts, prob)):
            return None  # e.g. torchrl's safe=True projection of the action onto its spec
        if (
            not prob.return_log_prob
            or prob.num_samples is not None
            or getattr(prob, "_generator", None) is not None
            or getattr(prob, "_generator_key", None) is not None
            or len(prob.dist_sample_keys) != 1
            or not set(prob.in_keys) <= set(net.out_keys)
        ):
            return None
        return cls(policy, net)

    def __call__(self, td: TensorDictBase) -> Any:
        kind = interaction_type() or self.default_type
        if kind is not InteractionType.RANDOM:
            return self.actor(td)  # the actor itself: a mode or a mean, at evaluation
        return self.act(*[td.get(k) for k in self.in_keys])

    def bind(self, td: TensorDictBase) -> Callable[[], Any]:
        """This call on ``td``, as a function of nothing, for a loop that refreshes ``td``'s
        entries in place (the collectors' step input): the interaction type in force now
        and ``td``'s input tensors are taken once, not looked up at every step."""
        kind = interaction_type() or self.default_type
        if kind is not InteractionType.RANDOM:
            actor = self.actor

            def call() -> Any:
                with set_interaction_type(kind):  # the type bound, wherever it is called
                    return actor(td)

            return call
        return functools.partial(self.act, *[td.get(k) for k in self.in_keys])

    def act(self, *inputs: torch.Tensor) -> dict[NestedKey, torch.Tensor]:
        """A sampled action and its log-probability, with the network's outputs, from the
        tensors of :attr:`in_keys`."""
        values = self.net(*inputs)
        out = dict(zip(self.net_keys, values))
        params = {name: values[i] for name, i in self._param_at}
        if self.direct is not None:
            drawn = self.direct(params)
            if drawn is not None:  # None: params the distribution refuses, built to say so
                out[self.action_key], out[self.log_prob_key] = drawn
                return out
        dist = self.dist_class(**params, **self.dist_kwargs)
        if self.atomic:
            action, log_prob = self._sample_and_log_prob(dist, reparameterize=dist.has_rsample)
        else:
            action = dist.rsample() if dist.has_rsample else dist.sample()
            log_prob = dist.log_prob(action)
        out[self.action_key] = action
        out[self.log_prob_key] = log_prob
        return out


class TeamActor:
    """A ``TensorDictSequential`` of actors that each act on tensors (one per agent group,
    as MAPPO's policy for an env of several groups), as one call that returns every
    actor's outputs (``{key: tensor}``); an actor reads what one before it wrote.

    Args:
        policy: the sequence (use :meth:`of`, which checks its structure).
        actors: each module's :class:`TensorActor`.
    """

    def __init__(self, policy: TensorDictSequential, actors: list[TensorActor]):
        self.policy = policy
        self.actors = actors

    @classmethod
    def of(cls, policy: Any) -> TeamActor | None:
        """The tensor call of ``policy``, or None where it is not exactly a plain
        ``TensorDictSequential`` (its own forward, no hooks) of actors that
        :meth:`TensorActor.of` takes. A sequence that selects some of its outputs is
        refused by the probe (:func:`tensor_actor`), whose keys differ."""
        if (
            not isinstance(policy, TensorDictSequential)
            or isinstance(policy, ProbabilisticTensorDictSequential)
            or type(policy).forward is not TensorDictSequential.forward
            or getattr(policy, "partial_tolerant", False)
            or not _no_hooks(policy)
        ):
            return None
        actors = [TensorActor.of(m) for m in policy.module]
        if not actors or any(a is None for a in actors):
            return None
        return cls(policy, actors)  # type: ignore[arg-type]

    def __call__(self, td: TensorDictBase) -> Any:
        if any(
            (interaction_type() or a.default_type) is not InteractionType.RANDOM
            for a in self.actors
        ):
            return self.policy(td)  # the policy itself: modes or means, at evaluation
        out: dict[NestedKey, torch.Tensor] = {}
        for actor in self.actors:
            out.update(actor.act(*(out[k] if k in out else td.get(k) for k in actor.in_keys)))
        return out


def tensor_actor(
    policy: Any,
    step: TensorDictBase,
    out_keys: list[NestedKey],
    exploration_type: InteractionType,
) -> TensorActor | TeamActor | None:
    """:class:`TensorActor` (or :class:`TeamActor`) of ``policy`` where, from the same
    generator states, it gives exactly the policy's outputs on ``step`` (:data:`PROBES`
    times): the same keys (``out_keys``, what the policy writes), dtypes, shapes and
    values. Torch's generator is left as it was. An actor's direct sampler
    (:mod:`fleetrl.networks.sampling`) is probed with it; where the two disagree, the
    probe is repeated with the distributions built each step."""
    fast = TensorActor.of(policy) or TeamActor.of(policy)
    if fast is None:
        return None
    if _same_outputs(fast, policy, step, out_keys, exploration_type):
        return fast
    actors = fast.actors if isinstance(fast, TeamActor) else [fast]
    if not any(a.direct is not None for a in actors):
        return None
    for a in actors:  # a torch or torchrl that samples another way: build the distributions
        a.direct = None
    return fast if _same_outputs(fast, policy, step, out_keys, exploration_type) else None


def _same_outputs(
    fast: TensorActor | TeamActor,
    policy: Any,
    step: TensorDictBase,
    out_keys: list[NestedKey],
    exploration_type: InteractionType,
) -> bool:
    """From the same generator states, ``fast`` and ``policy`` give the same keys, dtypes,
    shapes and values on ``step`` (:data:`PROBES` times)."""
    want_keys = set(out_keys)
    with (
        torch.inference_mode(),
        set_interaction_type(exploration_type),
        torch.random.fork_rng(devices=[]),
    ):
        for _ in range(PROBES):
            state = torch.get_rng_state()
            want = policy(step.clone())
            torch.set_rng_state(state)
            got = fast(step.clone())
            if not isinstance(got, dict) or set(got) != want_keys:
                return False
            if not all(_same(got[k], want.get(k)) for k in want_keys):
                return False
    return True


def _same(a: Any, b: Any) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.dtype == b.dtype
        and a.shape == b.shape
        and bool(torch.equal(a, b))
    )

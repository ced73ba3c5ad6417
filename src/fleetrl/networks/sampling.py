"""A sampled action and its log-probability from the distribution's parameters, without
building the distribution.

A collector's step samples one action per env from a small distribution. Building
torch's and torchrl's distribution objects for that, then sampling and scoring through
them, costs more than the policy's network at a few envs: argument checks, broadcasts,
transforms built as objects, the autograd-function wrapper of torchrl's safe tanh.
:func:`direct_sampler` gives, for the distributions fleetrl's actors use, one function
that runs the same tensor operations in the same order on the same generator, so it
returns bit-identical values:

- torchrl's ``TanhNormal`` (PPO's and A2C's continuous policy), sampled and scored
  atomically as torchrl's actor does (``rsample_and_log_prob``: the pre-tanh draw is
  scored, not the squashed action inverted), in its default ``[-1, 1]`` bounds or in
  others (the affine map after the tanh);
- torchrl's ``IndependentNormal`` (CleanRL's policy, ``ppo.distribution: normal``) and
  torch's ``Normal``;
- torch's ``Categorical`` over logits (discrete actions).

Where the parameters fail the distribution's own argument checks (a NaN location, a
scale under its bound), the sampler returns None and the caller builds the distribution,
which raises its own error: the checks are kept, at one reduction per step. Any other
class or keyword (torchrl's ``tanh_loc``, an unsafe tanh, probabilities instead of
logits, a scalar event) has no direct sampler: the caller builds the distribution.

:func:`fleetrl.networks.acting.tensor_actor` takes a direct sampler only after its
probe found the outputs bit-identical to the actor's own, so a torch or torchrl release
that computes these distributions differently is sampled the slow, exact way.

Examples:
    >>> from torchrl.modules import TanhNormal
    >>> sampler = direct_sampler(TanhNormal, {}, ["loc", "scale"], atomic=True)
    >>> params = {"loc": torch.zeros(4, 2), "scale": torch.ones(4, 2)}
    >>> state = torch.get_rng_state()
    >>> action, log_prob = sampler(params)
    >>> _ = torch.set_rng_state(state)
    >>> want = TanhNormal(**params).rsample_and_log_prob()
    >>> torch.equal(action, want[0]), torch.equal(log_prob, want[1])
    (True, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.distributions as D
from torch.nn import functional as F

__all__ = ["DirectSampler", "direct_sampler"]

#: params (the distribution's keywords) -> (action, log-probability), or None where the
#: distribution's argument checks would refuse the params
DirectSampler = Callable[[dict[str, torch.Tensor]], "tuple[torch.Tensor, torch.Tensor] | None"]

#: ``log(sqrt(2 pi))``, the constant torch's Normal subtracts, computed as it does
_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))
_LOG_2 = math.log(2.0)
#: torchrl's TanhNormal scale bound (its ``arg_constraints``)
_TANH_NORMAL_MIN_SCALE = 1e-6


def _validating() -> bool:
    return bool(D.Distribution._validate_args)


def _normal_log_prob(value: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    # torch.distributions.Normal.log_prob, op for op
    var = scale**2
    return -((value - loc) ** 2) / (2 * var) - scale.log() - _LOG_SQRT_2PI


def _rsample(loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    # torch.distributions.Normal.rsample: a standard normal draw of the broadcast shape
    shape = loc.shape
    if scale.shape != shape:
        shape = torch.broadcast_shapes(shape, scale.shape)
    eps = torch.empty(shape, dtype=loc.dtype, device=loc.device).normal_()
    return loc + eps * scale


def _gaussian_params(
    params: dict[str, torch.Tensor], min_ndim: int, min_scale: float
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``loc`` and ``scale`` where the direct draw takes them: tensors on one device, with
    ``min_ndim`` dims, and (torch's checks on) a real ``loc`` and ``scale > min_scale``."""
    loc, scale = params["loc"], params["scale"]
    if not (isinstance(loc, torch.Tensor) and isinstance(scale, torch.Tensor)):
        return None
    if loc.ndim < min_ndim or scale.device != loc.device:
        return None
    if _validating() and not bool(torch.logical_and((loc == loc).all(), (scale > min_scale).all())):
        return None
    return loc, scale


class _TanhNormal:
    """torchrl's ``TanhNormal(loc, scale, low, high)``'s ``rsample_and_log_prob``."""

    def __init__(self, low: Any, high: Any):
        self.low, self.high = low, high
        #: per device: None (the bounds are [-1, 1]: tanh alone) or the affine map's
        #: (loc, scale, log|scale|) after the tanh
        self._affine: dict[torch.device, tuple[torch.Tensor, ...] | None] = {}

    def affine(self, device: torch.device) -> tuple[torch.Tensor, ...] | None:
        if device not in self._affine:
            high = torch.as_tensor(self.high, device=device)
            low = torch.as_tensor(self.low, device=device)
            if bool((high != 1.0).any()) or bool((low != -1.0).any()):
                scale = (high - low) / 2
                self._affine[device] = ((high + low) / 2, scale, torch.abs(scale).log())
            else:
                self._affine[device] = None
        return self._affine[device]

    def __call__(self, params: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor] | None:
        checked = _gaussian_params(params, 1, _TANH_NORMAL_MIN_SCALE)
        if checked is None:
            return None
        loc, scale = checked
        pre = _rsample(loc, scale)
        limit = 1.0 - torch.finfo(pre.dtype).resolution
        squashed = pre.tanh().clamp(-limit, limit)  # torchrl's safe tanh
        # d tanh: torch's TanhTransform.log_abs_det_jacobian
        jacobian = 2.0 * (_LOG_2 - pre - F.softplus(-2.0 * pre))
        affine = self.affine(loc.device)
        if affine is None:
            action = squashed
        else:
            shift, width, log_width = affine
            action = shift + width * squashed
            jacobian = jacobian + log_width.expand(squashed.shape)
        log_prob = _normal_log_prob(pre, loc, scale).sum(-1) - jacobian.sum(-1)
        return action, log_prob


class _Normal:
    """``Normal``'s (or torchrl's ``IndependentNormal``'s) reparameterized draw and its
    log-probability, summed over ``event_dims`` trailing dims."""

    def __init__(self, event_dims: int):
        self.event_dims = event_dims

    def __call__(self, params: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor] | None:
        checked = _gaussian_params(params, self.event_dims, 0.0)
        if checked is None:
            return None
        loc, scale = checked
        action = _rsample(loc, scale)
        log_prob = _normal_log_prob(action, loc, scale)
        if self.event_dims:
            log_prob = log_prob.reshape((*log_prob.shape[: -self.event_dims], -1)).sum(-1)
        return action, log_prob


def _categorical(params: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """torch's ``Categorical(logits=...)``: ``sample()``, then ``log_prob`` of it."""
    logits = params["logits"]
    if not isinstance(logits, torch.Tensor) or logits.ndim < 1:
        return None
    if _validating() and not bool((logits == logits).all()):
        return None
    logits = logits - logits.logsumexp(dim=-1, keepdim=True)
    probs = F.softmax(logits, dim=-1)
    if logits.ndim == 2:  # [N, K], one env or agent a row: the draw is already [N, 1]
        index = torch.multinomial(probs, 1, True)
        return index.squeeze(-1), logits.gather(-1, index).squeeze(-1)
    action = torch.multinomial(probs.reshape(-1, logits.shape[-1]), 1, True).T
    action = action.reshape(logits.shape[:-1])
    log_prob = logits.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
    return action, log_prob


def direct_sampler(
    dist_class: type, dist_kwargs: dict[str, Any], names: Any, *, atomic: bool
) -> DirectSampler | None:
    """The direct sampler of ``dist_class(**params, **dist_kwargs)``, ``params`` the
    keywords ``names`` from the network, as an actor samples and scores it (``atomic``:
    torchrl's ``sample_and_log_prob``; otherwise tensordict's sample, then ``log_prob``),
    or None where there is none (see the module)."""
    kwargs = dict(dist_kwargs)
    names = set(names)
    if dist_class is D.Categorical:
        return _categorical if names == {"logits"} and not kwargs else None
    if names != {"loc", "scale"}:
        return None
    if dist_class is D.Normal:
        return None if kwargs else _Normal(0)
    if not str(getattr(dist_class, "__module__", "")).startswith("torchrl."):
        return None  # not torchrl's; importing torchrl.modules to ask costs a worker 36 MB
    from torchrl.modules import IndependentNormal, TanhNormal

    if dist_class is TanhNormal:
        if not atomic:  # tensordict's module scores the squashed action, inverted
            return None
        low, high = kwargs.pop("low", -1.0), kwargs.pop("high", 1.0)
        kwargs.pop("upscale", None)  # used only with tanh_loc
        if kwargs.pop("event_dims", None) not in (None, 1):
            return None
        if kwargs.pop("tanh_loc", False) or not kwargs.pop("safe_tanh", True) or kwargs:
            return None
        return _TanhNormal(low, high)
    if dist_class is IndependentNormal:
        kwargs.pop("upscale", None)
        event_dims = kwargs.pop("event_dim", 1)
        if kwargs.pop("tanh_loc", False) or kwargs or not isinstance(event_dims, int):
            return None
        return _Normal(event_dims)
    return None

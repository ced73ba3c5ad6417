"""Algorithm: a torchrl loss module, its optimizer and hyperparameters, TensorDict in and out.

The API follows PyTorchRL's ``Algorithm`` in TensorDict form:

- :attr:`Algorithm.policy`: the acting module the collectors run;
- :meth:`Algorithm.compute_gradients` ``(batch) -> (grads, info)``: gradients
  as a TensorDict keyed like the trainable parameters (so they can travel to
  another process and be averaged), and a dict of floats;
- :meth:`Algorithm.apply_gradients` ``(grads)``: one optimizer step with
  given gradients;
- :meth:`Algorithm.get_weights` / :meth:`Algorithm.set_weights`;
- the same four flat: :meth:`Algorithm.flat_gradients`,
  :meth:`Algorithm.apply_flat_gradients`, :meth:`Algorithm.flat_weights`,
  :meth:`Algorithm.load_flat_weights`, one ``float32`` numpy array in the
  layout of :attr:`Algorithm.codec` (:class:`fleetrl.wire.ParamCodec`), as
  gradients and weights cross Ray;
- :meth:`Algorithm.update_algorithm_parameter` ``(name, value)``: changes a
  hyperparameter where it acts (the optimizer's lr, the loss's clip epsilon...);
- :meth:`Algorithm.learn` ``(batch)``: the whole update on one collected batch
  (epochs x minibatches of compute + apply), what the central trainer calls.

One route into ``.grad``: the flat methods are the only code that reads or
writes the parameters' ``.grad`` (and the optimizer's step); the TensorDict
methods convert with the codec and call them. So a gradient applied from a
TensorDict, from a flat array sent by a gradient worker, or from an
all-reduce takes the same step, bit for bit.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from fleetrl.config import AlgorithmConfig
from fleetrl.errors import ConfigError
from fleetrl.normalization import (
    Normalization,
    ObservationNormalizer,
    RewardScaler,
    find_normalizers,
)
from fleetrl.wire import ParamCodec

__all__ = ["Algorithm", "InfoMean", "flatten_valid"]

UNKNOWN_PARAMETER_MSG = (
    "update_algorithm_parameter: {name!r} is not a parameter of {algo}; known: {known}"
)


def flatten_valid(batch: TensorDictBase) -> TensorDictBase:
    """All valid frames of a batch as one flat TensorDict (padded steps of a masked batch dropped)."""
    mask_key = ("collector", "mask")
    if mask_key in batch.keys(include_nested=True):
        return batch[batch.get(mask_key)]
    return batch.reshape(-1)


def end_padded_rows(batch: TensorDictBase) -> TensorDictBase:
    """Mark the last valid step of each padded row done (not terminated), for value estimators.

    A preempted sync round is padded after its last collected step; marking that
    step done-but-not-terminated makes GAE bootstrap from its next observation and
    stop there, instead of running into the padding.
    """
    mask_key = ("collector", "mask")
    if mask_key not in batch.keys(include_nested=True):
        return batch
    mask = batch.get(mask_key)
    last_valid = mask & ~torch.cat([mask[..., 1:], torch.zeros_like(mask[..., :1])], dim=-1)
    padded_after = last_valid & ~mask[..., -1:].expand_as(mask)
    if padded_after.any():
        for key in (("next", "done"), ("next", "truncated")):
            value = batch.get(key).clone()
            value[padded_after] = True
            batch.set(key, value)
    return batch


class InfoMean:
    """The mean of each logged value over optimizer steps: the one way every learner
    averages loss info (one batch's steps, several workers' steps, an iteration's).

    Example:
        >>> info = InfoMean()
        >>> info.add({"loss": 1.0, "grad_norm": 3.0})
        >>> info.add({"loss": 2.0}, weight=3)  # a report that stands for 3 steps
        >>> info.mean()
        {'loss': 1.75, 'grad_norm': 0.75}
    """

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.steps = 0

    def add(self, info: dict[str, float], weight: int = 1) -> None:
        """Add one step's values (or ``weight`` steps' mean values)."""
        for k, v in info.items():
            self.totals[k] = self.totals.get(k, 0.0) + v * weight
        self.steps += weight

    def mean(self) -> dict[str, float]:
        """Each value summed over the steps, divided by the steps (empty: no step)."""
        return {k: v / max(1, self.steps) for k, v in self.totals.items()}


class Algorithm(abc.ABC):
    """Base of every algorithm: loss module + optimizer + hyperparameters.

    Subclasses build their loss module and optimizer, and define :meth:`loss`
    (and :meth:`prepare` when the batch needs work first, e.g. GAE).

    The trainable parameters (those of ``loss_module`` that require grad, in
    ``named_parameters()`` order; a shared module counted once) have one flat
    layout, :attr:`codec`, built here once: gradients and weights cross Ray
    as one ``float32`` vector in that order (:mod:`fleetrl.wire`).

    Args:
        loss_module: a torchrl loss module holding the actor (and critic).
        actor: the acting policy (shares its parameters with the loss module).
        optimizer: over the loss module's trainable parameters.
        gamma: discount factor.
        num_epochs: passes over each batch in :meth:`learn`.
        num_mini_batch: minibatches per epoch.
        max_grad_norm: clip the gradient norm before each step (None: off).
    """

    name: ClassVar[str] = "algorithm"
    #: the dataclass of this algorithm's config section (defined in its file)
    config_class: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig
    #: learns from the batch just collected (False: from a replay buffer)
    on_policy: ClassVar[bool] = True
    #: acts uniformly at random for its first ``start_steps`` frames (the collectors'
    #: ``init_random_frames``), before the policy acts
    random_start: ClassVar[bool] = False
    #: hyperparameters that update_algorithm_parameter may change, besides "lr"
    tunable: ClassVar[tuple[str, ...]] = ()
    #: scales the rewards learned from (``env.normalize_reward``; fleetrl.normalization)
    reward_scaler: RewardScaler | None = None

    @property
    def max_policy_lag(self) -> int | None:
        """The most optimizer steps behind the learner a batch may arrive and still be
        learned from (:class:`~fleetrl.scheme.versions.StaleBatchFilter`); None: no bound,
        as for every algorithm without a lag correction."""
        return None

    def __init__(
        self,
        loss_module: nn.Module,
        actor: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        gamma: float,
        num_epochs: int = 1,
        num_mini_batch: int = 1,
        max_grad_norm: float | None = None,
        update_every: int = 1,
        start_steps: int = 0,
    ):
        self.loss_module = loss_module
        self.actor = actor
        self.optimizer = optimizer
        self._gamma = gamma
        self.num_epochs = num_epochs
        self.num_mini_batch = num_mini_batch
        self.max_grad_norm = max_grad_norm
        self.update_every = update_every
        self.start_steps = start_steps
        self.mini_batch_size: int | None = None  # known once a batch was split
        self.num_updates = 0  # optimizer steps taken
        trainable = [
            (tuple(n.split(".")), p) for n, p in loss_module.named_parameters() if p.requires_grad
        ]
        self._params = [p for _, p in trainable]
        self._codec = ParamCodec(trainable, owner=type(self).__name__)

    # --------------------------------------------------------------- properties
    @property
    def policy(self) -> nn.Module:
        """The acting module for the collectors."""
        return self.actor

    @property
    def observation_normalizers(self) -> list[ObservationNormalizer]:
        """The observation normalizers in the policy and the critic (each once): the
        statistics the learner merges from every batch (fleetrl.normalization)."""
        found = find_normalizers(self.policy)
        found += [m for m in find_normalizers(self.__dict__.get("critic")) if m not in found]
        return found

    @property
    def normalization(self) -> Normalization | None:
        """The statistics the learners merge (observation normalizers, reward scaler);
        None when the algorithm normalizes nothing."""
        normalizers = self.observation_normalizers
        if not normalizers and self.reward_scaler is None:
            return None
        return Normalization(normalizers, self.reward_scaler)

    @property
    def codec(self) -> ParamCodec:
        """The flat layout of the trainable parameters (fixed for the algorithm's life)."""
        return self._codec

    @property
    def gamma(self) -> float:
        return self._gamma

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    # ---------------------------------------------------------------- learning
    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        """Turn a collected batch into flat training data (default: the valid frames)."""
        return flatten_valid(batch)

    def minibatches(self, data: TensorDictBase) -> Iterator[TensorDictBase]:
        """A fresh random split of ``data`` into ``num_mini_batch`` minibatches."""
        n = data.shape[0]
        size = n // self.num_mini_batch
        self.mini_batch_size = size
        perm = torch.randperm(n, device=data.device)
        for i in range(self.num_mini_batch):
            yield data[perm[i * size : (i + 1) * size]]

    @abc.abstractmethod
    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, float]]:
        """The scalar loss to minimise on ``data`` and what to log about it."""

    def flat_gradients(self, data: TensorDictBase) -> tuple[np.ndarray, dict[str, float]]:
        """Gradients of the loss on ``data`` as one flat array, and what to log.

        Returns:
            A fresh, writable ``float32`` array in the layout of :attr:`codec`
            (a parameter the loss does not reach gets zeros), and the loss's
            info. The parameters' ``.grad`` are left empty.
        """
        self.optimizer.zero_grad(set_to_none=True)
        loss, info = self.loss(data)
        loss.backward()
        flat = self._codec.flatten([param.grad for param in self._params])
        self.optimizer.zero_grad(set_to_none=True)
        return flat, info

    def apply_flat_gradients(self, flat: np.ndarray) -> float | None:
        """One optimizer step with flat gradients (as from :meth:`flat_gradients`); the grad norm.

        ``flat`` is copied once (it may be a read-only array from Ray's object
        store) and is not changed. With ``max_grad_norm`` set, the gradients
        are clipped to it and the norm before clipping is returned (else None).
        """
        return self._step(self._codec.split(flat))

    def _step(self, grads: list[torch.Tensor]) -> float | None:
        """The one place where ``.grad`` is set and the optimizer steps."""
        for param, grad in zip(self._params, grads, strict=True):
            param.grad = grad.to(param.device)
        norm = None
        if self.max_grad_norm is not None:
            norm = float(nn.utils.clip_grad_norm_(self._params, self.max_grad_norm))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.num_updates += 1
        return norm

    def compute_gradients(self, data: TensorDictBase) -> tuple[TensorDict, dict[str, float]]:
        """Gradients of the loss on ``data``, keyed like the trainable parameters.

        :meth:`flat_gradients` as a TensorDict (its leaves view the one flat
        array). Leaves the parameters' ``.grad`` empty: the gradients live in
        the returned TensorDict only, ready to be averaged or sent elsewhere.
        """
        flat, info = self.flat_gradients(data)
        return self._codec.unpack(flat, copy=False), info  # the array is ours alone

    def apply_gradients(self, grads: TensorDictBase) -> float | None:
        """One optimizer step with ``grads`` (keyed as from :meth:`compute_gradients`).

        Packs them with :attr:`codec` and takes :meth:`apply_flat_gradients`'
        step; ``grads`` is not changed. Returns the grad norm (None when
        ``max_grad_norm`` is off).
        """
        return self._step(self._codec.split(self._codec.pack(grads), copy=False))

    @property
    def steps_per_batch(self) -> int:
        """Gradient steps taken on each collected batch (``num_epochs x num_mini_batch``)."""
        return self.num_epochs * self.num_mini_batch

    def gradient_batches(self, batch: TensorDictBase) -> Iterator[TensorDictBase]:
        """The data of each gradient step on one collected batch, in order.

        :meth:`prepare` (e.g. GAE with the current critic) runs once, when the
        first minibatch is drawn; then ``num_epochs`` fresh random splits into
        ``num_mini_batch`` minibatches. The central trainer
        (:meth:`learn`) and the gradient workers of the distributed scheme
        consume the same sequence.
        """
        data = self.prepare(batch)
        for _ in range(self.num_epochs):
            yield from self.minibatches(data)

    def after_update(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Hook after each optimizer step (e.g. target-network updates). Replicas that
        receive the weights of a step call it too, so their targets follow the master's."""

    def learn(self, batch: TensorDictBase) -> dict[str, float]:
        """Train on one collected batch; returns the mean of each logged value."""
        return self.update_on(self.gradient_batches(batch))

    def update_on(self, minibatches: Iterable[TensorDictBase]) -> dict[str, float]:
        """One optimizer step per minibatch (each followed by :meth:`after_update`); returns
        the mean of each logged value."""
        info = InfoMean()
        for minibatch in minibatches:
            flat, step_info = self.flat_gradients(minibatch)
            norm = self._step(self._codec.split(flat, copy=False))  # no copy: the array is ours
            self.after_update()
            if norm is not None:
                step_info["grad_norm"] = norm
            info.add(step_info)
        return info.mean()

    # ----------------------------------------------------------------- weights
    def flat_weights(self) -> np.ndarray:
        """The trainable parameters as one fresh ``float32`` array in the layout of :attr:`codec`."""
        return self._codec.flatten(self._params)

    def load_flat_weights(self, flat: np.ndarray) -> None:
        """Copy flat weights (as from :meth:`flat_weights`) into the parameters, in place."""
        with torch.no_grad():
            for param, value in zip(self._params, self._codec.split(flat, copy=False)):
                param.copy_(value)

    def get_weights(self) -> TensorDict:
        """The trainable parameters (a detached copy), keyed as in :meth:`compute_gradients`."""
        return self._codec.unpack(self.flat_weights(), copy=False)

    def set_weights(self, weights: TensorDictBase) -> None:
        """Copy ``weights`` (as from :meth:`get_weights`) into the parameters, in place."""
        self.load_flat_weights(self._codec.pack(weights))

    # ------------------------------------------------------- hyperparameters
    def update_algorithm_parameter(self, name: str, value: float) -> None:
        """Change a hyperparameter where it acts: ``lr`` in the optimizer, loss
        coefficients in the loss module, anything else on the algorithm."""
        if name == "lr":
            for group in self.optimizer.param_groups:
                group["lr"] = float(value)
            return
        if name not in self.tunable:
            raise ConfigError(
                [
                    UNKNOWN_PARAMETER_MSG.format(
                        name=name, algo=type(self).__name__, known=["lr", *self.tunable]
                    )
                ]
            )
        self._set_parameter(name, value)

    def _set_parameter(self, name: str, value: float) -> None:
        setattr(self, name, value)

    # ------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {
            "loss_module": self.loss_module.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "num_updates": self.num_updates,
            "hyperparameters": {name: float(getattr(self, name)) for name in ("lr", *self.tunable)},
            **({"reward_scaler": self.reward_scaler.state_dict()} if self.reward_scaler else {}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loss_module.load_state_dict(state["loss_module"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.num_updates = int(state["num_updates"])
        for name, value in state["hyperparameters"].items():
            self.update_algorithm_parameter(name, value)
        if self.reward_scaler is not None:
            self.reward_scaler.load_state_dict(state["reward_scaler"])

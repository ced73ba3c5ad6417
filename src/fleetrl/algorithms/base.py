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
  layout of :attr:`Algorithm.codec` (:class:`fleetrl.distributed.wire.ParamCodec`), as
  gradients and weights cross Ray;
- :meth:`Algorithm.update_algorithm_parameter` ``(name, value)``: changes a
  hyperparameter where it acts (the optimizer's lr, the loss's clip epsilon...);
  :meth:`Algorithm.scheduled` says what the algorithm's schedules set it to;
- :meth:`Algorithm.learn` ``(batch)``: the whole update on one collected batch
  (epochs x minibatches of :meth:`train_step`), what the central learner calls.

One route into ``.grad``: :meth:`Algorithm.backward` is the only code that
computes gradients and :meth:`Algorithm.step` the only code that clips them
and steps the optimizer. A local update (:meth:`train_step`) calls the two on
the gradients where ``backward`` left them; the flat route copies them out
(:meth:`flat_gradients`) and back in (:meth:`apply_flat_gradients`) between
the two. A gradient applied locally, from a TensorDict, from a flat array sent
by a gradient worker, or from an all-reduce therefore takes the same step, bit
for bit, and a local update copies nothing.

The hot path (measured by ``benchmarks/learner_throughput.py``):

- :meth:`prepare` keeps only the keys the loss reads, on the learner's device,
  moved there once per batch (from pinned memory on CUDA: :func:`to_learner_device`, one
  of the batch helpers of :mod:`fleetrl.algorithms.batches`);
- :meth:`minibatches` shuffles the data once per epoch and slices it (views,
  no copy per minibatch);
- the losses call the networks on tensors (:mod:`fleetrl.networks.heads`);
- Adam is ``fused`` on the CPU (one kernel for every parameter) and
  ``foreach`` on CUDA; gradient clipping is ``foreach``;
- logged values stay tensors until the batch is done: one stacked read per
  :meth:`learn`, not a ``float()`` per value per step.

Compiled updates (``<algo>.compile``): :meth:`train_step` and the loss's
forward and backward (:meth:`backward`) run under ``torch.compile``; the
learning rate is a tensor, so schedules change it without recompiling, and the
loss coefficients are the loss module's buffers for the same reason. On CUDA,
``<algo>.cudagraphs`` also captures :meth:`train_step` in a CUDA graph
(tensordict's ``CudaGraphModule``; Adam is then ``capturable``).
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from fleetrl._perf import skip_absent_pandas_probe
from fleetrl.algorithms.batches import as_device, end_padded_rows, flatten_valid, to_learner_device
from fleetrl.collectors.arguments import compile_options
from fleetrl.config import AlgorithmConfig, EvalActions, Schedule
from fleetrl.distributed.wire import ParamCodec
from fleetrl.errors import ConfigError
from fleetrl.keys import NestedKey
from fleetrl.networks.normalization import (
    Normalization,
    ObservationNormalizer,
    RewardScaler,
    find_normalizers,
)

__all__ = [
    "Algorithm",
    "InfoMean",
    "NetworkMisfit",
    "end_padded_rows",
    "flatten_valid",
    "to_learner_device",
]

logger = logging.getLogger(__name__)

UNKNOWN_PARAMETER_MSG = (
    "update_algorithm_parameter: {name!r} is not a parameter of {algo}; known: {known}"
)
CUDAGRAPHS_CPU_MSG = (
    "{algo}.cudagraphs=True is invalid with the learner on {device}: CUDA graphs capture GPU "
    "work; run the learner on CUDA (trainer.device=cuda), or use {algo}.compile=true on the CPU"
)
COMPILED_MSG = "%s: compiled its update step in %.1f s (torch.compile%s)"
#: eager (or compiled) calls of the update step before CUDA graphs capture it
CUDA_GRAPH_WARMUP = 3


class InfoMean:
    """The mean of each logged value over optimizer steps: the one way every learner
    averages loss info (one batch's steps, several workers' steps, an iteration's).

    Examples:
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


class StepInfo:
    """The logged tensors of a batch's optimizer steps, read once at the end.

    Each step's values are detached scalar tensors; :meth:`mean` stacks them and
    reads them in one go, so a step costs no ``float()`` (and, on CUDA, no sync).
    """

    def __init__(self) -> None:
        self.steps: list[dict[str, torch.Tensor]] = []

    def add(self, info: dict[str, torch.Tensor]) -> None:
        self.steps.append(info)

    def mean(self) -> dict[str, float]:
        """Each value's mean over the steps that logged it (empty: no step)."""
        if not self.steps:
            return {}
        names = list(dict.fromkeys(k for step in self.steps for k in step))
        means = torch.stack(
            [torch.stack([s[k].float() for s in self.steps if k in s]).mean() for k in names]
        )
        return dict(zip(names, means.tolist()))


def floats(info: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in info.items()}


class Algorithm(abc.ABC):
    """Base of every algorithm: loss module + optimizer + hyperparameters.

    A subclass builds its networks and torchrl loss module, calls
    ``super().__init__`` with them, and defines :meth:`loss` (and :meth:`prepare`
    when the batch needs work first, e.g. GAE).

    The trainable parameters (those of ``loss_module`` that require grad, in
    ``named_parameters()`` order; a shared module counted once) have one flat
    layout, :attr:`codec`, built here once: gradients and weights cross Ray
    as one ``float32`` vector in that order (:mod:`fleetrl.distributed.wire`).

    Examples:
        >>> from fleetrl import SyncDataCollector
        >>> from fleetrl.algorithms import PPO, PPOConfig
        >>> from fleetrl.envs.probe import env_spec
        >>> ppo = PPO(PPOConfig(num_epochs=1, num_mini_batch=2), env_spec("CartPole-v1"))
        >>> isinstance(ppo, Algorithm), ppo.steps_per_batch
        (True, 2)
        >>> with SyncDataCollector("CartPole-v1", ppo.policy, frames_per_batch=64,
        ...                        num_envs=2) as collector:
        ...     info = ppo.learn(collector.next())
        >>> ppo.num_updates, "loss/objective" in info
        (2, True)

    Args:
        config: the algorithm's config section (``lr``, ``gamma``,
            ``max_grad_norm``, ``lr_schedule``, ``compile``, ``cudagraphs``...).
        loss_module: a torchrl loss module holding the actor (and critic), on ``device``.
        actor: the acting policy (shares its parameters with the loss module).

    Keyword Args:
        adam_eps: Adam's epsilon (CleanRL's 1e-5 for the actor-critic algorithms).
        num_epochs: passes over each batch in :meth:`learn`.
        num_mini_batch: minibatches per epoch.
        update_every: sampled optimizer steps per collected batch (replay algorithms).
        learning_starts: frames collected before the first optimizer step (replay algorithms).
        device: the learner's device (the networks are already there).
        keys: the batch keys the loss reads (:meth:`prepare` keeps only these).
    """

    name: ClassVar[str] = "algorithm"
    #: the dataclass of this algorithm's config section (fleetrl.algorithms.sections)
    config_class: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig
    #: learns from the batch just collected (False: from a replay buffer): its section's
    #: fact (read there before torch is imported), set on each subclass
    on_policy: ClassVar[bool] = True
    #: acts uniformly at random for its first ``learning_starts`` frames (the collectors'
    #: ``init_random_frames``), before the policy acts
    random_start: ClassVar[bool] = False
    #: how its evaluations act with ``trainer.eval_actions: auto``: a policy-gradient
    #: algorithm's sampled policy is the one it trains (a squashed Gaussian's tanh(loc) can
    #: be another policy: issue 35's HalfCheetah run, whose sampled noise starts the flip
    #: its gait relies on)
    eval_actions: ClassVar[EvalActions] = EvalActions.SAMPLE
    #: hyperparameters that update_algorithm_parameter may change, besides "lr"
    tunable: ClassVar[tuple[str, ...]] = ()
    #: scales the rewards learned from (``env.normalize_reward``; fleetrl.networks.normalization)
    reward_scaler: RewardScaler | None = None
    #: seconds spent preparing batches for the optimizer steps so far (:meth:`gradient_batches`:
    #: GAE, flattening; a replay algorithm's storing and sampling); learners read differences
    prepare_s: float = 0.0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.on_policy = cls.config_class.on_policy

    def __init__(
        self,
        config: AlgorithmConfig,
        loss_module: nn.Module,
        actor: nn.Module,
        *,
        adam_eps: float = 1e-8,
        num_epochs: int = 1,
        num_mini_batch: int = 1,
        update_every: int = 1,
        learning_starts: int = 0,
        device: torch.device | str | None = None,
        keys: Iterable[Any] | None = None,
    ):
        skip_absent_pandas_probe()  # tensordict's per-call probe costs more than a 64-sample layer
        self.config = config
        self.device = as_device(device)
        self.loss_module = loss_module
        self.actor = actor
        self.max_grad_norm: float | None = config.max_grad_norm
        self.num_epochs = num_epochs
        self.num_mini_batch = num_mini_batch
        self.update_every = update_every
        self.learning_starts = learning_starts
        self.keys = None if keys is None else list(keys)
        self.mini_batch_size: int | None = None  # known once a batch was split
        self.num_updates = 0  # optimizer steps taken
        trainable = [
            (tuple(n.split(".")), p) for n, p in loss_module.named_parameters() if p.requires_grad
        ]
        self._params = [p for _, p in trainable]
        self._codec = ParamCodec(trainable, owner=type(self).__name__)
        self._compile = compile_options(config.compile)
        self._cudagraphs = bool(config.cudagraphs)
        if self._cudagraphs and self.device.type != "cuda":
            raise ConfigError([CUDAGRAPHS_CPU_MSG.format(algo=self.name, device=self.device.type)])
        self.optimizer = self._adam(config.lr, adam_eps)
        self._base_lr = float(config.lr)
        #: seconds the first compiled step took (None: eager, or not run yet)
        self.compile_s: float | None = None
        self._train_step = self.train_step
        self._backward = self.backward
        if self._compile is not None:
            self._train_step = torch.compile(self.train_step, **self._compile)
            self._backward = torch.compile(self.backward, **self._compile)
        self._graphed: Any = None  # the CUDA graph of train_step, captured at first use

    def _adam(self, lr: float, eps: float) -> torch.optim.Optimizer:
        """Adam over the trainable parameters, in its fastest form for the device.

        ``fused`` on the CPU, ``foreach`` on CUDA; with compile or CUDA graphs the
        learning rate is a tensor (a schedule changes it without recompiling), and
        CUDA graphs need a ``capturable`` optimizer.
        """
        kwargs: dict[str, Any] = {"eps": eps}
        if self._compile is not None or self._cudagraphs:
            # a tensor lr needs a capturable optimizer (torch's rule for foreach Adam)
            lr = torch.tensor(float(lr), device=self.device)
            kwargs.update(capturable=True, foreach=True)
        elif self.device.type == "cpu":
            kwargs["fused"] = True
        else:
            kwargs["foreach"] = True
        return torch.optim.Adam(self._params, lr=lr, **kwargs)

    # --------------------------------------------------------------- properties
    @property
    def policy(self) -> nn.Module:
        """The acting module for the collectors."""
        return self.actor

    def env_keys_read(self) -> set[NestedKey] | None:
        """The env's keys the run's modules read, where the algorithm knows them (an env
        may then leave out what nothing reads: :meth:`fleetrl.envs.pettingzoo.PettingZooId.reading`);
        None: unknown, the env keeps everything."""
        return None

    @property
    def observation_normalizers(self) -> list[ObservationNormalizer]:
        """The observation normalizers in the policy and the critic (each once): the
        statistics the learner merges from every batch (fleetrl.networks.normalization)."""
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
        return float(self.config.gamma)

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    @property
    def max_learn_lag(self) -> int | None:
        """The most optimizer steps behind the learner a batch may arrive and still be
        learned from (:class:`~fleetrl.learners.versions.StaleBatchFilter`); None: no bound,
        as for every algorithm without a lag correction."""
        return None

    # ---------------------------------------------------------------- learning
    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        """Turn a collected batch into flat training data (default: the valid frames)."""
        return self.on_device(flatten_valid(batch, self.keys))

    def on_device(self, data: TensorDictBase) -> TensorDictBase:
        """``data`` on the learner's device (no copy when it is there already; pinned, then
        copied without blocking, from the CPU to CUDA: :func:`to_learner_device`)."""
        return to_learner_device(data, self.device)

    def minibatches(self, data: TensorDictBase) -> Iterator[TensorDictBase]:
        """A fresh random split of ``data`` into ``num_mini_batch`` minibatches.

        One shuffled copy per epoch, then contiguous slices of it: the same
        minibatches as indexing ``data`` with each slice of the permutation,
        with one gather instead of one per minibatch.
        """
        n = data.shape[0]
        size = n // self.num_mini_batch
        self.mini_batch_size = size
        if self.num_mini_batch == 1:  # the whole batch: the order of a mean's terms is moot
            yield data
            return
        shuffled = data[torch.randperm(n, device=self.device)]
        for i in range(self.num_mini_batch):
            yield shuffled[i * size : (i + 1) * size]

    @abc.abstractmethod
    def loss(self, data: TensorDictBase) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The scalar loss to minimise on ``data`` and what to log about it (detached
        scalar tensors, read once per batch)."""

    def backward(self, data: TensorDictBase) -> dict[str, torch.Tensor]:
        """The loss on ``data`` and its gradients, left in the parameters' ``.grad``.

        The one place gradients are computed (compiled with ``<algo>.compile``).
        """
        loss, info = self.loss(data)
        loss.backward()
        return info

    def step(self) -> torch.Tensor | None:
        """Clip the gradients in ``.grad`` (``max_grad_norm``) and step the optimizer.

        The one place the optimizer steps; returns the norm before clipping (a
        tensor; None when clipping is off). Leaves ``.grad`` empty.
        """
        norm = None
        if self.max_grad_norm is not None:
            norm = nn.utils.clip_grad_norm_(self._params, self.max_grad_norm, foreach=True)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def train_step(self, data: TensorDictBase) -> dict[str, torch.Tensor]:
        """One local optimizer step on ``data``: :meth:`backward`, then :meth:`step`.

        What :meth:`learn` runs per minibatch (compiled with ``<algo>.compile``,
        captured in a CUDA graph with ``<algo>.cudagraphs``). Does not count the
        update or run :meth:`after_update`: :meth:`update_on` does.
        """
        info = self.backward(data)
        norm = self.step()
        if norm is not None:
            info["grad_norm"] = norm
        return info

    def _run_train_step(self, data: TensorDictBase) -> dict[str, torch.Tensor]:
        if self._cudagraphs:
            return self._graphed_step(data)
        if self._compile is not None and self.compile_s is None:
            start = time.perf_counter()
            info = self._train_step(data)
            self.compile_s = time.perf_counter() - start
            logger.info(COMPILED_MSG, type(self).__name__, self.compile_s, "")
            return info
        return self._train_step(data)

    def _graphed_step(self, data: TensorDictBase) -> dict[str, torch.Tensor]:
        """train_step captured in a CUDA graph (tensordict's CudaGraphModule): the first
        ``CUDA_GRAPH_WARMUP`` calls run it (and compile it, with ``compile``), the next one
        captures it, every later one replays the graph. ``compile_s`` is the time to the
        capture."""
        if self._graphed is None:
            from tensordict.nn import CudaGraphModule

            self._graphed = CudaGraphModule(self._train_step, warmup=CUDA_GRAPH_WARMUP)
            self._graph_calls = 0
            self._graph_s = 0.0
        if self._graph_calls > CUDA_GRAPH_WARMUP:
            return self._graphed(data)
        start = time.perf_counter()
        info = self._graphed(data)
        torch.cuda.synchronize()
        self._graph_s += time.perf_counter() - start
        self._graph_calls += 1
        if self._graph_calls > CUDA_GRAPH_WARMUP:  # this call captured the graph
            self.compile_s = self._graph_s
            logger.info(COMPILED_MSG, type(self).__name__, self.compile_s, " + CUDA graph")
        return info

    def flat_gradients(self, data: TensorDictBase) -> tuple[np.ndarray, dict[str, float]]:
        """Gradients of the loss on ``data`` as one flat array, and what to log.

        Returns:
            A fresh, writable ``float32`` array in the layout of :attr:`codec`
            (a parameter the loss does not reach gets zeros), and the loss's
            info. The parameters' ``.grad`` are left empty.
        """
        self.optimizer.zero_grad(set_to_none=True)
        info = self._backward(data)
        flat = self._codec.flatten([param.grad for param in self._params])
        self.optimizer.zero_grad(set_to_none=True)
        return flat, floats(info)

    def apply_flat_gradients(self, flat: np.ndarray) -> float | None:
        """One optimizer step with flat gradients (as from :meth:`flat_gradients`); the grad norm.

        ``flat`` is copied once (it may be a read-only array from Ray's object
        store) and is not changed. With ``max_grad_norm`` set, the gradients
        are clipped to it and the norm before clipping is returned (else None).
        """
        return self._apply(self._codec.split(flat))

    def _apply(self, grads: list[torch.Tensor]) -> float | None:
        for param, grad in zip(self._params, grads, strict=True):
            param.grad = grad.to(param.device)
        norm = self.step()
        self.num_updates += 1
        return None if norm is None else float(norm)

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
        return self._apply(self._codec.split(self._codec.pack(grads), copy=False))

    @property
    def steps_per_batch(self) -> int:
        """Gradient steps taken on each collected batch (``num_epochs x num_mini_batch``)."""
        return self.num_epochs * self.num_mini_batch

    def gradient_batches(self, batch: TensorDictBase) -> Iterator[TensorDictBase]:
        """The data of each gradient step on one collected batch, in order.

        :meth:`prepare` (e.g. GAE with the current critic) runs once, when the
        first minibatch is drawn (its seconds are added to :attr:`prepare_s`); then ``num_epochs`` fresh random splits into
        ``num_mini_batch`` minibatches. The central learner
        (:meth:`learn`) and the gradient workers of the distributed scheme
        consume the same sequence.
        """
        start = time.perf_counter()
        data = self.prepare(batch)
        # no sync: on a GPU, work still queued is counted by the optimizer steps that wait for it
        self.prepare_s += time.perf_counter() - start
        for _ in range(self.num_epochs):
            yield from self.minibatches(data)

    def after_update(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Hook after each optimizer step (e.g. target-network updates). Replicas that
        receive the weights of a step call it too, so their targets follow the master's."""

    def learn(self, batch: TensorDictBase) -> dict[str, float]:
        """Train on one collected batch; returns the mean of each logged value."""
        return self.update_on(self.gradient_batches(batch))

    def update_on(self, minibatches: Iterable[TensorDictBase]) -> dict[str, float]:
        """One local optimizer step per minibatch (each followed by :meth:`after_update`);
        returns the mean of each logged value, read once at the end."""
        info = StepInfo()
        for minibatch in minibatches:
            info.add(self._run_train_step(minibatch))
            self.num_updates += 1
            self.after_update()
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
        coefficients in the loss module, anything else on the algorithm.

        Values live in tensors where a compiled step reads them (the learning
        rate under compile, the loss's buffers), and change in place there.
        """
        if name == "lr":
            for group in self.optimizer.param_groups:
                if isinstance(group["lr"], torch.Tensor):
                    group["lr"].fill_(float(value))
                else:
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
        raise NotImplementedError(name)  # every tunable is set by the class that declares it

    def parameter(self, name: str) -> float:
        """The current value of ``lr`` or a tunable hyperparameter."""
        if name == "lr":
            return self.lr
        if name not in self.tunable:
            raise ConfigError(
                [
                    UNKNOWN_PARAMETER_MSG.format(
                        name=name, algo=type(self).__name__, known=["lr", *self.tunable]
                    )
                ]
            )
        return float(getattr(self, name))

    def scheduled(self, progress: float) -> dict[str, float]:
        """What the schedules set at ``progress`` (frames trained / ``trainer.total_frames``):
        name -> value, for :meth:`update_algorithm_parameter` (on every replica).

        ``lr`` decays linearly to (nearly) 0 with ``lr_schedule: linear``;
        subclasses add their own (PPO's and APPO's ``clip_schedule``).
        """
        progress = min(1.0, max(0.0, progress))
        if self.config.lr_schedule == Schedule.LINEAR:
            return {"lr": max(1e-8, self._base_lr * (1.0 - progress))}
        return {}

    def logged_parameters(self) -> dict[str, float]:
        """The hyperparameters a run logs each iteration (``train/lr``, ...)."""
        return {"train/lr": self.lr}

    # ------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {
            "loss_module": self.loss_module.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "num_updates": self.num_updates,
            "hyperparameters": {name: self.parameter(name) for name in ("lr", *self.tunable)},
            **({"reward_scaler": self.reward_scaler.state_dict()} if self.reward_scaler else {}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a :meth:`state_dict`; :class:`NetworkMisfit` when its networks are other
        ones (torch's loader lets a loss module's parameters go missing or unknown)."""
        _check_same_networks(self.loss_module.state_dict(), state["loss_module"])
        self.loss_module.load_state_dict(state["loss_module"])
        lr = [g["lr"] for g in self.optimizer.param_groups]
        self.optimizer.load_state_dict(_as_built(state["optimizer"], self.optimizer))
        for group, kept in zip(self.optimizer.param_groups, lr):
            if isinstance(kept, torch.Tensor):  # a compiled step reads this tensor: keep it
                kept.fill_(float(group["lr"]))
                group["lr"] = kept
        self.num_updates = int(state["num_updates"])
        for name, value in state["hyperparameters"].items():
            self.update_algorithm_parameter(name, value)
        if self.reward_scaler is not None:
            self.reward_scaler.load_state_dict(state["reward_scaler"])


class NetworkMisfit(ValueError):
    """A saved algorithm state whose networks (parameter names) are not the ones built now:
    e.g. a run trained with a custom actor, loaded into the config's default networks.
    Its message says which parameters differ."""


def _check_same_networks(built: dict[str, Any], saved: dict[str, Any]) -> None:
    missing, unknown = sorted(set(built) - set(saved)), sorted(set(saved) - set(built))
    if missing or unknown:
        parts = [
            f"{what} {len(keys)} (e.g. {keys[0]!r})"
            for keys, what in (
                (unknown, "the checkpoint has parameters they lack:"),
                (missing, "it lacks parameters they have:"),
            )
            if keys
        ]
        raise NetworkMisfit("; ".join(parts))


#: how an optimizer runs, not what it computes: a checkpoint's are not loaded over the built ones
OPTIMIZER_IMPLEMENTATION = ("foreach", "fused", "capturable", "differentiable")


def _as_built(saved: dict[str, Any], optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """A saved optimizer state with ``optimizer``'s own implementation flags.

    A checkpoint written by an eager CPU learner (fused Adam) resumes into a compiled
    or CUDA-graphed one (capturable Adam with a tensor learning rate) and back: the
    hyperparameters and moments are the checkpoint's, how the step runs is this
    learner's. The moments are copied: torch's ``load_state_dict`` keeps a tensor that
    needs no cast, and two learners loaded from one state must not share their moments.
    """
    groups = []
    for group, own in zip(saved["param_groups"], optimizer.param_groups, strict=True):
        group = {**group, **{k: own[k] for k in OPTIMIZER_IMPLEMENTATION if k in own}}
        group["lr"] = float(group["lr"])  # a tensor again after loading, where it is one now
        groups.append(group)
    state = {
        index: {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in moments.items()}
        for index, moments in saved["state"].items()
    }
    return {**saved, "state": state, "param_groups": groups}

"""The one batched-env interface every collector steps: N environments as one batch, numpy in and out.

:class:`BatchedEnv` is what :func:`fleetrl.envs.make_env` returns for every kind
of env a user passes (a gymnasium id, env or vector env, a torchrl env, an
:class:`~fleetrl.envs.AtariEnv` or :class:`~fleetrl.envs.MujocoEnv` spec, a
factory of any of these); each engine returns the same :class:`StepResult`, so
the collector has one hot loop.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fleetrl.errors import EnvError
from fleetrl.keys import NestedKey

__all__ = ["ENGINE_MSG", "BatchedEnv", "StepResult"]


STATIC_SEED_MSG = (
    "set_seed(seed, static_seed=True) seeds every env with the same seed, which {env} cannot "
    "do (its envs take consecutive seeds); use static_seed=False"
)
ENGINE_MSG = "{prefix}engine={value!r} is invalid: must be one of {allowed}"


@dataclass
class StepResult:
    """One batched step. Arrays have a leading dim of ``num_envs``.

    ``next_obs`` is the observation the transition led to (the final one when
    the episode ended); ``obs`` is what the policy sees at the next step (the
    reset observation where an episode ended, else the same as ``next_obs``).
    """

    next_obs: dict[NestedKey, np.ndarray]
    obs: dict[NestedKey, np.ndarray]
    reward: np.ndarray  # float, [N]
    terminated: np.ndarray  # bool, [N]
    truncated: np.ndarray  # bool, [N]


class BatchedEnv(abc.ABC):
    """N environments stepped as one batch; numpy in, numpy out.

    :func:`~fleetrl.envs.make_env` builds one from what a user passes (an id, a factory,
    a vector env); the collectors step it.

    Examples:
        >>> from fleetrl.envs import make_env
        >>> env = make_env("CartPole-v1", num_envs=2)
        >>> isinstance(env, BatchedEnv), env.num_envs, env.num_actions
        (True, 2, 2)
        >>> env.close()"""

    num_envs: int
    #: env batch dims as the user sees them ([N] for vector envs, [] for a torchrl env with no batch)
    batch_shape: torch.Size
    #: observation key -> (per-env shape, numpy dtype)
    observation_spec: dict[NestedKey, tuple[tuple[int, ...], np.dtype]]
    #: per-env action shape and dtype the env accepts
    action_shape: tuple[int, ...]
    action_dtype: np.dtype
    #: number of discrete actions, or None for continuous actions
    num_actions: int | None
    #: each env is one unbatched torchrl env (alone, or copies batched by fleetrl): torchrl
    #: feeds such envs' policies one env's shapes, and so does the collector
    unbatched_copies: bool = False
    _sent: Any = None  # the action sent and not yet received

    @abc.abstractmethod
    def reset(self, seed: int | None = None) -> dict[NestedKey, np.ndarray]:
        """Reset every env; with a seed, env i is seeded with ``seed + i``."""

    @abc.abstractmethod
    def reset_envs(self, mask: np.ndarray) -> dict[NestedKey, np.ndarray]:
        """Reset the envs where ``mask`` is True; return observations for all envs."""

    @abc.abstractmethod
    def step(self, action: np.ndarray | torch.Tensor) -> StepResult:
        """Step every env with a batch of actions."""

    def send(self, action: np.ndarray | torch.Tensor) -> None:
        """Start a step of every env with ``action``; :meth:`recv` finishes it. An engine
        that steps in threads of its own returns at once and steps meanwhile (the C++
        engines); here the step runs in :meth:`recv`."""
        self._sent = action

    def recv(self) -> StepResult:
        """Finish the step :meth:`send` started."""
        action, self._sent = self._sent, None
        return self.step(action)

    def cancel(self) -> None:
        """Leave no step in flight (after an error between :meth:`send` and :meth:`recv`)."""
        self._sent = None

    @abc.abstractmethod
    def random_action(self) -> torch.Tensor:
        """A uniformly random batch of actions, shaped as the policy would write them."""

    @abc.abstractmethod
    def seed_actions(self, seed: int) -> None:
        """Seed the random-action sampler."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the envs."""

    @property
    def action_bounds(self) -> tuple[np.ndarray, np.ndarray] | None:
        """A continuous action space's ``(low, high)`` per env (None: discrete or unknown)."""
        return None

    def reset_static(self, seed: int) -> dict[NestedKey, np.ndarray]:
        """Reset every env with the same ``seed`` (torchrl's ``set_seed(seed, static_seed=True)``)."""
        raise EnvError(STATIC_SEED_MSG.format(env=type(self).__name__))

    def state_dict(self) -> dict[str, Any] | None:
        """The envs' state (tensors and plain values), or None where it cannot be saved."""
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (only called with a saved state)."""
        raise EnvError(f"{type(self).__name__} cannot restore a saved env state")

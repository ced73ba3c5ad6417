"""One batched-env interface over what users pass as an environment.

:func:`make_env` accepts a gymnasium id, a gymnasium ``Env`` or ``VectorEnv``,
a torchrl ``EnvBase``, or a callable returning any of these, and returns a
:class:`BatchedEnv`: N environments stepped as one batch, speaking numpy.

Two backends:

- :class:`GymVectorEnv`, the fast path: a gymnasium vector env with
  ``AutoresetMode.SAME_STEP``. A finished env is reset inside the same
  ``step`` call and gymnasium hands back its final observation in
  ``infos["final_obs"]``; we return that as the transition's next observation
  and the reset observation as what the policy sees next. No transition ever
  spans two episodes.
- :class:`TorchRLEnv`: any torchrl ``EnvBase`` (``GymEnv``, ``TransformedEnv``,
  batched envs), stepped with ``step_and_maybe_reset`` so torchrl's own partial
  reset logic applies. A factory of unbatched torchrl envs asked for
  ``num_envs=n`` gives n copies in a ``SerialEnv``.

Both return the same :class:`StepResult`, so the collector has one hot loop.

On the gymnasium path, ``float64`` observations (MuJoCo's) become ``float32``
at the env boundary, the dtype of the networks and half the bytes in batches
and replay buffers; continuous (Box) actions are clipped to the action space
there, as CleanRL's ``ClipAction`` wrapper does: the policy's unclipped sample
is what the batch stores, so its log-probability stays exact.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict

from fleetrl.errors import EnvError

__all__ = ["BatchedEnv", "GymVectorEnv", "StepResult", "TorchRLEnv", "make_env"]

NestedKey = str | tuple[str, ...]

ENV_TYPE_MSG = (
    "create_env_fn={value!r} is invalid: pass a gymnasium id (e.g. 'CartPole-v1'), a gymnasium "
    "Env or VectorEnv, a torchrl EnvBase, or a callable returning one of these"
)
UNKNOWN_ID_MSG = (
    "create_env_fn={value!r} is not a registered gymnasium id ({err}); "
    "check the spelling or import the package that registers it"
)
NEXT_STEP_MSG = (
    "create_env_fn: the gymnasium VectorEnv {value!r} uses autoreset_mode=NEXT_STEP, which makes a "
    "bogus transition across every episode end; build it with "
    "vector_kwargs={{'autoreset_mode': gymnasium.vector.AutoresetMode.SAME_STEP}} (or DISABLED), "
    "or pass the env id and num_envs instead"
)
NUM_ENVS_MSG = (
    "num_envs={value!r} is invalid for an already built {kind}: it is only used to vectorize a "
    "gymnasium id or factory; leave num_envs=None (or equal to the env's {n} sub-envs)"
)
FACTORY_GYM_MSG = (
    "create_env_fn={value!r} raised gymnasium's {kind}: {err}; check the env id and the "
    "arguments the factory passes to gymnasium"
)
STATIC_SEED_MSG = (
    "set_seed(seed, static_seed=True) seeds every env with the same seed, which {env} cannot "
    "do (its envs take consecutive seeds); use static_seed=False"
)
SPACE_MSG = (
    "create_env_fn: {which} space {space!r} is not supported on the gymnasium fast path "
    "(Box, Discrete, MultiDiscrete, MultiBinary are); wrap the env in torchrl's GymWrapper "
    "to use torchrl's spec conversion"
)


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
    """N environments stepped as one batch; numpy in, numpy out."""

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

    @abc.abstractmethod
    def reset(self, seed: int | None = None) -> dict[NestedKey, np.ndarray]:
        """Reset every env; with a seed, env i is seeded with ``seed + i``."""

    @abc.abstractmethod
    def reset_envs(self, mask: np.ndarray) -> dict[NestedKey, np.ndarray]:
        """Reset the envs where ``mask`` is True; return observations for all envs."""

    @abc.abstractmethod
    def step(self, action: np.ndarray | torch.Tensor) -> StepResult:
        """Step every env with a batch of actions."""

    @abc.abstractmethod
    def random_action(self) -> torch.Tensor:
        """A uniformly random batch of actions, shaped as the policy would write them."""

    @abc.abstractmethod
    def seed_actions(self, seed: int) -> None:
        """Seed the random-action sampler."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the envs."""

    def reset_static(self, seed: int) -> dict[NestedKey, np.ndarray]:
        """Reset every env with the same ``seed`` (torchrl's ``set_seed(seed, static_seed=True)``)."""
        raise EnvError(STATIC_SEED_MSG.format(env=type(self).__name__))

    def state_dict(self) -> dict[str, Any] | None:
        """The envs' state (tensors and plain values), or None where it cannot be saved."""
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (only called with a saved state)."""
        raise EnvError(f"{type(self).__name__} cannot restore a saved env state")


def _space_spec(space: gym.Space, which: str) -> tuple[tuple[int, ...], np.dtype, int | None]:
    if isinstance(space, gym.spaces.Discrete):
        return (), np.dtype(np.int64), int(space.n)
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return tuple(space.shape), np.dtype(space.dtype), None
    raise EnvError(SPACE_MSG.format(which=which, space=space))


class GymVectorEnv(BatchedEnv):
    """A gymnasium vector env with same-step autoreset (the fast path).

    Cost per step: the env's own step plus one masked copy of the final
    observations when an episode ended; nothing is allocated otherwise.
    """

    def __init__(self, env: gym.vector.VectorEnv):
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if mode == AutoresetMode.NEXT_STEP:
            raise EnvError(NEXT_STEP_MSG.format(value=env))
        self.env = env
        self._manual_reset = mode == AutoresetMode.DISABLED
        self.num_envs = int(env.num_envs)
        self.batch_shape = torch.Size([self.num_envs])
        obs_shape, obs_dtype, _ = _space_spec(env.single_observation_space, "observation")
        #: float64 observations (MuJoCo's) are handed on as float32
        self._to_float32 = obs_dtype == np.float64
        if self._to_float32:
            obs_dtype = np.dtype(np.float32)
        self.observation_spec = {"observation": (obs_shape, obs_dtype)}
        self.action_shape, self.action_dtype, self.num_actions = _space_spec(
            env.single_action_space, "action"
        )
        space = env.single_action_space
        #: Box action bounds the actions are clipped to (None: discrete, or unbounded)
        self._action_bounds = None
        if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
            low, high = space.low, space.high
            if np.isfinite(low).any() or np.isfinite(high).any():
                self._action_bounds = (low.astype(space.dtype), high.astype(space.dtype))

    def _obs(self, obs: np.ndarray) -> np.ndarray:
        return obs.astype(np.float32) if self._to_float32 else obs

    def reset(self, seed: int | None = None) -> dict[NestedKey, np.ndarray]:
        obs, _ = self.env.reset(seed=seed)
        return {"observation": self._obs(obs)}

    def reset_envs(self, mask: np.ndarray) -> dict[NestedKey, np.ndarray]:
        obs, _ = self.env.reset(options={"reset_mask": mask})
        return {"observation": self._obs(obs)}

    def reset_static(self, seed: int) -> dict[NestedKey, np.ndarray]:
        obs, _ = self.env.reset(seed=[seed] * self.num_envs)  # gymnasium: one seed per env
        return {"observation": self._obs(obs)}

    def step(self, action: np.ndarray | torch.Tensor) -> StepResult:
        if isinstance(action, torch.Tensor):
            action = action.numpy()
        if self._action_bounds is not None:  # one small clip per step: [N, action_dim]
            action = np.clip(action, *self._action_bounds)
        obs, reward, terminated, truncated, infos = self.env.step(action)
        obs = self._obs(obs)
        next_obs = obs
        if self._manual_reset:
            done = terminated | truncated
            if done.any():
                obs = self.reset_envs(done)["observation"]
        elif "_final_obs" in infos:
            # gymnasium hands the final observations as an object array; copy only
            # the finished rows into a fresh array (obs holds the reset ones).
            next_obs = obs.copy()
            ended = np.flatnonzero(infos["_final_obs"])
            next_obs[ended] = np.stack(infos["final_obs"][ended])  # cast as it is written
        return StepResult(
            {"observation": next_obs}, {"observation": obs}, reward, terminated, truncated
        )

    def random_action(self) -> torch.Tensor:
        return torch.as_tensor(self.env.action_space.sample())

    def seed_actions(self, seed: int) -> None:
        self.env.action_space.seed(seed)

    def state_dict(self) -> dict[str, Any] | None:
        # classic-control envs under gymnasium's default wrappers in a SyncVectorEnv
        from fleetrl.env_state import vector_env_state

        return vector_env_state(self.env)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from fleetrl.env_state import load_vector_env_state

        load_vector_env_state(self.env, state)

    def close(self) -> None:
        self.env.close()


def _flat_keys(td: TensorDict) -> list[NestedKey]:
    return list(td.keys(include_nested=True, leaves_only=True))


class TorchRLEnv(BatchedEnv):
    """Any torchrl ``EnvBase``, stepped with ``step_and_maybe_reset``.

    Slower than the gymnasium path (torchrl builds TensorDicts per step) but
    runs everything torchrl runs: transforms, batched and parallel envs.
    """

    def __init__(self, env: Any, *, unbatched_copies: bool = False):
        self.env = env
        self.batch_shape = torch.Size(env.batch_size)
        self.num_envs = max(1, self.batch_shape.numel())
        self.unbatched_copies = unbatched_copies or self.batch_shape == torch.Size([])
        self._obs_keys = [k for k in env.full_observation_spec.keys(True, True)]
        self.observation_spec = {}
        for key in self._obs_keys:
            spec = env.full_observation_spec[key]
            shape = tuple(spec.shape[len(self.batch_shape) :])
            self.observation_spec[key] = (shape, _np_dtype(spec.dtype))
        action_spec = env.full_action_spec[env.action_key]
        self.action_shape = tuple(action_spec.shape[len(self.batch_shape) :])
        self.action_dtype = _np_dtype(action_spec.dtype)
        n = getattr(action_spec, "n", None)  # Categorical and OneHot specs carry n
        self.num_actions = int(n) if n is not None else None
        self._action_key = env.action_key
        self._td: TensorDict | None = None
        self._rng: torch.Generator | None = None

    def _obs(self, td: TensorDict) -> dict[NestedKey, np.ndarray]:
        return {
            k: td.get(k).reshape(self.num_envs, *self.observation_spec[k][0]).cpu().numpy()
            for k in self._obs_keys
        }

    def reset(self, seed: int | None = None) -> dict[NestedKey, np.ndarray]:
        if seed is not None:
            self.env.set_seed(seed)
        self._td = self.env.reset()
        return self._obs(self._td)

    def reset_static(self, seed: int) -> dict[NestedKey, np.ndarray]:
        self.env.set_seed(seed, static_seed=True)
        self._td = self.env.reset()
        return self._obs(self._td)

    def reset_envs(self, mask: np.ndarray) -> dict[NestedKey, np.ndarray]:
        assert self._td is not None
        reset = torch.as_tensor(mask, device=self.env.device).reshape((*self.batch_shape, 1))
        td = self._td.clone()
        td.set("_reset", reset)
        out = self.env.reset(td)
        # rows not reset keep their observation
        self._td = out
        return self._obs(out)

    def step(self, action: np.ndarray | torch.Tensor) -> StepResult:
        assert self._td is not None
        action = torch.as_tensor(action, device=self.env.device)
        td = self._td
        td.set(self._action_key, action.reshape(tuple(self.batch_shape) + tuple(action.shape[1:])))
        out, self._td = self.env.step_and_maybe_reset(td)
        nxt = out.get("next")
        n = self.num_envs
        done_like = nxt.get("terminated", None)
        if done_like is None:
            done_like = nxt.get("done")
        truncated = nxt.get("truncated", None)
        if truncated is None:
            truncated = torch.zeros_like(done_like)
        return StepResult(
            next_obs=self._obs(nxt),
            obs=self._obs(self._td),
            reward=nxt.get("reward").reshape(n).cpu().numpy(),
            terminated=done_like.reshape(n).cpu().numpy(),
            truncated=truncated.reshape(n).cpu().numpy(),
        )

    def random_action(self) -> torch.Tensor:
        a = self.env.full_action_spec[self._action_key].rand()
        return a.reshape((self.num_envs, *a.shape[len(self.batch_shape) :])).cpu()

    def seed_actions(self, seed: int) -> None:
        torch.manual_seed(seed)  # torchrl specs sample from torch's global generator

    def close(self) -> None:
        if not self.env.is_closed:
            self.env.close()


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty((), dtype=dtype).numpy().dtype


def _is_torchrl_env(obj: Any) -> bool:
    try:
        from torchrl.envs import EnvBase
    except ImportError:  # pragma: no cover - torchrl is a dependency
        return False
    return isinstance(obj, EnvBase)


def make_gym_vector_env(env_id: str, num_envs: int, **kwargs: Any) -> gym.vector.VectorEnv:
    """Build a gymnasium sync vector env with same-step autoreset."""
    try:
        gym.spec(env_id)
    except gym.error.Error as err:
        raise EnvError(UNKNOWN_ID_MSG.format(value=env_id, err=err)) from None
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        **kwargs,
    )


def make_env(
    create_env_fn: Any,
    num_envs: int | None = None,
    create_env_kwargs: dict[str, Any] | None = None,
) -> BatchedEnv:
    """Turn what a user passes as an env into a :class:`BatchedEnv`.

    Args:
        create_env_fn: a gymnasium id, a gymnasium ``Env`` or ``VectorEnv``, a
            torchrl ``EnvBase``, or a callable returning one of these; or a
            :class:`fleetrl.engines.AtariEnv` or :class:`fleetrl.mujoco_envs.MujocoEnv`.
            An ALE id (``"ALE/Pong-v5"``) is
            built as ``AtariEnv(id)``: the standard Atari preprocessing in the
            gymnasium engine.
        num_envs: how many copies to vectorize in-process. Used for gymnasium ids
            and factories (default 1); an already built vector or torchrl env
            keeps its own batch.
        create_env_kwargs: keyword arguments for ``create_env_fn`` (or for
            ``gymnasium.make`` when it is an id; for an ALE id, ``engine`` and
            :class:`~fleetrl.config.AtariConfig` fields, e.g. ``{"engine": "envpool"}``; for a
            MuJoCo id with an ``engine``, :class:`~fleetrl.mujoco_envs.MujocoEnv`'s fields and
            the env's own arguments).

    Examples:
        >>> env = make_env("CartPole-v1", num_envs=4)
        >>> env.num_envs, env.num_actions
        (4, 2)
        >>> env.close()
    """
    kwargs = dict(create_env_kwargs or {})
    from fleetrl.engines import AtariEnv, is_atari_id  # engines builds on this module
    from fleetrl.mujoco_envs import MujocoEnv, is_mujoco_id

    if isinstance(create_env_fn, str) and is_atari_id(create_env_fn):
        create_env_fn = AtariEnv.from_kwargs(create_env_fn, kwargs)
    elif isinstance(create_env_fn, str) and "engine" in kwargs and is_mujoco_id(create_env_fn):
        create_env_fn = MujocoEnv.from_kwargs(create_env_fn, kwargs)
    if isinstance(create_env_fn, (AtariEnv, MujocoEnv)):
        return create_env_fn.make(num_envs or 1)
    if isinstance(create_env_fn, str):
        return GymVectorEnv(make_gym_vector_env(create_env_fn, num_envs or 1, **kwargs))
    if isinstance(create_env_fn, gym.vector.VectorEnv):
        _check_prebuilt_num_envs(num_envs, create_env_fn.num_envs, "gymnasium VectorEnv")
        return GymVectorEnv(create_env_fn)
    if isinstance(create_env_fn, gym.Env):
        if num_envs not in (None, 1):
            raise EnvError(NUM_ENVS_MSG.format(value=num_envs, kind="gymnasium Env", n=1))
        env = create_env_fn
        return GymVectorEnv(
            gym.vector.SyncVectorEnv([lambda: env], autoreset_mode=AutoresetMode.SAME_STEP)
        )
    if _is_torchrl_env(create_env_fn):
        _check_prebuilt_num_envs(num_envs, max(1, create_env_fn.batch_size.numel()), "torchrl env")
        return TorchRLEnv(create_env_fn)
    if callable(create_env_fn):
        return _make_from_factory(create_env_fn, num_envs, kwargs)
    raise EnvError(ENV_TYPE_MSG.format(value=create_env_fn))


def _check_prebuilt_num_envs(num_envs: int | None, n: int, kind: str) -> None:
    if num_envs is not None and num_envs != n:
        raise EnvError(NUM_ENVS_MSG.format(value=num_envs, kind=kind, n=n))


def _call_factory(factory: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    try:
        return factory(**kwargs)
    except gym.error.Error as err:  # e.g. an unknown id inside the factory
        raise EnvError(
            FACTORY_GYM_MSG.format(value=factory, kind=type(err).__name__, err=err)
        ) from err


def _make_from_factory(
    factory: Callable[..., Any], num_envs: int | None, kwargs: dict[str, Any]
) -> BatchedEnv:
    first = _call_factory(factory, kwargs)
    if num_envs not in (None, 1) and _is_torchrl_env(first) and first.batch_size == torch.Size([]):
        return TorchRLEnv(_serial_copies(first, factory, num_envs, kwargs), unbatched_copies=True)
    if isinstance(first, gym.Env) and not isinstance(first, gym.vector.VectorEnv):
        n = num_envs or 1
        envs = [first] + [_call_factory(factory, kwargs) for _ in range(n - 1)]
        fns = [(lambda e=e: e) for e in envs]
        return GymVectorEnv(gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP))
    if num_envs not in (None, 1) and (
        isinstance(first, gym.vector.VectorEnv) or _is_torchrl_env(first)
    ):
        # A factory of batched envs cannot be vectorized again in-process.
        n = first.num_envs if isinstance(first, gym.vector.VectorEnv) else first.batch_size.numel()
        if num_envs != n:
            first.close()
            raise EnvError(NUM_ENVS_MSG.format(value=num_envs, kind=type(first).__name__, n=n))
    if isinstance(first, (gym.vector.VectorEnv, str)) or _is_torchrl_env(first):
        return make_env(first, None)
    raise EnvError(ENV_TYPE_MSG.format(value=factory) + f" (the callable returned {first!r})")


def _serial_copies(first: Any, factory: Callable[..., Any], n: int, kwargs: dict[str, Any]) -> Any:
    """``n`` copies of an unbatched torchrl env as one ``SerialEnv`` of batch ``[n]``.

    torchrl's collectors give each copy of a factory its own worker; we step
    the copies in-process instead (a ``ParallelEnv`` would start n processes
    inside a collector that Ray gives one CPU). The first copy is the env
    already built.
    """
    from torchrl.envs import SerialEnv

    fns = [lambda: first] + [lambda: _call_factory(factory, kwargs)] * (n - 1)
    return SerialEnv(n, fns)

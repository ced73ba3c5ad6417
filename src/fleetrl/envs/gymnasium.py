"""gymnasium vector envs as same-step episodes: the fast path of :func:`fleetrl.envs.make_env`.

fleetrl's own builds use same-step autoreset: a finished env is reset inside
the same ``step`` call and gymnasium hands back its final observation in
``infos["final_obs"]``; :class:`GymVectorEnv` returns that as the transition's
next observation and the reset observation as what the policy sees next. A
vector env a user built in another mode (NEXT_STEP, gymnasium's default, or
DISABLED) has its finished envs reset right after the step that ended them. No
transition ever spans two episodes.

``float64`` observations (MuJoCo's) become ``float32`` at the env boundary, the
dtype of the networks and half the bytes in batches and replay buffers;
continuous (Box) actions are clipped to the action space there, as CleanRL's
``ClipAction`` wrapper does: the policy's unclipped sample is what the batch
stores, so its log-probability stays exact.

Discrete actions are 0-based indices in every batch, whatever the space's
``start``: ``Discrete(3, start=-1)`` is stored as 0, 1, 2 (what a Categorical,
one-hot or Q-value policy writes, and what torchrl's specs say), and the env
receives ``index + start`` (-1, 0, 1). ``MultiDiscrete`` likewise, per
component. Random actions are stored the same way.
"""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from fleetrl.envs.base import BatchedEnv, StepResult
from fleetrl.envs.state import load_vector_env_state, vector_env_state
from fleetrl.errors import EnvError
from fleetrl.keys import OBSERVATION_KEY, NestedKey

__all__ = [
    "PARTIAL_RESET_CLASSES",
    "GymVectorEnv",
    "IdModuleError",
    "action_start",
    "autoreset_mode",
    "gym_spec",
    "make_gym_vector_env",
    "next_step_problem",
    "registry_name",
    "space_spec",
]

UNKNOWN_ID_MSG = (
    "create_env_fn={value!r} is not a registered gymnasium id ({err}); "
    "check the spelling or import the package that registers it"
)
NEXT_STEP_MSG = (
    "create_env_fn: the gymnasium VectorEnv {value!r} uses autoreset_mode=NEXT_STEP, which "
    "makes a transition across every episode end, and fleetrl cannot reset a {kind}'s "
    "finished envs itself (it does so for gymnasium's SyncVectorEnv and AsyncVectorEnv and "
    "ale-py's AtariVectorEnv); build it with autoreset_mode=SAME_STEP (final observations in "
    "infos['final_obs']) or DISABLED (fleetrl resets finished envs with "
    "reset(options={{'reset_mask': ...}}))"
)
NO_FINAL_OBS_MSG = (
    "create_env_fn: the gymnasium VectorEnv {value!r} (autoreset_mode=SAME_STEP) ended an "
    "episode without its final observation in infos['final_obs'], so the transition's next "
    "observation would be the new episode's first; build it with autoreset_mode=DISABLED "
    "(fleetrl resets finished envs itself)"
)
ALE_ASYNC_MSG = (
    "create_env_fn: ale-py's AtariVectorEnv {value!r} has batch_size={batch} < num_envs={n} "
    "(its async mode: each step answers the first envs ready); fleetrl steps every env each "
    "step: build it with batch_size=0 (the default: all {n} envs)"
)
ASYNC_NO_SHM_MSG = (
    "create_env_fn: the gymnasium AsyncVectorEnv {value!r} has shared_memory=False and "
    "autoreset_mode=NEXT_STEP: its workers keep a finished env's pending reset after "
    "reset(options={{'reset_mask': ...}}) resets it (gymnasium clears that flag only with "
    "shared memory), so the step after every episode end would be a second reset that "
    "ignores the action; build it with shared_memory=True (the default), or with "
    "autoreset_mode=SAME_STEP or DISABLED"
)
SPACE_MSG = (
    "create_env_fn: {which} space {space!r} is not supported on the gymnasium fast path "
    "(Box, Discrete, MultiDiscrete, MultiBinary are); wrap the env in torchrl's GymWrapper "
    "to use torchrl's spec conversion"
)


def space_spec(space: gym.Space, which: str) -> tuple[tuple[int, ...], np.dtype, int | None]:
    if isinstance(space, gym.spaces.Discrete):
        return (), np.dtype(np.int64), int(space.n)
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return tuple(space.shape), np.dtype(space.dtype), None
    raise EnvError(SPACE_MSG.format(which=which, space=space))


def action_start(space: gym.Space) -> np.ndarray | None:
    """The first value of a ``Discrete`` or ``MultiDiscrete`` space (per component), or None
    where it is 0 (or the space is not discrete).

    Examples:
        >>> action_start(gym.spaces.Discrete(3, start=-1))
        array(-1)
        >>> action_start(gym.spaces.MultiDiscrete([3, 2], start=[1, 0]))
        array([1, 0])
        >>> action_start(gym.spaces.Discrete(3)) is None
        True
    """
    if not isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return None
    start = np.asarray(space.start, dtype=np.int64)
    return start if start.any() else None


#: vector env classes whose ``reset(options={"reset_mask": m})`` resets just those envs and
#: cancels their pending next-step reset: (module, class name), so none is imported here.
#: Each was checked for the step after an episode end playing the policy's action
#: (tests/unit/envs/test_episode_boundaries.py); AsyncVectorEnv only with shared memory
#: (see :func:`next_step_problem`).
PARTIAL_RESET_CLASSES = {
    ("gymnasium.vector.sync_vector_env", "SyncVectorEnv"),
    ("gymnasium.vector.async_vector_env", "AsyncVectorEnv"),
    ("ale_py.vector_env", "AtariVectorEnv"),
}


def next_step_problem(env: gym.vector.VectorEnv) -> str | None:
    """Why fleetrl cannot keep a NEXT_STEP vector env's episodes apart, or None if it can.

    fleetrl resets a finished env right after the step that ended it; that works only where
    the partial reset also cancels the env's own pending reset. The class decides, and for
    gymnasium's AsyncVectorEnv its ``shared_memory`` too: without it, gymnasium's worker
    keeps the pending-reset flag, and the next step resets again, ignoring the action.
    """
    base = env.unwrapped
    kind = (type(base).__module__, type(base).__name__)
    if kind not in PARTIAL_RESET_CLASSES:
        return NEXT_STEP_MSG.format(value=env, kind=kind[1])
    if kind[1] == "AsyncVectorEnv" and not getattr(base, "shared_memory", True):
        return ASYNC_NO_SHM_MSG.format(value=env)
    return None


def autoreset_mode(env: gym.vector.VectorEnv) -> AutoresetMode:
    """A vector env's autoreset mode (gymnasium's default, NEXT_STEP, where it says none)."""
    return AutoresetMode(env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))


class GymVectorEnv(BatchedEnv):
    """A gymnasium vector env, in any autoreset mode, as same-step episodes (the fast path).

    - ``SAME_STEP``: a finished env is reset inside ``step``; its final observation
      (``infos["final_obs"]``: gymnasium's object array, or ale-py's batch array) is the
      transition's next observation.
    - ``DISABLED`` and ``NEXT_STEP``: the finished envs are reset right after the step
      that ended them (``reset(options={"reset_mask": done})``), so the step after an
      episode end plays the policy's action instead of a reset (NEXT_STEP: for the classes
      in :data:`PARTIAL_RESET_CLASSES`; another class is refused with the fix).

    ``terminated`` and ``truncated`` are distinct: an episode that terminates at its time
    limit is terminated, not truncated. Cost per step: the env's own step plus, when an
    episode ended, one copy of the observations and the finished rows' reset or final
    observations; nothing is allocated otherwise. gymnasium's own ``SyncVectorEnv`` in
    same-step mode (what fleetrl builds from an id) is stepped env by env here, without
    its info dicts: the same calls on the same sub-envs, in the same order.
    """

    def __init__(self, env: gym.vector.VectorEnv):
        mode = autoreset_mode(env)
        base = env.unwrapped
        problem = next_step_problem(env) if mode == AutoresetMode.NEXT_STEP else None
        if problem is not None:
            raise EnvError(problem)
        if type(base).__name__ == "AtariVectorEnv" and base.batch_size != base.num_envs:
            raise EnvError(ALE_ASYNC_MSG.format(value=env, batch=base.batch_size, n=base.num_envs))
        #: ale-py takes one seed per env as an array; gymnasium's classes, a list of ints
        self._seed_array = type(base).__name__ == "AtariVectorEnv"
        self.env = env
        #: reset finished envs after the step that ended them (else: the env reset them)
        self._manual_reset = mode != AutoresetMode.SAME_STEP
        self.num_envs = int(env.num_envs)
        self.batch_shape = torch.Size([self.num_envs])
        obs_shape, obs_dtype, _ = space_spec(env.single_observation_space, "observation")
        #: float64 observations (MuJoCo's) are handed on as float32
        self._to_float32 = obs_dtype == np.float64
        if self._to_float32:
            obs_dtype = np.dtype(np.float32)
        self.observation_spec = {OBSERVATION_KEY: (obs_shape, obs_dtype)}
        self.action_shape, self.action_dtype, self.num_actions = space_spec(
            env.single_action_space, "action"
        )
        space = env.single_action_space
        #: what a 0-based index is moved by on its way to the env (None: the space starts at 0)
        self._action_start = action_start(space)
        #: Box action bounds the actions are clipped to (None: discrete, or unbounded)
        self._action_bounds = None
        if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
            low, high = space.low, space.high
            if np.isfinite(low).any() or np.isfinite(high).any():
                self._action_bounds = (low.astype(space.dtype), high.astype(space.dtype))
        #: step the sub-envs here (:meth:`_step_each`): gymnasium's own SyncVectorEnv in
        #: same-step mode, with array observations and actions
        self._step_here = (
            type(env) is gym.vector.SyncVectorEnv
            and not self._manual_reset
            and isinstance(env.single_observation_space, gym.spaces.Box)
            and isinstance(space, (gym.spaces.Box, gym.spaces.Discrete))
        )
        #: the observation batch's shape and dtype (as handed on)
        self._obs_layout = ((self.num_envs, *obs_shape), obs_dtype)

    @property
    def action_bounds(self) -> tuple[np.ndarray, np.ndarray] | None:
        space = self.env.single_action_space
        if isinstance(space, gym.spaces.Box):
            return space.low, space.high
        return None

    def _obs(self, obs: np.ndarray) -> np.ndarray:
        return obs.astype(np.float32) if self._to_float32 else obs

    def reset(self, seed: int | None = None) -> dict[NestedKey, np.ndarray]:
        obs, _ = self.env.reset(seed=seed)
        return {OBSERVATION_KEY: self._obs(obs)}

    def reset_envs(self, mask: np.ndarray) -> dict[NestedKey, np.ndarray]:
        obs, _ = self.env.reset(options={"reset_mask": mask})
        return {OBSERVATION_KEY: self._obs(obs)}

    def reset_static(self, seed: int) -> dict[NestedKey, np.ndarray]:
        # one seed per env: ale-py refuses a list ("Unsupported seed type"), gymnasium's
        # envs refuse numpy integers
        seeds = (
            np.full(self.num_envs, seed, np.int64) if self._seed_array else [seed] * self.num_envs
        )
        obs, _ = self.env.reset(seed=seeds)
        return {OBSERVATION_KEY: self._obs(obs)}

    def step(self, action: np.ndarray | torch.Tensor) -> StepResult:
        if isinstance(action, torch.Tensor):
            action = action.numpy()
        if self._action_bounds is not None:  # one small clip per step: [N, action_dim]
            action = np.clip(action, *self._action_bounds)
        elif self._action_start is not None:  # 0-based indices -> the env's own values
            action = action + self._action_start
        if self._step_here:
            return self._step_each(action)
        obs, reward, terminated, truncated, infos = self.env.step(action)
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool) & ~terminated  # never both
        done = terminated | truncated
        obs = self._obs(obs)
        next_obs = obs
        if done.any():
            # a fresh array of next observations: the env may reuse its output buffer
            next_obs = obs.copy()
            if self._manual_reset:  # obs are the final ones: reset the finished envs now
                obs = self.reset_envs(done)[OBSERVATION_KEY]
            else:  # obs hold the reset ones: the final ones are in the infos
                final = infos.get("final_obs")
                if final is None:
                    raise EnvError(NO_FINAL_OBS_MSG.format(value=self.env))
                ended = np.flatnonzero(done)
                # gymnasium: an object array of rows; ale-py: the batch (cast as written)
                rows = final[ended]
                next_obs[ended] = np.stack(rows) if final.dtype == object else rows
        return StepResult(
            {OBSERVATION_KEY: next_obs}, {OBSERVATION_KEY: obs}, reward, terminated, truncated
        )

    def _step_each(self, action: np.ndarray) -> StepResult:
        """What ``SyncVectorEnv.step`` does in same-step mode, without its info dicts (merged
        per env and key, and read here only for the final observations): each sub-env
        steps with its row of ``action``, and one that ended is reset at once, its final
        observation kept as the transition's next one. The sub-envs' calls and their order
        are gymnasium's, so their states and generators end the same."""
        n = self.num_envs
        obs = np.empty(*self._obs_layout)
        reward = np.empty(n, dtype=np.float64)
        terminated = np.empty(n, dtype=bool)
        truncated = np.empty(n, dtype=bool)
        next_obs = obs
        for i, env in enumerate(self.env.envs):
            o, reward[i], terminated[i], truncated[i], _ = env.step(action[i])
            if terminated[i] or truncated[i]:
                if next_obs is obs:
                    next_obs = np.empty_like(obs)
                    next_obs[:i] = obs[:i]
                next_obs[i] = o
                o, _ = env.reset()
            elif next_obs is not obs:
                next_obs[i] = o
            obs[i] = o
        self.env._autoreset_envs = terminated | truncated  # as gymnasium keeps it (saved state)
        truncated &= ~terminated  # never both
        return StepResult(
            {OBSERVATION_KEY: next_obs}, {OBSERVATION_KEY: obs}, reward, terminated, truncated
        )

    def random_action(self) -> torch.Tensor:
        sample = self.env.action_space.sample()
        if self._action_start is not None:  # stored as the policy's would be: 0-based
            sample = sample - self._action_start
        return torch.as_tensor(sample)

    def seed_actions(self, seed: int) -> None:
        self.env.action_space.seed(seed)

    def state_dict(self) -> dict[str, Any] | None:
        # classic-control envs under gymnasium's default wrappers in a SyncVectorEnv
        return vector_env_state(self.env)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_vector_env_state(self.env, state)

    def close(self) -> None:
        self.env.close()


class IdModuleError(gym.error.Error):
    """The module an id in the ``module:Id`` form names cannot be imported."""

    def __init__(self, env_id: str, module: str, reason: ImportError):
        super().__init__(
            f"the module {module!r} that {env_id!r} names cannot be imported here: {reason}"
        )
        self.module, self.reason = module, reason


def registry_name(env_id: str) -> str:
    """The name ``env_id`` is registered under in this process: itself, or, in the
    ``module:Id`` form gymnasium's ``make`` takes (``my_envs:Maze-v0``), ``Id`` once the
    module (which registers it) is imported. Raises :class:`IdModuleError`."""
    module, sep, name = env_id.rpartition(":")
    if not sep:
        return env_id
    try:
        importlib.import_module(module)
    except ImportError as err:
        raise IdModuleError(env_id, module, err) from None
    return name


def gym_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """gymnasium's spec of ``env_id``, in the ``module:Id`` form too (:func:`registry_name`).
    Raises ``gymnasium.error.Error`` for an id nothing registers, or a module that cannot
    be imported (with the reason)."""
    return gym.spec(registry_name(env_id))


def make_gym_vector_env(env_id: str, num_envs: int, **kwargs: Any) -> gym.vector.VectorEnv:
    """Build a gymnasium sync vector env with same-step autoreset."""
    try:
        gym_spec(env_id)
    except gym.error.Error as err:
        raise EnvError(UNKNOWN_ID_MSG.format(value=env_id, err=err)) from None
    return gym.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        **kwargs,
    )

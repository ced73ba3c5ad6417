"""Small deterministic envs that make collector tests exact.

``CountingEnv``: the observation is the step count within the episode (reset
gives 0, step k gives k), the reward is ``1 + action``, and the episode ends
after ``length`` steps, by termination or by truncation. So the final
observation of an episode is ``length`` and the reset observation is 0: a
leaked reset observation is visible at once.

``TorchRLCountingEnv``: a torchrl ``EnvBase`` like torchrl's own test env, for
running torchrl's usage patterns.
"""

from __future__ import annotations

import functools
import os
import time

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict
from torch import nn
from torchrl.data import Binary, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase


class CountingEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(
        self,
        length: int = 5,
        truncate: bool = False,
        sleep: float = 0.0,
        fail_at_step: int | None = None,
    ):
        self.length, self.truncate, self.sleep = length, truncate, sleep
        self.fail_at_step = fail_at_step
        self.observation_space = gym.spaces.Box(0, 1e6, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0
        self.total_steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action):
        if self.sleep:
            time.sleep(self.sleep)
        self.t += 1
        self.total_steps += 1
        if self.fail_at_step is not None and self.total_steps >= self.fail_at_step:
            raise RuntimeError(f"CountingEnv exploded at step {self.total_steps}")
        end = self.t >= self.length
        terminated, truncated = (False, end) if self.truncate else (end, False)
        return (
            np.array([float(self.t)], dtype=np.float32),
            1.0 + float(action),
            terminated,
            truncated,
            {},
        )


def counting(length: int = 5, sleep: float = 0.0, fail_at_step: int | None = None):
    """A factory of CountingEnvs (what a collector's ``create_env_fn`` takes)."""
    return lambda: CountingEnv(length, sleep=sleep, fail_at_step=fail_at_step)


def counting_vec(lengths: list[int], truncate: list[bool] | None = None) -> gym.vector.VectorEnv:
    truncate = truncate or [False] * len(lengths)
    fns = [lambda n=n, tr=tr: CountingEnv(n, tr) for n, tr in zip(lengths, truncate)]
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


class ExitOnBuild:
    """An env factory that kills its own process (``os._exit(1)``) while a budget of deaths
    lasts: the way to kill a replacement worker while it starts, deterministically. In the
    process that made it (the in-process backend) it raises ``SimulatedDeath`` instead.

    The budget lives in a file (workers are other processes): ``arm(k)`` makes the next k
    env constructions, in whichever process, die; ``disarm()`` stops it.
    """

    def __init__(self, budget_file: str, length: int = 5, sleep: float = 0.0):
        self.budget_file, self.length, self.sleep = budget_file, length, sleep
        self.home = os.getpid()  # in this process (the in-process backend) a death is simulated

    def arm(self, deaths: int) -> None:
        with open(self.budget_file, "w") as f:
            f.write(str(deaths))

    def disarm(self) -> None:
        self.arm(0)

    def deaths_left(self) -> int:
        if not os.path.exists(self.budget_file):
            return 0
        with open(self.budget_file) as f:
            return int(f.read())

    def __call__(self) -> CountingEnv:
        left = self.deaths_left()
        if left > 0:
            self.arm(left - 1)
            if os.getpid() == self.home:
                from fleetrl.distributed.backends import SimulatedDeath

                raise SimulatedDeath("ExitOnBuild")
            os._exit(1)
        return CountingEnv(self.length, sleep=self.sleep)


class GatedEnv(CountingEnv):
    """A CountingEnv whose steps wait until a gate file exists: a worker as slow as the test
    wants, deterministically (the test opens the gate after the batches it needs first)."""

    def __init__(self, gate_file: str, length: int = 5):
        super().__init__(length)
        self.gate_file = gate_file

    def step(self, action):
        while not os.path.exists(self.gate_file):
            time.sleep(0.005)
        return super().step(action)


class ExitOnUnpickle(nn.Module):
    """Wraps a module; unpickling it in another process (as a Ray actor does with its
    arguments while it starts) kills that process while the budget of deaths of an
    :class:`ExitOnBuild` file lasts: the way to kill a gradient worker's replacement during
    start-up. The process that made it is spared (a deepcopy there unpickles too)."""

    def __init__(self, module: nn.Module, budget_file: str):
        super().__init__()
        self.module = module
        self.budget_file = budget_file
        self.owner_pid = os.getpid()

    def forward(self, x):
        return self.module(x)

    def __setstate__(self, state):
        super().__setstate__(state)
        budget = ExitOnBuild(self.budget_file)
        left = budget.deaths_left()
        if os.getpid() != self.owner_pid and left > 0:
            budget.arm(left - 1)
            os._exit(1)


class TorchRLCountingEnv(EnvBase):
    """A torchrl env like torchrl's own test ``CountingEnv``, unbatched by default.

    The observation (int32, ``[1]``) adds up the actions (a ``Binary`` spec of
    shape ``[1]``); the episode is done after ``max_steps`` steps. So the
    observation shows which weights acted: a policy writing 2 counts by 2.
    """

    def __init__(self, max_steps: int = 5, **kwargs):
        super().__init__(**kwargs)
        self.max_steps = max_steps
        shape = (*self.batch_size, 1)
        self.observation_spec = Composite(
            observation=Unbounded(shape, dtype=torch.int32), shape=self.batch_size
        )
        self.reward_spec = Unbounded(shape)
        self.done_spec = Categorical(2, dtype=torch.bool, shape=shape)
        self.action_spec = Binary(n=1, shape=shape)
        self.count = torch.zeros(shape, dtype=torch.int32)
        self.steps = torch.zeros(shape, dtype=torch.int32)

    def _reset(self, tensordict):
        reset = None if tensordict is None else tensordict.get("_reset", None)
        if reset is None:
            self.count.zero_()
            self.steps.zero_()
        else:
            self.count[reset] = 0
            self.steps[reset] = 0
        done = self.steps >= self.max_steps
        return TensorDict(
            {"observation": self.count.clone(), "done": done, "terminated": done.clone()},
            batch_size=self.batch_size,
        )

    def _step(self, tensordict):
        action = tensordict.get("action").reshape(self.count.shape)
        self.count += action.to(torch.int32)
        self.steps += 1
        done = self.steps >= self.max_steps
        return TensorDict(
            {
                "observation": self.count.clone(),
                "reward": torch.ones(self.count.shape),
                "done": done,
                "terminated": done.clone(),
            },
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        return seed


class PixelEnv(gym.Env):
    """An Atari-shaped fake: ``uint8`` frame stacks (4, 84, 84), 3 discrete actions.

    Every pixel of step t's observation is ``(16 * t + action) % 256``, so a test
    can tell frames apart; reward is 1 for action 0; the episode terminates after
    ``length`` steps. Runs everything pixel-shaped without ALE.
    """

    metadata = {"render_modes": []}

    def __init__(self, length: int = 6):
        self.length = length
        self.observation_space = gym.spaces.Box(0, 255, shape=PIXEL_SHAPE, dtype=np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(PIXEL_SHAPE, dtype=np.uint8), {}

    def step(self, action):
        self.t += 1
        frame = np.full(PIXEL_SHAPE, (16 * self.t + int(action)) % 256, dtype=np.uint8)
        return frame, float(int(action) == 0), self.t >= self.length, False, {}


def pixel_vec(lengths: list[int]) -> gym.vector.VectorEnv:
    """PixelEnvs with their own episode lengths, so episodes end at different steps per env."""
    fns = [lambda n=n: PixelEnv(n) for n in lengths]
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def invert_next_observation(batch):
    """A postproc that breaks ``("next", "observation")[t] == observation[t + 1]``."""
    batch.set(("next", "observation"), 255 - batch.get(("next", "observation")))
    return batch


class OffsetActionEnv(gym.Env):
    """Discrete actions that do not start at 0: the observation is the action the env got.

    ``Discrete(3, start=-1)`` by default (``nvec``: ``MultiDiscrete(nvec, start=start)``);
    an action outside the space fails the step, as a strict env's would. The observation
    after a step is the action received (float32), so a batch shows what reached the env;
    the reward is 1 for the space's first action; episodes end after ``length`` steps.
    """

    metadata = {"render_modes": []}

    def __init__(self, start=-1, nvec=None, length: int = 5):
        if nvec is None:
            self.action_space = gym.spaces.Discrete(3, start=start)
            shape = (1,)
        else:
            self.action_space = gym.spaces.MultiDiscrete(nvec, start=start)
            shape = (len(nvec),)
        self.observation_space = gym.spaces.Box(-100, 100, shape=shape, dtype=np.float32)
        self.length, self.t = length, 0
        self.first = np.asarray(start)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(self.observation_space.shape, dtype=np.float32), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"{action!r} invalid for {self.action_space}")
        self.t += 1
        obs = np.asarray(action, dtype=np.float32).reshape(self.observation_space.shape)
        reward = float(np.array_equal(np.asarray(action), self.first))
        return obs, reward, self.t >= self.length, False, {}


class BoundaryEnv(gym.Env):
    """An env whose observation is its exact state: ``[episode, t]``.

    ``episode`` counts this env's resets (the first reset is episode 0), ``t`` the steps
    since. It terminates at ``t == length``; :func:`boundary_env` adds a time limit. So a
    transition's next observation is its successor exactly when it is ``[episode, t + 1]``,
    and the first observation after an episode end is ``[episode + 1, 0]``.
    """

    metadata = {"render_modes": []}

    def __init__(self, length: int):
        self.length = length
        self.observation_space = gym.spaces.Box(0, 1e6, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.episode, self.t = -1, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode, self.t = self.episode + 1, 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, self.t >= self.length, False, {}

    def _obs(self):
        return np.array([self.episode, self.t], dtype=np.float32)


def boundary_env(length: int, limit: int | None = None) -> gym.Env:
    """A :class:`BoundaryEnv`, cut by gymnasium's ``TimeLimit`` at ``limit`` steps."""
    env = BoundaryEnv(length)
    return gym.wrappers.TimeLimit(env, limit) if limit else env


#: three envs: terminates at 3; truncated at 4 (of 10); terminates at 5, its time limit too
#: (gymnasium says terminated and truncated: fleetrl must say terminated only)
BOUNDARY_FNS = [
    functools.partial(boundary_env, 3),
    functools.partial(boundary_env, 10, 4),
    functools.partial(boundary_env, 5, 5),
]
#: per env: the step at which its episodes end, and whether that is a termination
BOUNDARY_ENDS = [(3, True), (4, False), (5, True)]


class PlainVectorEnv(gym.vector.VectorEnv):
    """A user's own VectorEnv class around a SyncVectorEnv of :data:`BOUNDARY_FNS`, in the
    autoreset mode it is given: fleetrl cannot know that its ``reset(options=...)`` resets
    just the masked envs."""

    def __init__(self, mode: gym.vector.AutoresetMode):
        self.inner = gym.vector.SyncVectorEnv(BOUNDARY_FNS, autoreset_mode=mode)
        self.num_envs = self.inner.num_envs
        self.single_observation_space = self.inner.single_observation_space
        self.single_action_space = self.inner.single_action_space
        self.observation_space = self.inner.observation_space
        self.action_space = self.inner.action_space
        self.metadata = {"autoreset_mode": mode}

    def reset(self, *, seed=None, options=None):
        return self.inner.reset(seed=seed, options=options)

    def step(self, actions):
        return self.inner.step(actions)


def torchrl_boundary_env(i: int):
    """``BOUNDARY_FNS[i]``'s env in torchrl's GymWrapper (picklable by reference, for
    torchrl's ParallelEnv workers)."""
    from torchrl.envs import GymWrapper

    return GymWrapper(BOUNDARY_FNS[i]())


def next_step_boundary_envs() -> gym.vector.VectorEnv:
    """:data:`BOUNDARY_FNS` in a SyncVectorEnv with gymnasium's default, NEXT_STEP autoreset."""
    return gym.vector.SyncVectorEnv(BOUNDARY_FNS, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)


def same_step_breakout() -> gym.vector.VectorEnv:
    """ale-py's AtariVectorEnv of Breakout, 2 envs, in its same-step autoreset mode."""
    from ale_py.vector_env import AtariVectorEnv

    return AtariVectorEnv("breakout", num_envs=2, autoreset_mode="SameStep", num_threads=1)


def envpool_breakout():
    """envpool's Breakout, 2 envs, built by hand (its gymnasium API, sync mode)."""
    import envpool

    return envpool.make("Breakout-v5", env_type="gymnasium", num_envs=2, num_threads=1)


PIXEL_SHAPE = (4, 84, 84)
#: the ids the CLI and collectors use, in gymnasium's ``module:Id`` form: a process that
#: reads one imports this module first, which registers them (a Ray worker too: the test
#: session puts tests/ on the workers' PYTHONPATH)
PIXEL_ENV_ID = "fakes:FleetrlFakePixel-v0"
#: :class:`OffsetActionEnv` with ``Discrete(3, start=-1)``, for runs of the CLI
OFFSET_ENV_ID = "fakes:FleetrlFakeOffsetActions-v0"
#: :class:`OffsetActionEnv` with ``MultiDiscrete([3, 2], start=[1, -2])``
MULTI_DISCRETE_ENV_ID = "fakes:FleetrlFakeMultiDiscrete-v0"


def _name(env_id: str) -> str:
    return env_id.partition(":")[2]


def register_fake_envs() -> None:
    """Register the fakes' gymnasium ids in this process (idempotent), under their names."""
    if _name(PIXEL_ENV_ID) not in gym.registry:
        gym.register(_name(PIXEL_ENV_ID), entry_point=PixelEnv, max_episode_steps=100)
    if _name(OFFSET_ENV_ID) not in gym.registry:
        gym.register(_name(OFFSET_ENV_ID), entry_point=OffsetActionEnv)
    if _name(MULTI_DISCRETE_ENV_ID) not in gym.registry:
        gym.register(
            _name(MULTI_DISCRETE_ENV_ID),
            entry_point=OffsetActionEnv,
            kwargs={"start": [1, -2], "nvec": [3, 2]},
        )


register_fake_envs()


def kill_worker(collector, worker_id: int) -> None:
    """Kill one of a RayCollector's workers, on whichever backend it runs."""
    from fleetrl.distributed.backends import Actor

    collector.backend.kill(Actor(collector.backend, collector.worker_handles()[worker_id]))


class ProcessProbe:
    """A worker that tells what its process holds, and changes it (warm-worker tests)."""

    def __init__(self, tag: str, fail: bool = False):
        if fail:
            raise ValueError(f"probe {tag} refuses to start")
        self.tag = tag
        self.shut = False

    def info(self) -> dict:
        import threading

        return {
            "tag": self.tag,
            "pid": os.getpid(),
            "threads": torch.get_num_threads(),
            "env": os.environ.get("FLEETRL_PROBE"),
            "draw": torch.rand(1).item(),
            "python_threads": threading.active_count(),
        }

    def dirty(self) -> None:
        """Change what a fresh process would not have: env vars, threads, the torch RNG."""
        os.environ["FLEETRL_PROBE"] = self.tag
        torch.set_num_threads(3)
        torch.rand(5)

    def leave_a_thread(self) -> None:
        import threading

        threading.Thread(target=time.sleep, args=(60,), daemon=True, name="left").start()

    def shutdown(self) -> None:
        self.shut = True


class OtherProbe:
    """A second kind of worker, with a method in the ``control`` concurrency group (as a
    collector's ``preempt``): a kept process hosts it after a :class:`ProcessProbe`."""

    def __init__(self, tag: str):
        self.tag = tag
        self.gate = None

    def pid(self) -> tuple[str, int]:
        return self.tag, os.getpid()

    def block(self, seconds: float) -> str:
        """Occupy the default group until :meth:`release` is called (or ``seconds`` pass)."""
        import threading

        self.gate = threading.Event()
        return "released" if self.gate.wait(seconds) else "timed out"

    def release(self) -> bool:
        while self.gate is None:
            time.sleep(0.01)
        self.gate.set()
        return True


def _control(method):
    import ray

    return ray.method(concurrency_group="control")(method)


OtherProbe.release = _control(OtherProbe.release)


def slow_nested_counting(delay: float, batch_size: tuple[int, ...] = (2,)):
    """A factory of torchrl's ``NestedCountingEnv`` (a multi-agent group with an agent dim)
    that sleeps ``delay`` seconds a step: a straggler for preemption tests."""
    from torchrl.testing.mocking_classes import NestedCountingEnv

    class SlowNestedCountingEnv(NestedCountingEnv):
        def _step(self, tensordict):
            time.sleep(delay)
            return super()._step(tensordict)

    return lambda: SlowNestedCountingEnv(batch_size=batch_size)

"""gymnasium's SyncVectorEnv in same-step mode, stepped env by env by fleetrl
(``GymVectorEnv._step_each``): every step's result and the saved state equal what stepping
through ``SyncVectorEnv.step`` gives, across episode ends (terminations and truncations),
for float64 (MuJoCo), float32, integer and discrete envs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from fakes import BOUNDARY_FNS
from fleetrl.envs.gymnasium import GymVectorEnv, make_gym_vector_env
from fleetrl.envs.state import vector_env_state


def same_step(fns):
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)


CASES = {
    # id -> (build, steps): every one ends episodes inside its steps
    "boundary-int": (lambda: same_step(BOUNDARY_FNS), 30),
    "cartpole-discrete": (lambda: make_gym_vector_env("CartPole-v1", 3), 120),
    "pendulum-truncated": (lambda: make_gym_vector_env("Pendulum-v1", 2), 420),
    "hopper-float64": (lambda: make_gym_vector_env("Hopper-v5", 2), 150),
}


def run(build, steps: int, here: bool):
    env = GymVectorEnv(build())
    assert env._step_here  # gymnasium's own class, same-step, arrays: stepped here
    env._step_here = here
    env.reset_static(7)
    env.seed_actions(7)
    results = []
    for _ in range(steps):
        res = env.step(env.random_action())
        results.append(res)
    state = (np.array(env.env._autoreset_envs), vector_env_state(env.env))
    env.close()
    return results, state


@pytest.mark.parametrize("case", list(CASES))
def test_stepping_each_env_gives_gymnasiums_steps_and_state(case):
    build, steps = CASES[case]
    got, got_state = run(build, steps, here=True)
    want, want_state = run(build, steps, here=False)
    ends = 0
    for g, w in zip(got, want):
        for field in ("reward", "terminated", "truncated"):
            a, b = getattr(g, field), np.asarray(getattr(w, field))
            assert a.dtype == b.dtype and np.array_equal(a, b), field
        for which in ("obs", "next_obs"):
            (key,) = getattr(w, which)
            a, b = getattr(g, which)[key], getattr(w, which)[key]
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), which
        ends += int((g.terminated | g.truncated).sum())
    assert ends >= 2  # the case crossed episode ends
    assert np.array_equal(got_state[0], want_state[0])  # what gymnasium keeps, and saves
    assert str(got_state[1]) == str(want_state[1])  # the saved state (None: MuJoCo's)


def test_only_gymnasiums_same_step_sync_class_is_stepped_here():
    assert not GymVectorEnv(
        gym.vector.SyncVectorEnv(BOUNDARY_FNS, autoreset_mode=AutoresetMode.NEXT_STEP)
    )._step_here
    wrapped = gym.wrappers.vector.RecordEpisodeStatistics(same_step(BOUNDARY_FNS))
    assert not GymVectorEnv(wrapped)._step_here  # its wrapper's step must run

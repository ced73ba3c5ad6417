"""What a RayCollector's workers would refuse in their envs is refused in the driver, before
Ray or any actor starts: the collector's Ray start fails the test if it is reached (under
``make test-all`` the integration tests' Ray may already be up in this process)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from collecting import needs_envpool
from fakes import CountingEnv, PlainVectorEnv
from fleetrl import RayCollector
from fleetrl.errors import EnvError
from policies import constant_policy


class DictObsEnv(CountingEnv):
    def __init__(self):
        super().__init__(5)
        self.observation_space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,), np.float32)})


@pytest.fixture(autouse=True)
def no_ray_start(monkeypatch):
    """The refusals below come before the collector starts Ray (or attaches to it)."""

    def started(*args, **kwargs):
        pytest.fail("the RayCollector started Ray before refusing its env")

    monkeypatch.setattr("fleetrl.collectors.remote.collector.start_ray", started)


def next_step_vector_env():
    """A NEXT_STEP vector env of a class fleetrl cannot reset partially."""
    return PlainVectorEnv(gym.vector.AutoresetMode.NEXT_STEP)


@pytest.mark.parametrize(
    ("create_env_fn", "message"),
    [
        (DictObsEnv, r"create_env_fn: observation space Dict\(.*\) is not supported"),
        (DictObsEnv(), r"create_env_fn: observation space Dict\(.*\) is not supported"),
        (next_step_vector_env, r"uses autoreset_mode=NEXT_STEP"),
        (lambda: gym.make("NoSuchEnv-v0"), r"raised gymnasium's .*NoSuchEnv"),
    ],
    ids=["dict-factory", "dict-env", "next-step-factory", "unknown-id-factory"],
)
def test_an_env_the_workers_would_refuse_is_refused_before_ray_starts(create_env_fn, message):
    with pytest.raises(EnvError, match=message):
        RayCollector(create_env_fn, constant_policy(0), frames_per_batch=20, total_frames=40)


def test_each_collector_env_is_probed_even_behind_a_good_one():
    with pytest.raises(EnvError, match="observation space Dict"):
        RayCollector(
            [lambda: CountingEnv(5), DictObsEnv],
            constant_policy(0),
            frames_per_batch=20,
            total_frames=40,
        )


def test_a_torchrl_factory_failing_in_the_driver_names_its_collector():
    """What the worker path says (tests/integration/test_torchrl_parity.py), said before any
    actor starts: the collector, the factory and gymnasium's error; no remote traceback."""
    from torchrl.envs import GymEnv

    fns = [lambda: GymEnv("Pendulum-v1"), lambda: GymEnv("Pendulumm-v1")]
    with pytest.raises(EnvError) as info:
        RayCollector(fns, None, frames_per_batch=10)
    msg = str(info.value)
    assert msg.startswith("collector 1: create_env_fn=<function ")
    assert "raised gymnasium's NameNotFound: Environment `Pendulumm` doesn't exist." in msg
    assert "remote traceback" not in msg
    assert info.value.worker_id == 1


@needs_envpool
@pytest.mark.parametrize("backend", ["ray", "inprocess"])
def test_a_built_env_that_cannot_be_sent_is_refused_with_the_factory_fix(backend):
    """An envpool engine does not pickle: Ray could not send it to the workers (a raw
    serialization error from Ray, once it had started; the in-process backend copies
    what it sends as Ray would)."""
    import envpool

    env = envpool.make("Pong-v5", env_type="gymnasium", num_envs=2, num_threads=1)
    with pytest.raises(EnvError) as info:
        RayCollector(env, None, frames_per_batch=20, total_frames=40, backend=backend)
    msg = str(info.value)
    assert msg.startswith("collector 0: create_env_fn=AtariGymnasiumEnvPool(")
    assert "cannot be sent to the collector workers: it does not pickle (TypeError: " in msg
    assert "pass a factory that builds it where it runs instead" in msg
    assert info.value.worker_id == 0


def test_an_added_collectors_env_is_probed_as_at_the_start():
    with RayCollector(
        lambda: CountingEnv(5),
        constant_policy(0),
        frames_per_batch=20,
        total_frames=40,
        backend="inprocess",
    ) as c:
        with pytest.raises(EnvError, match="observation space Dict"):
            c.add_collectors(1, create_env_fn=DictObsEnv)
        assert c.add_collectors(1, create_env_fn=lambda: CountingEnv(5)) == [1]
        assert sum(b.numel() for b in c) == 40

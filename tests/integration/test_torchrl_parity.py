"""torchrl's documented RayCollector usage, run against fleetrl.RayCollector.

Each ``test_torchrl_*`` test is one of torchrl's usage patterns: the example in
the docstring of ``torchrl.collectors.distributed.RayCollector`` and the Ray
tests of torchrl's ``test/test_distributed.py`` (basic, sync/async, collector
classes, policy update). They run unchanged except for the import of
``RayCollector`` and two substitutions for torchrl's test-only mocks:
``ContinuousActionVecMockEnv`` is ``GymEnv("Pendulum-v1")`` (also unbatched and
continuous), and ``CountingEnv`` / ``CountingPolicy`` are copies in
``tests/fakes.py`` / ``tests/policies.py``. torchrl's 0.14 class names are used
(``Collector`` for its old ``SyncDataCollector``, ``MultiSyncCollector``,
``MultiAsyncCollector``). The other tests cover the rest of torchrl parity:
``update_policy_weights_`` forms, env copies, ``collector_kwargs`` checks and
how worker errors arrive.
"""

from __future__ import annotations

import functools
import os

import pytest
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector
from torchrl.envs import GymEnv
from torchrl.envs.utils import RandomPolicy

from fakes import TorchRLCountingEnv

# torchrl's tests import RayCollector from torchrl.collectors.distributed: the one change
from fleetrl import (
    ConfigError,
    EnvError,
    PolicyError,
    RayCollector,
    SyncDataCollector,
    WorkerError,
)
from policies import CountingPolicy, ShapeRecorder
from runs import ROOT

pytestmark = pytest.mark.usefixtures("ray_session")

#: torchrl's ContinuousActionVecMockEnv stand-in: unbatched, continuous actions
PendulumEnv = functools.partial(GymEnv, "Pendulum-v1")
#: torchrl's test remote_configs. Its ray_init_config (for a Ray it starts; ours runs)
#: puts the tests folder on the workers' PYTHONPATH: here the actors' runtime_env does,
#: so that torchrl's Multi* collectors' subprocesses can import the test env.
TESTS_DIR = str(ROOT / "tests")
REMOTE_CONFIGS = {
    "num_cpus": 1,
    "num_gpus": 0.0,
    "memory": 1024**2,
    "runtime_env": {
        "env_vars": {
            "PYTHONPATH": os.pathsep.join(filter(None, [TESTS_DIR, os.environ.get("PYTHONPATH")]))
        }
    },
}


@pytest.fixture
def helpers_by_reference():
    """Send tests/fakes.py and tests/policies.py classes by reference, not by value.

    torchrl's Multi* collectors pickle the policy again for their subprocesses,
    with plain pickle, which needs an importable class. REMOTE_CONFIGS puts the
    tests folder on the actors' path, as torchrl's tests do with their Ray.
    """
    from ray import cloudpickle

    import fakes
    import policies

    for module in (fakes, policies):
        cloudpickle.unregister_pickle_by_value(module)
    yield
    for module in (fakes, policies):
        cloudpickle.register_pickle_by_value(module)


# ----------------------------------------------- torchrl's usage, unchanged


def test_torchrl_docstring_example():
    env_maker = lambda: GymEnv("Pendulum-v1", device="cpu")  # noqa: E731
    policy = TensorDictModule(nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])
    distributed_collector = RayCollector(
        create_env_fn=[env_maker],
        policy=policy,
        collector_class=Collector,
        max_frames_per_traj=50,
        init_random_frames=-1,
        reset_at_each_iter=-False,
        collector_kwargs={
            "device": "cpu",
            "storing_device": "cpu",
        },
        num_collectors=1,
        total_frames=10000,
        frames_per_batch=200,
    )
    for i, data in enumerate(distributed_collector):  # noqa: B007 (torchrl's example)
        if i == 2:
            break
    assert i == 2
    assert data.numel() == 200
    assert data["action"].shape == (200, 1)
    assert distributed_collector.frames == 600
    distributed_collector.shutdown()


@pytest.mark.parametrize("frames_per_batch", [50, pytest.param(100, marks=pytest.mark.e2e)])
def test_torchrl_distributed_collector_basic(frames_per_batch):
    env = PendulumEnv
    policy = RandomPolicy(env().action_spec)
    collector = RayCollector(
        [env] * 2,
        policy,
        total_frames=1000,
        frames_per_batch=frames_per_batch,
        remote_configs=REMOTE_CONFIGS,
    )
    total = 0
    for data in collector:
        total += data.numel()
        assert data.numel() == frames_per_batch
    assert data.names[-1] == "time"
    # unbatched env: fleetrl's layout is [time], as torchrl's
    assert data.batch_size == (frames_per_batch,)
    assert data["action"].shape == (frames_per_batch, 1)
    collector.shutdown()
    assert total == 1000


@pytest.mark.parametrize("sync", [False, True])
def test_torchrl_distributed_collector_sync(sync):
    frames_per_batch = 50
    env = PendulumEnv
    policy = RandomPolicy(env().action_spec)
    collector = RayCollector(
        [env] * 2,
        policy,
        total_frames=200,
        frames_per_batch=frames_per_batch,
        sync=sync,
        remote_configs=REMOTE_CONFIGS,
    )
    try:
        total = 0
        for data in collector:
            total += data.numel()
            assert data.numel() == frames_per_batch
        assert total == 200
        assert data.batch_size == ((2, 25) if sync else (50,))
    finally:
        collector.shutdown()


#: torchrl's multiprocess collectors inside Ray workers are slow: make test-all runs them
@pytest.mark.parametrize(
    "collector_class",
    [
        pytest.param(MultiSyncCollector, marks=pytest.mark.e2e),
        pytest.param(MultiAsyncCollector, marks=pytest.mark.e2e),
        Collector,
    ],
)
def test_torchrl_distributed_collector_class(collector_class):
    frames_per_batch = 50
    env = PendulumEnv
    policy = RandomPolicy(env().action_spec)
    collector = RayCollector(
        [env] * 2,
        policy,
        collector_class=collector_class,
        total_frames=200,
        frames_per_batch=frames_per_batch,
        remote_configs=REMOTE_CONFIGS,
    )
    try:
        total = 0
        for data in collector:
            total += data.numel()
            assert data.numel() == frames_per_batch
        assert total == 200
    finally:
        collector.shutdown()


@pytest.mark.parametrize(
    "collector_class, sync",
    [
        (SyncDataCollector, False),  # fleetrl's default class
        (SyncDataCollector, True),
        pytest.param(Collector, False, marks=pytest.mark.e2e),
        (Collector, True),
        pytest.param(MultiSyncCollector, True, marks=pytest.mark.e2e),
        pytest.param(MultiAsyncCollector, False, marks=pytest.mark.e2e),
    ],
)
def test_torchrl_distributed_collector_updatepolicy(collector_class, sync, helpers_by_reference):
    frames_per_batch = 50
    total_frames = 300
    env = TorchRLCountingEnv
    policy = CountingPolicy()
    if collector_class is MultiAsyncCollector:  # noqa: SIM108 (torchrl's test)
        # otherwise we may collect data from a collector that has not yet been
        # updated
        n_collectors = 1
    else:
        n_collectors = 2
    collector = RayCollector(
        [env] * n_collectors,
        policy,
        collector_class=collector_class,
        total_frames=total_frames,
        frames_per_batch=frames_per_batch,
        sync=sync,
        remote_configs=REMOTE_CONFIGS,
    )
    total = 0
    first_batch = None
    last_batch = None
    try:
        for i, data in enumerate(collector):
            total += data.numel()
            assert data.numel() == frames_per_batch
            if i == 0:
                first_batch = data
                policy.weight.data += 1
                collector.update_policy_weights_()
            elif total == total_frames - frames_per_batch:
                last_batch = data
        assert (first_batch["action"] == 1).all(), first_batch["action"]
        assert (last_batch["action"] == 2).all(), last_batch["action"]
        assert total == total_frames
    finally:
        collector.shutdown()


# ----------------------------------------------- the rest of torchrl parity


def counting_collector(**kwargs):
    return RayCollector(
        TorchRLCountingEnv,
        kwargs.pop("policy", None) or CountingPolicy(),
        frames_per_batch=kwargs.pop("frames_per_batch", 10),
        total_frames=kwargs.pop("total_frames", -1),
        prefetch=0,
        **kwargs,
    )


def test_update_policy_weights_takes_torchrl_forms():
    policy = CountingPolicy()
    with counting_collector(policy=policy, sync=True, num_collectors=2) as c:
        it = iter(c)
        assert (next(it)["action"] == 1).all()
        other = CountingPolicy()
        # each form as torchrl's docs show it; the returned version counts publishes
        for value, form in [
            (2.0, lambda p: c.update_policy_weights_(p)),  # a module, positionally
            (3.0, lambda p: c.update_policy_weights_(TensorDict.from_module(p))),
            (4.0, lambda p: c.update_policy_weights_(policy=p)),
            (5.0, lambda p: c.update_policy_weights_(weights=TensorDict.from_module(p))),
            (6.0, lambda p: c.update_policy_weights_(policy_or_weights=p.state_dict())),
        ]:
            other.weight.data.fill_(value)
            version = form(other)
            batch = next(it)
            assert (batch["action"] == value).all(), (value, batch["action"])
            assert (batch["collector", "policy_version"] == version).all()
        assert version == 5
        policy.weight.data.fill_(7.0)  # nothing: the collector's own policy
        assert c.update_policy_weights_() == 6
        assert (next(it)["action"] == 7).all()


def test_update_policy_weights_worker_ids_moves_only_those_workers():
    policy = CountingPolicy()
    with counting_collector(policy=policy, sync=True, num_collectors=2) as c:
        it = iter(c)
        next(it)
        policy.weight.data.fill_(2.0)
        assert c.update_policy_weights_(policy, worker_ids=[1]) == 1
        batch = next(it)  # [2 workers, 5 steps]
        assert batch["action"][0].unique().tolist() == [1.0]
        assert batch["action"][1].unique().tolist() == [2.0]
        assert batch["collector", "policy_version"][0].unique().tolist() == [0]
        assert batch["collector", "policy_version"][1].unique().tolist() == [1]
        policy.weight.data.fill_(3.0)
        assert c.update_policy_weights_(worker_ids=0) == 2
        batch = next(it)
        assert batch["action"].unique(dim=-1).tolist() == [[3.0], [2.0]]
        assert batch["collector", "policy_version"].unique(dim=-1).tolist() == [[2], [1]]
        assert c.update_policy_weights_() == 3  # a publish without worker_ids reaches all
        batch = next(it)
        assert (batch["action"] == 3).all()
        assert (batch["collector", "policy_version"] == 3).all()


def test_update_policy_weights_bad_arguments_say_what_to_pass():
    with counting_collector(num_collectors=2) as c:
        with pytest.raises(ConfigError, match=r"worker_ids=\[2\] is invalid: .*range\(2\)"):
            c.update_policy_weights_(worker_ids=[2])
        with pytest.raises(ConfigError, match="model_id='critic' is invalid: RayCollector carries"):
            c.update_policy_weights_(model_id="critic")
        with pytest.raises(ConfigError, match="pass the weights once"):
            c.update_policy_weights_(CountingPolicy(), policy=CountingPolicy())
        with pytest.raises(ConfigError, match="policy_or_weights=3 is invalid: must be None"):
            c.update_policy_weights_(3)
        assert c.policy_version == 0  # nothing was published
        with pytest.raises(ConfigError, match=r"did you mean 'num_envs'\?"):
            c.add_collectors(1, collector_kwargs={"num_env": 2})
        assert c.num_collectors == 2  # refused before any actor started


#: the stacked variant runs with make test-all (marker e2e): make test stays in budget
@pytest.mark.parametrize("sync", [False, pytest.param(True, marks=pytest.mark.e2e)])
def test_unbatched_env_policy_sees_one_env_and_batches_keep_fleetrl_layout(sync):
    env = GymEnv("Pendulum-v1")
    with RayCollector(
        lambda: GymEnv("Pendulum-v1"),
        RandomPolicy(env.action_spec),
        frames_per_batch=40,
        total_frames=80,
        num_collectors=2,
        sync=sync,
    ) as c:
        batches = list(c)
    assert [b.batch_size for b in batches] == [(2, 20) if sync else (40,)] * 2
    assert batches[0]["action"].shape[-1] == 1
    assert batches[0]["observation"].shape[-1] == 3
    assert batches[0].names[-1] == "time"


def test_num_workers_per_collector_builds_copies_of_a_torchrl_factory():
    env_fn = lambda: GymEnv("Pendulum-v1")  # noqa: E731
    with RayCollector(
        env_fn,
        RandomPolicy(env_fn().action_spec),  # built for one env, as torchrl feeds it
        frames_per_batch=40,
        total_frames=80,
        num_workers_per_collector=4,
    ) as c:
        batches = list(c)
    assert [b.batch_size for b in batches] == [(4, 10), (4, 10)]
    assert batches[0]["action"].shape == (4, 10, 1)
    # four copies, four trajectories: each env is its own episode
    assert batches[0]["collector", "traj_ids"][:, 0].unique().numel() == 4


def test_collector_kwargs_checked_against_the_collector_class_before_any_actor(tmp_path):
    marker = tmp_path / "env-built"

    def env_fn():
        marker.write_text("built")
        return GymEnv("Pendulum-v1")

    with pytest.raises(ConfigError) as info:
        RayCollector(env_fn, None, frames_per_batch=10, collector_kwargs={"max_frame_per_traj": 5})
    assert str(info.value) == (
        "collector_kwargs['max_frame_per_traj']=5 is invalid: SyncDataCollector takes no argument "
        "'max_frame_per_traj' (did you mean 'max_frames_per_traj'?); its arguments are listed in "
        "its signature (inspect.signature(SyncDataCollector))"
    )
    with pytest.raises(ConfigError) as info:
        RayCollector(
            env_fn,
            None,
            frames_per_batch=10,
            collector_class=Collector,
            collector_kwargs=[{"storing_devce": "cpu"}, {"frames_per_batch": 4}],
            num_collectors=2,
        )
    assert info.value.problems == [
        "collector_kwargs[0]['storing_devce']='cpu' is invalid: Collector takes no argument "
        "'storing_devce' (did you mean 'storing_device'?); its arguments are listed in its "
        "signature (inspect.signature(Collector))",
        "collector_kwargs[1]['frames_per_batch']=4 is invalid: is set by RayCollector itself; "
        "pass it to RayCollector(...) instead of collector_kwargs",
    ]
    assert not marker.exists()


def test_policy_error_in_a_worker_arrives_as_policy_error_naming_the_collector():
    policy = TensorDictModule(nn.Linear(3, 2), in_keys=["observation"], out_keys=["action"])
    with pytest.raises(PolicyError) as info:
        RayCollector(lambda: GymEnv("Pendulum-v1"), policy, frames_per_batch=10)
    msg = str(info.value)
    assert msg.startswith("collector 0: policy=TensorDictModule(")
    first, _, rest = msg.partition("\n\nremote traceback of collector 0:\n")
    assert first.endswith(
        "wrote an 'action' of shape (2,) and dtype torch.float32; the env needs actions of "
        "shape (1,): the env has no batch dims, so the policy is fed one env at a time, as "
        "torchrl feeds it"
    )
    assert rest.startswith("Traceback") and "_check_action" in rest
    assert info.value.worker_id == 0 and info.value.cause == rest


def test_env_error_in_a_worker_factory_arrives_as_env_error():
    """A factory that fails only where the workers run (here: in any other process) is
    reported from the worker, with its traceback. (One that fails in the driver too is
    refused there: tests/unit/collectors/test_driver_checks.py.)"""
    driver = os.getpid()

    def only_away_from_home():
        return GymEnv("Pendulum-v1" if os.getpid() == driver else "Pendulumm-v1")

    fns = [lambda: GymEnv("Pendulum-v1"), only_away_from_home]
    with pytest.raises(EnvError) as info:
        RayCollector(fns, None, frames_per_batch=10)
    msg = str(info.value)
    assert msg.startswith("collector 1: create_env_fn=<function ")
    assert "raised gymnasium's NameNotFound: Environment `Pendulumm` doesn't exist." in msg
    assert msg.index("remote traceback of collector 1:") > msg.index("NameNotFound")
    assert info.value.worker_id == 1


def test_config_error_in_a_worker_arrives_as_config_error():
    import gymnasium as gym

    def three_envs():
        return gym.make_vec(
            "CartPole-v1",
            num_envs=3,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        )

    # a count the arguments do not tell: the driver checks it once the worker reports it
    with pytest.raises(ConfigError) as info:
        RayCollector(three_envs, None, frames_per_batch=10)
    assert info.value.problems == [
        "frames_per_batch=10 is invalid: must be a multiple of the number of envs (3); use 9 or 12"
    ]
    assert not isinstance(info.value, WorkerError)
    # a value only the worker checks arrives as the worker's ConfigError, naming it
    with pytest.raises(ConfigError) as info:
        RayCollector(three_envs, None, frames_per_batch=9, collector_kwargs={"return_discount": 5})
    assert info.value.problems[0].startswith(
        "collector 0: return_discount=5 is invalid: must be in (0, 1]"
    )
    assert "remote traceback of collector 0:" in str(info.value)
    assert not isinstance(info.value, WorkerError)


# ----------------------------------------------- SyncDataCollector, in process


def shapes_fed(collector_cls, env_fn, make_policy, **kwargs):
    policy = ShapeRecorder(make_policy())
    collector = collector_cls(env_fn, policy, frames_per_batch=6, total_frames=6, **kwargs)
    policy.seen.clear()  # what it is fed while collecting (fleetrl probes it once when built)
    batch = next(iter(collector))
    collector.shutdown()
    return set(policy.seen), batch


def test_sync_collector_feeds_an_unbatched_env_policy_as_torchrl_does():
    env = GymEnv("Pendulum-v1")
    for make_policy in (
        lambda: RandomPolicy(env.action_spec),
        lambda: TensorDictModule(nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"]),
    ):
        torchrl_seen, torchrl_batch = shapes_fed(Collector, PendulumEnv, make_policy)
        fleet_seen, fleet_batch = shapes_fed(SyncDataCollector, PendulumEnv, make_policy)
        assert torchrl_seen == fleet_seen == {()}
        assert fleet_batch.batch_size == torchrl_batch.batch_size == (6,)
        assert fleet_batch["action"].shape == torchrl_batch["action"].shape == (6, 1)


def test_sync_collector_env_copies_use_the_batch_when_the_policy_takes_it():
    env = GymEnv("Pendulum-v1")
    seen, batch = shapes_fed(
        SyncDataCollector, PendulumEnv, lambda: RandomPolicy(env.action_spec), num_envs=3
    )
    assert seen == {()}  # built for one env: fed one env at a time
    assert batch.batch_size == (3, 2) and batch["action"].shape == (3, 2, 1)
    linear = lambda: TensorDictModule(  # noqa: E731
        nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"]
    )
    seen, batch = shapes_fed(SyncDataCollector, PendulumEnv, linear, num_envs=3)
    assert seen == {(3,)}  # takes the batch: one call per step
    assert batch.batch_size == (3, 2) and batch["action"].shape == (3, 2, 1)


def test_sync_collector_update_policy_weights_takes_a_module():
    policy = CountingPolicy()
    with SyncDataCollector(TorchRLCountingEnv(), policy, frames_per_batch=4) as c:
        assert (c.next()["action"] == 1).all()
        trained = CountingPolicy()
        trained.weight.data.fill_(2.0)
        c.update_policy_weights_(trained)
        batch = c.next()
        assert (batch["action"] == 2).all()
        assert (batch["collector", "policy_version"] == 1).all()
        assert policy.weight.item() == 2.0  # loaded into the collector's policy, as torchrl does


# ------------------------------------------------ torchrl 0.14's front door: Collector(backend=)


def test_torchrl_collector_docstring_example_runs_through_fleetrl_collector():
    # the Examples of torchrl.collectors.Collector (0.14.1), unchanged but for the import
    from tensordict.nn import TensorDictModule
    from torch import nn
    from torchrl.envs.libs.gym import GymEnv

    from fleetrl import Collector

    env_maker = lambda: GymEnv("Pendulum-v1", device="cpu")  # noqa: E731 - torchrl's example
    policy = TensorDictModule(nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])
    collector = Collector(
        create_env_fn=env_maker,
        policy=policy,
        total_frames=2000,
        max_frames_per_traj=50,
        frames_per_batch=200,
        init_random_frames=-1,
        reset_at_each_iter=False,
        device="cpu",
        storing_device="cpu",
    )
    seen = []
    for i, data in enumerate(collector):
        seen.append(data)
        if i == 2:
            print(data)
            break
    collector.shutdown()
    del collector
    data = seen[-1]
    assert type(seen[0]).__name__ in ("TensorDict", "LazyStackedTensorDict")
    assert data["action"].shape == (200, 1)
    assert data["next", "observation"].shape == (200, 3)
    assert data["next", "reward"].shape == (200, 1)
    assert data["next", "done"].shape == data["next", "truncated"].shape == (200, 1)
    assert data["collector", "traj_ids"].shape == (200,)
    # max_frames_per_traj=50: every trajectory is cut at 50 steps at most
    assert int(data["next", "truncated"].sum()) == 4


#: the first-ready variant runs with make test-all (marker e2e): make test stays within 6 min
@pytest.mark.parametrize("sync", [True, pytest.param(False, marks=pytest.mark.e2e)])
def test_torchrl_collector_with_backend_ray_runs_through_fleetrl_collector(sync):
    # the same usage with torchrl's backend selector: backend="ray", num_collectors, sync
    from tensordict.nn import TensorDictModule
    from torch import nn
    from torchrl.envs.libs.gym import GymEnv

    from fleetrl import Collector

    env_maker = lambda: GymEnv("Pendulum-v1", device="cpu")  # noqa: E731 - torchrl's example
    policy = TensorDictModule(nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])
    collector = Collector(
        create_env_fn=env_maker,
        policy=policy,
        backend="ray",
        num_collectors=2,
        sync=sync,
        total_frames=2000,
        max_frames_per_traj=50,
        frames_per_batch=200,
    )
    assert isinstance(collector, RayCollector)
    frames = 0
    for data in collector:
        assert data.numel() == 200 and data["next", "observation"].shape[-1] == 3
        frames += data.numel()
    stats = collector.stats()
    collector.shutdown()
    assert frames == 2000
    assert stats["frames"] == 2000 and stats["total_frames"] == 2000 and stats["completed"]
    assert stats["requested_frames_per_batch"] == 200 and stats["batches"] == 10
    assert stats["workers"] == stats["workers_alive"] == 2 and stats["worker_frames"] == 2000

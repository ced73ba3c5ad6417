"""Central batched inference in process: a SyncDataCollector acting through an inference
server gives the batches it gives acting locally (bit for bit, for a policy that acts on each
env's row alone, recurrent state included), tags each step with the version its server
answered with, and every argument that cannot work is refused before anything starts."""

from __future__ import annotations

import os
import re

import pytest
import torch
from tensordict.nn import TensorDictModule
from test_overlap import StepCounter
from torchrl.envs.utils import ExplorationType

from collecting import assert_same_batches as assert_same
from collecting import breakout
from fleetrl import ConfigError, EnvError, PolicyError, RayCollector, SyncDataCollector
from fleetrl.collectors.inference import (
    FACTORY_MSG,
    NO_POLICY_MSG,
    InferenceServers,
    latency_summary,
    needs_env,
)
from fleetrl.collectors.local.overlap import SplitEnv
from fleetrl.distributed.backends import make_backend
from fleetrl.distributed.wire import pack_weights
from policies import atari_row_policy, constant_policy, weight_echo


def servers_for(policy, count=1, **kwargs):
    backend = make_backend("inprocess")
    return InferenceServers(
        backend,
        backend.put(policy),
        count=count,
        device=None,
        max_batch=kwargs.get("max_batch"),
        max_wait_ms=0.0,
        exploration_type=ExplorationType.RANDOM,
        num_threads=None,
        clients=1,
    )


def collect(env, policy, *, served, batches=2, n=4, steps=40, **kwargs):
    """``batches`` batches of ``n`` envs, acting locally or through an in-process server."""
    servers = servers_for(policy) if served else None
    with SyncDataCollector(
        env,
        policy,
        frames_per_batch=n * steps,
        total_frames=batches * n * steps,
        num_envs=n,
        overlap=False,
        inference_server=None if servers is None else servers.for_worker(0),
        **kwargs,
    ) as c:
        c.set_seed(3)
        out = list(c)
        state = c.state_dict()
        groups = len(getattr(c.env, "groups", [None]))
    return out, state, groups, servers


@pytest.mark.parametrize(
    "case",
    ["cartpole", "breakout", "breakout_recurrent", "odd_envs", "max_frames_per_traj"],
)
def test_served_batches_are_bit_identical_to_local(case):
    kwargs, n, env = {}, 4, "CartPole-v1"
    policy = weight_echo()
    if case.startswith("breakout"):
        env = breakout("ale_vector", max_episode_frames=4 * 15)
        policy = StepCounter() if case == "breakout_recurrent" else atari_row_policy()
    if case == "odd_envs":
        n = 3  # groups of 1 and 2
    if case == "max_frames_per_traj":
        kwargs["max_frames_per_traj"] = 7
    want, want_state, _, _ = collect(env, policy, served=False, n=n, **kwargs)
    got, got_state, groups, servers = collect(env, policy, served=True, n=n, **kwargs)
    assert groups == 2  # double-buffered
    assert_same(got, want)
    for key in ("frames", "next_traj_id", "traj_ids", "episode_length", "episode_return"):
        assert torch.equal(torch.as_tensor(got_state[key]), torch.as_tensor(want_state[key])), key
    stats = servers.stats()[0]
    assert stats["observations"] == 2 * n * 40
    assert stats["requests"] == 2 * 2 * 40  # a request per group per step
    if case == "breakout_recurrent":
        for batch in got:
            count, is_init = batch["count"][..., 0], batch["is_init"][..., 0]
            assert torch.equal(count, batch["next", "episode_length"][..., 0] - 1)
            assert torch.equal(is_init, count == 0)


def test_random_frames_act_locally_and_the_policy_on_the_server():
    got, _, _, servers = collect("CartPole-v1", weight_echo(), served=True, init_random_frames=160)
    assert "w" not in got[0] and "w" in got[1]
    assert servers.stats()[0]["observations"] == 160  # the second batch only


def test_each_step_is_tagged_with_the_version_its_server_answered_with():
    policy = weight_echo()
    servers = servers_for(policy)
    with SyncDataCollector(
        "CartPole-v1",
        policy,
        frames_per_batch=32,
        num_envs=4,
        inference_server=servers.for_worker(0),
    ) as c:
        tags = []
        for version in (3, 4, 9):
            weights = {"module": {"w": torch.tensor(float(version))}}
            from tensordict import TensorDict

            servers.publish(servers.backend.put(pack_weights(TensorDict(weights))), version)
            batch = c.next()
            assert torch.equal(batch["w"], batch["collector", "policy_version"].float())
            tags.append(batch["collector", "policy_version"].unique().tolist())
            assert c.batch_version == version
        assert tags == [[3], [4], [9]]
        with pytest.raises(ConfigError, match="inference server, which holds the weights"):
            c.update_policy_weights_(policy)


def test_split_env_seeds_each_env_as_one_batch_does():
    one = SplitEnv.build("CartPole-v1", 1, None)
    assert not isinstance(one, SplitEnv)  # one env: one group
    one.close()
    split = SplitEnv.build("CartPole-v1", 5, None)
    assert [r.stop - r.start for r in split.rows] == [2, 3]
    from fleetrl.envs.make import make_env

    whole = make_env("CartPole-v1", 5)
    assert (split.reset(seed=11)["observation"] == whole.reset(seed=11)["observation"]).all()
    split.close()
    whole.close()


def test_latency_summary():
    assert latency_summary([0.001, 0.002, 0.003])["median_ms"] == pytest.approx(2.0)
    assert latency_summary([])["count"] == 0


# ------------------------------------------------------------- a RayCollector in process
def ray_collector(**kwargs):
    args = dict(
        frames_per_batch=160,
        total_frames=800,
        num_collectors=2,
        num_workers_per_collector=4,
        backend="inprocess",
        inference="server",
    )
    args.update(kwargs)
    return RayCollector(args.pop("env", "CartPole-v1"), args.pop("policy", weight_echo()), **args)


@pytest.mark.parametrize("sync", [True, False])
def test_ray_collector_with_servers_counts_frames_exactly(sync):
    with ray_collector(sync=sync, num_inference_servers=2) as c:
        frames, batches = 0, 0
        for batch in c:
            frames += batch.numel()
            batches += 1
            c.update_policy_weights_()
        assert frames == c.frames == 800 and batches == 5
        stats = c.stats()["inference"]
        assert [s["server"] for s in stats["servers"]] == [0, 1]
        assert stats["observations"] == 800
        assert stats["latency"]["count"] == stats["requests"]
        assert stats["servers"][0]["version"] == c.policy_version


def test_weights_go_to_the_servers_not_the_workers():
    policy = weight_echo()
    with ray_collector(policy=policy, sync=True) as c:
        with torch.no_grad():
            policy.module.w.fill_(7.0)
        c.update_policy_weights_(version=7)
        batch = c.next()
        assert batch["w"].unique().tolist() == [7.0]
        assert batch["collector", "policy_version"].unique().tolist() == [7]
        for worker in c.worker_handles():  # their own copies were never loaded
            assert float(worker.obj.collector.policy.module.w.detach()) == 0.0
        with pytest.raises(ConfigError, match="worker_ids"):
            c.update_policy_weights_(worker_ids=[0])


class HoldsEnv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        import gymnasium as gym

        self.env = gym.make("CartPole-v1")
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, obs):
        return self.linear(obs).argmax(-1)


def test_refusals_name_the_argument_before_anything_starts():
    from torchrl.collectors import Collector as TorchRLSync

    cases = {
        "inference=": dict(inference="remote"),
        "policy=None": dict(policy=None),
        "policy_factory=": dict(policy=None, policy_factory=weight_echo),
        "collector_class=": dict(collector_class=TorchRLSync),
        "policy_device='cuda:0'": dict(policy_device="cuda:0"),
        "compile_policy=True": dict(compile_policy=True),
        "max_weight_update_interval=2": dict(max_weight_update_interval=2),
        "num_inference_servers=3": dict(num_inference_servers=3),
        "inference_max_batch=0": dict(inference_max_batch=0),
        "inference_max_wait_ms=-1": dict(inference_max_wait_ms=-1),
        "inference_remote_config=": dict(inference_remote_config=[1]),
        "holds an env object": dict(
            policy=TensorDictModule(HoldsEnv(), in_keys=["observation"], out_keys=["action"])
        ),
    }
    if not torch.cuda.is_available():
        cases["inference_device='cuda'"] = dict(inference_device="cuda")
    for needle, kwargs in cases.items():
        with pytest.raises(ConfigError) as err:
            ray_collector(**kwargs)
        assert needle in str(err.value), (needle, str(err.value))
    with pytest.raises(ConfigError) as err:
        ray_collector(policy=None)
    assert f"policy=None is invalid: {NO_POLICY_MSG}" in str(err.value)
    with pytest.raises(ConfigError) as err:
        ray_collector(policy=None, policy_factory=weight_echo)
    assert FACTORY_MSG in str(err.value)
    # server-only arguments with local inference
    with pytest.raises(ConfigError, match="num_inference_servers=2 is invalid: only takes effect"):
        ray_collector(inference="local", num_inference_servers=2)


def test_a_policy_that_acts_one_env_at_a_time_is_refused(monkeypatch):
    import fleetrl.collectors.remote.collector as ray_module
    from fakes import TorchRLCountingEnv
    from policies import CountingPolicy

    def started(*args, **kwargs):
        raise AssertionError("an inference server started")

    monkeypatch.setattr(ray_module, "InferenceServers", started)
    with pytest.raises(PolicyError, match="acts on one env at a time"):
        ray_collector(env=TorchRLCountingEnv, policy=CountingPolicy(), frames_per_batch=8)

    servers = servers_for(CountingPolicy())
    with pytest.raises(PolicyError, match="acts on one env at a time"):
        SyncDataCollector(
            TorchRLCountingEnv,
            CountingPolicy(),
            frames_per_batch=4,
            num_envs=2,
            inference_server=servers.for_worker(0),
        )


def test_needs_env_finds_envs_in_attributes_and_closures():
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    assert needs_env(env) == "is an env"
    assert "holds an env object" in needs_env(HoldsEnv())
    module = TensorDictModule(
        lambda obs: env.action_space.sample(), in_keys=["observation"], out_keys=["action"]
    )
    assert "<env>" in needs_env(module)
    assert needs_env(constant_policy()) is None


def test_a_shared_memory_channel_carries_requests_and_answers_and_leaves_no_names():
    import os

    import numpy as np

    from fleetrl.distributed.shm import ShmChannel, ShmEndpoint

    def serve(inputs):  # the action is the observation's sum; the version 7
        obs = np.concatenate([a for k, a in inputs if k == "observation"])
        return [("action", obs.sum(-1).astype(np.int64)), ("value", obs[:, :1] * 2)], 7, 1.5

    endpoint = ShmEndpoint(serve, threads=2)
    obs = np.arange(6, dtype=np.float32).reshape(2, 3)
    inputs = [("observation", obs), ("is_init", np.ones((2, 1), dtype=bool))]
    channel = ShmChannel(endpoint.path, inputs, serve(inputs)[0], 2, endpoint.register)
    try:
        assert not os.path.exists(channel.fifo)  # both ends are open: the names are gone
        assert not os.path.exists(f"/dev/shm/{channel.shm.name.lstrip('/')}")
        for step in range(3):
            channel.send([("observation", obs + step), inputs[1]])
            assert channel.wait(5.0)
            outputs, version, at = channel.answer()
            assert [k for k, _ in outputs] == ["action", "value"]
            np.testing.assert_array_equal(outputs[0][1], (obs + step).sum(-1).astype(np.int64))
            np.testing.assert_array_equal(outputs[1][1], (obs + step)[:, :1] * 2)
            assert (version, at) == (7, 1.5)
        assert endpoint.requests == 3
        assert not channel.wait(0.05)  # one answer per request
    finally:
        channel.close()
        endpoint.close()
    assert not os.path.exists(endpoint.path)


# ------------------------------------------------------------------------ the config
def problems_of(*overrides):
    from fleetrl.setup.load import config_from_dict

    with pytest.raises(ConfigError) as err:
        config_from_dict({"algorithm": "ppo", "env": {"id": "CartPole-v1"}}, list(overrides))
    return str(err.value)


def test_the_config_keys_are_checked_with_everything_else():
    from fleetrl.collectors.inference import InferenceOptions
    from fleetrl.setup.load import config_from_dict

    text = problems_of("collector.inference=server", "collector.num_collectors=0")
    assert "collector.inference='server' is invalid: serves remote collectors" in text
    text = problems_of("collector.inference=server", "collector.num_inference_servers=3")
    assert (
        "collector.num_inference_servers=3 is invalid: must be <= collector.num_collectors=2"
        in text
    )
    text = problems_of("collector.inference_max_batch=64", "collector.inference_transport=ray")
    assert "collector.inference_max_batch=64 is invalid: only takes effect with" in text
    assert "collector.inference_transport='ray' is invalid: only takes effect with" in text
    assert "collector.inference='gpu' is invalid: must be 'local' or 'server'" in problems_of(
        "collector.inference=gpu"
    )
    if not torch.cuda.is_available():
        text = problems_of("collector.inference=server", "collector.inference_device=cuda")
        assert "collector.inference_device='cuda' is invalid: needs a GPU" in text
    config = config_from_dict(
        {"algorithm": "ppo", "env": {"id": "CartPole-v1"}},
        ["collector.inference=server", "collector.inference_max_wait_ms=0.5"],
    )
    assert InferenceOptions.from_config(config.collector).arguments() == {
        "inference": "server",
        "num_inference_servers": 1,
        "inference_device": None,
        "inference_max_batch": None,
        "inference_max_wait_ms": 0.5,
        "inference_remote_config": {"num_cpus": 1.0},
        "inference_transport": "auto",
    }


def test_the_direct_front_door_refuses_server_arguments():
    from fleetrl import Collector

    with pytest.raises(ConfigError, match="inference='server' is invalid: is central inference"):
        Collector("CartPole-v1", weight_echo(), frames_per_batch=8, inference="server")
    with Collector("CartPole-v1", weight_echo(), frames_per_batch=8, inference="local") as c:
        assert c.next().numel() == 8


def test_a_channel_whose_server_end_closed_says_so_instead_of_answering():
    import numpy as np

    from fleetrl.distributed.shm import ShmChannel, ShmEndpoint

    def serve(inputs):
        return [("action", np.zeros(2, dtype=np.int64))], 1, 1.0

    endpoint = ShmEndpoint(serve, threads=1)
    inputs = [("observation", np.zeros((2, 3), dtype=np.float32))]
    channel = ShmChannel(endpoint.path, inputs, serve(inputs)[0], 2, endpoint.register)
    try:
        channel.send(inputs)
        assert channel.wait(5.0) and channel.answer()[1] == 1
        endpoint.close()  # as a killed server's descriptors close
        with pytest.raises(ConnectionError):
            channel.wait(1.0)  # the segment still holds the last answer: never served again
    finally:
        channel.close()


def test_preemption_and_state_dict_keep_their_contracts_when_served():
    policy = weight_echo()
    servers = servers_for(policy)

    def make():
        return SyncDataCollector(
            "CartPole-v1",
            policy,
            frames_per_batch=160,
            num_envs=4,
            inference_server=servers.for_worker(0),
        )

    with make() as c:
        c.set_seed(1)
        # a straggler's rollout stops at the first step past its minimum where asked to
        short = c.collect(160, min_frames=40, should_stop=lambda: True)
        assert short.batch_size == (4, 10)
        assert servers.stats()[0]["requests"] == 2 * 10  # nothing asked beyond the stop
        state = c.state_dict()
        want = c.next()
    with make() as again:
        again.load_state_dict(state)
        got = again.next()
    assert_same([got], [want])


@pytest.mark.parametrize(("max_batch", "batches"), [(4, 2), (None, 1)])
def test_a_server_batches_ready_requests_up_to_max_batch_within_max_wait(max_batch, batches):
    """Three requests of 2 rows arrive together: with max_batch=4 the first batch takes two
    requests (4 observations) and the third waits for the next; with no bound and a wait of
    300 ms, one batch holds all three. Each request gets its own rows back."""
    import threading

    import numpy as np

    from fleetrl.collectors.inference import InferenceServer

    server = InferenceServer(weight_echo(), max_batch=max_batch, max_wait_ms=300.0)
    barrier, answers = threading.Barrier(3), {}

    def ask(i):
        obs = np.full((2, 4), float(i) - 1.0, dtype=np.float32)  # sign -> action
        barrier.wait()
        answers[i] = server.infer([("observation", obs)])

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    stats = server.stats()
    assert (stats["requests"], stats["batches"], stats["observations"]) == (3, batches, 6)
    for i, (outputs, version, _) in answers.items():
        assert version == 0
        action = dict(outputs)["action"]
        assert action.tolist() == [int(i - 1.0 > 0)] * 2


# ------------------------------------------------- an env with its own batch (issue 35, 10)
def four_cartpoles():
    """A user's factory of a vector env with its own batch of 4 envs."""
    import gymnasium as gym

    return gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4)


@pytest.mark.parametrize("workers", [4, 1])
@pytest.mark.parametrize("prebuilt", [False, True], ids=["factory", "prebuilt"])
def test_an_env_with_its_own_batch_of_num_envs_is_served_as_it_acts_locally(prebuilt, workers):
    """num_envs (num_workers_per_collector) equal to the env's own batch, or left at 1 (the
    env's own size): accepted with inference='server' as with 'local', the env stepped whole
    (one group: it cannot split)."""
    env = four_cartpoles() if prebuilt else four_cartpoles
    for inference in ("local", "server"):
        with ray_collector(
            env=env, inference=inference, sync=True, num_workers_per_collector=workers
        ) as c:
            batches = list(c)
            assert sum(b.numel() for b in batches) == c.frames == 800
            assert batches[0].batch_size == (2, 4, 20)
            worker_env = c.worker_handles()[0].obj.collector.env
            assert not isinstance(worker_env, SplitEnv) and worker_env.num_envs == 4
    if prebuilt:
        env.close()


def test_split_env_refuses_an_env_with_another_batch_naming_the_num_envs_given():
    from fleetrl.envs.make import NUM_ENVS_MSG

    for env in (four_cartpoles, four_cartpoles()):
        for n in (2, 8):
            kind = "SyncVectorEnv" if callable(env) else "gymnasium VectorEnv"
            message = NUM_ENVS_MSG.format(value=n, kind=kind, n=4)
            with pytest.raises(EnvError, match=re.escape(message)):
                SplitEnv.build(env, n, None)


def test_split_env_calls_a_factory_once_per_env():
    import gymnasium as gym

    calls = []

    def one_cartpole():
        calls.append(1)
        return gym.make("CartPole-v1")

    split = SplitEnv.build(one_cartpole, 5, None)
    assert isinstance(split, SplitEnv) and [r.stop - r.start for r in split.rows] == [2, 3]
    assert len(calls) == 5
    split.close()


# ------------------------------------------- a replaced channel is dropped (issue 35, 8)
def mapped(name):
    """How many mappings of shared-memory segment ``name`` this process holds."""
    with open("/proc/self/maps") as maps:
        return sum(f"/{name.lstrip('/')}" in line for line in maps)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/self/maps")
def test_a_replaced_channel_leaves_the_server_one_mapping_and_one_descriptor():
    """A worker's group registers a new channel once its old one closed (the worker was
    replaced, or its server restarted): the server drops the old one, mapping and pipe."""
    import numpy as np

    from fleetrl.distributed.shm import ShmChannel, ShmEndpoint

    def serve(inputs):
        return [("action", np.full(2, 3, dtype=np.int64))], 1, 1.0

    endpoint = ShmEndpoint(serve, threads=1)
    inputs = [("observation", np.zeros((2, 3), dtype=np.float32))]
    try:
        old = ShmChannel(endpoint.path, inputs, serve(inputs)[0], 2, endpoint.register)
        old_name, fds = old.shm.name, len(os.listdir("/proc/self/fd"))
        old.close()  # as a killed worker's descriptors close
        new = ShmChannel(endpoint.path, inputs, serve(inputs)[0], 2, endpoint.register)
        try:
            assert len(endpoint.channels) == 1
            assert mapped(old_name) == 0  # the server let go of the old segment
            assert len(os.listdir("/proc/self/fd")) == fds  # and of its answer pipe
            new.send(inputs)  # the new channel is served under its own id
            assert new.wait(5.0) and new.answer()[0][0][1].tolist() == [3, 3]
        finally:
            new.close()
    finally:
        endpoint.close()

"""SyncDataCollector on multi-agent torchrl envs (agent groups): torchrl's grouped layout."""

from __future__ import annotations

import re

import pytest
import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torchrl.collectors import Collector
from torchrl.envs.utils import MarlGroupMapType
from torchrl.modules import MultiAgentMLP, ProbabilisticActor
from torchrl.testing.mocking_classes import (
    MultiAgentCountingEnv,
    MultiKeyCountingEnv,
    NestedCountingEnv,
)

from fleetrl import ConfigError, PolicyError, SyncDataCollector, episode_stats
from fleetrl.collectors.local.grouped import GROUPED_ARGUMENT_MSG, ROOT_ACTION_MSG
from fleetrl.keys import (
    EPISODE_END_KEY,
    EPISODE_LENGTH_KEY,
    EPISODE_RETURN_KEY,
    GROUP_END_KEY,
    GROUP_RETURN_KEY,
    POLICY_VERSION_KEY,
    TRAJ_IDS_KEY,
    WORKER_ID_KEY,
)

#: torchrl's mock multi-agent envs: three agents in one group (one sub-TensorDict each), one
#: group per agent, a nested group with an agent dim, two groups beside root keys
ENVS = {
    "three_agents": lambda: MultiAgentCountingEnv(n_agents=3),
    "group_per_agent": lambda: MultiAgentCountingEnv(
        n_agents=2, group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT
    ),
    "nested": lambda: NestedCountingEnv(batch_size=(2,)),
    "two_groups": lambda: MultiKeyCountingEnv(batch_size=(2,)),
}
#: what fleetrl adds to torchrl's batch
FLEET_KEYS = {
    POLICY_VERSION_KEY,
    WORKER_ID_KEY,
    EPISODE_END_KEY,
    EPISODE_RETURN_KEY,
    EPISODE_LENGTH_KEY,
}


def _layout(batch):
    return {
        key: (tuple(batch.get(key).shape), batch.get(key).dtype)
        for key in batch.keys(include_nested=True, leaves_only=True)
    }


def _torchrl_layouts(make_env, policy, frames_per_batch, total_frames):
    collector = Collector(
        make_env,
        policy,
        frames_per_batch=frames_per_batch,
        total_frames=total_frames,
        auto_register_policy_transforms=False,
    )
    try:
        return [_layout(batch) for batch in collector]
    finally:
        collector.shutdown()


def _fleet_layouts(make_env, policy, frames_per_batch, total_frames):
    collector = SyncDataCollector(
        make_env, policy, frames_per_batch=frames_per_batch, total_frames=total_frames
    )
    try:
        layouts = [_layout(batch) for batch in collector]
        assert collector.frames == total_frames
        return layouts
    finally:
        collector.shutdown()


def _own(key) -> bool:
    return key in FLEET_KEYS or key[:2] in (GROUP_RETURN_KEY, GROUP_END_KEY)


@pytest.mark.parametrize("name", sorted(ENVS))
def test_random_policy_batches_match_torchrl_collector(name):
    make_env = ENVS[name]
    want = _torchrl_layouts(make_env, None, 12, 24)
    got = _fleet_layouts(make_env, None, 12, 24)
    assert len(got) == len(want) == 2
    for fleet, torchrl in zip(got, want):
        assert {k: v for k, v in fleet.items() if not _own(k)} == torchrl
        batch_shape = torchrl[TRAJ_IDS_KEY][0]
        assert fleet[EPISODE_RETURN_KEY] == ((*batch_shape, 1), torch.float32)
        assert fleet[POLICY_VERSION_KEY] == (batch_shape, torch.int64)


def _mappo_actor():
    """torchrl's multi-agent actor over NestedCountingEnv's group ``"data"`` (3 agents)."""
    to_float = TensorDictModule(
        lambda states: states.float(), in_keys=[("data", "states")], out_keys=[("data", "x")]
    )
    net = MultiAgentMLP(
        n_agent_inputs=1, n_agent_outputs=1, n_agents=3, centralised=False, share_params=True
    )
    logits = TensorDictModule(net, in_keys=[("data", "x")], out_keys=[("data", "logits")])
    actor = ProbabilisticActor(
        TensorDictSequential(to_float, logits),
        in_keys={"logits": ("data", "logits")},
        out_keys=[("data", "action")],
        distribution_class=torch.distributions.Bernoulli,
        return_log_prob=True,
    )
    return actor


def test_multi_agent_mlp_actor_plugs_in_with_torchrl_layout():
    actor = _mappo_actor()
    make_env = ENVS["nested"]
    want = _torchrl_layouts(make_env, actor, 12, 12)
    got = _fleet_layouts(make_env, actor, 12, 12)
    assert {k: v for k, v in got[0].items() if not _own(k)} == want[0]
    assert got[0][("data", "action")][0] == (2, 6, 3, 1)


def test_frames_are_env_steps_and_counted_exactly():
    collector = SyncDataCollector(ENVS["nested"], None, frames_per_batch=12, total_frames=30)
    sizes = [batch.batch_size for batch in collector]
    assert sizes == [torch.Size([2, 6]), torch.Size([2, 6]), torch.Size([2, 3])]
    assert collector.frames == 30
    collector.shutdown()


def test_no_transition_spans_two_episodes():
    """NestedCountingEnv's observation is its step count: an episode ends after 6 steps, the
    terminal next observation is the episode's last (6), and the next step starts at 0."""
    collector = SyncDataCollector(ENVS["nested"], None, frames_per_batch=40, total_frames=40)
    batch = collector.next()
    collector.shutdown()
    done = batch.get(("next", "data", "done"))[..., 0, 0]
    states = batch.get(("data", "states"))[..., 0, 0]
    next_states = batch.get(("next", "data", "states"))[..., 0, 0]
    # a random binary action: the count grows by 0 or 1 a step, and the episode ends past 5
    assert bool(done.any())
    assert bool((next_states[done] == 6).all())
    after = torch.zeros_like(done)
    after[:, 1:] = done[:, :-1]
    assert bool((states[after] == 0).all())
    assert torch.equal(batch.get(EPISODE_END_KEY)[..., 0], done)
    # trajectory ids change exactly after each end, as torchrl's do
    traj = batch.get(TRAJ_IDS_KEY)
    assert torch.equal(traj[:, 1:] != traj[:, :-1], done[:, :-1])


def test_group_episodes_end_on_their_own_dones():
    """MultiKeyCountingEnv's groups count at their own pace (random actions), so agents and
    groups end at different steps; each group's return is the sum of its agents' mean
    reward since its own last end (or a root done)."""
    torch.manual_seed(0)
    collector = SyncDataCollector(ENVS["two_groups"], None, frames_per_batch=40)
    first, second = collector.next(), collector.next()
    collector.shutdown()
    stats = episode_stats(second)
    for group, reward_name, n_agents in (("nested_1", "gift", 3), ("nested_2", "reward", 2)):
        carry = torch.zeros(2, dtype=torch.float64)
        for batch in (first, second):
            reward = batch.get(("next", group, reward_name)).reshape(2, -1, n_agents)
            own = batch.get(("next", group, "done")).reshape(2, -1, n_agents).any(-1)
            end = own | batch.get(("next", "done"))[..., 0]
            assert torch.equal(batch.get((*GROUP_END_KEY, group))[..., 0], end)
            running = batch.get((*GROUP_RETURN_KEY, group))[..., 0]
            for t in range(reward.shape[1]):
                carry = carry + reward[:, t].double().mean(-1)
                torch.testing.assert_close(running[:, t], carry.float())
                carry = torch.where(end[:, t], 0.0, carry)
        ended = second.get((*GROUP_RETURN_KEY, group))[..., 0][end]
        assert torch.equal(stats.group_returns[group], ended)
    assert set(stats.group_returns) == {"nested_1", "nested_2", "reward"}


def test_team_return_sums_the_groups_mean_rewards():
    collector = SyncDataCollector(
        lambda: MultiAgentCountingEnv(n_agents=2, max_steps=3),
        None,
        frames_per_batch=10,
    )
    batch = collector.next()
    collector.shutdown()
    stats = episode_stats(batch)
    # the counting env ends every 4 steps with zero rewards
    assert stats.lengths.tolist() == [4, 4]
    assert stats.returns.tolist() == [0.0, 0.0]
    assert stats.group_returns["agents"].tolist() == [0.0, 0.0]


def test_root_action_policy_is_refused_before_collecting():
    policy = TensorDictModule(
        lambda states: states[..., 0, :].bool(), in_keys=[("data", "states")], out_keys=["action"]
    )
    message = re.escape(ROOT_ACTION_MSG.split("{")[0].format())
    with pytest.raises(PolicyError, match=message) as err:
        SyncDataCollector(ENVS["nested"], policy, frames_per_batch=12)
    assert "('data', 'action')" in str(err.value)
    assert "policy=" in str(err.value)
    # the fix reads the observation the env has, not a made-up ("data", "observation")
    assert "in_keys=[('data', 'states')]" in str(err.value)


def test_a_policy_that_cannot_read_the_grouped_observation_is_told_what_the_env_has():
    from torch import nn

    with pytest.raises(PolicyError) as err:  # as_policy reads "observation": no such key
        SyncDataCollector(ENVS["nested"], nn.Linear(3, 2), frames_per_batch=12)
    text = str(err.value)
    assert text.startswith("policy=")
    assert "raised KeyError" in text and "on the env's first step: it reads ['observation']" in text
    assert "observations are [('data', 'states')" in text
    assert text.endswith("e.g. out_keys=[('data', 'action')]")


def test_arguments_the_grouped_rollout_lacks_are_refused_at_once():
    with pytest.raises(ConfigError) as err:
        SyncDataCollector(
            ENVS["nested"],
            None,
            frames_per_batch=12,
            max_frames_per_traj=3,
            set_truncated=True,
        )
    text = str(err.value)
    assert "max_frames_per_traj=3" in text and "set_truncated=True" in text
    assert GROUPED_ARGUMENT_MSG.split("{")[0] in text


def test_init_random_frames_and_reset_at_each_iter():
    collector = SyncDataCollector(
        ENVS["nested"],
        _mappo_actor(),
        frames_per_batch=12,
        total_frames=24,
        init_random_frames=12,
        reset_at_each_iter=True,
    )
    first, second = list(collector)
    collector.shutdown()
    assert ("data", "action_log_prob") not in first.keys(True)
    assert ("data", "action_log_prob") in second.keys(True)
    assert bool((second.get(("data", "states"))[:, 0] == 0).all())


def test_a_ray_collector_refuses_what_the_grouped_rollout_lacks_before_any_worker_starts():
    from fleetrl import RayCollector

    with pytest.raises(ConfigError) as err:  # the driver's probe of the env, in its own words
        RayCollector(
            ENVS["nested"],
            _mappo_actor(),
            frames_per_batch=12,
            backend="inprocess",
            inference="server",  # taken: central inference serves multi-agent envs
            trajs_per_batch=2,
        )
    assert err.value.problems == [
        "trajs_per_batch=2 is invalid: " + GROUPED_ARGUMENT_MSG.format(default=None),
    ]


# ------------------------------------------------------------------ central inference


def _servers(policy, count=1):
    from torchrl.envs.utils import ExplorationType

    from fleetrl.collectors.inference import InferenceServers
    from fleetrl.distributed.backends import make_backend

    backend = make_backend("inprocess")
    return InferenceServers(
        backend, backend.put(policy), count=count, device=None, max_batch=None, max_wait_ms=0.0,
        exploration_type=ExplorationType.RANDOM, num_threads=None, clients=1,
    )  # fmt: skip


@pytest.mark.parametrize("name", ["three_agents", "group_per_agent", "nested"])
def test_a_served_policy_gives_the_batches_a_local_one_gives(name):
    """Every agent of every env in one request a step: the server's batches are the local
    policy's, bit for bit (an in-process server draws from the same generator)."""
    from collecting import assert_same_batches
    from fleetrl.algorithms import MAPPO, MAPPOConfig

    make_env = ENVS[name]
    policy = (
        _mappo_actor()
        if name == "nested"
        else MAPPO(MAPPOConfig(hidden_sizes=[8]), make_env()).policy
    )
    num_envs = None if name == "nested" else 3  # NestedCountingEnv keeps its own batch (2,)
    got, servers = {}, None
    for served in (False, True):
        servers = _servers(policy) if served else None
        with SyncDataCollector(
            make_env, policy, frames_per_batch=24, total_frames=48, num_envs=num_envs,
            inference_server=None if servers is None else servers.for_worker(0),
        ) as c:  # fmt: skip
            c.set_seed(0)
            torch.manual_seed(0)
            got[served] = list(c)
    assert_same_batches(got[True], got[False])
    assert servers is not None and servers.stats()[0]["observations"] == 48  # env steps
    assert servers.stats()[0]["requests"] == 48 // (3 if num_envs else 2)  # one a step


def test_a_served_multi_agent_batch_is_tagged_with_the_version_that_acted():
    from tensordict import TensorDict

    from fleetrl.algorithms import MAPPO, MAPPOConfig
    from fleetrl.distributed.wire import pack_weights

    make_env = ENVS["three_agents"]
    mappo = MAPPO(MAPPOConfig(hidden_sizes=[8]), make_env())
    servers = _servers(mappo.policy)
    with SyncDataCollector(
        make_env, mappo.policy, frames_per_batch=12, num_envs=2,
        inference_server=servers.for_worker(0),
    ) as c:  # fmt: skip
        for version in (2, 7):
            weights = TensorDict.from_module(mappo.policy).data.clone()
            servers.publish(servers.backend.put(pack_weights(weights)), version)
            batch = c.next()
            assert batch["collector", "policy_version"].unique().tolist() == [version]
            assert batch["agents", "agent_0", "action"].shape == (2, 6, 1)
            assert c.batch_version == version


def test_a_ray_collector_serves_a_pettingzoo_team_and_counts_frames_exactly():
    pytest.importorskip("mpe2")
    from mpe2 import simple_tag_v3

    from fleetrl import RayCollector
    from fleetrl.algorithms import MAPPO, MAPPOConfig
    from fleetrl.envs.pettingzoo import PettingZooEnv

    def make_tag():
        return PettingZooEnv(simple_tag_v3.parallel_env, max_cycles=5)

    mappo = MAPPO(MAPPOConfig(hidden_sizes=[8]), make_tag())
    with RayCollector(
        make_tag, mappo.policy, frames_per_batch=40, total_frames=120, num_collectors=2,
        num_workers_per_collector=2, backend="inprocess", inference="server",
    ) as c:  # fmt: skip
        batches = list(c)
        stats = c.stats()["inference"]
    assert sum(b.numel() for b in batches) == 120
    for batch in batches:
        assert batch["adversary", "action"].shape[-1] == 3
        assert batch["agent", "action_log_prob"].shape[-1] == 1
    assert stats["observations"] == 120  # one observation row per env step: every agent in it

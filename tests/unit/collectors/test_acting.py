"""A probabilistic policy acts on tensors in the collector's loop, with the actor's outputs.

``fleetrl.networks.acting``: the collector calls a plain ``ProbabilisticActor`` on
tensors, after a probe shows the two calls give the same outputs. Here every batch is
compared with the one collected through the actor's own TensorDict call, bit for bit, and
every structure the tensor call cannot reproduce goes through the actor.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.data import Bounded
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import ProbabilisticActor, TanhNormal

from fleetrl import SyncDataCollector
from fleetrl.networks import acting
from fleetrl.networks.acting import TeamActor, TensorActor, tensor_actor
from policies import categorical_actor, mlp, two_network_actor


def tanh_normal_actor(obs_dim: int = 3, act_dim: int = 1, **kwargs) -> ProbabilisticActor:
    net = nn.Sequential(mlp(obs_dim, 2 * act_dim), NormalParamExtractor())
    return ProbabilisticActor(
        TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": -2.0, "high": 2.0},
        return_log_prob=True,
        **kwargs,
    )


def collect(env_id, policy, num_envs, fast: bool, monkeypatch, batches: int = 2):
    with monkeypatch.context() as m:
        if not fast:
            m.setattr("fleetrl.collectors.local.acting_setup.tensor_actor", lambda *a: None)
        torch.manual_seed(0)
        with SyncDataCollector(env_id, policy, frames_per_batch=64, num_envs=num_envs) as c:
            c.set_seed(1)
            acts_on_tensors = isinstance(c._rolling.plan.act, TensorActor)
            out = [c.next() for _ in range(batches)]
    return acts_on_tensors, out


@pytest.mark.parametrize(
    "env_id,make_policy,num_envs",
    [
        ("CartPole-v1", categorical_actor, 1),
        ("CartPole-v1", categorical_actor, 4),
        ("Pendulum-v1", tanh_normal_actor, 2),
        ("CartPole-v1", two_network_actor, 2),  # a chain of networks before the distribution
    ],
)
def test_batches_acted_on_tensors_equal_the_actors_own_bit_for_bit(
    env_id, make_policy, num_envs, monkeypatch
):
    torch.manual_seed(0)
    policy = make_policy()
    fast, got = collect(env_id, policy, num_envs, True, monkeypatch)
    slow, want = collect(env_id, policy, num_envs, False, monkeypatch)
    assert fast and not slow
    for a, b in zip(got, want):
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        for key in b.keys(True, True):
            assert torch.equal(a.get(key), b.get(key)), key


def test_the_collectors_generator_state_is_the_actors():
    """Acting on tensors draws exactly what the actor draws: the global generator ends in
    the same state (the next random number is the same) after a batch either way."""
    policy = categorical_actor()
    draws = []
    for fast in (True, False):
        mp = pytest.MonkeyPatch()
        _, _ = collect("CartPole-v1", policy, 2, fast, mp, batches=1)
        draws.append(torch.rand(3))
        mp.undo()
    torch.testing.assert_close(draws[0], draws[1], rtol=0, atol=0)


def test_deterministic_acting_is_the_actors_mode():
    policy = categorical_actor()
    fast = TensorActor.of(policy)
    td = TensorDict({"observation": torch.randn(5, 4)}, [5])
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        got, want = fast(td.clone()), policy(td.clone())
    assert torch.equal(got.get("action"), want.get("action"))
    assert torch.equal(got.get("action"), want.get("logits").argmax(-1))


@pytest.mark.parametrize("kind", [ExplorationType.RANDOM, ExplorationType.DETERMINISTIC])
def test_a_bound_call_reads_the_step_refreshed_in_place_under_the_type_it_was_bound_in(kind):
    """``bind`` takes the interaction type and the input tensors once: the bound call
    equals the actor's call on the step as it is now, after in-place refreshes, and keeps
    the type it was bound under after that context ends."""
    policy = categorical_actor()
    fast = TensorActor.of(policy)
    obs = torch.randn(5, 4)
    td = TensorDict({"observation": obs}, [5])
    with set_exploration_type(kind):
        call = fast.bind(td)
    other = (
        ExplorationType.DETERMINISTIC if kind is ExplorationType.RANDOM else ExplorationType.RANDOM
    )
    for seed in range(3):
        obs.copy_(torch.randn(5, 4) * (seed + 1))  # the step's refresh, in place
        with set_exploration_type(other):
            torch.manual_seed(seed)
            got = call()
        with set_exploration_type(kind):
            torch.manual_seed(seed)
            want = policy(td.clone())
        got_logits = got["logits"] if isinstance(got, dict) else got.get("logits")
        got_action = got["action"] if isinstance(got, dict) else got.get("action")
        assert torch.equal(got_logits, want.get("logits"))
        assert torch.equal(got_action, want.get("action"))
    if kind is ExplorationType.DETERMINISTIC:
        assert torch.equal(got_action, want.get("logits").argmax(-1))


class OwnForward(ProbabilisticActor):
    def forward(self, tensordict, *args, **kwargs):
        out = super().forward(tensordict, *args, **kwargs)
        out.set("action", torch.zeros_like(out.get("action")))
        return out


def _with_hook() -> ProbabilisticActor:
    policy = categorical_actor()
    policy.module[0].register_forward_hook(lambda module, args, out: out)
    return policy


def _hook_in_the_chain() -> ProbabilisticActor:
    policy = two_network_actor()
    policy.module[0].module[1].register_forward_hook(lambda module, args, out: out)
    return policy


def _safe_projection() -> ProbabilisticActor:
    return tanh_normal_actor(spec=Bounded(-1.0, 1.0, (1,)), safe=True)


def _own_forward() -> ProbabilisticActor:
    return OwnForward(
        TensorDictModule(mlp(), in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )


def _no_log_prob() -> ProbabilisticActor:
    return ProbabilisticActor(
        TensorDictModule(mlp(), in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
    )


def _not_probabilistic() -> TensorDictModule:
    return TensorDictModule(mlp(), in_keys=["observation"], out_keys=["action"])


@pytest.mark.parametrize(
    "env_id,make_policy",
    [
        pytest.param("Pendulum-v1", _safe_projection, id="safe-projection-hook"),
        pytest.param("CartPole-v1", _with_hook, id="a-forward-hook"),
        pytest.param("CartPole-v1", _own_forward, id="a-subclass-forward"),
        pytest.param("CartPole-v1", _no_log_prob, id="no-log-prob"),
        pytest.param("CartPole-v1", _hook_in_the_chain, id="a-forward-hook-in-a-chain"),
        pytest.param("CartPole-v1", _not_probabilistic, id="not-probabilistic"),
    ],
)
def test_other_structures_act_through_the_actor(env_id, make_policy):
    assert TensorActor.of(make_policy()) is None
    with SyncDataCollector(env_id, make_policy(), frames_per_batch=8, num_envs=2) as c:
        assert not isinstance(c._rolling.plan.act, TensorActor)
        assert c.next().numel() == 8


def test_a_probe_that_disagrees_keeps_the_actor(monkeypatch):
    """A tensor call whose draws differ from the actor's (another generator) is not taken."""
    policy = categorical_actor(num_actions=3)
    td = TensorDict({"observation": torch.randn(2, 4)}, [2])
    keys = ["logits", "action", "action_log_prob"]
    assert tensor_actor(policy, td, keys, ExplorationType.RANDOM) is not None
    assert tensor_actor(policy, td, keys[:2], ExplorationType.RANDOM) is None  # other keys
    call = TensorActor.__call__

    def other_draw(self, td):
        torch.rand(1)  # one draw of the generator first: other samples
        return call(self, td)

    monkeypatch.setattr(TensorActor, "__call__", other_draw)
    assert acting.PROBES >= 8
    assert tensor_actor(policy, td, keys, ExplorationType.RANDOM) is None


def _grouped_batches(make_env, policy, fast: bool, monkeypatch, fast_kind=TensorActor):
    with monkeypatch.context() as m:
        if not fast:
            m.setattr("fleetrl.collectors.local.grouped.tensor_actor", lambda *a: None)
        with SyncDataCollector(
            make_env, policy, frames_per_batch=24, total_frames=48, num_envs=3
        ) as c:
            c.set_seed(0)
            torch.manual_seed(0)
            acts_on_tensors = isinstance(getattr(c._rolling._act, "fast", None), fast_kind)
            return acts_on_tensors, list(c)


@pytest.mark.parametrize(
    "env_id", ["mpe2:simple_spread_v3", "mpe2:simple_tag_v3"], ids=["one-group", "two-groups"]
)
def test_a_team_acts_on_tensors_with_the_actors_batches_bit_for_bit(env_id, monkeypatch):
    """MAPPO's actors (the group's observations stacked, then torchrl's MultiAgentMLP and a
    Categorical) act on tensors in the grouped rollout, every group's outputs written as
    the actor writes them: the same keys, and the same values from the same draws."""
    from collecting import assert_same_batches
    from fleetrl import load_config
    from fleetrl.setup.build import make_algorithm

    config = load_config("configs/mappo_simple_spread.yaml", [f"env.id={env_id}"])
    policy = make_algorithm(config, seed=0).policy
    make_env = config.env.id
    kind = TensorActor if env_id.endswith("spread_v3") else TeamActor  # an actor per group
    fast, got = _grouped_batches(make_env, policy, True, monkeypatch, kind)
    slow, want = _grouped_batches(make_env, policy, False, monkeypatch, kind)
    assert fast and not slow
    assert_same_batches(got, want)
    for group in {k[0] for k in want[0].keys(True, True) if k[-1] == "action"}:
        assert (group, "action_log_prob") in want[0].keys(True, True)

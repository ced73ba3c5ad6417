"""MAPPO and IPPO on grouped batches collected by SyncDataCollector from torchrl envs."""

from __future__ import annotations

import math
import re

import pytest
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase
from torchrl.envs.utils import MarlGroupMapType
from torchrl.testing.mocking_classes import (
    ContinuousActionVecMockEnv,
    MultiAgentCountingEnv,
    MultiKeyCountingEnv,
)

from fleetrl import ConfigError, SyncDataCollector
from fleetrl.algorithms import IPPO, MAPPO, IPPOConfig, MAPPOConfig
from fleetrl.algorithms.agent_groups import NO_GROUPS_MSG
from fleetrl.algorithms.mappo import GroupLosses

N_AGENTS = 3


def counting_env() -> MultiAgentCountingEnv:
    return MultiAgentCountingEnv(n_agents=N_AGENTS, max_steps=3)


def collect(algo, make_env, frames: int = 24, num_envs: int = 2) -> TensorDictBase:
    with SyncDataCollector(make_env, algo.policy, frames_per_batch=frames, num_envs=num_envs) as c:
        c.set_seed(0)
        return c.next()


@pytest.mark.parametrize("cls,config_cls", [(MAPPO, MAPPOConfig), (IPPO, IPPOConfig)])
def test_learn_step_on_collected_batch_changes_parameters(cls, config_cls):
    torch.manual_seed(0)
    algo = cls(config_cls(num_epochs=2, num_mini_batch=3), counting_env())
    batch = collect(algo, counting_env)
    data = algo.prepare(batch)
    t = algo.loss_module.tensor_keys
    assert data.get(t.advantage).shape == (24, N_AGENTS, 1)
    assert data.get(t.value_target).shape == (24, N_AGENTS, 1)
    assert data.get(t.action).shape == (24, N_AGENTS, 1)
    before = algo.flat_weights().copy()
    info = algo.learn(batch)
    assert algo.num_updates == 6
    assert {"loss/objective", "loss/critic", "loss/entropy", "grad_norm"} <= set(info)
    assert (algo.flat_weights() != before).any()
    # weights published and restored exactly, as the learner loop does
    other = cls(config_cls(), counting_env())
    other.set_weights(algo.get_weights())
    assert (other.flat_weights() == algo.flat_weights()).all()
    restored = cls(config_cls(num_epochs=2, num_mini_batch=3), counting_env())
    restored.load_state_dict(algo.state_dict())
    assert restored.num_updates == 6
    assert (restored.flat_weights() == algo.flat_weights()).all()


def mlp_params(n_in: int, hidden: int, n_out: int) -> int:
    return (n_in + 1) * hidden + (hidden + 1) * hidden + (hidden + 1) * n_out


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("cls,config_cls", [(MAPPO, MAPPOConfig), (IPPO, IPPOConfig)])
def test_parameter_counts_follow_share_params_and_critic_inputs(cls, config_cls, share):
    algo = cls(config_cls(hidden_sizes=[8, 8], share_params=share), counting_env())
    copies = 1 if share else N_AGENTS
    obs = 3 * 4  # MultiAgentCountingEnv's [3, 4] observation, flattened
    critic_in = obs * N_AGENTS if cls is MAPPO else obs
    actor = sum(p.numel() for p in algo.actor.parameters())
    critic = sum(p.numel() for p in algo.critic.parameters())
    assert actor == copies * mlp_params(obs, 8, 1)  # Binary action: one Bernoulli logit
    assert critic == copies * mlp_params(critic_in, 8, 1)
    assert algo.flat_weights().size == actor + critic


@pytest.mark.parametrize("cls,config_cls", [(MAPPO, MAPPOConfig), (IPPO, IPPOConfig)])
def test_mappo_critic_reads_every_agent_ippo_critic_its_own(cls, config_cls):
    torch.manual_seed(0)
    algo = cls(config_cls(), counting_env())
    td = counting_env().reset()
    values = algo.critic(td.clone()).get(("agents", "state_value"))
    td.set(("agents", "agent_0", "observation"), torch.randn(3, 4))
    changed = algo.critic(td.clone()).get(("agents", "state_value"))
    moved = (values != changed).squeeze(-1).tolist()
    # MAPPO: a change in agent 0's view moves every agent's value; IPPO: agent 0's only
    assert moved == ([True] * N_AGENTS if cls is MAPPO else [True] + [False] * (N_AGENTS - 1))


def test_bad_config_refused_by_key():
    with pytest.raises(ConfigError) as err:
        MAPPO(MAPPOConfig(clip_epsilon=0.0, num_epochs=0, gae_lambda=2.0), counting_env())
    text = str(err.value)
    for key, value in (("clip_epsilon", 0.0), ("num_epochs", 0), ("gae_lambda", 2.0)):
        assert f"mappo.{key}={value}" in text
    with pytest.raises(ConfigError, match=r"ippo\.hidden_sizes=\[\] is invalid"):
        IPPO(IPPOConfig(hidden_sizes=[]), counting_env())


def test_every_group_gets_its_own_networks_and_one_group_may_be_chosen():
    env = MultiAgentCountingEnv(n_agents=2, group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT)
    both = MAPPO(MAPPOConfig(hidden_sizes=[8]), env)
    assert both.groups == ["agent_0", "agent_1"]
    assert isinstance(both.loss_module, GroupLosses)
    names = {n.split(".")[1] for n, _ in both.loss_module.named_parameters()}
    assert names == {"agent_0", "agent_1"}  # losses.<group>.<network>...
    # the policy writes every group's action; the critic reads every group's observation
    assert set(both.policy.out_keys) >= {("agent_0", "agent_0", "action"),
                                         ("agent_1", "agent_1", "action")}  # fmt: skip
    assert set(both.env_keys_read()) == {
        ("agent_0", "agent_0", "observation"),
        ("agent_1", "agent_1", "observation"),
    }
    with pytest.raises(ConfigError, match=r"group='nope' is not an agent group"):
        MAPPO(MAPPOConfig(), env, group="nope")
    chosen = MAPPO(MAPPOConfig(), env, group="agent_1")
    assert chosen.groups == ["agent_1"] and chosen.layout.n_agents == 1
    assert not isinstance(chosen.loss_module, GroupLosses)
    # an env of three groups, two of them nested beside root keys
    assert MAPPO(MAPPOConfig(), MultiKeyCountingEnv()).groups == ["nested_1", "nested_2"]
    single = ContinuousActionVecMockEnv()
    with pytest.raises(ConfigError, match=re.escape(NO_GROUPS_MSG.format(algo="ippo"))):
        IPPO(IPPOConfig(), single)


@pytest.mark.parametrize("cls", [MAPPO, IPPO])
def test_several_groups_learn_together_each_on_its_own_gradients(cls):
    """One step on a batch of two groups moves both groups' networks; a group's loss touches
    only its own parameters; max_grad_norm clips each group's gradients on their own; the
    shared clip epsilon and coefficients change for every group at once."""
    make_env = lambda: MultiAgentCountingEnv(  # noqa: E731
        n_agents=2, max_steps=4, group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT
    )
    config = cls.config_class(num_epochs=1, num_mini_batch=1, hidden_sizes=[8], max_grad_norm=1e-3)
    algo = cls(config, make_env())
    batch = collect(algo, make_env)
    for group in ("agent_0", "agent_1"):
        assert batch[group, group, "action"].shape == (2, 12, 1)  # the env's action shape
    before = {n: p.detach().clone() for n, p in algo.loss_module.named_parameters()}
    norms = []
    step = algo.optimizer.step

    def recorded_step(*args, **kwargs):
        for params in algo._group_params:
            grads = [p.grad for p in params if p.grad is not None]
            norms.append(float(torch.stack([g.norm() for g in grads]).norm()))
        return step(*args, **kwargs)

    algo.optimizer.step = recorded_step
    info = algo.learn(batch)
    assert algo.num_updates == 1 and "loss/objective" in info
    moved = {n.split(".")[1] for n, p in algo.loss_module.named_parameters()
             if not torch.equal(p, before[n])}  # fmt: skip
    assert moved == {"agent_0", "agent_1"}
    assert len(norms) == 2 and all(n <= 1e-3 * (1 + 1e-4) for n in norms)  # each clipped
    # one group's loss has no gradient in the other group's parameters
    data = algo.prepare(collect(algo, make_env))
    own = algo.loss_module.losses["agent_0"](data)
    own["loss_objective"].backward()
    grads = {n.split(".")[1] for n, p in algo.loss_module.named_parameters()
             if p.grad is not None and p.grad.abs().sum() > 0}  # fmt: skip
    assert grads == {"agent_0"}
    algo.update_algorithm_parameter("clip_epsilon", 0.05)
    algo.update_algorithm_parameter("entropy_coef", 0.0)
    for loss in algo.loss_module.losses.values():
        assert float(loss.clip_epsilon) == pytest.approx(0.05)
        assert float(loss.entropy_coeff) == 0.0 and loss.entropy_bonus is False
    assert algo.clip_epsilon == pytest.approx(0.05) and algo.entropy_coef == 0.0


# ------------------------------------------------------------------ learning


class OneStepEnv(EnvBase):
    """One-step episodes in the stacked layout (``("agents", ...)`` with an agent dim) and a
    team reward at the root: each step observes afresh (:meth:`_observe`, the agents'
    observations) and pays :meth:`_reward` of the agents' actions."""

    def _observe_agents(self) -> torch.Tensor:
        raise NotImplementedError

    def _reward(self, action: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _observe(self) -> TensorDict:
        obs = self._observe_agents()
        done = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        agents = TensorDict({"observation": obs}, [*self.batch_size, self.n_agents])
        return TensorDict({"agents": agents, "done": done, "terminated": done}, self.batch_size)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs) -> TensorDict:
        return self._observe()

    def _step(self, tensordict: TensorDictBase) -> TensorDict:
        reward = self._reward(tensordict.get(("agents", "action")))
        out = self._observe()
        out.set("reward", reward)
        out.set("done", torch.ones_like(out.get("done")))
        out.set("terminated", torch.ones_like(out.get("done")))
        return out

    def _set_seed(self, seed: int | None) -> None:
        torch.manual_seed(seed)


class CueEnv(OneStepEnv):
    """Each agent sees a random one-hot cue of ``n_cues`` and earns 1 for the matching
    action; the team reward is the mean of the agents' hits."""

    def __init__(self, n_agents: int = 2, n_cues: int = 3, batch: int = 32):
        super().__init__(batch_size=torch.Size([batch]))
        self.n_agents, self.n_cues = n_agents, n_cues
        shape = (batch, n_agents)
        self.group_map = {"agents": [f"agent_{i}" for i in range(n_agents)]}
        self.observation_spec = Composite(
            agents=Composite(observation=Unbounded((*shape, n_cues)), shape=shape),
            shape=(batch,),
        )
        self.action_spec = Composite(
            agents=Composite(action=Categorical(n_cues, shape=shape), shape=shape),
            shape=(batch,),
        )
        self.reward_spec = Unbounded((batch, 1))

    def _observe_agents(self) -> torch.Tensor:
        self.cue = torch.randint(self.n_cues, (*self.batch_size, self.n_agents))
        return torch.nn.functional.one_hot(self.cue, self.n_cues).float()

    def _reward(self, action: torch.Tensor) -> torch.Tensor:
        return (action == self.cue).float().mean(-1, keepdim=True)


@pytest.mark.parametrize("cls,config_cls", [(MAPPO, MAPPOConfig), (IPPO, IPPOConfig)])
def test_learns_to_match_the_cue(cls, config_cls):
    torch.manual_seed(0)
    config = config_cls(lr=3e-3, num_epochs=4, num_mini_batch=4, hidden_sizes=[32])
    algo = cls(config, CueEnv())
    rewards = []
    with SyncDataCollector(CueEnv, algo.policy, frames_per_batch=256, total_frames=256 * 40) as c:
        c.set_seed(0)
        for batch in c:
            rewards.append(float(batch.get(("next", "reward")).mean()))
            algo.learn(batch)
            if rewards[-1] > 0.95:
                break
    assert rewards[0] < 0.5  # chance: 1/3
    assert max(rewards[-3:]) > 0.9, rewards


# --- a centralised critic on the env's global state ---------------------------------------------


def spread_env(num_envs=None):
    pytest.importorskip("mpe2")
    from mpe2 import simple_spread_v3

    from fleetrl.envs.pettingzoo import PettingZooEnv

    return PettingZooEnv(simple_spread_v3.parallel_env, num_envs=num_envs, max_cycles=5)


def test_a_state_critic_reads_the_global_state_alone_and_trains():
    torch.manual_seed(0)
    config = MAPPOConfig(critic_input="state", hidden_sizes=[16], num_epochs=2, num_mini_batch=2)
    algo = MAPPO(config, spread_env())
    assert algo.critic.in_keys == ["state"]
    assert algo.env_keys_read() == {("agents", "observation"), "state"}
    critic = sum(p.numel() for p in algo.critic.parameters())
    assert critic == (54 + 1) * 16 + (16 + 1) * N_AGENTS  # MPE's state: 3 x 18, a value per agent
    td = spread_env().reset()
    values = algo.critic(td.clone()).get(("agents", "state_value"))
    assert values.shape == (N_AGENTS, 1)
    # the state moves every agent's value; the agents' own observations move none
    td_obs = td.clone().set(("agents", "observation"), torch.randn(N_AGENTS, 18))
    assert torch.equal(algo.critic(td_obs).get(("agents", "state_value")), values)
    td_state = td.clone().set("state", torch.randn(54))
    moved = algo.critic(td_state).get(("agents", "state_value")) != values
    assert moved.all()
    batch = collect(algo, lambda: spread_env(2), frames=20, num_envs=None)
    assert batch["state"].shape == (2, 10, 54)
    before = algo.flat_weights().copy()
    info = algo.learn(batch)
    assert algo.num_updates == 4 and math.isfinite(info["loss/critic"])
    assert (algo.flat_weights() != before).any()


def test_an_observation_critic_reads_no_state():
    algo = MAPPO(MAPPOConfig(), spread_env())
    assert "state" not in algo.env_keys_read()


def test_a_state_critic_needs_an_env_with_a_state():
    with pytest.raises(ConfigError, match=r"mappo.critic_input='state' is invalid with this env"):
        MAPPO(MAPPOConfig(critic_input="state"), counting_env())
    with pytest.raises(ConfigError, match=r"mappo\.critic_input='global' is invalid: must be one"):
        MAPPO(MAPPOConfig(critic_input="global"), counting_env())


# --- bounded continuous actions ------------------------------------------------------------


class TargetEnv(OneStepEnv):
    """Each agent sees a target in [0, 1] and earns 1 - |action - target| for its continuous
    action in [0, 1] (a Bounded spec); the team reward is the agents' mean.
    ``bounded=False`` declares the actions Unbounded instead."""

    def __init__(self, n_agents: int = 2, batch: int = 32, bounded: bool = True):
        super().__init__(batch_size=torch.Size([batch]))
        self.n_agents = n_agents
        shape = (batch, n_agents)
        action = Bounded(0.0, 1.0, (*shape, 1)) if bounded else Unbounded((*shape, 1))
        self.group_map = {"agents": [f"agent_{i}" for i in range(n_agents)]}
        self.observation_spec = Composite(
            agents=Composite(observation=Unbounded((*shape, 1)), shape=shape), shape=(batch,)
        )
        self.action_spec = Composite(agents=Composite(action=action, shape=shape), shape=(batch,))
        self.reward_spec = Unbounded((batch, 1))

    def _observe_agents(self) -> torch.Tensor:
        self.target = torch.rand(*self.batch_size, self.n_agents, 1)
        return self.target.clone()

    def _reward(self, action: torch.Tensor) -> torch.Tensor:
        return 1 - (action - self.target).abs().mean(-2)


@pytest.mark.parametrize("cls,config_cls", [(MAPPO, MAPPOConfig), (IPPO, IPPOConfig)])
def test_bounded_continuous_actions_learn_a_tanh_normal_within_the_bounds(cls, config_cls):
    torch.manual_seed(0)
    config = config_cls(lr=3e-3, num_epochs=4, num_mini_batch=4, hidden_sizes=[32])
    algo = cls(config, TargetEnv())
    layout = algo.layout
    assert layout.continuous and (layout.n_actions, layout.binary) == (1, False)
    assert layout.action_low.tolist() == [[0.0], [0.0]] and layout.action_high.tolist() == [
        [1.0],
        [1.0],
    ]
    rewards = []
    with SyncDataCollector(
        TargetEnv, algo.policy, frames_per_batch=256, total_frames=256 * 40
    ) as c:
        c.set_seed(0)
        for batch in c:
            action = batch.get(("agents", "action"))
            assert action.shape == (32, 8, 2, 1) and action.min() >= 0 and action.max() <= 1
            # one log-probability per agent: the TanhNormal's, summed over the action dims
            assert batch.get(("agents", "action_log_prob")).shape == (32, 8, 2)
            rewards.append(float(batch.get(("next", "reward")).mean()))
            algo.learn(batch)
            if rewards[-1] > 0.95:
                break
    assert rewards[0] < 0.85  # the initial policy: about 0.75
    assert max(rewards[-3:]) > 0.93, rewards


def test_a_continuous_pettingzoo_box_trains_per_agent_bounds():
    pytest.importorskip("mpe2")
    from mpe2 import simple_spread_v3

    from fleetrl.envs.pettingzoo import PettingZooEnv

    def make():
        return PettingZooEnv(
            simple_spread_v3.parallel_env, num_envs=2, max_cycles=5, continuous_actions=True
        )

    torch.manual_seed(0)
    mappo = MAPPO(MAPPOConfig(num_epochs=1, num_mini_batch=2), make())
    assert mappo.layout.continuous and mappo.layout.n_actions == 5  # no-op, 4 directions
    assert mappo.layout.action_low.shape == (3, 5) and bool((mappo.layout.action_high == 1).all())
    batch = collect(mappo, make, frames=20)
    action = batch.get(("agents", "action"))
    assert action.shape == (2, 10, 3, 5) and action.min() >= 0 and action.max() <= 1
    before = mappo.flat_weights().copy()
    info = mappo.learn(batch)
    assert all(math.isfinite(float(v)) for v in info.values())
    assert (mappo.flat_weights() != before).any()


def test_unbounded_continuous_actions_are_refused_by_group_and_spec():
    with pytest.raises(ConfigError) as err:
        MAPPO(MAPPOConfig(), TargetEnv(bounded=False))
    assert err.value.problems == [
        "mappo: the action spec of group 'agents' is UnboundedContinuous; supported: "
        "Categorical, Binary (n=1) and Bounded continuous actions of one dim per agent (a Box) "
        "(unbounded continuous and OneHot actions are not built yet: bound them, e.g. with "
        "torchrl's ActionScaling or a clipping wrapper)"
    ]


@pytest.mark.cuda
def test_a_continuous_group_on_a_cuda_learner_keeps_its_bounds_with_its_networks():
    mappo = MAPPO(MAPPOConfig(num_epochs=1, num_mini_batch=2), TargetEnv(), device="cuda")
    bounds = [
        v
        for m in mappo.actor.modules()
        for v in (getattr(m, "distribution_kwargs", None) or {}).values()
    ]
    assert bounds and all(b.device.type == "cuda" for b in bounds)
    obs = TensorDict({"observation": torch.rand(4, 2, 1)}, [4, 2], device="cuda")
    out = mappo.actor(TensorDict({"agents": obs}, [4], device="cuda"))
    action = out.get(("agents", "action"))
    assert action.device.type == "cuda" and action.min() >= 0 and action.max() <= 1


# --- the loss on tensors is torchrl's MAPPOLoss / IPPOLoss ----------------------------------


def tag_env():
    pytest.importorskip("mpe2")
    from mpe2 import simple_tag_v3

    from fleetrl.envs.pettingzoo import PettingZooEnv

    return PettingZooEnv(simple_tag_v3.parallel_env, max_cycles=5)


#: every action kind and layout the tensor loss takes: Categorical (stacked agents), Binary
#: (one sub-TensorDict per agent), bounded continuous (TanhNormal: a sampled entropy), a
#: critic on the global state, two groups, value clipping, unnormalized advantages
LOSS_CASES = {
    "mappo-categorical": (MAPPO, dict(), lambda: CueEnv(batch=8)),
    "ippo-categorical-per-agent-params-clip-value": (
        IPPO,
        dict(share_params=False, clip_value=0.1),
        lambda: CueEnv(batch=8),
    ),
    "mappo-binary-per-agent-keys": (MAPPO, dict(normalize_advantage=False), counting_env),
    "ippo-tanh-normal": (IPPO, dict(), lambda: TargetEnv(batch=8)),
    "mappo-state-critic": (MAPPO, dict(critic_input="state"), spread_env),
    "mappo-two-groups": (MAPPO, dict(clip_value=0.2), tag_env),
}


def loss_and_grads(algo, data, torchrl: bool):
    torch.manual_seed(11)  # a TanhNormal's entropy is sampled: the same draw both ways
    algo.optimizer.zero_grad(set_to_none=True)
    loss, info = algo.torchrl_loss(data) if torchrl else algo.loss(data)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in algo.loss_module.named_parameters()
             if p.grad is not None}  # fmt: skip
    return loss.detach(), {k: float(v) for k, v in info.items()}, grads


@pytest.mark.parametrize("name", list(LOSS_CASES))
def test_the_loss_on_tensors_is_torchrls_multi_agent_loss(name):
    """The groups' networks called on tensors and PPO's terms written once
    (``MultiAgentPPO.loss``) give torchrl's MAPPOLoss / IPPOLoss forward: the same loss,
    the same gradient of every parameter, the same logged values."""
    cls, overrides, make_env = LOSS_CASES[name]
    torch.manual_seed(3)
    config = cls.config_class(entropy_coef=0.01, hidden_sizes=[16], **overrides)
    algo = cls(config, make_env())
    assert algo.heads is not None and len(algo.heads) == len(algo.layouts)
    batched = isinstance(make_env(), OneStepEnv)  # already a batch of 8 envs
    data = algo.prepare(collect(algo, make_env, frames=32, num_envs=None if batched else 2))
    with torch.no_grad():  # ratios away from 1, so that clipping acts
        for loss in algo.group_losses:
            key = loss.tensor_keys.sample_log_prob
            data.set(key, data.get(key) + 0.3 * torch.randn_like(data.get(key)))
    lean, lean_info, lean_grads = loss_and_grads(algo, data.clone(), torchrl=False)
    reference, ref_info, ref_grads = loss_and_grads(algo, data.clone(), torchrl=True)
    torch.testing.assert_close(lean, reference, rtol=1e-5, atol=1e-6)
    assert lean_grads.keys() == ref_grads.keys() and lean_grads
    for key in lean_grads:
        torch.testing.assert_close(lean_grads[key], ref_grads[key], rtol=1e-4, atol=1e-5)
    assert lean_info.keys() == ref_info.keys()
    assert 0 < ref_info["loss/clip_fraction"] < 1
    for key in ref_info:
        assert lean_info[key] == pytest.approx(ref_info[key], rel=1e-4, abs=1e-5), key
    # the comparison can fail: another clip epsilon on one side is told apart
    algo.update_algorithm_parameter("clip_epsilon", 0.01)
    clipped, _, _ = loss_and_grads(algo, data.clone(), torchrl=True)
    assert not torch.allclose(lean, clipped)

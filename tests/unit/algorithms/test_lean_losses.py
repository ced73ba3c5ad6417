"""The losses on tensors compute torchrl's losses: the same values and the same gradients.

Each algorithm calls its networks on tensors (:mod:`fleetrl.networks.heads`)
where their structure allows, and its torchrl loss module's own forward
otherwise. Both ways must be the same function of the same parameters: here
each algorithm's loss and gradients on one minibatch are computed both ways
and compared, for every algorithm and every policy kind fleetrl builds.
"""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn

from fleetrl import SyncDataCollector
from fleetrl.algorithms import (
    A2C,
    APPO,
    DQN,
    IMPALA,
    PPO,
    SAC,
    A2CConfig,
    APPOConfig,
    DQNConfig,
    IMPALAConfig,
    PPOConfig,
    SACConfig,
)
from fleetrl.algorithms.base import flatten_valid
from fleetrl.envs.probe import env_spec
from fleetrl.keys import TRANSITION_KEYS
from fleetrl.networks.heads import ActorCriticHeads, LogitsCategorical, PolicyHead
from policies import two_network_actor

CASES = {
    "ppo-categorical": (PPO, lambda: PPOConfig(entropy_coef=0.01), "CartPole-v1"),
    "ppo-tanh-normal-clip-value": (
        PPO,
        lambda: PPOConfig(clip_value=0.2, entropy_coef=0.01),
        "Pendulum-v1",
    ),
    "ppo-normal": (PPO, lambda: PPOConfig(distribution="normal", clip_value=0.1), "Pendulum-v1"),
    "ppo-unnormalized-advantage": (
        PPO,
        lambda: PPOConfig(normalize_advantage=False),
        "CartPole-v1",
    ),
    "a2c": (A2C, lambda: A2CConfig(), "CartPole-v1"),
    "impala": (IMPALA, lambda: IMPALAConfig(), "CartPole-v1"),
    "appo-clip-value": (APPO, lambda: APPOConfig(clip_value=0.1), "CartPole-v1"),
    "dqn-double": (DQN, lambda: DQNConfig(hidden_sizes=[32]), "CartPole-v1"),
    "dqn-plain": (DQN, lambda: DQNConfig(hidden_sizes=[32], double_dqn=False), "CartPole-v1"),
    "sac": (SAC, lambda: SACConfig(hidden_sizes=[32, 32]), "Pendulum-v1"),
}


def build(name: str):
    cls, cfg, env_id = CASES[name]
    torch.manual_seed(3)
    return cls(cfg(), env_spec(env_id))


def minibatch(name: str, algorithm):
    """A prepared minibatch, as the algorithm's update gets it."""
    env_id = CASES[name][2]
    with SyncDataCollector(env_id, algorithm.policy, frames_per_batch=64, num_envs=2) as c:
        c.set_seed(0)
        batch = c.next()
    if algorithm.on_policy:
        return algorithm.prepare(batch)
    data = flatten_valid(batch, TRANSITION_KEYS)
    if isinstance(algorithm, DQN):  # a target network that differs from the online one
        with torch.no_grad():
            for p in algorithm.loss_module.target_value_network_params.values(True, True):
                p.mul_(0.5)
    else:
        with torch.no_grad():
            for p in algorithm.loss_module.target_qvalue_network_params.values(True, True):
                p.mul_(0.5)
    return data


def loss_and_grads(algorithm, data, torchrl: bool):
    torch.manual_seed(11)  # SAC samples actions in its loss: the same draws both ways
    algorithm.optimizer.zero_grad(set_to_none=True)
    loss, info = algorithm.torchrl_loss(data) if torchrl else algorithm.loss(data)
    loss.backward()
    grads = {
        n: p.grad.clone() for n, p in algorithm.loss_module.named_parameters() if p.grad is not None
    }
    return loss.detach(), {k: float(v) for k, v in info.items()}, grads


def tensor_path(algorithm) -> bool:
    if isinstance(algorithm, (DQN, SAC)):
        return algorithm.q is not None
    return algorithm.heads is not None


@pytest.mark.parametrize("name", list(CASES))
def test_the_loss_on_tensors_is_torchrls_loss(name):
    algorithm = build(name)
    assert tensor_path(algorithm)  # fleetrl's default networks take the tensor path
    data = minibatch(name, algorithm)
    lean, lean_info, lean_grads = loss_and_grads(algorithm, data.clone(), torchrl=False)
    reference, ref_info, ref_grads = loss_and_grads(algorithm, data.clone(), torchrl=True)
    torch.testing.assert_close(lean, reference, rtol=1e-5, atol=1e-6)
    assert lean_grads.keys() == ref_grads.keys() and lean_grads
    for key in lean_grads:
        torch.testing.assert_close(lean_grads[key], ref_grads[key], rtol=1e-4, atol=1e-5)
    assert lean_info.keys() == ref_info.keys()  # the same columns are logged either way
    for key in ref_info:
        assert lean_info[key] == pytest.approx(ref_info[key], rel=1e-4, abs=1e-5), key


def test_the_comparison_can_fail():
    """A loss that differs (another clip epsilon on one side) is told apart."""
    algorithm = build("ppo-categorical")
    data = minibatch("ppo-categorical", algorithm)
    data.set("action_log_prob", data.get("action_log_prob") - 0.5)  # ratios far from 1
    lean, _, _ = loss_and_grads(algorithm, data.clone(), torchrl=False)
    algorithm.update_algorithm_parameter("clip_epsilon", 0.01)
    reference, _, _ = loss_and_grads(algorithm, data.clone(), torchrl=True)
    assert not torch.allclose(lean, reference)


def test_networks_of_another_structure_go_through_the_torchrl_loss():
    """A critic that writes two keys, or an actor of three modules, has no tensor path:
    the torchrl loss module's own forward runs it, and learning works the same."""
    from torchrl.modules import ProbabilisticActor

    net = TensorDictModule(nn.Linear(4, 2), in_keys=["observation"], out_keys=["logits"])
    plain_actor = ProbabilisticActor(
        net,
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )
    assert PolicyHead.of(plain_actor) is not None
    assert PolicyHead.of(two_network_actor()) is None
    critic = TensorDictModule(_TwoOut(), in_keys=["observation"], out_keys=["state_value", "h"])
    assert ActorCriticHeads.of(plain_actor, critic) is None
    ppo = PPO(PPOConfig(), env_spec("CartPole-v1"), actor=plain_actor, critic=critic)
    assert ppo.heads is None and ppo.keys is None
    with SyncDataCollector("CartPole-v1", ppo.policy, frames_per_batch=64, num_envs=2) as c:
        info = ppo.learn(c.next())
    assert ppo.num_updates == 16 and "loss/objective" in info and "loss/critic" in info


class _TwoOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)

    def forward(self, obs):
        value = self.net(obs)
        return value, value.detach()


def test_a_shared_pixel_torso_runs_once_and_gives_the_separate_networks_gradients():
    from fleetrl.envs.spec import EnvSpec

    info = EnvSpec(4 * 84 * 84, 6, 1, None, None, (4, 84, 84), torch.uint8)
    torch.manual_seed(0)
    ppo = PPO(PPOConfig(), info)
    assert ppo.heads.torso is not None  # actor and critic share the Nature torso
    calls = []
    ppo.heads.torso.register_forward_hook(lambda *_: calls.append(1))
    obs = torch.randint(0, 255, (8, 4, 84, 84), dtype=torch.uint8)
    dist, value = ppo.heads(obs)
    assert len(calls) == 1 and value.shape == (8, 1)
    # the same outputs as the actor and critic run whole
    separate = ppo.heads.policy.dist(obs)
    torch.testing.assert_close(dist.logits, separate.logits)
    torch.testing.assert_close(value, ppo.heads.value(obs))


def test_the_policy_heads_categorical_is_torchs_to_float_rounding():
    """LogitsCategorical: torch's log-probabilities, entropy and their gradients; a masked
    action (-inf logit) has a finite entropy; values of another shape broadcast as torch's."""
    torch.manual_seed(0)
    raw = torch.randn(64, 5)
    raw[::4, 2] = -float("inf")  # masked actions
    action = torch.distributions.Categorical(logits=raw).sample()
    got, want = raw.clone().requires_grad_(), raw.clone().requires_grad_()
    fast = LogitsCategorical(logits=got)
    slow = torch.distributions.Categorical(logits=want)
    torch.testing.assert_close(fast.log_prob(action), slow.log_prob(action))
    torch.testing.assert_close(fast.entropy(), slow.entropy())
    assert torch.isfinite(fast.entropy()).all()
    (fast.log_prob(action).sum() + fast.entropy().sum()).backward()
    (slow.log_prob(action).sum() + slow.entropy().sum()).backward()
    torch.testing.assert_close(got.grad, want.grad)
    torch.testing.assert_close(fast.probs, slow.probs)
    every = torch.arange(5).unsqueeze(-1)  # [5, 1]: each action's log-prob under every row
    torch.testing.assert_close(fast.log_prob(every), slow.log_prob(every))
    assert fast.log_prob(every).shape == (5, 64)
    # the policy head of fleetrl's discrete actor builds it; a continuous one keeps its own
    assert build("a2c").heads.policy.dist_class is LogitsCategorical
    assert build("ppo-normal").heads.policy.dist_class is not LogitsCategorical

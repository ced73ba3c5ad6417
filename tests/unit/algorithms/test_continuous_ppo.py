"""``ppo.distribution``: CleanRL's Normal policy (state-independent log-std) and the TanhNormal."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import TanhNormal

from fleetrl.algorithms.ppo import PPO, PPOConfig
from fleetrl.envs.probe import env_spec
from fleetrl.errors import ConfigError
from fleetrl.networks.models import ActionDistribution, StateIndependentScale, make_actor_critic
from fleetrl.setup.load import config_from_dict


def _obs(n: int = 5) -> TensorDict:
    torch.manual_seed(0)
    return TensorDict({"observation": torch.randn(n, 17)}, [n])


def test_normal_is_cleanrls_policy():
    info = env_spec("HalfCheetah-v5")
    actor, critic = make_actor_critic("mlp", info, [64, 64], distribution="normal")
    body = actor.module[0].module
    assert isinstance(body, StateIndependentScale)
    assert torch.equal(body.log_std.detach(), torch.zeros(6))  # std 1 at the start, any state
    linears = [m for m in body.loc_net.modules() if isinstance(m, torch.nn.Linear)]
    # CleanRL's init: orthogonal rows (gain 0.01 on the mean head), zero bias
    head = linears[-1].weight.detach()
    torch.testing.assert_close(head @ head.T, 1e-4 * torch.eye(6), atol=1e-9, rtol=0)
    assert all(torch.equal(m.bias.detach(), torch.zeros_like(m.bias)) for m in linears)
    value_head = [m for m in critic.module.modules() if isinstance(m, torch.nn.Linear)][-1]
    assert torch.linalg.norm(value_head.weight.detach()).item() == pytest.approx(1.0)

    with torch.no_grad():
        body.log_std.fill_(1.0)  # std e: samples beyond the [-1, 1] bounds
    with set_exploration_type(ExplorationType.RANDOM), torch.no_grad():  # as the collectors act
        td = actor(_obs())
    assert torch.equal(td["scale"], torch.full((5, 6), torch.e))
    assert td["action"].abs().max() > 1  # unclipped here: the env clips it
    expected = torch.distributions.Normal(td["loc"], td["scale"]).log_prob(td["action"]).sum(-1)
    torch.testing.assert_close(td["action_log_prob"], expected)
    with set_exploration_type(ExplorationType.DETERMINISTIC), torch.no_grad():
        td = actor(_obs())
    assert torch.equal(td["action"], td["loc"])  # evaluation acts with the mean


def test_tanh_normal_stays_the_default():
    assert PPOConfig().distribution is ActionDistribution.TANH_NORMAL
    ppo = PPO(PPOConfig(), env_spec("Pendulum-v1"))
    td = ppo.policy(TensorDict({"observation": torch.randn(4, 3)}, [4]))
    assert td["action"].abs().max() <= 2.0  # squashed into Pendulum's [-2, 2]
    dist = ppo.policy.get_dist(TensorDict({"observation": torch.randn(4, 3)}, [4]))
    assert isinstance(dist, TanhNormal)
    cfg = config_from_dict({"algorithm": "ppo"}, ["ppo.distribution=normal"])
    assert cfg.algo.distribution is ActionDistribution.NORMAL
    with pytest.raises(
        ConfigError, match=r"ppo\.distribution='beta' is invalid: must be 'tanh_normal' or 'normal'"
    ):
        config_from_dict({"algorithm": "ppo"}, ["ppo.distribution=beta"])


def test_ppo_learns_the_log_std():
    """One PPO minibatch step on HalfCheetah-shaped data moves the state-independent log-std."""
    cfg = config_from_dict(
        {"algorithm": "ppo", "env": {"id": "HalfCheetah-v5"}},
        ["ppo.distribution=normal", "collector.frames_per_batch=16", "ppo.num_mini_batch=1"],
    )
    ppo = PPO(cfg.algo, env_spec("HalfCheetah-v5"))
    with set_exploration_type(ExplorationType.RANDOM):
        td = ppo.policy(_obs(16))
    td["advantage"] = torch.randn(16, 1)
    td["value_target"] = torch.randn(16, 1)
    td["state_value"] = torch.zeros(16, 1)
    ppo.optimizer.zero_grad()
    loss, _ = ppo.loss(td.detach())
    loss.backward()
    grad = ppo.policy.module[0].module.log_std.grad
    assert grad is not None and grad.shape == (6,) and bool(grad.abs().sum() > 0)

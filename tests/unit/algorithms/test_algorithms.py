from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from fleetrl import ConfigError, SyncDataCollector
from fleetrl.algorithms import A2C, PPO, A2CConfig, PPOConfig
from fleetrl.envs.probe import env_spec


@pytest.fixture(scope="module")
def cartpole_batch():
    torch.manual_seed(0)
    ppo = PPO(PPOConfig(), env_spec("CartPole-v1"))
    with SyncDataCollector("CartPole-v1", ppo.policy, frames_per_batch=256, num_envs=4) as c:
        c.set_seed(0)
        return c.next()


@pytest.mark.parametrize(("cls", "cfg"), [(PPO, PPOConfig()), (A2C, A2CConfig())])
def test_gradients_applied_elsewhere_equal_a_local_step(cls, cfg, cartpole_batch):
    info = env_spec("CartPole-v1")
    torch.manual_seed(1)
    local = cls(cfg, info)
    torch.manual_seed(1)
    replica = cls(cfg, info)
    data = local.prepare(cartpole_batch.clone())
    # gradients computed on one replica travel as a TensorDict...
    grads, logged = replica.compute_gradients(data)
    assert isinstance(grads, TensorDict)
    assert set(grads.keys(True, True)) == set(local.get_weights().keys(True, True))
    # ...and applied there give what a plain local optimizer step gives
    local.optimizer.zero_grad()
    loss, _ = local.loss(data)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(local.loss_module.parameters()), cfg.max_grad_norm)
    local.optimizer.step()
    replica.apply_gradients(grads.clone())
    for key, value in local.get_weights().items(True, True):
        assert torch.allclose(value, replica.get_weights().get(key), atol=1e-6), key
    assert "loss/objective" in logged and "loss/critic" in logged


def test_compute_gradients_leaves_no_grad_behind(cartpole_batch):
    ppo = PPO(PPOConfig(), env_spec("CartPole-v1"))
    before = ppo.get_weights()
    grads, _ = ppo.compute_gradients(ppo.prepare(cartpole_batch.clone()))
    assert all(p.grad is None for p in ppo.loss_module.parameters())
    assert (ppo.get_weights() == before).all()
    assert any(g.abs().sum() > 0 for g in grads.values(True, True))


def test_update_algorithm_parameter_changes_behaviour(cartpole_batch):
    torch.manual_seed(2)
    ppo = PPO(PPOConfig(lr=1e-3), env_spec("CartPole-v1"))
    ppo.update_algorithm_parameter("lr", 0.0)
    assert ppo.optimizer.param_groups[0]["lr"] == 0.0
    before = ppo.get_weights()
    ppo.learn(cartpole_batch.clone())
    after = ppo.get_weights()
    # lr 0: Adam takes no step at all
    assert all(torch.equal(before.get(k), after.get(k)) for k in before.keys(True, True))
    ppo.update_algorithm_parameter("clip_epsilon", 0.05)
    assert float(ppo.loss_module.clip_epsilon) == pytest.approx(0.05)
    ppo.update_algorithm_parameter("entropy_coef", 0.3)
    assert float(ppo.loss_module.entropy_coeff) == pytest.approx(0.3)
    with pytest.raises(
        ConfigError, match=r"'epsilon' is not a parameter of PPO; known: \['lr', 'clip_epsilon'"
    ):
        ppo.update_algorithm_parameter("epsilon", 0.1)


def test_seed_properties_and_state_round_trip(cartpole_batch):
    ppo = PPO(PPOConfig(num_epochs=2, num_mini_batch=4), env_spec("CartPole-v1"))
    assert (ppo.gamma, ppo.num_epochs, ppo.num_mini_batch) == (0.99, 2, 4)
    ppo.learn(cartpole_batch.clone())
    assert ppo.mini_batch_size == 64 and ppo.num_updates == 8
    state = ppo.state_dict()
    other = PPO(PPOConfig(num_epochs=2, num_mini_batch=4), env_spec("CartPole-v1"))
    other.load_state_dict(state)
    assert (other.get_weights() == ppo.get_weights()).all()
    assert other.num_updates == 8


def test_dqn_checkpoint_keeps_the_target_update_schedule():
    from fleetrl.algorithms import DQN, DQNConfig

    cfg = DQNConfig(
        learning_starts=32, updates_per_batch=3, target_update_interval=5, batch_size=16
    )
    dqn = DQN(cfg, env_spec("CartPole-v1"))
    with SyncDataCollector("CartPole-v1", dqn.policy, frames_per_batch=64, num_envs=2) as c:
        dqn.learn(c.next())
    assert dqn.target_updater.counter == 3
    other = DQN(cfg, env_spec("CartPole-v1"))
    other.load_state_dict(torch.load(_roundtrip(dqn.state_dict()), weights_only=True))
    assert other.target_updater.counter == 3 and len(other.buffer) == 64


def _roundtrip(state):
    import io

    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return buf


def test_continuous_actions_on_pendulum():
    ppo = PPO(PPOConfig(), env_spec("Pendulum-v1"))
    with SyncDataCollector("Pendulum-v1", ppo.policy, frames_per_batch=128, num_envs=2) as c:
        batch = c.next()
    assert batch["action"].shape == (2, 64, 1)
    assert batch["action"].abs().max() <= 2.0
    info = ppo.learn(batch)
    assert all(torch.isfinite(torch.tensor(v)) for v in info.values())


def test_algorithm_on_the_wrong_action_space_speaks_the_python_api():
    from fleetrl.algorithms import DQN, SAC, DQNConfig, SACConfig

    with pytest.raises(ConfigError) as info:
        SAC(SACConfig(), env_spec("CartPole-v1"))
    assert str(info.value) == (
        "spec.num_actions=2 is invalid: SAC needs an env with continuous (Box) actions and this "
        "one has discrete actions; use DQN, PPO or A2C for it"
    )
    with pytest.raises(ConfigError) as info:
        DQN(DQNConfig(), env_spec("Pendulum-v1"))
    assert str(info.value) == (
        "spec.num_actions=None is invalid: DQN needs an env with discrete actions and this one "
        "has 1-dimensional continuous actions; use SAC, PPO or A2C for it"
    )

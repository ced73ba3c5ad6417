"""Default networks on pixels: model choice, uint8 batches through the unchanged torchrl
losses (ClipPPOLoss with GAE, A2CLoss, DQNLoss), the replay buffer's dtype, config errors."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from fakes import PIXEL_ENV_ID, PIXEL_SHAPE
from fleetrl import ConfigError, SyncDataCollector
from fleetrl.algorithms import A2C, DQN, PPO, A2CConfig, DQNConfig, PPOConfig
from fleetrl.envs.probe import env_spec
from fleetrl.envs.spec import EnvSpec
from fleetrl.networks.models import (
    CONV_ACTIONS_MSG,
    CONV_OBS_MSG,
    ImpalaTorso,
    ModelKind,
    NatureTorso,
    make_actor_critic,
    make_qnet,
)
from fleetrl.setup.load import config_from_dict

ALGOS = {"ppo": (PPO, PPOConfig), "a2c": (A2C, A2CConfig), "dqn": (DQN, DQNConfig)}


@pytest.fixture(scope="module")
def pixel_info() -> EnvSpec:
    return env_spec(PIXEL_ENV_ID)


def collect(policy, frames: int = 32, num_envs: int = 2):
    with SyncDataCollector(
        PIXEL_ENV_ID, policy, frames_per_batch=frames, num_envs=num_envs
    ) as collector:
        collector.set_seed(0)
        return collector.next()


def torsos(*modules: nn.Module) -> list[nn.Module]:
    return [m for mod in modules for m in mod.modules() if isinstance(m, NatureTorso | ImpalaTorso)]


def networks(algorithm) -> list[nn.Module]:
    """The algorithm's own networks (its torchrl loss holds functional copies)."""
    if isinstance(algorithm, DQN):
        return [algorithm.qvalue]
    return [algorithm.policy, algorithm.critic]


def test_env_info_reads_shape_and_dtype(pixel_info):
    assert pixel_info.obs_shape == PIXEL_SHAPE
    assert pixel_info.obs_dtype == torch.uint8
    assert pixel_info.obs_dim == 4 * 84 * 84
    assert pixel_info.pixels and pixel_info.num_actions == 3
    cartpole = env_spec("CartPole-v1")
    assert (cartpole.obs_shape, cartpole.obs_dtype, cartpole.obs_dim) == ((4,), torch.float32, 4)
    assert not cartpole.pixels


def test_config_model_values_are_the_model_kinds():
    kinds = ("auto", "mlp", "cnn", "impala", "lstm", "gru")
    assert tuple(kind.value for kind in ModelKind) == kinds
    for _, cfg in ALGOS.values():
        assert cfg().model == "auto"


@pytest.mark.parametrize("algo", ["ppo", "a2c", "dqn"])
@pytest.mark.parametrize(
    ("model", "torso"),
    [("auto", NatureTorso), ("cnn", NatureTorso), ("impala", ImpalaTorso), ("mlp", None)],
)
def test_model_is_chosen_by_config(algo, model, torso, pixel_info):
    cls, cfg = ALGOS[algo]
    algorithm = cls(cfg(model=model), pixel_info)
    found = torsos(*networks(algorithm))
    if torso is None:
        assert found == []
        first = next(m for m in networks(algorithm)[0].modules() if isinstance(m, nn.Linear))
        assert first.in_features == 4 * 84 * 84
    else:
        # PPO/A2C: one torso shared by actor and critic; DQN: one in the Q network
        assert len({id(m) for m in found}) == 1
        assert type(found[0]) is torso
        # the shared torso's parameters are trained (and sent) once
        own = {id(p): p for net in networks(algorithm) for p in net.parameters()}
        assert algorithm.flat_weights().size == sum(p.numel() for p in own.values())


@pytest.mark.parametrize("algo", ["ppo", "a2c", "dqn"])
def test_auto_on_flat_observations_is_the_mlp(algo):
    cls, cfg = ALGOS[algo]
    algorithm = cls(cfg(), env_spec("CartPole-v1"))
    assert torsos(*networks(algorithm)) == []


def test_orthogonal_init_as_cleanrl(pixel_info):
    torch.manual_seed(0)
    actor, critic = make_actor_critic("cnn", pixel_info, [64])
    policy_head, value_head = actor.module[0].module[1], critic.module[1]
    conv = critic.module[0].net[0][0]
    for layer, gain in ((policy_head, 0.01), (value_head, 1.0)):
        w = layer.weight.detach()
        # orthogonal rows (fewer rows than columns) scaled by the gain
        assert torch.allclose(w @ w.T, gain**2 * torch.eye(w.shape[0]), atol=1e-5)
        assert (layer.bias == 0).all()
    assert (conv.bias == 0).all()
    flat = conv.weight.detach().reshape(conv.weight.shape[0], -1)
    assert torch.allclose(flat @ flat.T, 2.0 * torch.eye(flat.shape[0]), atol=1e-4)


def test_torso_scales_uint8_by_1_over_255(pixel_info):
    torso = NatureTorso(PIXEL_SHAPE)
    frames = torch.randint(0, 256, (3, *PIXEL_SHAPE), dtype=torch.uint8)
    assert torch.allclose(torso(frames), torso(frames.float() / 255.0), atol=1e-6)
    assert not torch.allclose(torso(frames), torso(frames.float()), atol=1e-3)


@pytest.fixture(scope="module")
def ppo_and_batch(pixel_info):
    torch.manual_seed(0)
    ppo = PPO(PPOConfig(model="cnn", num_mini_batch=2, entropy_coef=0.01), pixel_info)
    return ppo, collect(ppo.policy)


def test_pixel_batch_stays_uint8(ppo_and_batch):
    _, batch = ppo_and_batch
    assert batch.batch_size == torch.Size([2, 16])
    for key in ("observation", ("next", "observation")):
        assert batch.get(key).dtype == torch.uint8
        assert batch.get(key).shape == torch.Size([2, 16, *PIXEL_SHAPE])
    # the fake's pixels say the step: step 1's frame after reset 0 holds 16 + action
    first = batch["next", "observation"][:, 0, 0, 0, 0].long()
    assert torch.equal(first, 16 + batch["action"][:, 0])


def test_ppo_loss_with_gae_on_a_pixel_batch_reaches_the_cnn(ppo_and_batch):
    ppo, batch = ppo_and_batch
    data = ppo.prepare(batch.clone())
    assert data["observation"].dtype == torch.uint8
    assert data.batch_size == torch.Size([32])
    assert data["advantage"].shape == torch.Size([32, 1])
    assert data["value_target"].isfinite().all()
    out = ppo.loss_module(data[:16])
    for key in ("loss_objective", "loss_critic", "loss_entropy"):
        assert out[key].isfinite(), key
    torso = torsos(*networks(ppo))[0]
    # the critic's loss alone reaches the shared torso, and so does the policy's
    for key in ("loss_critic", "loss_objective"):
        ppo.loss_module.zero_grad()
        out = ppo.loss_module(data[:16])
        out[key].backward()
        grads = [p.grad for p in torso.parameters()]
        assert all(g is not None and g.isfinite().all() for g in grads), key
        assert sum(float(g.abs().sum()) for g in grads) > 0, key
    ppo.loss_module.zero_grad()
    before = [p.detach().clone() for p in torso.parameters()]
    info = ppo.learn(batch.clone())
    assert all(v == v for v in info.values())  # no NaN logged
    assert any(not torch.equal(a, b) for a, b in zip(before, torso.parameters()))


def test_a2c_impala_loss_on_a_pixel_batch_reaches_the_cnn(pixel_info):
    torch.manual_seed(0)
    a2c = A2C(A2CConfig(model="impala"), pixel_info)
    data = a2c.prepare(collect(a2c.policy, frames=16))
    out = a2c.loss_module(data)
    loss = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
    assert loss.isfinite()
    loss.backward()
    torso = torsos(*networks(a2c))[0]
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in torso.parameters())


def test_dqn_on_pixels_keeps_uint8_in_the_replay_buffer(pixel_info):
    torch.manual_seed(0)
    dqn = DQN(
        DQNConfig(model="cnn", batch_size=8, learning_starts=0, updates_per_batch=2), pixel_info
    )
    batch = collect(dqn.policy)
    samples = list(dqn.gradient_batches(batch))
    assert len(samples) == 2 and len(dqn.buffer) == 32
    stored = dqn.buffer.storage[0:32]
    for td in (stored, samples[0]):
        assert td["observation"].dtype == torch.uint8
        assert td["next", "observation"].dtype == torch.uint8
        assert td["observation"].shape[1:] == torch.Size(PIXEL_SHAPE)
    assert torch.equal(stored["observation"], batch["observation"].reshape(32, *PIXEL_SHAPE))
    out = dqn.loss_module(samples[0])
    assert out["loss"].isfinite()
    out["loss"].backward()
    torso = torsos(dqn.qvalue)[0]
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in torso.parameters())
    assert make_qnet("cnn", pixel_info, [8])(samples[0]["observation"]).shape == (8, 3)


def test_mlp_on_pixels_flattens_and_scales(pixel_info):
    """Decided: model=mlp on pixels works (flattened, scaled by 1/255), it is not refused."""
    torch.manual_seed(0)
    ppo = PPO(PPOConfig(model="mlp", hidden_sizes=[16], num_mini_batch=1), pixel_info)
    data = ppo.prepare(collect(ppo.policy, frames=16))
    out = ppo.loss_module(data)
    assert out["loss_objective"].isfinite() and out["loss_critic"].isfinite()
    first = ppo.critic.module[0]
    obs = data["observation"][:2]
    assert torch.allclose(first(obs), obs.reshape(2, -1).float() / 255.0)


def test_custom_modules_still_win(pixel_info):
    critic = make_actor_critic("mlp", pixel_info, [8])[1]
    ppo = PPO(PPOConfig(model="cnn"), pixel_info, critic=critic)
    assert ppo.critic is critic
    assert len(torsos(*networks(ppo))) == 1  # the default actor's, alone
    qnet = nn.Sequential(nn.Flatten(-3), nn.LazyLinear(3))
    qnet(torch.zeros(1, *PIXEL_SHAPE))
    dqn = DQN(DQNConfig(model="impala"), pixel_info, qnet=qnet)
    assert torsos(dqn.qvalue) == []


def test_unknown_model_is_a_config_error():
    with pytest.raises(ConfigError) as info:
        config_from_dict({"algorithm": "ppo"}, ["ppo.model=resnet"])
    assert info.value.problems == [
        "ppo.model='resnet' is invalid: must be one of ['auto', 'mlp', 'cnn', 'impala', 'lstm', 'gru']"
    ]


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_conv_model_on_flat_observations_is_a_config_error(algo):
    with pytest.raises(ConfigError, match=r"needs a 3-D \(channels, height, width\)") as info:
        config_from_dict({"algorithm": algo, "env": {"id": "CartPole-v1"}}, [f"{algo}.model=cnn"])
    assert info.value.problems == [
        CONV_OBS_MSG.format(algo=algo, key="model", model="cnn", env_id="CartPole-v1", shape=(4,))
    ]


def test_conv_model_on_continuous_actions_is_a_config_error():
    with pytest.raises(ConfigError) as info:
        config_from_dict({"algorithm": "ppo", "env": {"id": "Pendulum-v1"}}, ["ppo.model=impala"])
    assert info.value.problems == [
        CONV_OBS_MSG.format(
            algo="ppo", key="model", model="impala", env_id="Pendulum-v1", shape=(3,)
        ),
        CONV_ACTIONS_MSG.format(algo="ppo", model="impala", env_id="Pendulum-v1"),
    ]


def test_gradients_of_a_shared_torso_travel_like_a_local_step(ppo_and_batch, pixel_info):
    """The distributed scheme's seam: a replica's gradients, applied, give the local step."""
    _, batch = ppo_and_batch
    cfg = PPOConfig(model="cnn")
    torch.manual_seed(3)
    local = PPO(cfg, pixel_info)
    torch.manual_seed(3)
    replica = PPO(cfg, pixel_info)
    data = local.prepare(batch.clone())
    grads, _ = replica.compute_gradients(data)
    assert isinstance(grads, TensorDict)
    local.optimizer.zero_grad()
    local.loss(data)[0].backward()
    torch.nn.utils.clip_grad_norm_(list(local.loss_module.parameters()), cfg.max_grad_norm)
    local.optimizer.step()
    replica.apply_gradients(grads.clone())
    for key, value in local.get_weights().items(True, True):
        assert torch.allclose(value, replica.get_weights().get(key), atol=1e-6), key

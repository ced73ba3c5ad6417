"""The torso under a recurrent core (``<algo>.torso``): CleanRL's ``ppo_atari_lstm.py``
network on frames (the Nature CNN, then an LSTM), IMPALA's ResNet or the MLP by choice,
trained through time on frames, and the settings that cannot work refused by key."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn
from torchrl.modules import GRUModule, LSTMModule

from fakes import PIXEL_ENV_ID, PIXEL_SHAPE
from fleetrl import ConfigError, SyncDataCollector
from fleetrl.algorithms import PPO, A2CConfig, PPOConfig
from fleetrl.algorithms.sequences import LOSS_MASK_KEY
from fleetrl.envs.probe import env_spec
from fleetrl.envs.spec import EnvSpec
from fleetrl.networks.models import ImpalaTorso, NatureTorso
from fleetrl.setup.load import config_from_dict, load_config

#: Pong with one 84x84 frame per observation (ppo_atari_lstm.yaml's env): 6 actions
ONE_FRAME = EnvSpec(84 * 84, 6, 1, None, None, (1, 84, 84), torch.uint8)


def one_frame_step() -> TensorDict:
    """Three envs' first step: random frames, each an episode start."""
    return TensorDict(
        {
            "observation": torch.randint(0, 256, (3, 1, 84, 84), dtype=torch.uint8),
            "is_init": torch.ones(3, 1, dtype=torch.bool),
        },
        [3],
    )


def trunk(ppo: PPO) -> list[nn.Module]:
    """The modules the actor's distribution reads through: torso, core, policy head."""
    return list(ppo.actor.module[0].module)


def test_lstm_on_frames_is_cleanrls_ppo_atari_lstm_network():
    ppo = PPO(PPOConfig(model="lstm"), ONE_FRAME)
    torso, core, _ = trunk(ppo)
    assert isinstance(torso.module, NatureTorso) and isinstance(core, LSTMModule)
    assert (core.lstm.input_size, core.lstm.hidden_size) == (512, 128)
    # conv 1x32x8x8, 32x64x4x4, 64x64x3x3, 3136 -> 512, LSTM(512, 128), 128 -> 6 actions
    sizes = [2_080, 32_832, 36_928, 1_606_144, 4 * 128 * (512 + 128) + 2 * 4 * 128, 774]
    assert sum(p.numel() for p in ppo.actor.parameters()) == sum(sizes) == 2_007_462
    # one torso and one core for the policy and the value, which adds its 129 weights
    assert ppo.critic.module[0] is torso and ppo.critic.module[1] is core
    assert sum(p.numel() for p in ppo.critic.parameters()) == sum(sizes[:5]) + 129
    # CleanRL's LSTM init: orthogonal weights, zero biases
    w_ih, w_hh = core.lstm.weight_ih_l0, core.lstm.weight_hh_l0
    assert torch.allclose(w_ih @ w_ih.T, torch.eye(512), atol=1e-4)
    assert torch.allclose(w_hh.T @ w_hh, torch.eye(128), atol=1e-4)  # 512 x 128: columns
    assert not core.lstm.bias_ih_l0.any() and not core.lstm.bias_hh_l0.any()


@pytest.mark.parametrize(
    ("model", "torso", "torso_class", "width", "core_class"),
    [
        ("lstm", "auto", NatureTorso, 512, LSTMModule),
        ("gru", "cnn", NatureTorso, 512, GRUModule),
        ("lstm", "impala", ImpalaTorso, 256, LSTMModule),
        ("gru", "mlp", nn.Sequential, 64, GRUModule),  # hidden_sizes [64, 64]: the last width
    ],
)
def test_the_torso_key_picks_the_network_under_the_core(
    model, torso, torso_class, width, core_class
):
    ppo = PPO(PPOConfig(model=model, torso=torso, recurrent_size=32), ONE_FRAME)
    body, core, _ = trunk(ppo)
    assert type(body.module) is torso_class and isinstance(core, core_class)
    rnn = core.lstm if core_class is LSTMModule else core.gru
    assert (rnn.input_size, rnn.hidden_size) == (width, 32)
    out = ppo.actor(one_frame_step())
    state = "recurrent_state_h" if core_class is LSTMModule else "recurrent_state"
    assert out["action"].shape == (3,) and out["next", state].shape == (3, 1, 32)


def test_a_conv_torso_trains_through_time_on_frames():
    """Sequences of frames: the update's gradient reaches the convolutions and the core's
    input weights, and each collected step is in the loss once."""
    torch.manual_seed(0)
    info = env_spec(PIXEL_ENV_ID)
    assert info.obs_shape == PIXEL_SHAPE
    ppo = PPO(PPOConfig(model="lstm", recurrent_size=16, seq_len=8, num_mini_batch=2), info)
    with SyncDataCollector(PIXEL_ENV_ID, ppo.policy, frames_per_batch=48, num_envs=2) as c:
        c.set_seed(0)
        batch = c.next()
    assert batch["recurrent_state_h"].shape == (2, 24, 1, 16)
    data = ppo.prepare(batch)
    assert data.shape == (2 * 3, 8) and int(data[LOSS_MASK_KEY].sum()) == 48
    body, core, _ = trunk(ppo)
    conv = body.module.net[0][0].weight
    before = (conv.detach().clone(), core.lstm.weight_ih_l0.detach().clone())
    info = ppo.learn(batch)
    assert all(torch.isfinite(torch.tensor(v)) for v in info.values())
    assert not torch.equal(conv, before[0]) and not torch.equal(core.lstm.weight_ih_l0, before[1])


LOCAL = ["collector.num_collectors=0", "logging.tensorboard=false", "logging.progress_bar=false"]
REFUSED = [
    (
        {"algorithm": "ppo", "env": {"id": "CartPole-v1"}},
        ["ppo.torso=cnn"],
        "ppo.torso='cnn' is read only under a recurrent core: set ppo.model=lstm or gru, or "
        "for a feed-forward network choose it with ppo.model=cnn (and leave ppo.torso=auto)",
    ),
    (
        {"algorithm": "a2c", "env": {"id": "CartPole-v1"}},
        ["a2c.model=lstm", "a2c.torso=impala"],
        "a2c.torso='impala' needs a 3-D (channels, height, width) observation, but env "
        "'CartPole-v1' has observation shape (4,); use a2c.torso=mlp (or auto)",
    ),
    (
        {"algorithm": "appo", "env": {"id": "CartPole-v1"}},
        ["appo.torso=lstm"],
        "appo.torso='lstm' is invalid: must be one of ['auto', 'mlp', 'cnn', 'impala']",
    ),
]


@pytest.mark.parametrize(("data", "overrides", "problem"), REFUSED, ids=lambda v: str(v)[:30])
def test_a_torso_that_cannot_serve_is_refused_by_key_and_value(data, overrides, problem):
    with pytest.raises(ConfigError) as info:
        config_from_dict(data, [*LOCAL, *overrides])
    assert info.value.problems == [problem]


def test_frames_under_a_recurrent_core_are_normalized_before_the_conv_torso():
    """The normalizer goes first under the core, before the conv torso, as in model cnn; under
    torso mlp it goes before the MLP."""
    from fleetrl.networks.normalization import find_normalizers
    from fleetrl.setup.build import make_algorithm

    config = load_config("configs/ppo_atari_lstm.yaml", [*LOCAL, "env.normalize_observation=true"])
    algorithm = make_algorithm(config, 0)
    (norm,) = algorithm.observation_normalizers
    assert norm.shape == (1, 84, 84)
    assert find_normalizers(algorithm.policy) == find_normalizers(algorithm.critic) == [norm]
    config = load_config(
        "configs/ppo_atari_lstm.yaml", [*LOCAL, "env.normalize_observation=true", "ppo.torso=mlp"]
    )
    assert (config.algo.model.value, config.algo.torso.value) == ("lstm", "mlp")
    assert A2CConfig().torso.value == "auto"


# --- head_sizes: hidden layers between the core and each head -------------------------------


def test_head_sizes_put_hidden_layers_of_their_own_in_the_policy_and_value_heads():
    info = env_spec("CartPole-v1")
    ppo = PPO(PPOConfig(model="lstm", recurrent_size=16, hidden_sizes=[], head_sizes=[8]), info)
    torso, core, policy = trunk(ppo)
    value = ppo.critic.module[-1].module
    shapes = [tuple(m.weight.shape) for m in policy.module if isinstance(m, nn.Linear)]
    assert shapes == [(8, 16), (2, 8)]
    assert [type(m).__name__ for m in policy.module] == ["Linear", "Tanh", "Linear"]
    assert [tuple(m.weight.shape) for m in value if isinstance(m, nn.Linear)] == [(8, 16), (1, 8)]
    assert policy.module[0] is not value[0]  # each head its own layer
    # no MLP torso (hidden_sizes []): the core reads the 4 observation entries
    assert core.lstm.input_size == 4 and ppo.critic.module[0] is torso
    plain = PPO(PPOConfig(model="lstm", recurrent_size=16), info)
    assert isinstance(trunk(plain)[2].module, nn.Linear)  # [] by default: a linear layer


def test_head_sizes_are_refused_with_a_feed_forward_model_and_when_not_positive():
    data = {"algorithm": "ppo", "env": {"id": "CartPole-v1"}}
    with pytest.raises(ConfigError) as info:
        config_from_dict(data, [*LOCAL, "ppo.head_sizes=[64]"])
    assert info.value.problems == [
        "ppo.head_sizes=[64] is read only under a recurrent core: set ppo.model=lstm or gru, "
        "or set a feed-forward network's layers with ppo.hidden_sizes"
    ]
    with pytest.raises(ConfigError) as info:
        config_from_dict(data, [*LOCAL, "ppo.model=gru", "ppo.head_sizes=[0]"])
    assert info.value.problems == [
        "ppo.head_sizes=[0] is invalid: must be a list of positive layer widths"
    ]


def test_the_constructor_refuses_what_only_a_core_reads_under_a_feed_forward_model():
    from fleetrl.networks.models import make_actor_critic

    info = env_spec("CartPole-v1")
    with pytest.raises(ValueError, match=r"^torso and head_sizes: read only under a recurrent"):
        make_actor_critic("mlp", info, [64], torso="mlp", head_sizes=[8])

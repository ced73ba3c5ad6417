"""One gradient route: the Algorithm's flat gradients and weights, and the TensorDict API on top.

Every way a gradient reaches ``.grad`` (a plain local ``backward`` + step, the
TensorDict ``compute_gradients``/``apply_gradients``, the flat arrays that
cross Ray) must take the same optimizer step, bit for bit, for an on-policy
algorithm (PPO) and the replay ones (DQN, SAC).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from torch import nn

from fleetrl import ConfigError, SyncDataCollector
from fleetrl.algorithms import DQN, PPO, SAC, DQNConfig, PPOConfig, SACConfig
from fleetrl.algorithms.base import flatten_valid
from fleetrl.distributed.wire import FLAT_SIZE_MSG, PARAM_DTYPE_MSG, ParamCodec
from fleetrl.envs.probe import env_spec
from fleetrl.keys import TRANSITION_KEYS

CASES = {
    "ppo": (PPO, lambda: PPOConfig(hidden_sizes=[16], max_grad_norm=0.5), "CartPole-v1"),
    "dqn": (DQN, lambda: DQNConfig(hidden_sizes=[16], max_grad_norm=10.0), "CartPole-v1"),
    "sac": (SAC, lambda: SACConfig(hidden_sizes=[16], max_grad_norm=None), "Pendulum-v1"),
}


def build(name: str, seed: int = 1):
    cls, cfg, env_id = CASES[name]
    torch.manual_seed(seed)  # the same seed: the same initial weights
    return cls(cfg(), env_spec(env_id))


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    """(algorithm name, training data): one collected batch, as each algorithm learns from it."""
    name = request.param
    algorithm = build(name)
    env_id = CASES[name][2]
    with SyncDataCollector(env_id, algorithm.policy, frames_per_batch=64, num_envs=2) as c:
        c.set_seed(0)
        batch = c.next()
    if name == "ppo":
        data = algorithm.prepare(batch)  # GAE with the (shared) initial critic
    else:
        data = flatten_valid(batch).select(*TRANSITION_KEYS, strict=False)
    return name, data


def params_of(algorithm) -> dict[str, torch.Tensor]:
    """The trainable parameters, read straight from the loss module (not through the codec)."""
    return {
        n: p.detach().clone()
        for n, p in algorithm.loss_module.named_parameters()
        if p.requires_grad
    }


def assert_bit_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def read_only(flat: np.ndarray) -> np.ndarray:
    """A flat array as a Ray task receives it: a read-only view of the object store."""
    flat = flat.copy()
    flat.flags.writeable = False
    return flat


def test_every_gradient_route_takes_the_same_step_bit_for_bit(case):
    name, data = case
    plain, by_td, by_flat = build(name), build(name), build(name)
    initial = params_of(plain)
    # the textbook step, without the codec: backward into .grad, clip, step
    torch.manual_seed(7)  # SAC samples actions in its loss: the same draws on every route
    plain.optimizer.zero_grad()
    loss, _ = plain.loss(data)
    loss.backward()
    if plain.max_grad_norm is not None:
        trainable = [p for p in plain.loss_module.parameters() if p.requires_grad]
        nn.utils.clip_grad_norm_(trainable, plain.max_grad_norm)
    plain.optimizer.step()
    # the TensorDict API
    torch.manual_seed(7)
    grads, td_info = by_td.compute_gradients(data)
    kept = grads.clone()
    by_td.apply_gradients(grads)
    assert (grads == kept).all()  # the caller's gradients are not clipped in place
    # the flat API, the array arriving read-only as from Ray
    torch.manual_seed(7)
    flat, flat_info = by_flat.flat_gradients(data)
    assert flat.dtype == np.float32 and flat.shape == (by_flat.codec.numel,)
    assert np.array_equal(flat, by_td.codec.pack(kept))  # the same numbers, in the layout
    assert td_info == flat_info
    by_flat.apply_flat_gradients(read_only(flat))
    assert by_td.num_updates == by_flat.num_updates == 1
    want = params_of(plain)
    assert_bit_identical(params_of(by_td), want)
    assert_bit_identical(params_of(by_flat), want)
    assert any(not torch.equal(want[k], initial[k]) for k in want)  # it really stepped


def test_a_route_that_differs_is_caught(case):
    """The comparison above can fail: a route that got the gradient wrong takes another step."""
    name, data = case
    right, wrong = build(name), build(name)
    torch.manual_seed(7)
    flat, _ = right.flat_gradients(data)
    right.apply_flat_gradients(flat)
    wrong.apply_flat_gradients(-flat)
    got, want = params_of(wrong), params_of(right)
    assert got.keys() == want.keys()
    assert any(not torch.equal(got[k], want[k]) for k in want)


def test_learn_is_the_flat_route_step_by_step():
    """``learn`` on PPO equals compute_gradients + apply_gradients on the same minibatches."""
    algorithm, replica = build("ppo"), build("ppo")
    algorithm.num_epochs = replica.num_epochs = 2
    algorithm.num_mini_batch = replica.num_mini_batch = 2
    with SyncDataCollector("CartPole-v1", algorithm.policy, frames_per_batch=64, num_envs=2) as c:
        c.set_seed(0)
        batch = c.next()
    torch.manual_seed(3)  # the minibatch permutations
    algorithm.learn(batch.clone())
    torch.manual_seed(3)
    for minibatch in replica.gradient_batches(batch.clone()):
        grads, _ = replica.compute_gradients(minibatch)
        replica.apply_gradients(grads)
    assert algorithm.num_updates == replica.num_updates == 4
    assert_bit_identical(params_of(algorithm), params_of(replica))


def test_flat_weights_round_trip_bit_for_bit_in_the_documented_layout(case):
    name, data = case
    trained, fresh = build(name, seed=1), build(name, seed=2)
    flat, _ = trained.flat_gradients(data)
    trained.apply_flat_gradients(flat)
    weights = trained.flat_weights()
    # the layout: the trainable parameters in named_parameters() order, flattened, one float32 vector
    want = torch.cat([p.reshape(-1) for p in params_of(trained).values()]).numpy()
    assert weights.dtype == np.float32 and np.array_equal(weights, want)
    assert trained.codec.keys == [tuple(n.split(".")) for n in params_of(trained)]
    assert not np.array_equal(fresh.flat_weights(), weights)  # different seeds, different nets
    fresh.load_flat_weights(read_only(weights))
    assert_bit_identical(params_of(fresh), params_of(trained))
    assert np.array_equal(fresh.flat_weights(), weights)
    # the TensorDict view of the same weights
    other = build(name, seed=3)
    other.set_weights(trained.get_weights())
    assert_bit_identical(params_of(other), params_of(trained))
    assert weights.flags.writeable and not np.shares_memory(weights, trained.flat_weights())


def test_flat_arrays_of_the_wrong_size_are_refused():
    ppo = build("ppo")
    bad = np.zeros(ppo.codec.numel + 1, dtype=np.float32)
    allowed = FLAT_SIZE_MSG.format(numel=ppo.codec.numel, owner="PPO")
    message = f"flat.shape=({ppo.codec.numel + 1},) is invalid: {allowed}"
    with pytest.raises(ConfigError, match=re.escape(message)):
        ppo.load_flat_weights(bad)
    with pytest.raises(ConfigError, match=re.escape(message)):
        ppo.apply_flat_gradients(bad)
    assert ppo.num_updates == 0


def test_parameters_that_are_not_float32_are_refused_when_the_codec_is_built():
    net = nn.Linear(2, 1).double()
    with pytest.raises(ConfigError, match=re.escape(PARAM_DTYPE_MSG)) as err:
        ParamCodec([(tuple(n.split(".")), p) for n, p in net.named_parameters()], owner="Net")
    assert err.value.problems[0].startswith("Net parameter 'weight' dtype=torch.float64 is invalid")
    assert len(err.value.problems) == 2  # weight and bias, both listed

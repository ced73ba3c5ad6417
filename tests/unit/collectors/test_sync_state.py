"""SyncDataCollector.state_dict / load_state_dict: a collector that loads another's state
(through a ``weights_only`` checkpoint) delivers the very batches the first one would have."""

from __future__ import annotations

import io
import re

import pytest
import torch
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.modules import LSTMModule, ProbabilisticActor

from fakes import counting_vec
from fleetrl import EnvError, SyncDataCollector
from fleetrl.envs.state import STATE_MISMATCH_MSG
from policies import categorical_actor


def lstm_actor() -> ProbabilisticActor:
    lstm = LSTMModule(input_size=4, hidden_size=8, in_key="observation", out_key="features")
    head = TensorDictModule(nn.Linear(8, 2), in_keys=["features"], out_keys=["logits"])
    return ProbabilisticActor(
        TensorDictSequential(lstm, head),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )


def through_checkpoint(obj):
    """Save and load as a checkpoint is: ``torch.load(weights_only=True)``."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


CASES = {
    # episodes cut by max_frames_per_traj span batches; actions from torch's generator
    "cartpole": dict(create_env_fn="CartPole-v1", num_envs=3, max_frames_per_traj=30),
    # a recurrent state and is_init carried from step to step
    "cartpole_lstm": dict(create_env_fn="CartPole-v1", num_envs=3),
    # uniform random actions from the vector env's action space generator, then the policy
    "pendulum_random": dict(create_env_fn="Pendulum-v1", num_envs=2, init_random_frames=144),
}


def make_policy(case: str):
    if case == "cartpole_lstm":
        return lstm_actor()
    if case == "pendulum_random":
        from fleetrl.envs.probe import env_spec
        from fleetrl.networks.models import make_actor

        return make_actor(env_spec("Pendulum-v1"), [16])
    return categorical_actor()


@pytest.mark.parametrize("case", sorted(CASES))
def test_loaded_state_continues_with_the_same_batches(case):
    torch.manual_seed(0)
    policy = make_policy(case)
    kwargs = CASES[case]
    first = SyncDataCollector(policy=policy, frames_per_batch=48, total_frames=240, **kwargs)
    first.set_seed(7)
    before = [first.next() for _ in range(2)]
    saved = through_checkpoint({"collector": first.state_dict(), "rng": torch.get_rng_state()})
    assert saved["collector"]["env"] is not None
    if case == "cartpole_lstm":  # the LSTM's hidden state and is_init are part of the state
        assert len(saved["collector"]["step_state"]) == 3
    expected = [first.next() for _ in range(3)]
    first.shutdown()
    # episodes were in progress at the save: the test would not see a reset otherwise
    assert (before[-1]["next", "episode_length"][:, -1] > 0).any()

    second = SyncDataCollector(policy=policy, frames_per_batch=48, total_frames=240, **kwargs)
    second.load_state_dict(saved["collector"])
    torch.set_rng_state(saved["rng"])
    assert second.frames == 96
    got = list(second)
    second.shutdown()
    assert len(got) == 3
    for want, batch in zip(expected, got):
        assert set(batch.keys(True, True)) == set(want.keys(True, True))
        for key in want.keys(True, True):
            assert torch.equal(batch[key], want[key]), key


def test_an_env_that_cannot_be_saved_restores_only_the_counters():
    with SyncDataCollector(counting_vec([3, 4]), None, frames_per_batch=8) as first:
        first.set_seed(0)
        first.next()
        state = through_checkpoint(first.state_dict())
    assert state["env"] is None  # a custom env: its state is unknown
    with SyncDataCollector(counting_vec([3, 4]), None, frames_per_batch=8) as second:
        second.load_state_dict(state)
        assert (second.frames, second.state_dict()["next_traj_id"]) == (8, state["next_traj_id"])


def test_a_state_for_other_envs_is_a_clear_error():
    with SyncDataCollector("CartPole-v1", None, frames_per_batch=6, num_envs=3) as first:
        state = first.state_dict()
    message = STATE_MISMATCH_MSG.format(saved="3 envs", built="2 envs")
    with (
        SyncDataCollector("CartPole-v1", None, frames_per_batch=6, num_envs=2) as second,
        pytest.raises(EnvError, match=re.escape(message)),
    ):
        second.load_state_dict(state)

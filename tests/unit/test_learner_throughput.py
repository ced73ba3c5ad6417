"""The plain recurrent PPO of ``benchmarks/learner_throughput.py`` computes fleetrl's update.

The benchmark's ratio is only meaningful if both contestants do the same work: these
tests hold the plain learner's loss, gradients, advantages and loss masks to fleetrl's on
a real CartPole batch with episode starts inside sequences, with and without burn-in.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from learner_throughput import (
    CASES,
    collected_batch,
    load,
    plain_data,
    plain_learner,
    recurrent_parity,
)
from plain_learners import unroll


def test_unroll_resets_to_the_stored_state_where_an_episode_starts():
    torch.manual_seed(0)
    lstm = nn.LSTM(3, 5, batch_first=True)
    x, h, c = torch.randn(2, 6, 3), torch.randn(2, 6, 1, 5), torch.randn(2, 6, 1, 5)
    starts = torch.zeros(2, 6, dtype=torch.bool)
    starts[0, 2] = starts[1, 4] = True  # an episode starts inside each row
    y, h_n, c_n = unroll(lstm, x, h, c, starts)
    for row in range(2):  # step by step, the state replaced at each start
        state = (h[row, 0].unsqueeze(1), c[row, 0].unsqueeze(1))
        for t in range(6):
            if starts[row, t]:
                state = (h[row, t].unsqueeze(1), c[row, t].unsqueeze(1))
            out, state = lstm(x[row, t].reshape(1, 1, 3), state)
            torch.testing.assert_close(y[row, t], out[0, 0])
        torch.testing.assert_close(h_n[row], state[0][:, 0])
        torch.testing.assert_close(c_n[row], state[1][:, 0])


@pytest.mark.parametrize("overrides", [[], ["ppo.burn_in=4"]])
def test_plain_recurrent_ppo_has_fleetrls_loss_and_gradients(overrides):
    from fleetrl.setup.build import make_algorithm

    config = load(CASES["ppo_lstm_cartpole"], overrides)
    algorithm = make_algorithm(config, seed=0)
    batch = collected_batch(config, algorithm.policy)
    torch.manual_seed(1)
    with torch.no_grad():  # stale stored states: burn-in and the resets change the loss
        for param in algorithm.optimizer.param_groups[0]["params"]:
            param.add_(0.1 * torch.randn_like(param))
    plain = plain_learner(config, algorithm, "cpu")
    sequences = plain.prepare(plain_data(batch))
    assert sequences["init"][:, 1:].any()  # the reset path runs

    parity = recurrent_parity(algorithm, plain, batch)

    assert parity["loss_mask_differences"] == 0
    assert parity["plain_loss"] == pytest.approx(parity["fleetrl_loss"], rel=1e-5)
    assert parity["plain_grad_norm"] == pytest.approx(parity["fleetrl_grad_norm"], rel=1e-5)
    assert parity["advantage_max_abs_diff"] < 1e-4


@pytest.mark.parametrize("case", ["mappo_simple_spread", "ippo_simple_spread"])
def test_plain_mappo_has_fleetrls_loss_gradients_and_advantages(case):
    """The plain MAPPO / IPPO update computes fleetrl's on a real MPE batch (a shorter one
    than the config's), on the first minibatch, before either updates."""
    pytest.importorskip("mpe2")
    from fleetrl.setup.build import make_algorithm
    from plain_multiagent import PlainMAPPO, group_data
    from plain_multiagent import parity as multiagent_parity

    config = load(CASES[case], ["collector.frames_per_batch=400"])
    algorithm = make_algorithm(config, seed=0)
    batch = collected_batch(config, algorithm.policy)
    torch.manual_seed(1)
    with torch.no_grad():  # ratios away from 1: the clip acts in both
        key = ("agents", "action_log_prob")
        batch.set(key, batch.get(key) + 0.3 * torch.randn_like(batch.get(key)))
    plain = plain_learner(config, algorithm, "cpu")
    assert isinstance(plain, PlainMAPPO)
    assert group_data(batch, "agents")["obs"].shape == (8, 50, 3, 18)

    parity = multiagent_parity(algorithm, plain, batch)

    assert parity["plain_loss"] == pytest.approx(parity["fleetrl_loss"], rel=1e-5)
    assert parity["plain_grad_norm"] == pytest.approx(parity["fleetrl_grad_norm"], rel=1e-5)
    assert parity["advantage_max_abs_diff"] < 1e-5

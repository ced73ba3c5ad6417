"""next_values: a batch's next observations' values, reused from the observations' where a
step's next observation is the next step's; the same values as the critic on every next
observation, with the critic called on the others only."""

from __future__ import annotations

import torch
from torch import nn

from fleetrl.networks.heads import next_values


def test_next_values_equal_the_critic_on_every_next_observation_and_call_it_on_few():
    torch.manual_seed(0)
    rows, steps = 3, 6
    critic = nn.Sequential(nn.Flatten(-2), nn.Linear(8, 1))  # [..., 2, 4] -> [..., 1]
    obs = torch.randn(rows, steps + 1, 2, 4)
    nxt = obs[:, 1:].clone()
    observations = obs[:, :-1]
    nxt[1, 2] = torch.randn(2, 4)  # row 1's episode ends at step 2: its next obs is final
    seen = []

    def counted(x):
        seen.append(x.shape[0])
        return critic(x)

    value = critic(observations)
    got = next_values(value, [observations], [nxt], counted)
    assert torch.allclose(got, critic(nxt), atol=1e-6)
    assert seen == [rows + 1]  # each row's last step, and row 1's episode end

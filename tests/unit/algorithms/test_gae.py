"""fleetrl's GAE: the reverse loop for short rows and torchrl's vectorized GAE for long ones
give torchrl's numbers, with episode ends cutting the trace and terminations the bootstrap."""

from __future__ import annotations

import pytest
import torch
from torchrl.objectives.value.functional import vec_generalized_advantage_estimate

from fleetrl.algorithms.gae import LOOP_MAX_STEPS, generalized_advantage_estimate


@pytest.mark.parametrize(
    "shape",
    [(2048, 1), (16, 16), (2, 8, 16), (3, LOOP_MAX_STEPS), (4, LOOP_MAX_STEPS + 1), (2, 3, 64)],
)
def test_every_row_length_gives_torchrls_advantages_and_targets(shape):
    generator = torch.Generator().manual_seed(sum(shape))
    full = (*shape, 1)
    value, next_value, reward = (torch.randn(full, generator=generator) for _ in range(3))
    done = torch.rand(full, generator=generator) < 0.2
    terminated = done & (torch.rand(full, generator=generator) < 0.5)
    time_dim = len(shape) - 1
    args = (0.99, 0.95, value, next_value, reward, done, terminated)
    adv, target = generalized_advantage_estimate(*args, time_dim=time_dim)
    want_adv, want_target = vec_generalized_advantage_estimate(*args, time_dim=time_dim)
    torch.testing.assert_close(adv, want_adv, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(target, want_target, rtol=1e-5, atol=1e-5)


def test_a_truncated_step_bootstraps_and_a_terminated_one_does_not():
    value = torch.zeros(1, 2, 1)
    next_value = torch.full((1, 2, 1), 10.0)
    reward = torch.ones(1, 2, 1)
    done = torch.tensor([[[True], [True]]])
    terminated = torch.tensor([[[False], [True]]])
    adv, _ = generalized_advantage_estimate(
        0.5, 1.0, value, next_value, reward, done, terminated, time_dim=1
    )
    assert adv.flatten().tolist() == [1.0 + 0.5 * 10.0, 1.0]

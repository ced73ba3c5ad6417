"""Compiled updates (``<algo>.compile``): the eager numbers, the same hyperparameter changes, resume.

``torch.compile`` fuses the update's kernels, so compiled and eager steps agree
to float rounding, not bit for bit: the tolerance here is 1e-5 on the weights
after several steps (measured: about 1e-6). Compilation takes seconds on the
CPU, so one algorithm (PPO, the target of the compiled benchmark) runs here;
``benchmarks/learner_throughput.py --compile`` compiles every algorithm.
"""

from __future__ import annotations

import logging
import re

import pytest
import torch
from torch._dynamo.utils import counters

from fleetrl import ConfigError, SyncDataCollector, load_config
from fleetrl.algorithms import PPO, SAC, PPOConfig, SACConfig
from fleetrl.algorithms.base import CUDAGRAPHS_CPU_MSG
from fleetrl.algorithms.sac import SAC_CUDAGRAPHS_MSG
from fleetrl.envs.probe import env_spec

TOLERANCE = 1e-5
SETTINGS = {
    "num_epochs": 2,
    "num_mini_batch": 2,
    "hidden_sizes": [16],
    "clip_value": 0.2,
    "entropy_coef": 0.01,
}


def max_difference(a, b) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a._params, b._params))


def learn(algorithm, batch, seed: int) -> dict[str, float]:
    torch.manual_seed(seed)  # the minibatch permutations: the same for both
    return algorithm.learn(batch.clone())


@pytest.fixture(scope="module")
def batches():
    torch.manual_seed(0)
    policy = PPO(PPOConfig(**SETTINGS), env_spec("CartPole-v1")).policy
    with SyncDataCollector("CartPole-v1", policy, frames_per_batch=64, num_envs=2) as c:
        c.set_seed(0)
        return [c.next() for _ in range(4)]


def test_compiled_ppo_takes_the_eager_steps_through_parameter_changes_and_a_resume(batches, caplog):
    info = env_spec("CartPole-v1")
    torch.manual_seed(0)
    eager = PPO(PPOConfig(**SETTINGS), info)
    torch.manual_seed(0)
    compiled = PPO(PPOConfig(compile=True, **SETTINGS), info)
    with caplog.at_level(logging.INFO, logger="fleetrl.algorithms.base"):
        for i, batch in enumerate(batches[:2]):
            want, got = learn(eager, batch, i), learn(compiled, batch, i)
            assert got.keys() == want.keys()
            for key in want:
                assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-5), key
    assert max_difference(eager, compiled) < TOLERANCE
    assert compiled.num_updates == eager.num_updates == 8
    # the compile time is reported once
    assert compiled.compile_s is not None and compiled.compile_s > 0
    assert len([r for r in caplog.records if "compiled its update step" in r.message]) == 1

    # lr and clip epsilon changed at run time act on the compiled step, without recompiling
    frames = counters["frames"]["ok"]
    for algorithm in (eager, compiled):
        algorithm.update_algorithm_parameter("lr", 1e-2)
        algorithm.update_algorithm_parameter("clip_epsilon", 0.05)
    want, got = learn(eager, batches[2], 5), learn(compiled, batches[2], 5)
    assert counters["frames"]["ok"] == frames
    assert got["loss/clip_fraction"] == pytest.approx(want["loss/clip_fraction"], abs=1e-5)
    assert want["loss/clip_fraction"] > 0  # the new clip acts (0.05 clips some ratios)
    assert max_difference(eager, compiled) < TOLERANCE

    # a checkpoint of the compiled algorithm resumes into a new compiled one
    torch.manual_seed(0)
    resumed = PPO(PPOConfig(compile=True, **SETTINGS), info)
    resumed.load_state_dict(compiled.state_dict())
    assert (resumed.lr, resumed.clip_epsilon) == pytest.approx((1e-2, 0.05))
    learn(eager, batches[3], 7), learn(resumed, batches[3], 7)
    assert max_difference(eager, resumed) < TOLERANCE

    # lr 0 after all that: no step at all, compiled or not
    before = [p.detach().clone() for p in resumed._params]
    resumed.update_algorithm_parameter("lr", 0.0)
    learn(resumed, batches[0], 9)
    assert all(torch.equal(a, b) for a, b in zip(before, resumed._params))


def test_a_checkpoint_moves_between_eager_and_compiled_learners(batches):
    """An eager run's checkpoint resumes compiled and back: the optimizer keeps its own
    implementation (fused on the CPU; capturable with a tensor learning rate compiled)."""
    info = env_spec("CartPole-v1")
    torch.manual_seed(0)
    eager = PPO(PPOConfig(**SETTINGS), info)
    learn(eager, batches[0], 0)
    compiled = PPO(PPOConfig(compile=True, **SETTINGS), info)
    compiled.load_state_dict(eager.state_dict())
    group = compiled.optimizer.param_groups[0]
    assert group["capturable"] and isinstance(group["lr"], torch.Tensor)
    learn(eager, batches[1], 1), learn(compiled, batches[1], 1)
    assert max_difference(eager, compiled) < TOLERANCE
    back = PPO(PPOConfig(**SETTINGS), info)
    back.load_state_dict(compiled.state_dict())
    group = back.optimizer.param_groups[0]
    assert group["fused"] and not group["capturable"] and isinstance(group["lr"], float)
    learn(eager, batches[2], 2), learn(back, batches[2], 2)
    assert max_difference(eager, back) < TOLERANCE


def test_cudagraphs_need_a_cuda_learner():
    message = CUDAGRAPHS_CPU_MSG.format(algo="ppo", device="cpu")
    with pytest.raises(ConfigError, match=re.escape(message)):
        PPO(PPOConfig(cudagraphs=True), env_spec("CartPole-v1"))
    with pytest.raises(
        ConfigError, match=re.escape(f"sac.cudagraphs=True is invalid: {SAC_CUDAGRAPHS_MSG}")
    ):
        SAC(SACConfig(cudagraphs=True), env_spec("Pendulum-v1"))
    with pytest.raises(ConfigError) as err:
        load_config("configs/ppo_cartpole.yaml", ["ppo.cudagraphs=true"])
    assert str(err.value) == (
        "ppo.cudagraphs=True is invalid: CUDA graphs capture GPU work and the learner runs on "
        "trainer.device='cpu'; set trainer.device=cuda on a machine with a GPU, or use "
        "ppo.compile=true on the CPU"
    )


def test_compile_takes_true_or_torch_compile_options():
    cfg = load_config("configs/ppo_cartpole.yaml", ["ppo.compile={mode: max-autotune}"])
    assert cfg.algo.compile == {"mode": "max-autotune"}
    with pytest.raises(ConfigError, match=re.escape("ppo.compile=3 is invalid: must be")):
        load_config("configs/ppo_cartpole.yaml", ["ppo.compile=3"])

"""Evaluation acts as the trained policy does (issue 35.2): a policy-gradient algorithm's
evaluations sample its policy, DQN's and SAC's take the deterministic action, and
``trainer.eval_actions`` (``fleetrl eval --actions``) chooses either."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.envs.utils import ExplorationType
from torchrl.modules import ProbabilisticActor

from fakes import OFFSET_ENV_ID
from fleetrl.config import EvalActions
from fleetrl.run.evaluate import Evaluator, eval_exploration
from fleetrl.setup.load import load_config
from runs import ROOT

PPO = str(ROOT / "configs" / "ppo_cartpole.yaml")


class FixedLogits(nn.Module):
    """Logits (0, 1, 0) whatever the observation: the deterministic action is index 1,
    which OffsetActionEnv never rewards; a sampled one is index 0 (reward 1) 21% of the time."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tensor([0.0, 1.0, 0.0]).expand(*obs.shape[:-1], 3)


def fixed_policy() -> ProbabilisticActor:
    return ProbabilisticActor(
        TensorDictModule(FixedLogits(), in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
    )


def mean_eval_return(algorithm: str, *overrides: str) -> float:
    config = load_config(
        PPO,
        [
            f"algorithm={algorithm}",
            f"env.id={OFFSET_ENV_ID}",
            "env.num_envs=4",
            "collector.frames_per_batch=64",
            "trainer.num_test_episodes=40",
            "trainer.target_return=null",
            *overrides,
        ],
    )
    metrics = Evaluator(config)(fixed_policy(), frames=0, iterations=1)
    return metrics["eval/return_mean"]


def test_a_policy_gradient_run_evaluates_the_policy_it_trains():
    # 40 episodes of 5 steps: about 0.21 * 5 = 1.06 rewarded steps per episode when sampled
    assert 0.6 < mean_eval_return("ppo") < 1.6
    assert mean_eval_return("ppo") == mean_eval_return("ppo")  # seeded: the same episodes
    assert mean_eval_return("ppo", "trainer.eval_actions=deterministic") == 0.0


def test_dqn_evaluates_its_greedy_policy_unless_told_to_sample():
    assert mean_eval_return("dqn") == 0.0
    assert mean_eval_return("dqn", "trainer.eval_actions=sample") > 0.0


@pytest.mark.parametrize(
    "algorithm, expected",
    [
        ("ppo", ExplorationType.RANDOM),
        ("a2c", ExplorationType.RANDOM),
        ("impala", ExplorationType.RANDOM),
        ("appo", ExplorationType.RANDOM),
        ("dqn", ExplorationType.DETERMINISTIC),
        ("sac", ExplorationType.DETERMINISTIC),
    ],
)
def test_auto_is_each_algorithms_choice(algorithm, expected):
    env = "Pendulum-v1" if algorithm == "sac" else "CartPole-v1"
    config = load_config(PPO, [f"algorithm={algorithm}", f"env.id={env}"])
    assert config.trainer.eval_actions is EvalActions.AUTO
    assert eval_exploration(config) is expected
    assert eval_exploration(config, "sample") is ExplorationType.RANDOM
    assert eval_exploration(config, EvalActions.DETERMINISTIC) is ExplorationType.DETERMINISTIC


def test_a_bad_eval_actions_value_is_refused_with_the_allowed_ones():
    from fleetrl.errors import ConfigError

    with pytest.raises(ConfigError, match=r"trainer.eval_actions='greedy' is invalid"):
        load_config(PPO, ["trainer.eval_actions=greedy"])

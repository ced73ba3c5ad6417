"""Discrete action spaces that do not start at 0: ``Discrete(3, start=-1)``, ``MultiDiscrete``.

The convention: a batch holds 0-based indices (what Categorical, one-hot and Q-value
policies write, random actions too); the env receives ``index + start``. The fake env's
observation is the action it received, so ``("next", "observation")`` shows what crossed the
env boundary, and it fails on any action outside its space.
"""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn

from fakes import MULTI_DISCRETE_ENV_ID, OFFSET_ENV_ID, OffsetActionEnv
from fleetrl import SyncDataCollector
from fleetrl.cli import main
from fleetrl.run.evaluate import evaluate
from policies import categorical_actor, constant_policy
from runs import ROOT, rows


class OneHotOf(nn.Module):
    """Always the one-hot of ``index`` among 3 actions."""

    def __init__(self, index: int):
        super().__init__()
        self.index = index

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        hot = torch.nn.functional.one_hot(torch.tensor(self.index), 3)
        return hot.expand(obs.shape[0], 3).clone()


POLICIES = {
    "categorical": lambda: categorical_actor(obs_dim=1, num_actions=3),
    "one-hot": lambda: TensorDictModule(OneHotOf(2), ["observation"], ["action"]),
    "index": lambda: constant_policy(2),
    "random": lambda: None,
}


def collect(env_fn, policy, frames=60, num_envs=4):
    with SyncDataCollector(
        env_fn, policy, frames_per_batch=frames, total_frames=frames, num_envs=num_envs
    ) as collector:
        return next(iter(collector))


@pytest.mark.parametrize("start", [-1, 5])
@pytest.mark.parametrize("kind", POLICIES)
def test_discrete_actions_are_indices_in_the_batch_and_start_based_at_the_env(kind, start):
    batch = collect(lambda: OffsetActionEnv(start=start), POLICIES[kind]())
    action = batch["action"]
    index = action.argmax(-1) if kind == "one-hot" else action
    assert index.dtype == torch.int64 and index.shape == (4, 15)
    assert ((index >= 0) & (index < 3)).all(), index.unique()
    if kind in ("one-hot", "index"):
        assert (index == 2).all()
    else:  # sampled: every index turns up in 60 draws of 3
        assert set(index.unique().tolist()) == {0, 1, 2}
    received = batch["next", "observation"].squeeze(-1)
    assert torch.equal(received, (index + start).float())
    # the env's reward is 1 for its first action, the index 0
    assert torch.equal(batch["next", "reward"].squeeze(-1), (index == 0).float())


@pytest.mark.parametrize("kind", ["random", "index"])
def test_multi_discrete_actions_are_indices_per_component(kind):
    nvec, start = [3, 2], [1, -2]
    policy = None
    if kind == "index":  # index 2 of the first component, 1 of the second
        fixed = torch.tensor([2, 1])
        policy = TensorDictModule(
            lambda obs: fixed.expand(obs.shape[0], 2).clone(), ["observation"], ["action"]
        )
    batch = collect(lambda: OffsetActionEnv(start=start, nvec=nvec), policy)
    index = batch["action"]
    assert index.shape == (4, 15, 2)
    assert ((index >= 0) & (index < torch.tensor(nvec))).all()
    if kind == "index":
        assert (index == torch.tensor([2, 1])).all()
    assert torch.equal(batch["next", "observation"], (index + torch.tensor(start)).float())


def test_evaluation_hands_the_env_its_own_actions():
    returns = evaluate(constant_policy(0), OFFSET_ENV_ID, 3, seed=0)
    assert returns.tolist() == [5.0, 5.0, 5.0]  # index 0 is the env's -1: reward 1 per step


@pytest.mark.parametrize(
    ("config", "algo"),
    [
        ("ppo_cartpole.yaml", ["ppo.num_mini_batch=2", "ppo.num_epochs=1"]),
        ("dqn_cartpole.yaml", ["dqn.learning_starts=32", "dqn.batch_size=16"]),
    ],
    ids=["ppo", "dqn"],
)
def test_a_run_trains_and_evaluates_on_an_env_whose_actions_start_at_minus_one(
    config, algo, tmp_path, capsys
):
    run = tmp_path / "run"
    args = [
        "train",
        str(ROOT / "configs" / config),
        f"env.id={OFFSET_ENV_ID}",
        "collector.num_collectors=0",
        "env.num_envs=2",
        "collector.frames_per_batch=32",
        "trainer.total_frames=96",
        "trainer.target_return=null",
        "trainer.test_every=1",
        "trainer.num_test_episodes=2",
        "logging.progress_bar=false",
        "logging.tensorboard=false",
        "logging.plot=false",
        *algo,
        "--run-dir",
        str(run),
    ]
    assert main(args) == 0  # the env fails on any action outside -1..1
    metrics = rows(run)
    assert [int(float(r["train/frames"])) for r in metrics] == [32, 64, 96]
    # every episode is 5 steps; its return counts the steps that chose the env's -1
    assert all(0 <= float(r["eval/return_mean"]) <= 5 for r in metrics)
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "2"]) == 0


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            "ppo_cartpole.yaml",
            f"env '{MULTI_DISCRETE_ENV_ID}' has 2 integer actions that are not one Discrete (a "
            "MultiDiscrete or MultiBinary space): fleetrl's default networks take one Discrete "
            "or a Box of actions; pass networks built for this space in code",
        ),
        (
            "dqn_cartpole.yaml",
            f"algorithm='dqn' is invalid with env.id='{MULTI_DISCRETE_ENV_ID}': DQN needs "
            f"discrete actions and {MULTI_DISCRETE_ENV_ID} has 2 integer actions (a "
            "MultiDiscrete or MultiBinary space)",
        ),
    ],
    ids=["ppo", "dqn"],
)
def test_a_run_on_multi_discrete_actions_is_refused_before_it_starts(
    config, message, tmp_path, capsys
):
    """The default networks build one Categorical or a continuous policy: neither acts in a
    MultiDiscrete space, so a run is refused, not trained on float actions."""
    run = tmp_path / "run"
    args = ["train", str(ROOT / "configs" / config), f"env.id={MULTI_DISCRETE_ENV_ID}"]
    assert main([*args, "collector.num_collectors=0", "--run-dir", str(run)]) == 2
    assert message in capsys.readouterr().err
    assert not run.exists()

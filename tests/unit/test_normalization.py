"""Normalization with one statistic per run (fleetrl.networks.normalization): exact merges, the
statistics every worker acts with, reward scaling, checkpoints and the config rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from fleetrl.cli import main
from fleetrl.collectors import SyncDataCollector
from fleetrl.collectors.local.episodes import discounted_returns
from fleetrl.envs.probe import env_spec
from fleetrl.errors import ConfigError
from fleetrl.keys import DISCOUNTED_RETURN_KEY
from fleetrl.networks.normalization import (
    EPS,
    ObservationNormalizer,
    RewardScaler,
    RunningMoments,
)
from fleetrl.run.checkpoint import latest_checkpoint, load_checkpoint
from fleetrl.setup.build import make_algorithm
from fleetrl.setup.load import config_from_dict
from runs import NORMALIZED_TINY, ROOT, assert_identical, metric_rows
from runs import PPO_LOCAL as LOCAL

PENDULUM = str(ROOT / "configs" / "ppo_pendulum.yaml")


# ------------------------------------------------------------------ the moments
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_merged_moments_equal_numpy_over_the_concatenation(seed):
    rng = np.random.default_rng(seed)
    data = rng.normal(3.0, 5.0, size=(1000, 4)) * rng.uniform(0.1, 100, size=4)
    cuts = np.sort(rng.choice(np.arange(1, 1000), size=7, replace=False))
    parts = np.split(data, cuts)
    merged = RunningMoments((4,))
    for part in [parts[i] for i in rng.permutation(len(parts))]:  # any order
        merged.merge(RunningMoments.of(torch.from_numpy(part)))
    assert merged.count.item() == 1000
    np.testing.assert_allclose(merged.mean.numpy(), data.mean(0), rtol=1e-12)
    np.testing.assert_allclose(merged.var.numpy(), data.var(0), rtol=1e-10)


def test_empty_moments_change_nothing_and_read_as_unit_variance():
    m = RunningMoments((2,))
    m.merge(RunningMoments.of(torch.zeros(0, 2)))
    assert m.count.item() == 0 and m.var.tolist() == [1.0, 1.0]


def test_normalizer_is_the_identity_until_merged_then_standardizes_and_clips():
    norm = ObservationNormalizer((2,), clip=3.0)
    obs = torch.tensor([[1.0, -2.0], [100.0, 5.0]])
    assert torch.allclose(norm(obs), obs.clamp(-3, 3))
    data = torch.tensor([[0.0, 10.0], [2.0, 30.0], [4.0, 20.0]], dtype=torch.float64)
    norm.merge_(RunningMoments.of(data))
    want = (obs.double() - data.mean(0)) / torch.sqrt(data.var(0, unbiased=False) + EPS)
    assert torch.allclose(norm(obs), want.clamp(-3, 3).float())
    assert [k for k, _ in norm.named_buffers()] == ["count", "mean", "m2"]


def test_acting_keeps_the_statistics_affine_only_until_a_statistic_changes():
    """Under inference mode (a collector's step) the normalizer keeps the mean and scale it
    computed; every way the statistics change makes it compute them again, so acting
    always equals the learner's (grad-mode) call, bit for bit."""
    import copy
    import pickle

    norm = ObservationNormalizer((3,), clip=5.0)
    obs = torch.randn(6, 3) * 4 + 1

    def assert_acting_is_learning(x=obs):
        with torch.inference_mode():
            acted = norm(x)
        assert torch.equal(acted, norm(x)) and acted.dtype == x.dtype

    assert_acting_is_learning()
    norm.merge_(RunningMoments.of(torch.randn(40, 3) * 3 + 2))
    with torch.inference_mode():
        first = norm(obs)
    assert not torch.equal(first, obs.clamp(-5, 5))  # the merge was seen
    assert_acting_is_learning()
    other = ObservationNormalizer((3,), clip=5.0)
    other.merge_(RunningMoments.of(torch.randn(40, 3) - 3))
    norm.load_state_dict(other.state_dict())  # a weights update
    assert_acting_is_learning()
    with torch.no_grad():
        norm.mean.add_(0.5)  # any in-place write
    assert_acting_is_learning()
    replaced = other.m2.clone() * 4  # a buffer replaced by another tensor of its version
    while replaced._version < norm.m2._version:
        replaced.add_(0.0)
    norm.m2 = replaced
    assert_acting_is_learning()
    assert_acting_is_learning(obs.double())  # another dtype
    assert_acting_is_learning()
    # a compiled update traces the learning branch, in one graph
    explained = torch._dynamo.explain(lambda x: norm(x).sum())(obs)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    for twin in (pickle.loads(pickle.dumps(norm)), copy.deepcopy(norm)):
        assert "_kept" not in twin.__dict__  # derived: never shipped with the policy
        with torch.inference_mode():
            assert torch.equal(twin(obs), norm(obs))


# ------------------------------------------------------------------ discounted returns
def reference_returns(reward, done, gamma):
    g, out = np.zeros(reward.shape[0]), np.zeros(reward.shape)
    for t in range(reward.shape[1]):
        g = gamma * g + reward[:, t]
        out[:, t] = g
        g[done[:, t]] = 0.0
    return out


def test_discounted_returns_restart_after_each_episode_end_and_carry_across_batches():
    rng = np.random.default_rng(0)
    reward = rng.normal(size=(3, 40))
    done = rng.random((3, 40)) < 0.1
    want = reference_returns(reward, done, 0.9)
    first, carry = discounted_returns(reward[:, :25], done[:, :25], np.zeros(3), 0.9)
    second, _ = discounted_returns(reward[:, 25:], done[:, 25:], carry, 0.9)
    np.testing.assert_allclose(np.concatenate([first, second], 1), want, rtol=1e-12)


def test_the_collector_writes_the_discounted_return_and_saves_it_in_its_state():
    def collector():
        return SyncDataCollector(
            "Pendulum-v1", None, frames_per_batch=40, num_envs=2, return_discount=0.9
        )

    c = collector()
    c.set_seed(0)
    first = c.collect(40)
    state = c.state_dict()
    second = c.collect(40)
    c.shutdown()
    batches = [first, second]
    reward = torch.cat([b.get(("next", "reward"))[..., 0] for b in batches], 1).double().numpy()
    done = torch.cat([b.get(("next", "done"))[..., 0] for b in batches], 1).numpy()
    got = torch.cat([b.get(DISCOUNTED_RETURN_KEY)[..., 0] for b in batches], 1)
    np.testing.assert_allclose(got.numpy(), reference_returns(reward, done, 0.9), rtol=1e-6)
    resumed = collector()
    resumed.load_state_dict(state)
    again = resumed.collect(40)
    resumed.shutdown()
    assert torch.equal(again.get(DISCOUNTED_RETURN_KEY), second.get(DISCOUNTED_RETURN_KEY))


def test_the_reward_scaler_divides_by_the_return_std_and_clips():
    g = torch.tensor([[1.0], [-3.0], [5.0], [9.0]])
    batch = TensorDict({("next", "reward"): torch.tensor([[2.0], [4.0], [-100.0], [0.0]])}, [4])
    batch.set(DISCOUNTED_RETURN_KEY, g)
    scaler = RewardScaler(clip=5.0)
    scaler.merge_batch(batch)
    std = float(np.sqrt(g.double().numpy().var() + EPS))
    assert scaler.std == pytest.approx(std, rel=1e-12)
    got = scaler.scale(batch).get(("next", "reward")).flatten().tolist()
    assert got == pytest.approx([2 / std, 4 / std, -5.0, 0.0], rel=1e-6)


# ------------------------------------------------------------------ CLI, checkpoints
def test_cli_run_with_normalization_trains_checkpoints_and_resumes_bit_for_bit(tmp_path):
    args = [*LOCAL, *NORMALIZED_TINY, "trainer.test_every=2"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    for run, frames in ((straight, 256), (split, 128)):
        train = ["train", PENDULUM, *args, f"trainer.total_frames={frames}"]
        assert main([*train, "--run-dir", str(run)]) == 0
    assert main(["train", "--resume", str(split), "trainer.total_frames=256"]) == 0
    a = load_checkpoint(latest_checkpoint(straight))
    b = load_checkpoint(latest_checkpoint(split))
    a["config"]["logging"].pop("run_dir", None), b["config"]["logging"].pop("run_dir", None)
    assert_identical(a, b)
    assert_identical(metric_rows(straight), metric_rows(split), "metrics")
    counts = [v for k, v in a["algorithm"]["loss_module"].items() if k.endswith(".count")]
    assert counts and all(c.item() == 256 for c in counts)
    assert a["algorithm"]["reward_scaler"]["count"].item() == 256
    assert a["collector"]["discounted_return"].shape == (2,)
    assert main(["eval", str(straight), "--episodes", "1"]) == 0


def test_resume_restores_the_statistics_exactly():
    config = config_from_dict({"algorithm": "ppo", "env": {"id": "Pendulum-v1"}}, NORMALIZED_TINY)
    algorithm = make_algorithm(config, 0)
    (norm,) = algorithm.observation_normalizers
    norm.merge_(RunningMoments.of(torch.randn(50, 3) * 7))
    batch = TensorDict({DISCOUNTED_RETURN_KEY: torch.randn(50, 1)}, [50])
    algorithm.reward_scaler.merge_batch(batch)
    state = algorithm.state_dict()
    fresh = make_algorithm(config)
    fresh.load_state_dict(state)
    (restored,) = fresh.observation_normalizers
    for name, value in norm.named_buffers():
        assert torch.equal(getattr(restored, name), value)
    assert_identical(fresh.reward_scaler.state_dict(), algorithm.reward_scaler.state_dict())


def test_statistics_are_frozen_when_the_policy_acts():
    config = config_from_dict({"algorithm": "ppo", "env": {"id": "Pendulum-v1"}}, NORMALIZED_TINY)
    algorithm = make_algorithm(config, 0)
    (norm,) = algorithm.observation_normalizers
    norm.merge_(RunningMoments.of(torch.randn(50, 3)))
    before = {k: v.clone() for k, v in norm.named_buffers()}
    algorithm.policy(TensorDict({"observation": torch.randn(8, 3)}, [8]))
    assert all(torch.equal(before[k], v) for k, v in norm.named_buffers())


# ------------------------------------------------------------------ refused combinations
def test_unsupported_combinations_are_refused_with_the_key_and_the_fix():
    with pytest.raises(ConfigError) as err:
        config_from_dict(
            {"algorithm": "sac", "env": {"id": "Pendulum-v1"}},
            ["env.normalize_observation=true", "env.clip_reward=0"],
        )
    assert str(err.value).splitlines()[1:] == [
        "  - env.clip_reward=0.0 is invalid: must be > 0, or null: off",
        "  - env.normalize_observation=True is invalid: is supported for the algorithms "
        "['a2c', 'appo', 'impala', 'ppo'], not algorithm='sac'; set env.normalize_observation=false",
    ]


def test_networks_passed_in_code_must_hold_a_normalizer():
    from fleetrl.networks.models import make_actor

    config = config_from_dict({"algorithm": "ppo", "env": {"id": "Pendulum-v1"}}, NORMALIZED_TINY)
    actor = make_actor(env_spec("Pendulum-v1"), [8])
    with pytest.raises(ConfigError, match=r"the \['actor'\] passed in code hold no"):
        make_algorithm(config, actor=actor)


def test_pixel_networks_normalize_each_pixel_of_the_uint8_frames():
    """Sample Factory's ``normalize_input``: a conv network with ``env.normalize_observation``
    has the normalizer first, per element of the (C, H, W) frame stack, and reads its float
    output as it is (no 1/255 scaling on top)."""
    from fakes import PIXEL_ENV_ID
    from fleetrl.networks.normalization import RunningMoments, find_normalizers

    config = config_from_dict(
        {"algorithm": "ppo", "env": {"id": PIXEL_ENV_ID, "num_envs": 2}},
        [
            "env.normalize_observation=true",
            "collector.frames_per_batch=64",
            "env.clip_observation=5",
        ],
    )
    algorithm = make_algorithm(config, 0)
    (norm,) = algorithm.observation_normalizers
    shape = norm.shape
    assert len(shape) == 3 and norm.clip == 5.0
    assert find_normalizers(algorithm.policy) == find_normalizers(algorithm.critic) == [norm]
    frames = torch.randint(0, 256, (32, *shape), dtype=torch.uint8)
    norm.merge_(RunningMoments.of(frames))
    expected = (
        (frames.double() - frames.double().mean(0))
        / (frames.double().var(0, unbiased=False) + 1e-8).sqrt()
    ).clamp(-5, 5)
    torch.testing.assert_close(norm(frames), expected.float())
    # the torso after the normalizer sees its float output unscaled
    body, _ = algorithm.critic.module
    normalizer, torso = body
    assert normalizer is norm
    torch.testing.assert_close(body(frames[:4]), torso.net(norm(frames[:4])))


def test_resume_cannot_switch_normalization(tmp_path):
    from fleetrl.setup.parse import config_to_dict
    from fleetrl.setup.resume import check_resume_overrides

    saved = config_to_dict(config_from_dict({"algorithm": "ppo", "env": {"id": "Pendulum-v1"}}))
    with pytest.raises(ConfigError, match=r"env\.normalize_reward=True is invalid on resume"):
        check_resume_overrides(saved, ["env.normalize_reward=true"], tmp_path)


@pytest.mark.parametrize("algo", ["a2c", "appo", "impala", "ppo"])
def test_every_actor_critic_algorithm_shares_one_normalizer_between_actor_and_critic(algo):
    from fleetrl.networks.normalization import find_normalizers

    config = config_from_dict(
        {"algorithm": algo, "env": {"id": "Pendulum-v1"}},
        ["env.normalize_observation=true", "env.normalize_reward=true"],
    )
    algorithm = make_algorithm(config, 0)
    (norm,) = algorithm.observation_normalizers
    assert find_normalizers(algorithm.policy) == find_normalizers(algorithm.critic) == [norm]
    assert norm.shape == (3,) and norm.clip == 10.0
    assert algorithm.reward_scaler is not None and algorithm.reward_scaler.clip == 10.0
    # statistics are buffers, never trainable: the flat weights and gradients skip them
    assert algorithm.codec.numel == sum(
        p.numel() for p in algorithm.loss_module.parameters() if p.requires_grad
    )


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8])
def test_moments_of_8_bit_frames_are_the_float64_moments(dtype):
    """uint8 frames take integer sums (no float64 copy of the batch): the same moments."""
    from fleetrl.networks.normalization import RunningMoments

    low, high = (0, 256) if dtype == torch.uint8 else (-128, 128)
    frames = torch.randint(low, high, (600, 4, 21, 21), dtype=dtype)
    fast, exact = RunningMoments.of(frames), RunningMoments.of(frames.double())
    assert fast.count.item() == exact.count.item() == 600
    torch.testing.assert_close(fast.mean, exact.mean, rtol=0, atol=1e-12)
    torch.testing.assert_close(fast.m2, exact.m2, rtol=1e-12, atol=1e-6)
    constant = torch.full((5, 3), 7, dtype=dtype)
    assert RunningMoments.of(constant).m2.eq(0).all()

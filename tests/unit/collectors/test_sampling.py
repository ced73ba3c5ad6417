"""Direct samplers (fleetrl.networks.sampling): a draw and its log-probability from the
distribution's parameters, bit for bit what the distribution itself gives from the same
generator state, the distribution's own errors kept, and the probe's fallback."""

from __future__ import annotations

import pytest
import torch
import torch.distributions as D
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import IndependentNormal, TanhNormal
from torchrl.modules.distributions.utils import sample_and_log_prob

from fleetrl import SyncDataCollector
from fleetrl.envs.probe import env_spec
from fleetrl.networks import sampling
from fleetrl.networks.acting import TensorActor, tensor_actor
from fleetrl.networks.models import make_actor
from fleetrl.networks.normalization import ObservationNormalizer, RunningMoments
from fleetrl.networks.sampling import direct_sampler

SHAPES = [(5,), (3, 4), (2, 3, 6)]


def params_of(dist_class, shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dist_class is D.Categorical:
        return {"logits": torch.randn(*shape, generator=g, dtype=dtype) * 3}
    loc = torch.randn(*shape, generator=g, dtype=dtype) * 2
    scale = torch.rand(*shape, generator=g, dtype=dtype) + 0.05
    return {"loc": loc, "scale": scale}


def reference(dist_class, kwargs, params, atomic):
    """What torchrl's actor (atomic) or tensordict's module does with the distribution."""
    dist = dist_class(**params, **kwargs)
    if atomic:
        return sample_and_log_prob(dist, reparameterize=dist.has_rsample)
    action = dist.rsample() if dist.has_rsample else dist.sample()
    return action, dist.log_prob(action)


CASES = [
    pytest.param(TanhNormal, {}, True, id="tanh-normal"),
    pytest.param(TanhNormal, {"low": -1.0, "high": 1.0}, True, id="tanh-normal-unit-bounds"),
    pytest.param(TanhNormal, {"low": -2.0, "high": 2.0}, True, id="tanh-normal-bounds"),
    pytest.param(TanhNormal, {"low": -0.4, "high": 0.4, "upscale": 3.0}, True, id="tanh-upscale"),
    pytest.param(IndependentNormal, {}, True, id="independent-normal"),
    pytest.param(IndependentNormal, {}, False, id="independent-normal-sample-then-score"),
    pytest.param(D.Normal, {}, True, id="normal"),
    pytest.param(D.Categorical, {}, True, id="categorical"),
    pytest.param(D.Categorical, {}, False, id="categorical-sample-then-score"),
]


@pytest.mark.parametrize("dist_class,kwargs,atomic", CASES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_a_direct_draw_is_the_distributions_bit_for_bit(dist_class, kwargs, atomic, shape, dtype):
    params = params_of(dist_class, shape, dtype)
    sampler = direct_sampler(dist_class, kwargs, list(params), atomic=atomic)
    assert sampler is not None
    for seed in range(4):
        torch.manual_seed(seed)
        with torch.inference_mode():
            want = reference(dist_class, kwargs, params, atomic)
        after_want = torch.rand(2)
        torch.manual_seed(seed)
        with torch.inference_mode():
            got = sampler(params)
        assert torch.rand(2).tolist() == after_want.tolist()  # the same draws taken
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert torch.equal(g, w)


def test_per_dimension_bounds_and_a_saturated_tanh_are_scored_as_torchrl_does():
    """Bounds of one value per action dim (MuJoCo's Humanoid: +-0.4), and draws far in the
    tails, where the squashed action is clamped by torchrl's safe tanh."""
    low, high = torch.tensor([-0.4, -1.0, 0.0]), torch.tensor([0.4, 2.0, 5.0])
    loc = torch.tensor([[30.0, -30.0, 0.5], [0.0, 1.0, -2.0]])
    params = {"loc": loc, "scale": torch.full_like(loc, 0.3)}
    sampler = direct_sampler(TanhNormal, {"low": low, "high": high}, ["loc", "scale"], atomic=True)
    torch.manual_seed(3)
    want = TanhNormal(**params, low=low, high=high).rsample_and_log_prob()
    torch.manual_seed(3)
    got = sampler(params)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert (got[0] >= low).all() and (got[0] <= high).all()


@pytest.mark.parametrize(
    "dist_class,kwargs,names,atomic",
    [
        pytest.param(TanhNormal, {"tanh_loc": True}, ["loc", "scale"], True, id="tanh-loc"),
        pytest.param(TanhNormal, {"safe_tanh": False}, ["loc", "scale"], True, id="unsafe-tanh"),
        pytest.param(TanhNormal, {"event_dims": 2}, ["loc", "scale"], True, id="two-event-dims"),
        pytest.param(TanhNormal, {}, ["loc", "scale"], False, id="tanh-sample-then-score"),
        pytest.param(IndependentNormal, {"tanh_loc": True}, ["loc", "scale"], True, id="ind-tanh"),
        pytest.param(D.Normal, {"validate_args": False}, ["loc", "scale"], True, id="kwargs"),
        pytest.param(D.Categorical, {}, ["probs"], True, id="probs"),
        pytest.param(D.Beta, {}, ["concentration1", "concentration0"], True, id="another"),
    ],
)
def test_what_has_no_direct_sampler_builds_the_distribution(dist_class, kwargs, names, atomic):
    assert direct_sampler(dist_class, kwargs, names, atomic=atomic) is None


REFUSED = [
    (TanhNormal, {"loc": torch.tensor([[float("nan"), 0.0]]), "scale": torch.ones(1, 2)}, "loc"),
    (TanhNormal, {"loc": torch.zeros(1, 2), "scale": torch.full((1, 2), 1e-7)}, "scale"),
    (IndependentNormal, {"loc": torch.zeros(1, 2), "scale": torch.zeros(1, 2)}, "scale"),
    (D.Categorical, {"logits": torch.tensor([[0.0, float("nan")]])}, "logits"),
]
REFUSED_IDS = ["nan-loc", "scale-under-the-bound", "zero-scale", "nan-logits"]


def actor_writing(dist_class, params):
    """An actor whose network writes ``params`` whatever it sees."""
    from tensordict.nn import TensorDictModule
    from torchrl.modules import ProbabilisticActor

    class Out(torch.nn.Module):
        def forward(self, obs):
            values = tuple(v.expand(obs.shape[0], -1) for v in params.values())
            return values if len(values) > 1 else values[0]

    return ProbabilisticActor(
        TensorDictModule(Out(), in_keys=["observation"], out_keys=list(params)),
        in_keys=list(params),
        distribution_class=dist_class,
        return_log_prob=True,
    )


@pytest.mark.parametrize("dist_class,params,match", REFUSED, ids=REFUSED_IDS)
def test_with_checks_on_params_the_distribution_refuses_raise_its_own_error(
    dist_class, params, match, monkeypatch
):
    """torch's argument checks on (``Distribution.set_default_validate_args(True)``): the
    direct sampler returns None, the actor then builds the distribution, whose check
    raises as it always has."""
    monkeypatch.setattr(D.Distribution, "_validate_args", True)
    assert direct_sampler(dist_class, {}, list(params), atomic=True)(params) is None
    fast = TensorActor.of(actor_writing(dist_class, params))
    assert fast.direct is not None
    with torch.inference_mode(), pytest.raises(ValueError, match=match):
        fast.act(torch.zeros(1, 3))


@pytest.mark.parametrize("dist_class,params,match", REFUSED, ids=REFUSED_IDS)
def test_with_checks_off_the_same_params_give_the_distributions_values(
    dist_class, params, match, monkeypatch
):
    """torchrl turns torch's checks off when it is imported (the collectors' case): the
    direct sampler then checks nothing either, and gives what the distribution gives."""
    monkeypatch.setattr(D.Distribution, "_validate_args", False)
    actor = actor_writing(dist_class, params)
    fast = TensorActor.of(actor)
    td = TensorDict({"observation": torch.zeros(1, 3)}, [1])

    def outcome(call):
        torch.manual_seed(0)
        try:
            with torch.inference_mode(), set_exploration_type(ExplorationType.RANDOM):
                out = call()
        except RuntimeError as err:  # a NaN probability: torch.multinomial refuses it
            return str(err)
        return [out.get(key) for key in ("action", "action_log_prob")]

    want = outcome(lambda: actor(td.clone()))
    got = outcome(lambda: fast.act(torch.zeros(1, 3)))
    if isinstance(want, str):
        assert got == want and "probability tensor contains" in want
        return
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("distribution", ["tanh_normal", "normal"])
@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
def test_fleetrls_actors_are_sampled_directly_by_the_collector(env_id, distribution):
    info = env_spec(env_id)
    norm = ObservationNormalizer(info.obs_shape)
    norm.merge_(RunningMoments.of(torch.randn(100, *info.obs_shape)))
    torch.manual_seed(0)
    actor = make_actor(info, [16], normalizer=norm, distribution=distribution)
    with SyncDataCollector(env_id, actor, frames_per_batch=16, num_envs=2) as c:
        act = c._rolling.plan.act
        assert isinstance(act, TensorActor) and act.direct is not None
        assert c.next().numel() == 16


def test_a_probe_that_disagrees_with_the_direct_sampler_builds_the_distributions(monkeypatch):
    """A direct draw that differs from the distribution's (another torch) is dropped, and
    the tensor call builds the distribution each step, still probed bit for bit."""
    info = env_spec("Pendulum-v1")
    actor = make_actor(info, [16])
    td = TensorDict({"observation": torch.randn(3, *info.obs_shape)}, [3])
    keys = ["loc", "scale", "action", "action_log_prob"]
    fast = tensor_actor(actor, td, keys, ExplorationType.RANDOM)
    assert fast is not None and fast.direct is not None
    drawn = sampling._TanhNormal.__call__

    def shifted(self, params):
        action, log_prob = drawn(self, params)
        return action, log_prob + 1e-3

    monkeypatch.setattr(sampling._TanhNormal, "__call__", shifted)
    fast = tensor_actor(actor, td, keys, ExplorationType.RANDOM)
    assert isinstance(fast, TensorActor) and fast.direct is None

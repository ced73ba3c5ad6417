"""IMPALA and APPO: V-trace targets against references written here, config checks, training.

The references are numpy loops over time, written from the IMPALA paper
(Espeholt et al. 2018, eq. 1 and its recursive form), independent of torchrl.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from fleetrl import ConfigError, SyncDataCollector
from fleetrl.algorithms import APPO, IMPALA, APPOConfig, IMPALAConfig
from fleetrl.algorithms.vtrace import NO_BEHAVIOUR_LOG_PROB_MSG
from fleetrl.envs.probe import env_spec
from fleetrl.errors import PolicyError
from fleetrl.setup.load import config_from_dict

GAMMA = 0.9


def fixed_batch(impala: IMPALA, seed: int = 0) -> TensorDict:
    """2 envs x 6 steps of CartPole-shaped data: env 0 terminates after step 2, env 1 is
    truncated after step 4; actions and behaviour log-probs come from another policy."""
    g = torch.Generator().manual_seed(seed)
    n, t = 2, 6
    done = torch.zeros(n, t, 1, dtype=torch.bool)
    terminated = torch.zeros(n, t, 1, dtype=torch.bool)
    done[0, 2] = terminated[0, 2] = True
    done[1, 4] = True  # truncated: bootstraps from its next observation
    return TensorDict(
        {
            "observation": torch.randn(n, t, 4, generator=g),
            "action": torch.randint(0, 2, (n, t), generator=g),
            "action_log_prob": torch.rand(n, t, generator=g).clamp_min(0.05).log(),
            "next": {
                "observation": torch.randn(n, t, 4, generator=g),
                "reward": torch.randn(n, t, 1, generator=g),
                "done": done,
                "terminated": terminated,
                "truncated": done & ~terminated,
            },
        },
        [n, t],
    )


def inputs(algo, batch):
    """What the reference needs, computed from the networks: V(x), V(x'), log pi(a|x)."""
    with torch.no_grad():
        v = algo.critic(batch.select("observation").clone())["state_value"][..., 0].numpy()
        nv = algo.critic(batch["next"].select("observation").clone())["state_value"][..., 0]
        logits = algo.actor.module[0](batch.select("observation").clone())["logits"]
    log_pi = torch.log_softmax(logits, -1).gather(-1, batch["action"][..., None])[..., 0]
    return v, nv.numpy(), log_pi.numpy()


def vtrace_reference(batch, v, nv, log_pi, gamma, rho_bar, c_bar):
    """v_s = V(x_s) + delta_s + gamma c_s (v_{s+1} - V(x_{s+1})) within an episode, with
    delta_s = rho_s (r_s + gamma V(x_{s+1}) - V(x_s)); a terminated step has no next value,
    a done step carries nothing back; the policy-gradient advantage is
    rho_s (r_s + gamma v_{s+1} - V(x_s)), v_{s+1} = V(x_{s+1}) at the batch's or an episode's end."""
    r = batch["next", "reward"][..., 0].numpy().astype(np.float64)
    done = batch["next", "done"][..., 0].numpy()
    term = batch["next", "terminated"][..., 0].numpy()
    ratio = np.exp(log_pi - batch["action_log_prob"].numpy())
    rho, c = np.minimum(ratio, rho_bar), np.minimum(ratio, c_bar)
    n, t = r.shape
    vs, adv = np.zeros((n, t)), np.zeros((n, t))
    for i in range(n):
        carry = 0.0  # v_{s+1} - V(x_{s+1})
        for s in reversed(range(t)):
            if done[i, s] or s == t - 1:
                carry = 0.0
            next_v = 0.0 if term[i, s] else nv[i, s]
            delta = rho[i, s] * (r[i, s] + gamma * next_v - v[i, s])
            carry = delta + gamma * c[i, s] * carry
            vs[i, s] = v[i, s] + carry
        for s in range(t):
            boundary = done[i, s] or s == t - 1
            vs_next = 0.0 if term[i, s] else (nv[i, s] if boundary else vs[i, s + 1])
            adv[i, s] = rho[i, s] * (r[i, s] + gamma * vs_next - v[i, s])
    return vs, adv


@pytest.mark.parametrize(("rho_bar", "c_bar"), [(1.0, 1.0), (1.5, 0.7), (0.5, 0.5)])
def test_vtrace_targets_equal_the_hand_computed_reference(rho_bar, c_bar):
    torch.manual_seed(0)
    cfg = IMPALAConfig(gamma=GAMMA, rho_bar=rho_bar, c_bar=c_bar, hidden_sizes=[8])
    impala = IMPALA(cfg, env_spec("CartPole-v1"))
    batch = fixed_batch(impala)
    v, nv, log_pi = inputs(impala, batch)
    assert not np.allclose(log_pi, batch["action_log_prob"].numpy())  # off-policy
    vs, adv = vtrace_reference(batch, v, nv, log_pi, GAMMA, rho_bar, c_bar)
    out = impala.vtrace(batch.clone())
    assert out["value_target"].shape == (2, 6, 1) and out["advantage"].shape == (2, 6, 1)
    np.testing.assert_allclose(out["value_target"][..., 0].numpy(), vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["advantage"][..., 0].numpy(), adv, rtol=1e-5, atol=1e-5)
    # the bound matters: the truncation levels change the targets
    if (rho_bar, c_bar) != (1.0, 1.0):
        base, _ = vtrace_reference(batch, v, nv, log_pi, GAMMA, 1.0, 1.0)
        assert not np.allclose(vs, base)


def n_step_returns(batch, nv, gamma):
    """G_s = r_s + gamma G_{s+1} within an episode, bootstrapped with V(x') where the batch
    ends or an episode is truncated, 0 after a termination."""
    r = batch["next", "reward"][..., 0].numpy().astype(np.float64)
    done = batch["next", "done"][..., 0].numpy()
    term = batch["next", "terminated"][..., 0].numpy()
    n, t = r.shape
    g = np.zeros((n, t))
    for i in range(n):
        for s in reversed(range(t)):
            if term[i, s]:
                nxt = 0.0
            elif done[i, s] or s == t - 1:
                nxt = nv[i, s]
            else:
                nxt = g[i, s + 1]
            g[i, s] = r[i, s] + gamma * nxt
    return g


@pytest.mark.parametrize("cls", [IMPALA, APPO])
@pytest.mark.parametrize(("rho_bar", "c_bar"), [(1.0, 1.0), (2.0, 1.5)])
def test_on_policy_vtrace_reduces_to_n_step_returns(cls, rho_bar, c_bar):
    """A batch collected by the learner's own policy: the collector recorded the behaviour
    log-probs, the current policy gives the same ones (ratio 1), and V-trace with
    rho_bar, c_bar >= 1 is the n-step bootstrapped return."""
    torch.manual_seed(1)
    config_class = cls.config_class
    algo = cls(config_class(gamma=0.95, rho_bar=rho_bar, c_bar=c_bar), env_spec("CartPole-v1"))
    with SyncDataCollector("CartPole-v1", algo.policy, frames_per_batch=256, num_envs=4) as c:
        c.set_seed(0)
        batch = c.next()
    assert batch["next", "done"].any()  # episodes end inside the batch
    v, nv, log_pi = inputs(algo, batch)
    np.testing.assert_allclose(log_pi, batch["action_log_prob"].numpy(), atol=1e-6)
    out = algo.vtrace(batch.clone())
    expected = n_step_returns(batch, nv, 0.95)
    np.testing.assert_allclose(out["value_target"][..., 0].numpy(), expected, rtol=1e-4, atol=1e-4)
    # the advantage is the one-step-ahead return minus the value: G_s - V(x_s)
    np.testing.assert_allclose(out["advantage"][..., 0].numpy(), expected - v, rtol=1e-4, atol=1e-4)


def test_a_batch_without_behaviour_log_probs_is_refused():
    impala = IMPALA(IMPALAConfig(hidden_sizes=[8]), env_spec("CartPole-v1"))
    batch = fixed_batch(impala).exclude("action_log_prob")
    with pytest.raises(
        PolicyError, match=re.escape(NO_BEHAVIOUR_LOG_PROB_MSG.format(key="action_log_prob"))
    ):
        impala.learn(batch)


def test_appo_learns_with_its_clipped_ratio_over_the_behaviour_policy():
    torch.manual_seed(2)
    appo = APPO(
        APPOConfig(num_epochs=2, num_mini_batch=2, hidden_sizes=[8]), env_spec("CartPole-v1")
    )
    batch = fixed_batch(appo)
    before = appo.get_weights()
    info = appo.learn(batch)
    assert appo.num_updates == 4 and appo.steps_per_batch == 4
    assert any(not torch.equal(before[k], w) for k, w in appo.get_weights().items(True, True))
    # the behaviour log-probs are not the current policy's: the ratio is off 1, kl is not 0
    assert info["loss/kl_approx"] != 0.0
    assert {"loss/objective", "loss/critic", "loss/entropy", "loss/clip_fraction"} <= set(info)


def gae_reference(batch, v, nv, gamma, lmbda):
    """GAE (Schulman et al. 2016) by a numpy loop: delta_s + gamma * lambda * A_{s+1},
    the trace cut where an episode ended, no bootstrap past a termination."""
    r = batch["next", "reward"][..., 0].numpy()
    done = batch["next", "done"][..., 0].numpy()
    terminated = batch["next", "terminated"][..., 0].numpy()
    adv = np.zeros_like(r)
    for i in range(r.shape[0]):
        last = 0.0
        for s in reversed(range(r.shape[1])):
            delta = r[i, s] + gamma * nv[i, s] * (1 - terminated[i, s]) - v[i, s]
            last = delta + gamma * lmbda * (1 - done[i, s]) * last
            adv[i, s] = last
    return adv


def test_appo_with_gae_advantages_takes_gae_from_the_current_critic():
    """``appo.advantage: gae`` (Sample Factory's default): the clipped objective on GAE's
    advantages and targets, whatever the behaviour policy; no importance weight in them."""
    torch.manual_seed(4)
    cfg = APPOConfig(advantage="gae", gae_lambda=0.8, gamma=GAMMA, hidden_sizes=[8])
    appo = APPO(cfg, env_spec("CartPole-v1"))
    batch = fixed_batch(appo)
    v, nv, _ = inputs(appo, batch)
    prepared = appo.prepare(batch.clone())
    expected = gae_reference(batch, v, nv, GAMMA, 0.8).reshape(-1)
    np.testing.assert_allclose(prepared["advantage"][..., 0].numpy(), expected, atol=1e-5)
    np.testing.assert_allclose(
        prepared["value_target"][..., 0].numpy(), expected + v.reshape(-1), atol=1e-5
    )
    vtrace = APPO(APPOConfig(gamma=GAMMA, hidden_sizes=[8]), env_spec("CartPole-v1"))
    vtrace.set_weights(appo.get_weights())
    # the behaviour policy is not the current one: V-trace's advantages differ from GAE's
    assert not np.allclose(vtrace.prepare(batch.clone())["advantage"][..., 0].numpy(), expected)
    info = appo.learn(batch)
    assert appo.num_updates == 1 and info["loss/kl_approx"] != 0.0


@pytest.mark.parametrize("advantage", ["vtrace", "gae"])
def test_decoupled_appo_clips_over_the_proximal_policy_and_weighs_the_lag(advantage):
    """``appo.decoupled``: the ratio's denominator is the current policy's log-probability of
    each action when the batch's update starts, so the first step's ratio is 1 (no kl, no
    clipping) however old the behaviour policy; GAE's advantages carry the truncated weight
    min(rho_bar, proximal / behaviour), V-trace's are left as they are."""
    torch.manual_seed(5)
    spec = env_spec("CartPole-v1")
    common = {"gamma": GAMMA, "hidden_sizes": [8], "advantage": advantage}
    plain = APPO(APPOConfig(**common), spec)
    decoupled = APPO(APPOConfig(**common, decoupled=True, rho_bar=0.9), spec)
    decoupled.set_weights(plain.get_weights())
    batch = fixed_batch(plain)
    _, _, log_pi = inputs(plain, batch)
    before = plain.prepare(batch.clone())
    after = decoupled.prepare(batch.clone())
    np.testing.assert_allclose(after["action_log_prob"].numpy(), log_pi.reshape(-1), atol=1e-6)
    weight = np.minimum(
        0.9, np.exp(log_pi.reshape(-1) - batch["action_log_prob"].numpy().reshape(-1))
    )
    expected = before["advantage"][..., 0].numpy() * (weight if advantage == "gae" else 1.0)
    if advantage == "vtrace":  # V-trace's own weights are rho_bar-truncated: redo them at 0.9
        redo = APPO(APPOConfig(gamma=GAMMA, hidden_sizes=[8], rho_bar=0.9), spec)
        redo.set_weights(plain.get_weights())
        expected = redo.prepare(batch.clone())["advantage"][..., 0].numpy()
    np.testing.assert_allclose(after["advantage"][..., 0].numpy(), expected, atol=1e-6)
    assert not np.allclose(weight, 1.0)  # the behaviour policy is another one
    info = decoupled.learn(batch)  # one step: its ratio is exactly 1
    assert info["loss/kl_approx"] == 0.0 and info["loss/clip_fraction"] == 0.0
    assert plain.learn(batch)["loss/kl_approx"] != 0.0


@pytest.mark.parametrize("advantage", ["vtrace", "gae"])
def test_decoupled_appo_runs_its_networks_once_over_a_batch_to_prepare_it(advantage, monkeypatch):
    """The proximal log-probabilities come from the targets' own pass: ``prepare`` runs the
    policy and the value over the batch's 12 observations once (one call of the heads), and
    the critic alone only over next observations (all 12 here: random observations never
    repeat), 24 rows in all, where a second pass for the log-probabilities made it 36."""
    from fleetrl.networks.heads import ActorCriticHeads

    rows: dict[str, list[int]] = {"both": [], "value": []}
    call, value = ActorCriticHeads.__call__, ActorCriticHeads.value

    def counted_call(self, *inputs):
        rows["both"].append(inputs[0].shape[0])
        return call(self, *inputs)

    def counted_value(self, *inputs):
        rows["value"].append(inputs[0].shape[0])
        return value(self, *inputs)

    monkeypatch.setattr(ActorCriticHeads, "__call__", counted_call)
    monkeypatch.setattr(ActorCriticHeads, "value", counted_value)
    cfg = APPOConfig(gamma=GAMMA, hidden_sizes=[8], advantage=advantage, decoupled=True)
    appo = APPO(cfg, env_spec("CartPole-v1"))
    prepared = appo.prepare(fixed_batch(appo))
    assert rows == {"both": [12], "value": [12]}
    assert "proximal_log_prob" not in prepared.keys(include_nested=True)  # read, then dropped


def test_decoupled_appo_takes_the_proximal_log_probs_of_recurrent_sequences():
    """With an LSTM the proximal log-probabilities come from the networks run over each
    sequence: the first step's ratio is 1 though the batch's behaviour log-probs are off."""
    torch.manual_seed(6)
    cfg = APPOConfig(model="lstm", recurrent_size=8, seq_len=4, decoupled=True, advantage="gae")
    appo = APPO(cfg, env_spec("CartPole-v1"))
    with SyncDataCollector("CartPole-v1", appo.policy, frames_per_batch=32, num_envs=2) as c:
        c.set_seed(0)
        batch = c.next()
    batch["action_log_prob"] = batch["action_log_prob"] - 0.3  # an older behaviour policy
    info = appo.learn(batch)
    assert info["loss/kl_approx"] == 0.0 and info["loss/clip_fraction"] == 0.0


class ValueAndFeatures(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.torso, self.head = torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)

    def forward(self, obs):
        features = torch.tanh(self.torso(obs))
        return self.head(features), features


@pytest.mark.parametrize("networks", ["default", "custom"])
def test_appo_clips_its_value_loss_around_the_values_vtrace_stored(networks):
    """``appo.clip_value`` needs the behaviour-time values in the batch: the V-trace targets
    store the critic's values before the update, with fleetrl's networks (its own loss) and
    with networks passed in code (torchrl's ``ClipPPOLoss``, which raised a KeyError once)."""
    from tensordict.nn import TensorDictModule

    from policies import categorical_actor

    torch.manual_seed(3)
    modules = {}
    if networks == "custom":  # a critic that also writes its features: no tensor heads here
        critic = TensorDictModule(
            ValueAndFeatures(), in_keys=["observation"], out_keys=["state_value", "features"]
        )
        modules = {"actor": categorical_actor(4, 2), "critic": critic}
    cfg = APPOConfig(clip_value=0.1, num_epochs=1, num_mini_batch=1, hidden_sizes=[8])
    appo = APPO(cfg, env_spec("CartPole-v1"), **modules)
    assert (appo.heads is None) == (networks == "custom")
    batch = fixed_batch(appo)
    with torch.no_grad():
        values = appo.critic(batch.select("observation").clone())["state_value"]
    prepared = appo.prepare(batch.clone())
    assert torch.equal(prepared["state_value"], values.reshape(prepared["state_value"].shape))
    info = appo.learn(batch)
    assert appo.num_updates == 1 and np.isfinite(float(info["loss/critic"]))


def config(algorithm, **section):
    return config_from_dict(
        {
            "algorithm": algorithm,
            "env": {"id": "CartPole-v1", "num_envs": 4},
            "collector": {"num_collectors": 0, "frames_per_batch": 64},
            "trainer": {"total_frames": 256},
            algorithm: section,
        }
    )


BAD = [
    ("impala", {"rho_bar": 0.0}, "impala.rho_bar=0.0 is invalid: must be > 0"),
    ("appo", {"rho_bar": -1.0, "c_bar": 0.5}, "appo.rho_bar=-1.0 is invalid: must be > 0"),
    ("impala", {"c_bar": 0.0}, "impala.c_bar=0.0 is invalid: must be > 0 and <= rho_bar (1.0)"),
    (
        "appo",
        {"rho_bar": 1.0, "c_bar": 2.0},
        "appo.c_bar=2.0 is invalid: must be > 0 and <= rho_bar (1.0)",
    ),
    ("impala", {"rho_bar": ".nan"}, "impala.rho_bar="),
    ("appo", {"max_learn_lag": -1}, "appo.max_learn_lag=-1 is invalid: must be null"),
    ("appo", {"advantage": "td"}, "appo.advantage='td' is invalid: must be 'vtrace' or 'gae'"),
    (
        "appo",
        {"advantage": "gae", "c_bar": 0.5},
        "appo.c_bar=0.5 is invalid: applies with appo.advantage 'vtrace' only",
    ),
    (
        "appo",
        {"gae_lambda": 0.9},
        "appo.gae_lambda=0.9 is invalid: applies with appo.advantage 'gae' only",
    ),
    ("appo", {"advantage": "gae", "gae_lambda": 1.5}, "appo.gae_lambda=1.5 is invalid: must be"),
    (
        "appo",
        {"advantage": "gae", "rho_bar": 2.0},
        "appo.rho_bar=2.0 is invalid: applies with appo.advantage 'vtrace', or 'gae' with "
        "appo.decoupled: true",
    ),
]


@pytest.mark.parametrize(("algorithm", "section", "expected"), BAD)
def test_bad_truncation_levels_are_a_config_error_naming_the_key(algorithm, section, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)):
        config(algorithm, **section)


def test_a_lag_bound_below_what_the_publish_interval_gives_is_a_config_error():
    with pytest.raises(ConfigError) as err:
        config_from_dict(
            {
                "algorithm": "appo",
                "env": {"id": "CartPole-v1", "num_envs": 4},
                "collector": {"num_collectors": 0, "frames_per_batch": 64},
                "trainer": {"total_frames": 256, "weight_update_interval": 3},
                "appo": {"num_epochs": 2, "num_mini_batch": 2, "max_learn_lag": 7},
            }
        )
    assert "appo.max_learn_lag=7 is invalid: must be null (no bound) or >= 8" in str(err.value)
    ok = config("appo", rho_bar=2.0, c_bar=2.0, max_learn_lag=None)
    assert (ok.algo.rho_bar, ok.algo.c_bar, ok.algo.max_learn_lag) == (2.0, 2.0, None)
    ok = config("appo", advantage="gae", decoupled=True, rho_bar=2.0)
    assert (ok.algo.advantage, ok.algo.decoupled, ok.algo.rho_bar) == ("gae", True, 2.0)

"""One loss, two speeds: the learner's fast path against torchrl alone, term by term.

PPO, A2C, IMPALA and APPO compute their losses on tensors
(:mod:`fleetrl.networks.heads`; ``clipped_objective``, ``critic_loss``,
``policy_gradient``, ``entropy_of`` and ``standardized`` in
:mod:`fleetrl.algorithms.actor_critic`; the V-trace targets of
:mod:`fleetrl.algorithms.vtrace`) beside torchrl's ``ClipPPOLoss`` and ``A2CLoss``,
which they build for their coefficients and keys. Here both run on one collected
batch with the same networks, and must give the same loss terms (objective,
critic, entropy; PPO's KL and clip fraction) and the same gradient of every
parameter: in float64, to ``RTOL`` / ``ATOL``.

- The fast path is what the learner runs: :meth:`~fleetrl.algorithms.Algorithm.
  gradient_batches` (``prepare``: GAE or V-trace targets on tensors, the flat
  valid frames, A2C's and IMPALA's per-batch standardization), then
  ``algorithm.loss`` and its ``backward()`` (the body of ``Algorithm.backward``);
  the terms are what it logs.
- The reference is torchrl alone: its ``GAE`` module (``average_gae`` for A2C's
  ``normalize_advantage``) or its ``VTrace`` estimator (``average_adv`` for
  IMPALA's) on the TensorDict critic, then the loss module's own ``forward``.

Conventions, where the two cannot agree to the last bit by construction:

- A TanhNormal has no closed-form entropy: both sides estimate it from one
  reparameterized sample (``rsample_and_log_prob``). The generator is seeded
  before each side's loss, so both draw the same sample and the entropy, and its
  gradient, are compared exactly.
- torchrl's ``VTrace`` (0.14.1) takes log pi of a *new* action (the actor's mode,
  or a fresh sample), not of the action in the batch, so its weights are not
  pi(a|x) / mu(a|x) (``test_torchrls_vtrace_weighs_another_action``). The
  reference hands it :class:`TakenAction`: the same actor, whose "sample" is the
  batch's action; everything else (values, recursion, done/terminated) is
  torchrl's. ``test_impala.py`` also checks the targets against the paper's
  equations.
- Advantage standardization floors the std: at 1e-6 on the fast path
  (``standardized``, torchrl's ``ClipPPOLoss``'s), at 1e-4 in torchrl's ``GAE``
  and 1e-5 in its ``VTrace``; the same numbers whenever the std is above 1e-4,
  as it is here (asserted).
- torchrl's PPO falls back to a sampled entropy where the closed form is not
  finite; the fast path does not (no such distribution here: asserted finite).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import InteractionType
from torch import nn
from torchrl.objectives.value import GAE, VTrace

from fleetrl.algorithms import (
    A2C,
    APPO,
    IMPALA,
    PPO,
    A2CConfig,
    APPOConfig,
    IMPALAConfig,
    PPOConfig,
)
from fleetrl.envs.spec import EnvSpec

RTOL, ATOL = 1e-9, 1e-12  # float64: the two paths differ by the order of a few roundings
ENTROPY_COEF = 0.05  # on, and large enough that a wrong entropy gradient shows
NUM_ENVS, STEPS = 4, 16
OBS_DIM = 5

DISCRETE = EnvSpec(OBS_DIM, 3, 1, None, None)
CONTINUOUS = EnvSpec(
    OBS_DIM,
    None,
    2,
    torch.tensor([-1.0, -2.0], dtype=torch.float64),
    torch.tensor([1.0, 0.5], dtype=torch.float64),
)
#: policy -> (the env's spaces, PPO's ``distribution``)
POLICIES = {
    "categorical": (DISCRETE, "tanh_normal"),
    "tanh_normal": (CONTINUOUS, "tanh_normal"),
    "normal": (CONTINUOUS, "normal"),
}


@dataclass(frozen=True)
class Case:
    algo: type
    policy: str
    normalize_advantage: bool
    clip_value: float | None = None

    @property
    def id(self) -> str:
        clip = "clip-value" if self.clip_value else "no-clip-value"
        norm = "norm-adv" if self.normalize_advantage else "raw-adv"
        parts = [self.algo.name, self.policy, norm]
        return "-".join(parts + ([clip] if self.algo in (PPO, APPO) else []))

    def build(self) -> Any:
        spec, distribution = POLICIES[self.policy]
        common = {
            "entropy_coef": ENTROPY_COEF,
            "normalize_advantage": self.normalize_advantage,
            "hidden_sizes": [16, 16],
        }
        if self.algo is PPO:
            config = PPOConfig(
                **common,
                distribution=distribution,
                clip_value=self.clip_value,
                num_epochs=1,
                num_mini_batch=1,
            )
        elif self.algo is APPO:
            config = APPOConfig(**common, clip_value=self.clip_value, rho_bar=1.2, c_bar=0.9)
        elif self.algo is IMPALA:
            config = IMPALAConfig(**common, rho_bar=1.2, c_bar=0.9)
        else:
            config = A2CConfig(**common, gae_lambda=0.95)
        torch.manual_seed(0)
        algorithm = self.algo(config, spec)
        algorithm.loss_module.double()  # the parameters in place: the networks see them too
        return algorithm


def _cases() -> list[Case]:
    cases = []
    for normalize in (True, False):
        for clip_value in (None, 0.05):
            cases += [Case(PPO, policy, normalize, clip_value) for policy in POLICIES]
            cases += [Case(APPO, p, normalize, clip_value) for p in ("categorical", "tanh_normal")]
        # A2C's, IMPALA's and APPO's continuous policy is the TanhNormal (only PPO has 'normal')
        cases += [Case(A2C, p, normalize) for p in ("categorical", "tanh_normal")]
        cases += [Case(IMPALA, p, normalize) for p in ("categorical", "tanh_normal")]
    return cases


CASES = _cases()


# ------------------------------------------------------------------ the batch


def collected_batch(algorithm: Any, seed: int = 1) -> TensorDict:
    """``NUM_ENVS`` x ``STEPS`` steps as a collector lays them out, in float64: episodes
    that terminate and one that is truncated inside the batch; actions drawn from the
    current policy, their behaviour log-probs from another one (log pi + noise), so that
    ratios clip and V-trace's weights truncate."""
    g = torch.Generator().manual_seed(seed)
    n, t = NUM_ENVS, STEPS
    obs = torch.randn(n, t + 1, OBS_DIM, generator=g, dtype=torch.float64)
    done = torch.zeros(n, t, 1, dtype=torch.bool)
    terminated = torch.zeros_like(done)
    done[0, 5] = terminated[0, 5] = True
    done[1, 9] = True  # truncated: bootstraps from its next observation
    done[2, 3] = terminated[2, 3] = done[2, 12] = terminated[2, 12] = True
    next_obs = obs[:, 1:].clone()
    # the step after a done one starts a new episode: its observation is not the next one
    next_obs[done[..., 0]] = torch.randn(int(done.sum()), OBS_DIM, generator=g, dtype=obs.dtype)
    batch = TensorDict(
        {
            "observation": obs[:, :-1],
            "next": {
                "observation": next_obs,
                "reward": torch.randn(n, t, 1, generator=g, dtype=torch.float64),
                "done": done,
                "terminated": terminated,
                "truncated": done & ~terminated,
            },
        },
        [n, t],
    )
    with torch.no_grad():
        dist = algorithm.actor.get_dist(batch.select("observation"))
        torch.manual_seed(seed)
        action = dist.sample()
        behaviour = dist.log_prob(action)
    noise = 0.4 * torch.randn(behaviour.shape, generator=g, dtype=behaviour.dtype)
    batch.set("action", action)
    batch.set("action_log_prob", behaviour + noise)
    return batch


class TakenAction(nn.Module):
    """The actor as torchrl's ``VTrace`` reads it, whose "sample" is the batch's action.

    ``VTrace`` scores ``actor._dist_sample(dist)`` (the mode, under the actor's default
    interaction); this one returns the action the batch holds, so log pi is that of the
    taken action, the only thing V-trace's weights may use.
    """

    default_interaction_type = InteractionType.DETERMINISTIC
    num_samples = None

    def __init__(self, actor: nn.Module):
        super().__init__()
        self.actor = actor
        self.in_keys = [*actor.in_keys, "action"]
        self._action: torch.Tensor | None = None

    def get_dist(self, data: TensorDictBase) -> torch.distributions.Distribution:
        self._action = data.get("action")
        return self.actor.get_dist(data)

    def _dist_sample(self, dist: Any, interaction_type: Any = None) -> torch.Tensor:
        return self._action


def reference_targets(case: Case, algorithm: Any, batch: TensorDict) -> TensorDict:
    """Advantages, value targets and values by torchrl alone, flat like the fast path's."""
    config = algorithm.config
    # A2C and IMPALA standardize over the batch (the estimator's job); PPO and APPO per
    # minibatch (the loss module's)
    per_batch = case.normalize_advantage and case.algo in (A2C, IMPALA)
    if case.algo in (PPO, A2C):
        estimator = GAE(
            gamma=config.gamma,
            lmbda=config.gae_lambda,
            value_network=algorithm.critic,
            average_gae=per_batch,
        )
    else:
        estimator = VTrace(
            gamma=config.gamma,
            value_network=algorithm.critic,
            actor_network=TakenAction(algorithm.actor),
            rho_thresh=config.rho_bar,
            c_thresh=config.c_bar,
            average_adv=per_batch,
        )
    with torch.no_grad():
        data = estimator(batch.clone())
        if data.get("state_value", None) is None:
            data.set("state_value", algorithm.critic(data.select("observation"))["state_value"])
    return data.reshape(-1)


# ------------------------------------------------------------------ the two paths


def fast_path(algorithm: Any, data: TensorDict, seed: int) -> tuple[Any, ...]:
    """The learner's loss on ``data``: its value, its logged terms, the gradients."""
    algorithm.optimizer.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # a TanhNormal's entropy sample: the same draw both ways
    loss, info = algorithm.loss(data)
    loss.backward()  # Algorithm.backward: the loss, then its backward
    grads = {n: p.grad.clone() for n, p in algorithm.loss_module.named_parameters()}
    algorithm.optimizer.zero_grad(set_to_none=True)
    return loss.detach(), {k: v.detach() for k, v in info.items()}, grads


def torchrl_path(algorithm: Any, data: TensorDict, seed: int) -> tuple[Any, ...]:
    """torchrl's loss module's own forward on ``data``, and the gradients of its sum."""
    torch.manual_seed(seed)
    out = algorithm.loss_module(data)
    loss = sum(v for k, v in out.items() if k.startswith("loss_"))
    names, params = zip(*algorithm.loss_module.named_parameters(), strict=True)
    grads = torch.autograd.grad(loss, params)
    return loss.detach(), out.detach(), dict(zip(names, grads, strict=True))


def parity(case: Case, seed: int = 7) -> dict[str, Any]:
    """Both paths on one batch: the differences (max abs) and what the batch exercised."""
    algorithm = case.build()
    batch = collected_batch(algorithm)
    reference = reference_targets(case, algorithm, batch)
    data = next(iter(algorithm.gradient_batches(batch.clone())))
    assert data.shape == reference.shape == (NUM_ENVS * STEPS,)
    diffs = {
        key: (data.get(key) - reference.get(key)).abs().max().item()
        for key in ("advantage", "value_target", "state_value")
    }
    if case.clip_value is not None:  # the critic moved since the targets: the clip acts
        g = torch.Generator().manual_seed(seed)
        shift = 0.1 * torch.randn(data.get("state_value").shape, generator=g, dtype=torch.float64)
        data.set("state_value", data.get("state_value") + shift)
        reference.set("state_value", reference.get("state_value") + shift)
    fast_loss, info, fast_grads = fast_path(algorithm, data, seed)
    ref_loss, out, ref_grads = torchrl_path(algorithm, reference, seed)
    terms = {
        "loss": (fast_loss, ref_loss),
        "objective": (info["loss/objective"], out["loss_objective"]),
        "critic": (info["loss/critic"], out["loss_critic"]),
        "entropy": (info["loss/entropy"], out["entropy"]),
    }
    if case.algo in (PPO, APPO):
        terms["clip_fraction"] = (info["loss/clip_fraction"], out["clip_fraction"])
        terms["kl_approx"] = (info["loss/kl_approx"], out["kl_approx"])
    return {
        "algorithm": algorithm,
        "batch": batch,
        "targets": diffs,
        "terms": terms,
        "grads": (fast_grads, ref_grads),
        "out": out,
        "reference": reference,
    }


# ------------------------------------------------------------------ the tests


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_fast_path_computes_torchrls_loss(case):
    result = parity(case)
    for key, diff in result["targets"].items():
        assert diff <= ATOL + RTOL, key  # advantages are O(1)
    for term, (fast, ref) in result["terms"].items():
        torch.testing.assert_close(
            fast, ref, rtol=RTOL, atol=ATOL, msg=lambda m, t=term: f"{t}: {m}"
        )
    fast_grads, ref_grads = result["grads"]
    assert fast_grads.keys() == ref_grads.keys()
    for name, ref in ref_grads.items():
        assert ref.abs().sum() > 0, name  # every parameter is reached: none compared vacuously
        torch.testing.assert_close(
            fast_grads[name], ref, rtol=RTOL, atol=ATOL, msg=lambda m, n=name: f"{n}: {m}"
        )
    # the batch exercises what the case is about
    out, reference = result["out"], result["reference"]
    assert reference.get("advantage").std() > 1e-4  # the std floors do not act
    assert torch.isfinite(out["entropy"])
    if case.algo in (PPO, APPO):
        assert 0 < out["clip_fraction"] < 1  # some ratios clipped, some not
    if case.clip_value is not None:
        assert 0 < out["value_clip_fraction"] < 1
    if case.algo in (IMPALA, APPO):
        algorithm, batch = result["algorithm"], result["batch"]
        with torch.no_grad():
            dist = algorithm.actor.get_dist(batch.select("observation"))
            ratio = (dist.log_prob(batch["action"]) - batch["action_log_prob"]).exp()
        rho_bar, c_bar = algorithm.config.rho_bar, algorithm.config.c_bar
        assert (ratio > rho_bar).any() and (ratio < c_bar).any()  # truncation acts, not always


def test_the_comparison_can_fail():
    """A loss that differs (another clip epsilon on one side) is told apart, at the tolerance."""
    case = Case(PPO, "categorical", True)
    algorithm = case.build()
    batch = collected_batch(algorithm)
    data = next(iter(algorithm.gradient_batches(batch.clone())))
    fast, _, _ = fast_path(algorithm, data, 0)
    algorithm.update_algorithm_parameter("clip_epsilon", 0.19)
    ref, _, _ = torchrl_path(algorithm, data, 0)
    assert not torch.allclose(fast, ref, rtol=RTOL, atol=ATOL)


def test_torchrls_vtrace_weighs_another_action():
    """Why the reference wraps the actor in :class:`TakenAction`: torchrl's ``VTrace`` given
    the actor itself scores its mode, not the batch's action, and gives other targets. (Should
    this fail, torchrl scores the taken action, and ``VTraceTargets`` could be its ``VTrace``.)"""
    case = Case(IMPALA, "categorical", False)
    algorithm = case.build()
    batch = collected_batch(algorithm)
    config = algorithm.config
    plain = VTrace(
        gamma=config.gamma,
        value_network=algorithm.critic,
        actor_network=algorithm.actor,
        rho_thresh=config.rho_bar,
        c_thresh=config.c_bar,
    )
    with torch.no_grad():
        theirs = plain(batch.clone())
    ours = algorithm.vtrace(batch.clone())
    assert not torch.allclose(theirs["value_target"], ours["value_target"])
    taken = reference_targets(case, algorithm, batch)
    torch.testing.assert_close(
        taken["value_target"], ours["value_target"].reshape(-1, 1), rtol=RTOL, atol=ATOL
    )

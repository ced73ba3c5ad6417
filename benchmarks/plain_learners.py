"""The limit fleetrl's learner is measured against: each update written in plain PyTorch.

Every learner here is written from the equations, on plain tensors: no
TensorDict, no torchrl loss module, no flat gradient route. It gets the same
networks as fleetrl's algorithm (deep copies of the ``nn.Module`` inside its
actor, critic or Q network, so the same layers and initial weights), the same
data (the collected batch as tensors), the same minibatch schedule, the same
optimizer (Adam with the same ``lr`` and ``eps``) and the same gradient-norm
clipping. What it leaves out is what an update does not need: logging beyond
the loss, keys nobody reads, dispatch.

- :class:`PlainPPO`: GAE on the batch with the current critic, then epochs x
  minibatches of the clipped objective (value clipping and advantage
  normalization per minibatch as configured). A shared pixel torso runs once
  per minibatch for both heads, as CleanRL's ``ppo_atari.py`` does.
- :class:`PlainA2C`: GAE, one step on the whole batch.
- :class:`PlainVTrace`: V-trace targets with the current actor and critic, then
  the A2C loss (IMPALA) or the clipped objective over epochs x minibatches (APPO).
- :class:`PlainDQN`: a tensor ring buffer, uniform samples, (double) DQN targets,
  a hard target copy every ``target_update_interval`` steps.
- :class:`PlainSAC`: a tensor ring buffer, two Q networks with soft targets, a
  tanh-squashed Gaussian actor, a learned temperature; one optimizer over all.
- :class:`PlainRecurrentPPO`: PPO's update of ``model: lstm`` (an MLP torso, an
  ``nn.LSTM`` shared by the policy and value heads): GAE on whole rows, then epochs x
  minibatches of shuffled sequences, the LSTM run over each from its stored state.

``step()`` is each learner's one optimizer step (what ``torch.compile`` wraps
for the compiled rows); ``learn(batch)`` is the whole update on one batch, as
``Algorithm.learn`` is.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

LOG2 = math.log(2.0)


# ------------------------------------------------------------------ distributions


def categorical_logp_entropy(
    logits: torch.Tensor, action: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    logp_all = logits.log_softmax(-1)
    logp = logp_all.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def normal_logp(z: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return -((z - loc) ** 2) / (2 * scale**2) - scale.log() - 0.5 * math.log(2 * math.pi)


def tanh_log_det(z: torch.Tensor) -> torch.Tensor:
    """log |d tanh(z) / dz| = log(1 - tanh(z)^2), written stably."""
    return 2.0 * (LOG2 - z - F.softplus(-2.0 * z))


class TanhNormalHead:
    """A Gaussian squashed by tanh into [low, high]: log-prob of a given action, and samples."""

    def __init__(self, low: torch.Tensor, high: torch.Tensor):
        self.mid = (high + low) / 2
        self.half = (high - low) / 2
        self.log_half = self.half.log()

    def to(self, device: torch.device) -> TanhNormalHead:
        self.mid, self.half, self.log_half = (
            t.to(device) for t in (self.mid, self.half, self.log_half)
        )
        return self

    def log_prob(
        self, loc: torch.Tensor, scale: torch.Tensor, action: torch.Tensor
    ) -> torch.Tensor:
        y = ((action - self.mid) / self.half).clamp(-1 + 1e-6, 1 - 1e-6)
        z = torch.atanh(y)
        return (normal_logp(z, loc, scale) - tanh_log_det(z) - self.log_half).sum(-1)

    def rsample(self, loc: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = loc + scale * torch.randn_like(loc)
        action = torch.tanh(z) * self.half + self.mid
        logp = (normal_logp(z, loc, scale) - tanh_log_det(z) - self.log_half).sum(-1)
        return action, logp


class Policy:
    """The actor's network and how its output becomes a log-prob (and an entropy)."""

    def __init__(self, body: nn.Module, kind: str, low: Any = None, high: Any = None):
        self.body, self.kind = body, kind
        self.tanh = TanhNormalHead(low, high) if kind == "tanh_normal" else None

    def to(self, device: torch.device) -> Policy:
        self.body.to(device)
        if self.tanh is not None:
            self.tanh.to(device)
        return self

    def logp_entropy(
        self, out: Any, action: torch.Tensor, with_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``out``: the body's output (logits, or (loc, scale))."""
        if self.kind == "categorical":
            logp, entropy = categorical_logp_entropy(out, action)
            return logp, entropy if with_entropy else None
        loc, scale = out
        if self.kind == "normal":
            logp = normal_logp(action, loc, scale).sum(-1)
            entropy = (0.5 + 0.5 * math.log(2 * math.pi) + scale.log()).sum(-1)
            return logp, entropy if with_entropy else None
        logp = self.tanh.log_prob(loc, scale, action)
        # no closed form for a squashed Gaussian: one-sample estimate, as torchrl's loss makes
        return logp, (-self.tanh.rsample(loc, scale)[1]) if with_entropy else None


def clip_and_step(params: list[torch.Tensor], opt: torch.optim.Optimizer, max_norm: Any) -> None:
    if max_norm is not None:
        nn.utils.clip_grad_norm_(params, max_norm)
    opt.step()


#: what one flat PPO minibatch holds, in ``step``'s order
PPO_KEYS = ("obs", "action", "logp", "adv", "ret", "value")


def shuffled_epochs(
    flat: dict[str, torch.Tensor], keys: tuple[str, ...], cfg: Any, step: Callable[..., Any]
) -> int:
    """``cfg.num_epochs`` passes of ``cfg.num_mini_batch`` shuffled minibatches of the
    rows of ``flat`` (``step`` called with ``keys``' tensors); returns the steps taken."""
    n = flat[keys[0]].shape[0]
    size = n // cfg.num_mini_batch
    steps = 0
    for _ in range(cfg.num_epochs):
        perm = torch.randperm(n, device=flat[keys[0]].device)
        for i in range(cfg.num_mini_batch):
            idx = perm[i * size : (i + 1) * size]
            step(*(flat[k][idx] for k in keys))
            steps += 1
    return steps


def grad_norm(loss: torch.Tensor, params: list[torch.Tensor]) -> float:
    """The norm of ``loss``'s gradient in ``params`` (``autograd.grad``: ``.grad`` untouched)."""
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return float(torch.stack([g.norm() for g in grads if g is not None]).norm())


def parity_record(
    fleet_loss: torch.Tensor, plain_loss: torch.Tensor, norms: list[float], adv_diff: torch.Tensor
) -> dict[str, float]:
    """What a parity check of fleetrl's loss against a plain learner's reports: both losses,
    both gradient norms, their differences and the largest advantage difference."""
    return {
        "fleetrl_loss": float(fleet_loss.detach()),
        "plain_loss": float(plain_loss.detach()),
        "loss_abs_diff": abs(float(fleet_loss.detach() - plain_loss.detach())),
        "fleetrl_grad_norm": norms[0],
        "plain_grad_norm": norms[1],
        "grad_norm_abs_diff": abs(norms[0] - norms[1]),
        "advantage_max_abs_diff": float(adv_diff.abs().max()),
    }


class LossStep:
    """One optimizer step of a learner's ``loss`` (``self.opt``, ``self.params``, ``self.cfg``):
    backward, the gradient-norm clip, Adam."""

    opt: torch.optim.Optimizer
    params: list[torch.Tensor]
    cfg: Any

    def loss(self, *minibatch: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def step(self, *minibatch: torch.Tensor) -> torch.Tensor:
        loss = self.loss(*minibatch)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_and_step(self.params, self.opt, self.cfg.max_grad_norm)
        return loss.detach()


# ------------------------------------------------------------------ on-policy


def gae(
    value: torch.Tensor,
    next_value: torch.Tensor,
    reward: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    gamma: float,
    lmbda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and value targets over ``[envs, time]`` (a done step cuts the trace)."""
    delta = reward + gamma * next_value * (~terminated) - value
    carry = gamma * lmbda * (~done)
    adv = torch.empty_like(delta)
    last = torch.zeros_like(delta[:, 0])
    for t in range(delta.shape[1] - 1, -1, -1):
        last = delta[:, t] + carry[:, t] * last
        adv[:, t] = last
    return adv, adv + value


def vtrace(
    log_rho: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    reward: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    gamma: float,
    rho_bar: float,
    c_bar: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace advantages and value targets over ``[envs, time]`` (Espeholt et al. 2018)."""
    rho = log_rho.exp()
    rho_c = rho.clamp(max=rho_bar)
    c = rho.clamp(max=c_bar)
    discount = gamma * (~terminated)
    delta = rho_c * (reward + discount * next_value - value)
    carry = gamma * c * (~done)
    vs_minus_v = torch.empty_like(delta)
    last = torch.zeros_like(delta[:, 0])
    for t in range(delta.shape[1] - 1, -1, -1):
        last = delta[:, t] + carry[:, t] * last
        vs_minus_v[:, t] = last
    vs = value + vs_minus_v
    vs_next = torch.cat([vs[:, 1:], next_value[:, -1:]], dim=1)
    vs_next = torch.where(done, next_value, vs_next)
    adv = rho_c * (reward + discount * vs_next - value)
    return adv, vs


def clipped_surrogate(
    logp: torch.Tensor, logp_old: torch.Tensor, adv: torch.Tensor, eps: float
) -> torch.Tensor:
    """PPO's clipped objective, ``-min(r A, clip(r, 1 - eps, 1 + eps) A)``, averaged."""
    ratio = (logp - logp_old).exp()
    return -torch.min(ratio * adv, ratio.clamp(1 - eps, 1 + eps) * adv).mean()


def value_loss(
    value: torch.Tensor, ret: torch.Tensor, value_old: torch.Tensor, clip_value: Any
) -> torch.Tensor:
    """The squared value error, averaged; with ``clip_value``, the larger of it and the
    error of the value clipped to within ``clip_value`` of ``value_old``."""
    loss = (value - ret) ** 2
    if clip_value:
        clipped = value_old + (value - value_old).clamp(-clip_value, clip_value)
        loss = torch.max(loss, (clipped - ret) ** 2)
    return loss.mean()


def normalized(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean()) / (x.std() + 1e-8)


class OnPolicyBase:
    """What PPO, A2C and V-trace share: the actor, the critic (maybe a shared torso), Adam."""

    def __init__(
        self,
        actor_body: nn.Module,
        critic_body: nn.Module,
        kind: str,
        cfg: Any,
        low: Any = None,
        high: Any = None,
        device: str = "cpu",
    ):
        # one deepcopy of both: a torso the two share stays shared in the copy
        actor_body, critic_body = copy.deepcopy((actor_body, critic_body))
        self.device = torch.device(device)
        self.policy = Policy(actor_body, kind, low, high).to(self.device)
        self.critic = critic_body.to(self.device)
        self.shared = _shared_torso(actor_body, critic_body)
        self.cfg = cfg
        params = {id(p): p for m in (actor_body, critic_body) for p in m.parameters()}
        self.params = list(params.values())
        self.opt = torch.optim.Adam(self.params, lr=cfg.lr, eps=1e-5)
        self.entropy = getattr(cfg, "entropy_coef", 0.0) > 0

    def forward(self, obs: torch.Tensor) -> tuple[Any, torch.Tensor]:
        """The policy's output and the value, the shared torso run once."""
        if self.shared is not None:
            torso, actor_head, critic_head = self.shared
            hidden = torso(obs)
            return actor_head(hidden), critic_head(hidden).squeeze(-1)
        return self.policy.body(obs), self.critic(obs).squeeze(-1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def to_device(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device, non_blocking=True) for k, v in data.items()}


def _shared_torso(actor_body: nn.Module, critic_body: nn.Module) -> Any:
    """(torso, actor head, critic head) when both are Sequential(torso, head) of one torso."""
    if (
        isinstance(actor_body, nn.Sequential)
        and isinstance(critic_body, nn.Sequential)
        and len(actor_body) == 2
        and len(critic_body) == 2
        and actor_body[0] is critic_body[0]
    ):
        return actor_body[0], actor_body[1], critic_body[1]
    return None


class PlainPPO(OnPolicyBase):
    """PPO from the equations (see the module docstring)."""

    def prepare(self, d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        c = self.cfg
        with torch.no_grad():
            value = self.value(d["obs"])
            next_value = self.value(d["next_obs"])
        adv, ret = gae(
            value, next_value, d["reward"], d["terminated"], d["done"], c.gamma, c.gae_lambda
        )
        flat = {
            "obs": d["obs"].flatten(0, 1),
            "action": d["action"].flatten(0, 1),
            "logp": d["logp"].flatten(0, 1),
            "adv": adv.flatten(),
            "ret": ret.flatten(),
            "value": value.flatten(),
        }
        return flat

    def step(self, obs, action, logp_old, adv, ret, value_old) -> torch.Tensor:
        c = self.cfg
        out, value = self.forward(obs)
        logp, entropy = self.policy.logp_entropy(out, action, self.entropy)
        if c.normalize_advantage:
            adv = normalized(adv)
        objective = clipped_surrogate(logp, logp_old, adv, c.clip_epsilon)
        loss = objective + c.critic_coef * value_loss(value, ret, value_old, c.clip_value)
        if entropy is not None:
            loss = loss - c.entropy_coef * entropy.mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_and_step(self.params, self.opt, c.max_grad_norm)
        return loss.detach()

    def learn(self, data: dict[str, torch.Tensor], step: Callable[..., Any] | None = None) -> int:
        return shuffled_epochs(
            self.prepare(self.to_device(data)), PPO_KEYS, self.cfg, step or self.step
        )


class PlainA2C(OnPolicyBase):
    """A2C from the equations: GAE, one step on the whole batch."""

    def step(self, obs, action, adv, ret) -> torch.Tensor:
        c = self.cfg
        out, value = self.forward(obs)
        logp, entropy = self.policy.logp_entropy(out, action, self.entropy)
        loss = -(logp * adv).mean() + c.critic_coef * ((value - ret) ** 2).mean()
        if entropy is not None:
            loss = loss - c.entropy_coef * entropy.mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_and_step(self.params, self.opt, c.max_grad_norm)
        return loss.detach()

    def learn(self, data: dict[str, torch.Tensor], step: Callable[..., Any] | None = None) -> int:
        step = step or self.step
        c = self.cfg
        d = self.to_device(data)
        with torch.no_grad():
            value = self.value(d["obs"])
            next_value = self.value(d["next_obs"])
        adv, ret = gae(
            value, next_value, d["reward"], d["terminated"], d["done"], c.gamma, c.gae_lambda
        )
        adv = normalized(adv) if c.normalize_advantage else adv
        step(d["obs"].flatten(0, 1), d["action"].flatten(0, 1), adv.flatten(), ret.flatten())
        return 1


class PlainVTrace(OnPolicyBase):
    """IMPALA (the A2C loss) or APPO (the clipped objective) on V-trace targets."""

    def __init__(self, *args: Any, clipped: bool, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.clipped = clipped

    def step(self, obs, action, logp_old, adv, ret, value_old) -> torch.Tensor:
        c = self.cfg
        out, value = self.forward(obs)
        logp, entropy = self.policy.logp_entropy(out, action, self.entropy)
        if self.clipped:
            if c.normalize_advantage:
                adv = normalized(adv)
            objective = clipped_surrogate(logp, logp_old, adv, c.clip_epsilon)
        else:
            objective = -(logp * adv).mean()
        clip_value = getattr(c, "clip_value", None)
        loss = objective + c.critic_coef * value_loss(value, ret, value_old, clip_value)
        if entropy is not None:
            loss = loss - c.entropy_coef * entropy.mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_and_step(self.params, self.opt, c.max_grad_norm)
        return loss.detach()

    def learn(self, data: dict[str, torch.Tensor], step: Callable[..., Any] | None = None) -> int:
        step = step or self.step
        c = self.cfg
        d = self.to_device(data)
        with torch.no_grad():
            out, value = self.forward(d["obs"])
            logp, _ = self.policy.logp_entropy(out, d["action"], False)
            next_value = self.value(d["next_obs"])
        adv, ret = vtrace(
            logp - d["logp"],
            value,
            next_value,
            d["reward"],
            d["terminated"],
            d["done"],
            c.gamma,
            c.rho_bar,
            c.c_bar,
        )
        if not self.clipped and c.normalize_advantage:
            adv = normalized(adv)
        flat = [
            d["obs"].flatten(0, 1),
            d["action"].flatten(0, 1),
            d["logp"].flatten(),
            adv.flatten(),
            ret.flatten(),
            value.flatten(),
        ]
        epochs = getattr(c, "num_epochs", 1)
        minibatches = getattr(c, "num_mini_batch", 1)
        n = flat[3].shape[0]
        size = n // minibatches
        steps = 0
        for _ in range(epochs):
            perm = torch.randperm(n, device=self.device)
            for i in range(minibatches):
                idx = perm[i * size : (i + 1) * size]
                step(*(t[idx] for t in flat))
                steps += 1
        return steps


# ------------------------------------------------------------------ replay


class RingBuffer:
    """Preallocated tensors, written by index, sampled uniformly with replacement."""

    def __init__(
        self, capacity: int, specs: dict[str, tuple[tuple[int, ...], torch.dtype]], device
    ):
        self.capacity = capacity
        self.data = {
            k: torch.empty((capacity, *s), dtype=dt, device=device) for k, (s, dt) in specs.items()
        }
        self.pos = 0
        self.size = 0

    def extend(self, batch: dict[str, torch.Tensor]) -> None:
        n = next(iter(batch.values())).shape[0]
        idx = (torch.arange(n) + self.pos) % self.capacity
        for k, v in batch.items():
            self.data[k][idx.to(v.device)] = v.to(self.data[k].device)
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.capacity, self.size + n)

    def sample(self, batch_size: int) -> list[torch.Tensor]:
        idx = torch.randint(self.size, (batch_size,), device=next(iter(self.data.values())).device)
        return [v[idx] for v in self.data.values()]


class PlainDQN:
    """(Double) DQN from the equations, on a tensor ring buffer."""

    def __init__(self, qnet: nn.Module, cfg: Any, obs_shape, obs_dtype, device: str = "cpu"):
        self.device = torch.device(device)
        self.q = copy.deepcopy(qnet).to(self.device)
        self.target = copy.deepcopy(qnet).to(self.device)
        self.target.requires_grad_(False)
        self.cfg = cfg
        self.params = list(self.q.parameters())
        self.opt = torch.optim.Adam(self.params, lr=cfg.lr)
        self.buffer = RingBuffer(
            cfg.buffer_size,
            {
                "obs": (tuple(obs_shape), obs_dtype),
                "action": ((), torch.int64),
                "reward": ((), torch.float32),
                "next_obs": (tuple(obs_shape), obs_dtype),
                "terminated": ((), torch.bool),
            },
            self.device,
        )
        self.updates = 0

    def step(self, obs, action, reward, next_obs, terminated) -> torch.Tensor:
        c = self.cfg
        q = self.q(obs).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            if c.double_dqn:
                best = self.q(next_obs).argmax(-1, keepdim=True)
                q_next = self.target(next_obs).gather(-1, best).squeeze(-1)
            else:
                q_next = self.target(next_obs).max(-1).values
            y = reward + c.gamma * (~terminated) * q_next
        loss = ((q - y) ** 2).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_and_step(self.params, self.opt, c.max_grad_norm)
        return loss.detach()

    def after_step(self) -> None:
        self.updates += 1
        if self.updates % self.cfg.target_update_interval == 0:
            with torch.no_grad():
                for t, p in zip(self.target.parameters(), self.q.parameters()):
                    t.copy_(p)

    def learn(self, data: dict[str, torch.Tensor], step: Callable[..., Any] | None = None) -> int:
        step = step or self.step
        self.buffer.extend({k: v.flatten(0, 1) for k, v in data.items() if k in self.buffer.data})
        for _ in range(self.cfg.updates_per_batch):
            step(*self.buffer.sample(self.cfg.batch_size))
            self.after_step()
        return self.cfg.updates_per_batch


class PlainSAC:
    """SAC (learned temperature) from the equations, on a tensor ring buffer."""

    def __init__(
        self, actor_body: nn.Module, qnet: nn.Module, cfg: Any, info: Any, device: str = "cpu"
    ):
        self.device = torch.device(device)
        self.actor = copy.deepcopy(actor_body).to(self.device)
        self.qs = [copy.deepcopy(qnet).to(self.device) for _ in range(2)]
        for q in self.qs[1].modules():  # a second, independently initialised Q network
            if isinstance(q, nn.Linear):
                q.reset_parameters()
        self.targets = [copy.deepcopy(q).requires_grad_(False) for q in self.qs]
        self.log_alpha = torch.zeros((), device=self.device, requires_grad=True)
        self.head = TanhNormalHead(info.action_low, info.action_high).to(self.device)
        self.target_entropy = -float(info.action_dim)
        self.cfg = cfg
        self.params = [
            self.log_alpha,
            *self.actor.parameters(),
            *(p for q in self.qs for p in q.parameters()),
        ]
        self.opt = torch.optim.Adam(self.params, lr=cfg.lr)
        self.buffer = RingBuffer(
            cfg.buffer_size,
            {
                "obs": ((info.obs_dim,), torch.float32),
                "action": ((info.action_dim,), torch.float32),
                "reward": ((), torch.float32),
                "next_obs": ((info.obs_dim,), torch.float32),
                "terminated": ((), torch.bool),
            },
            self.device,
        )

    @staticmethod
    def _q(
        q: nn.Module, obs: torch.Tensor, action: torch.Tensor, params: Any = None
    ) -> torch.Tensor:
        x = torch.cat([obs, action], -1)
        if params is None:
            return q(x).squeeze(-1)
        return torch.func.functional_call(q, params, (x,)).squeeze(-1)

    def step(self, obs, action, reward, next_obs, terminated) -> torch.Tensor:
        c = self.cfg
        alpha = self.log_alpha.exp()
        with torch.no_grad():
            next_action, next_logp = self.head.rsample(*self.actor(next_obs))
            q_next = torch.min(*(self._q(t, next_obs, next_action) for t in self.targets))
            y = reward + c.gamma * (~terminated) * (q_next - alpha * next_logp)
        q_loss = sum(((self._q(q, obs, action) - y) ** 2) for q in self.qs).mean()
        new_action, logp = self.head.rsample(*self.actor(obs))
        detached = [{n: p.detach() for n, p in q.named_parameters()} for q in self.qs]
        q_pi = torch.min(*(self._q(q, obs, new_action, d) for q, d in zip(self.qs, detached)))
        actor_loss = (alpha.detach() * logp - q_pi).mean()
        alpha_loss = (-self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        loss = actor_loss + q_loss + alpha_loss
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        clip_and_step(self.params, self.opt, c.max_grad_norm)
        return loss.detach()

    def after_step(self) -> None:
        with torch.no_grad():
            for t, q in zip(self.targets, self.qs):
                for tp, p in zip(t.parameters(), q.parameters()):
                    tp.lerp_(p, self.cfg.tau)

    def learn(self, data: dict[str, torch.Tensor], step: Callable[..., Any] | None = None) -> int:
        step = step or self.step
        self.buffer.extend({k: v.flatten(0, 1) for k, v in data.items() if k in self.buffer.data})
        for _ in range(self.cfg.updates_per_batch):
            step(*self.buffer.sample(self.cfg.batch_size))
            self.after_step()
        return self.cfg.updates_per_batch


# ------------------------------------------------------------------ recurrent


def unroll(
    lstm: nn.LSTM, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, starts: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The LSTM over ``x`` ``[B, T, D]``, its state reset to the stored one where a stretch starts.

    ``h``, ``c``: the stored state of each step, ``[B, T, layers, H]`` (torchrl's layout);
    ``starts`` ``[B, T]``: where an episode starts (the first step always counts as one).
    Each stretch from a start to the next starts from the state stored at its first step.
    Returns the outputs ``[B, T, H]`` and each row's last state ``[B, layers, H]``.

    Without a start past the first step the rows run as they are, in one call. Otherwise
    each stretch becomes a row of its own (padded to ``T``, packed with its length), so
    one call still runs every stretch and none reads another episode's steps.
    """
    rows, steps = starts.shape
    if not bool(starts[:, 1:].any()):
        state = (h[:, 0].transpose(0, 1).contiguous(), c[:, 0].transpose(0, 1).contiguous())
        y, (h_n, c_n) = lstm(x, state)
        return y, h_n.transpose(0, 1), c_n.transpose(0, 1)
    flat = starts.reshape(-1).clone()
    flat[::steps] = True
    stretch = flat.cumsum(0) - 1  # each step's stretch
    first = flat.nonzero().squeeze(1)  # each stretch's first step
    pos = torch.arange(flat.numel(), device=x.device) - first[stretch]
    lengths = torch.bincount(stretch, minlength=first.numel())
    padded = x.new_zeros(first.numel(), steps, x.shape[-1])
    padded[stretch, pos] = x.reshape(-1, x.shape[-1])
    state = tuple(s.flatten(0, 1)[first].transpose(0, 1).contiguous() for s in (h, c))
    packed = nn.utils.rnn.pack_padded_sequence(
        padded, lengths.cpu(), batch_first=True, enforce_sorted=False
    )
    out, (h_n, c_n) = lstm(packed, state)
    y, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=steps)
    last = stretch.reshape(rows, steps)[:, -1]
    y = y[stretch, pos].reshape(rows, steps, -1)
    return y, h_n[:, last].transpose(0, 1), c_n[:, last].transpose(0, 1)


class PlainRecurrentPPO(LossStep):
    """PPO with an LSTM trained through time, from the equations (the update of
    ``model: lstm``), on copies of fleetrl's networks: the MLP torso, an ``nn.LSTM``
    with the weights of torchrl's ``LSTMModule``, the policy and value heads.

    - GAE on each env's whole row, with values read one step at a time from the stored
      states (the next observation's from the state written after the step);
    - each row cut into sequences of ``seq_len`` steps, ``seq_len - burn_in`` apart (the
      last one padded, the padding out of the loss by a mask);
    - the LSTM run over each sequence from the state stored at its first step, the state
      reset to the stored one where an episode starts inside it (:func:`unroll`); the
      first ``burn_in`` steps run without gradient, their last state replacing the
      stored one unless an episode starts right after them;
    - ``num_epochs`` x ``num_mini_batch`` minibatches of shuffled sequences; the clipped
      objective, value loss and entropy averaged over the steps under the mask, the
      advantages normalized over those steps.

    The batch holds ``obs``, ``next_obs``, ``action``, ``logp``, ``reward``,
    ``terminated``, ``done``, ``is_init`` and the states ``h``, ``c``, ``next_h``,
    ``next_c`` over ``[envs, time]``.
    """

    #: what one sequence minibatch holds, in :meth:`step`'s order
    KEYS = ("obs", "action", "logp", "adv", "ret", "value", "h", "c", "init", "mask")

    def __init__(
        self,
        torso: nn.Module,
        core: nn.LSTM,
        policy_head: nn.Module,
        value_head: nn.Module,
        kind: str,
        cfg: Any,
        low: Any = None,
        high: Any = None,
        device: str = "cpu",
    ):
        self.device = torch.device(device)
        torso, policy_head, value_head = copy.deepcopy((torso, policy_head, value_head))
        # a plain nn.LSTM of the same shape, torchrl's weights copied in
        self.lstm = nn.LSTM(
            core.input_size, core.hidden_size, core.num_layers, batch_first=True
        ).to(self.device)
        self.lstm.load_state_dict(core.state_dict())
        self.torso = torso.to(self.device)
        self.value_head = value_head.to(self.device)
        self.policy = Policy(policy_head, kind, low, high).to(self.device)
        self.cfg = cfg
        self.seq_len, self.burn_in = cfg.seq_len, cfg.burn_in
        modules = (self.torso, self.lstm, policy_head, self.value_head)
        self.params = [p for m in modules for p in m.parameters()]
        self.opt = torch.optim.Adam(self.params, lr=cfg.lr, eps=1e-5)
        self.entropy = getattr(cfg, "entropy_coef", 0.0) > 0

    def to_device(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device, non_blocking=True) for k, v in data.items()}

    @torch.no_grad()
    def values(self, d: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """V(x_t) from the state stored at t, V(x_t+1) from the one written after t: one
        LSTM step each, both in one call."""
        obs = torch.cat([d["obs"], d["next_obs"]]).flatten(0, 1)
        state = (
            torch.cat([d[k], d[f"next_{k}"]]).flatten(0, 1).transpose(0, 1).contiguous()
            for k in ("h", "c")
        )
        y, _ = self.lstm(self.torso(obs).unsqueeze(1), tuple(state))
        value = self.value_head(y[:, 0]).squeeze(-1).reshape(2, *d["obs"].shape[:2])
        return value[0], value[1]

    def prepare(self, d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """GAE over the rows, then the rows cut into sequences ``[sequences, seq_len]``."""
        c = self.cfg
        value, next_value = self.values(d)
        adv, ret = gae(
            value, next_value, d["reward"], d["terminated"], d["done"], c.gamma, c.gae_lambda
        )
        starts = d["is_init"].clone()
        starts[:, 1:] |= d["done"][:, :-1]  # an episode starts after a done step
        rows = {
            "obs": d["obs"],
            "action": d["action"],
            "logp": d["logp"],
            "adv": adv,
            "ret": ret,
            "value": value,
            "h": d["h"],
            "c": d["c"],
        }
        count, steps = starts.shape
        stride = self.seq_len - self.burn_in
        per_row = math.ceil(steps / stride)
        slot = torch.arange(self.seq_len, device=self.device)
        time = torch.arange(per_row, device=self.device)[:, None] * stride - self.burn_in + slot
        inside = (time >= 0) & (time < steps)
        index = time.clamp(0, steps - 1)
        first = time == time.clamp_min(0)[:, :1]
        shape = (count * per_row, self.seq_len)
        seqs = {k: v[:, index.reshape(-1)].reshape(*shape, *v.shape[2:]) for k, v in rows.items()}
        seqs["init"] = (starts[:, index] & inside | first).reshape(shape)
        seqs["mask"] = (inside & (slot >= self.burn_in)).expand(count, -1, -1).reshape(shape)
        keep = seqs["mask"].any(-1)
        if not bool(keep.all()):  # sequences of burn-in padding only
            seqs = {k: v[keep] for k, v in seqs.items()}
        return seqs

    def memory(
        self, obs: torch.Tensor, h: torch.Tensor, c: torch.Tensor, init: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The LSTM's output at the steps after the burn-in, and those steps' resets."""
        b = self.burn_in
        if b:
            with torch.no_grad():
                _, h_b, c_b = unroll(
                    self.lstm, self.torso(obs[:, :b]), h[:, :b], c[:, :b], init[:, :b]
                )
            fresh = init[:, b].reshape(-1, 1, 1, 1)  # an episode starts there: keep its state
            h = torch.cat([torch.where(fresh, h[:, b : b + 1], h_b[:, None]), h[:, b + 1 :]], 1)
            c = torch.cat([torch.where(fresh, c[:, b : b + 1], c_b[:, None]), c[:, b + 1 :]], 1)
            obs, init = obs[:, b:], init[:, b:]
        y, _, _ = unroll(self.lstm, self.torso(obs), h, c, init)
        return y, init

    def loss(self, obs, action, logp_old, adv, ret, value_old, h, c, init, mask) -> torch.Tensor:
        cfg, b = self.cfg, self.burn_in
        y, _ = self.memory(obs, h, c, init)
        mask = mask[:, b:]
        y = y[mask]
        action, logp_old, adv, ret, value_old = (
            t[:, b:][mask] for t in (action, logp_old, adv, ret, value_old)
        )
        logp, entropy = self.policy.logp_entropy(self.policy.body(y), action, self.entropy)
        value = self.value_head(y).squeeze(-1)
        if cfg.normalize_advantage:
            adv = normalized(adv)
        objective = clipped_surrogate(logp, logp_old, adv, cfg.clip_epsilon)
        loss = objective + cfg.critic_coef * value_loss(value, ret, value_old, cfg.clip_value)
        if entropy is not None:
            loss = loss - cfg.entropy_coef * entropy.mean()
        return loss

    def learn(self, data: dict[str, torch.Tensor], step: Callable[..., Any] | None = None) -> int:
        step = step or self.step
        c = self.cfg
        seqs = self.prepare(self.to_device(data))
        count = seqs["mask"].shape[0]
        steps = 0
        for _ in range(c.num_epochs):
            if c.num_mini_batch == 1:
                step(*(seqs[k] for k in self.KEYS))
                steps += 1
                continue
            for idx in torch.randperm(count, device=self.device).tensor_split(c.num_mini_batch):
                step(*(seqs[k][idx] for k in self.KEYS))
                steps += 1
        return steps

"""Default networks the algorithms build when the user passes none.

Everything here is a plain torchrl/tensordict module, so a user's own
``TensorDictModule`` (an LSTM policy, a CNN) can stand in for any of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator

__all__ = ["EnvInfo", "env_info", "make_actor", "make_critic", "mlp"]


@dataclass
class EnvInfo:
    """What a model builder needs to know about the env."""

    obs_dim: int
    num_actions: int | None  # discrete: number of actions; continuous: None
    action_dim: int
    action_low: torch.Tensor | None
    action_high: torch.Tensor | None
    obs_shape: tuple[int, ...] = ()
    obs_dtype: torch.dtype = torch.float32  # torch.uint8 for a uint8 Box observation (pixels)

    @property
    def discrete(self) -> bool:
        return self.num_actions is not None


def env_info(env_id: Any) -> EnvInfo:
    """Read the spaces of a gymnasium env (Box observations; Discrete or Box actions).

    ``env_id`` may also be an ALE id or a :class:`fleetrl.engines.AtariEnv`: the
    env is then built through its engine, so the observation is the preprocessed
    frame stack, e.g. uint8 (4, 84, 84).
    """
    from fleetrl.engines import AtariEnv, is_atari_id

    if isinstance(env_id, str) and is_atari_id(env_id):
        env_id = AtariEnv(env_id)
    if isinstance(env_id, AtariEnv):
        return _engine_info(env_id)
    env = gym.make(env_id)
    try:
        obs, act = env.observation_space, env.action_space
        obs_shape = tuple(int(d) for d in obs.shape)
        obs_dim = int(torch.tensor(obs_shape).prod())
        obs_dtype = torch.uint8 if obs.dtype == np.uint8 else torch.float32
        if isinstance(act, gym.spaces.Discrete):
            return EnvInfo(obs_dim, int(act.n), 1, None, None, obs_shape, obs_dtype)
        low = torch.as_tensor(act.low, dtype=torch.float32)
        high = torch.as_tensor(act.high, dtype=torch.float32)
        return EnvInfo(obs_dim, None, int(act.shape[0]), low, high, obs_shape, obs_dtype)
    finally:
        env.close()


def _engine_info(spec: Any) -> EnvInfo:
    """An Atari env's spaces as its engine builds them (one env, closed at once)."""
    from fleetrl.envs import make_env

    env = make_env(spec, num_envs=1)
    try:
        shape, dtype = env.observation_spec["observation"]
        obs_dtype = torch.uint8 if dtype == np.uint8 else torch.float32
        obs_dim = int(np.prod(shape))
        return EnvInfo(obs_dim, env.num_actions, 1, None, None, tuple(shape), obs_dtype)
    finally:
        env.close()


def mlp(
    in_dim: int, out_dim: int, hidden: list[int], activation: type[nn.Module] = nn.Tanh
) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), activation()]
        in_dim = width
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


def make_actor(
    info: EnvInfo, hidden: list[int], activation: type[nn.Module] = nn.Tanh
) -> ProbabilisticActor:
    """Categorical over logits for discrete actions; TanhNormal within the bounds otherwise.

    Writes ``action`` and its log-prob (``action_log_prob``), what the PPO/A2C losses read.
    """
    if info.discrete:
        net = TensorDictModule(
            mlp(info.obs_dim, info.num_actions, hidden, activation),
            in_keys=["observation"],
            out_keys=["logits"],
        )
        return ProbabilisticActor(
            net,
            in_keys=["logits"],
            distribution_class=torch.distributions.Categorical,
            return_log_prob=True,
        )
    body = nn.Sequential(
        mlp(info.obs_dim, 2 * info.action_dim, hidden, activation), NormalParamExtractor()
    )
    net = TensorDictModule(body, in_keys=["observation"], out_keys=["loc", "scale"])
    return ProbabilisticActor(
        net,
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": info.action_low, "high": info.action_high},
        return_log_prob=True,
    )


def make_critic(info: EnvInfo, hidden: list[int]) -> ValueOperator:
    """State value V(s), written to ``state_value``."""
    return ValueOperator(mlp(info.obs_dim, 1, hidden), in_keys=["observation"])

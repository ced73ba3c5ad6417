"""Default networks the algorithms build when the user passes none.

Everything here is a plain torchrl/tensordict module, so a user's own
``TensorDictModule`` (an LSTM policy, a different CNN) can stand in for any of them.

Which network: ``<algo>.model`` (:class:`ModelKind`) is ``mlp``, ``cnn`` (the
Nature DQN convolutional torso), ``impala`` (IMPALA's residual torso) or
``auto``: ``cnn`` for a 3-D ``uint8`` observation (stacked frames, channels
first), ``mlp`` otherwise. The on-policy algorithms also take ``lstm`` and ``gru``:
a recurrent core (torchrl's ``LSTMModule`` / ``GRUModule``) on top of a torso
(``<algo>.torso``, :class:`TorsoKind`: the MLP, or the Nature or IMPALA convolutions for
frames), shared by the actor and the critic (:func:`make_recurrent_actor_critic`),
trained through time on sequences (:mod:`fleetrl.algorithms.sequences`). Observations stay ``uint8`` in batches and replay
buffers (a quarter of float32's bytes); the networks scale them by 1/255
inside. Initialisation follows CleanRL: orthogonal with gain sqrt(2) and zero
bias in the torso, 0.01 for the policy head, 1 for the value head.

Continuous actions (:class:`ActionDistribution`, ``ppo.distribution``):
``tanh_normal`` squashes a Gaussian whose mean and std the MLP outputs into the
action bounds (torchrl's ``TanhNormal``; SAC's policy); ``normal`` is CleanRL's
``ppo_continuous_action.py`` policy: the MLP outputs the mean, the log-std is
one learned parameter per action dim (state-independent, initialised to 0), the
actions are sampled from an unbounded Gaussian and clipped to the bounds at the
env (:class:`~fleetrl.envs.GymVectorEnv`), so the batch keeps the sample its
log-probability belongs to. ``normal`` also gives actor and critic CleanRL's
orthogonal init (gain sqrt(2); 0.01 for the mean head, 1 for the value head).

PPO and A2C share one pixel torso between actor and critic (CleanRL's
``ppo_atari.py`` does): a torso is ~99% of the compute and parameters, the
losses run it once each for actor and critic either way, and sharing halves
the parameters the optimizer steps and the weights sent to the collectors.
"""

from __future__ import annotations

import math

import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.modules import (
    GRUModule,
    IndependentNormal,
    LSTMModule,
    ProbabilisticActor,
    TanhNormal,
    ValueOperator,
)

from fleetrl.envs.spec import EnvSpec
from fleetrl.errors import EnvError
from fleetrl.keys import OBSERVATION_KEY
from fleetrl.networks.kinds import ActionDistribution, ModelKind, TorsoKind, core_only_problems

__all__ = [
    "ActionDistribution",
    "ImpalaTorso",
    "ModelKind",
    "NatureTorso",
    "StateIndependentScale",
    "TorsoKind",
    "check_default_actions",
    "conv_problems",
    "core_only_problems",
    "make_actor",
    "make_actor_critic",
    "make_critic",
    "make_qnet",
    "make_recurrent_actor_critic",
    "make_torso",
    "mlp",
    "resolve_model",
    "resolve_torso",
    "torso_problems",
]

CONV_OBS_MSG = (
    "{algo}.{key}={model!r} needs a 3-D (channels, height, width) observation, but env "
    "{env_id!r} has observation shape {shape}; use {algo}.{key}=mlp (or auto)"
)
CONV_ACTIONS_MSG = (
    "{algo}.model={model!r} builds discrete-action heads, but env {env_id!r} has "
    "continuous actions; use {algo}.model=mlp (or auto)"
)


def resolve_model(model: str | ModelKind, spec: EnvSpec) -> ModelKind:
    """``auto`` -> ``cnn`` for pixels (3-D uint8), ``mlp`` otherwise; other kinds as given."""
    kind = ModelKind(model)
    if kind is ModelKind.AUTO:
        return ModelKind.CNN if spec.pixels and spec.discrete else ModelKind.MLP
    return kind


def resolve_torso(torso: str | TorsoKind, spec: EnvSpec) -> ModelKind:
    """The network family of a recurrent core's torso: ``auto`` as :func:`resolve_model`
    resolves it (``cnn`` for frames), other kinds as given."""
    return resolve_model(ModelKind(TorsoKind(torso).value), spec)


def torso_problems(algo: str, model: str, torso: str, env_id: str, spec: EnvSpec) -> list[str]:
    """Why ``torso`` cannot serve under ``model`` on this env (empty when it can; a torso
    set under a feed-forward ``model`` is the section's own check, :func:`core_only_problems`)."""
    if TorsoKind(torso) is TorsoKind.AUTO or not ModelKind(model).recurrent:
        return []
    kind = resolve_torso(torso, spec)
    if kind is ModelKind.MLP or len(spec.obs_shape) == 3:  # any action heads sit on the core
        return []
    return [
        CONV_OBS_MSG.format(
            algo=algo, key="torso", model=kind.value, env_id=env_id, shape=spec.obs_shape
        )
    ]


def conv_problems(algo: str, model: str, env_id: str, spec: EnvSpec) -> list[str]:
    """Why ``model`` cannot serve this env (empty when it can): for config validation."""
    kind = resolve_model(model, spec)
    if kind in (ModelKind.AUTO, ModelKind.MLP) or kind.recurrent:
        return []
    problems = []
    if len(spec.obs_shape) != 3:
        problems.append(
            CONV_OBS_MSG.format(
                algo=algo, key="model", model=kind.value, env_id=env_id, shape=spec.obs_shape
            )
        )
    if not spec.discrete and algo != "dqn":  # DQN's own check already says it needs discrete
        problems.append(CONV_ACTIONS_MSG.format(algo=algo, model=kind.value, env_id=env_id))
    return problems


def layer_init(layer: nn.Module, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Module:
    """CleanRL's init: orthogonal weights with gain ``std``, constant bias."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class _PixelTorso(nn.Module):
    """Base of the conv torsos: (*batch, C, H, W) in, (*batch, features) out.

    Any leading batch dims (envs x time in a rollout) are folded into one for
    the convolutions. ``uint8`` input is scaled by 1/255 here, so frames stay
    ``uint8`` (4x smaller than float32) everywhere outside the network.

    A forward that records gradients on the CPU (the learner's) takes its frames in
    ``channels_last`` memory order: oneDNN's convolutions and their backward pass run about
    a fifth faster so (a Nature CNN's step on 256 frames stacks of 4x84x84 with Adam, one
    thread: ``benchmarks/conv_memory_format.py``), while a forward without gradients
    (acting, a batch's targets) keeps the default order, faster there for the Nature CNN.
    The weights and their gradients keep the default order.
    """

    out_features: int
    net: nn.Module

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        lead = obs.shape[:-3]
        x = obs.reshape(-1, *obs.shape[-3:])
        x = x.float() * (1.0 / 255.0) if x.dtype == torch.uint8 else x.float()
        if torch.is_grad_enabled() and x.device.type == "cpu":
            x = x.contiguous(memory_format=torch.channels_last)
        return self.net(x).reshape(*lead, self.out_features)


def _flat_size(convs: nn.Module, obs_shape: tuple[int, ...]) -> int:
    with torch.no_grad():
        return int(convs(torch.zeros(1, *obs_shape)).shape[-1])


class NatureTorso(_PixelTorso):
    """The Nature DQN convolutions (Mnih et al. 2015): 32x8s4, 64x4s2, 64x3s1, then 512 units.

    Examples:
        >>> torso = NatureTorso((4, 84, 84))
        >>> torso(torch.zeros(2, 3, 4, 84, 84, dtype=torch.uint8)).shape
        torch.Size([2, 3, 512])
    """

    def __init__(self, obs_shape: tuple[int, ...], features: int = 512):
        super().__init__()
        convs = nn.Sequential(
            layer_init(nn.Conv2d(obs_shape[0], 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
        )
        flat = _flat_size(convs, obs_shape)
        self.net = nn.Sequential(convs, layer_init(nn.Linear(flat, features)), nn.ReLU())
        self.out_features = features


class _ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


def _conv_sequence(in_channels: int, out_channels: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1),
        nn.MaxPool2d(3, stride=2, padding=1),
        _ResidualBlock(out_channels),
        _ResidualBlock(out_channels),
    )


class ImpalaTorso(_PixelTorso):
    """IMPALA's residual torso (Espeholt et al. 2018; CleanRL's ``ppo_procgen.py``).

    Three (conv, max-pool, two residual blocks) stages of 16, 32, 32 channels,
    then 256 units. Convolutions keep PyTorch's default init, as CleanRL does.

    Examples:
        >>> ImpalaTorso((4, 84, 84))(torch.zeros(5, 4, 84, 84, dtype=torch.uint8)).shape
        torch.Size([5, 256])
    """

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        channels: tuple[int, ...] = (16, 32, 32),
        features: int = 256,
    ):
        super().__init__()
        stages: list[nn.Module] = []
        in_channels = obs_shape[0]
        for out_channels in channels:
            stages.append(_conv_sequence(in_channels, out_channels))
            in_channels = out_channels
        convs = nn.Sequential(*stages, nn.Flatten(), nn.ReLU())
        flat = _flat_size(convs, obs_shape)
        self.net = nn.Sequential(convs, nn.Linear(flat, features), nn.ReLU())
        self.out_features = features


def make_torso(kind: ModelKind, spec: EnvSpec) -> _PixelTorso:
    """The conv torso of ``kind`` (``cnn`` or ``impala``) for this env's frames."""
    if kind is ModelKind.IMPALA:
        return ImpalaTorso(spec.obs_shape)
    return NatureTorso(spec.obs_shape)


def mlp(
    in_dim: int, out_dim: int, hidden: list[int], activation: type[nn.Module] = nn.Tanh
) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), activation()]
        in_dim = width
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


class _FlatInput(nn.Module):
    """An MLP's input from any observation: the trailing obs dims flattened, uint8 scaled."""

    def __init__(self, obs_shape: tuple[int, ...]):
        super().__init__()
        self.obs_ndim = len(obs_shape)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.flatten(-self.obs_ndim) if self.obs_ndim != 1 else obs
        return x.float() * (1.0 / 255.0) if x.dtype == torch.uint8 else x


def _mlp_for(
    spec: EnvSpec,
    out_dim: int,
    hidden: list[int],
    activation: type[nn.Module] = nn.Tanh,
    normalizer: nn.Module | None = None,
) -> nn.Module:
    net = mlp(spec.obs_dim, out_dim, hidden, activation)
    if len(spec.obs_shape) > 1 or spec.obs_dtype == torch.uint8:
        net = nn.Sequential(_FlatInput(spec.obs_shape), net)
    # the flat float case without a normalizer keeps the plain MLP (and its state_dict keys)
    return net if normalizer is None else nn.Sequential(normalizer, net)


class StateIndependentScale(nn.Module):
    """``loc`` from the wrapped network, ``scale`` = exp(log_std): one learned log-std per
    action dim, whatever the state (CleanRL's ``actor_logstd``).

    Examples:
        >>> head = StateIndependentScale(nn.Linear(3, 2), action_dim=2)
        >>> loc, scale = head(torch.zeros(5, 3))
        >>> loc.shape, scale.tolist()[0]
        (torch.Size([5, 2]), [1.0, 1.0])
    """

    def __init__(self, loc_net: nn.Module, action_dim: int):
        super().__init__()
        self.loc_net = loc_net
        self.log_std = nn.Parameter(torch.zeros(action_dim))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loc = self.loc_net(obs)
        return loc, self.log_std.exp().expand_as(loc)


def _init_cleanrl(net: nn.Module, head_std: float) -> nn.Module:
    """CleanRL's init on every Linear of ``net``: gain sqrt(2), the last one ``head_std``."""
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    for i, layer in enumerate(linears):
        layer_init(layer, std=head_std if i == len(linears) - 1 else math.sqrt(2))
    return net


INTEGER_ACTIONS_MSG = (
    "env {env_id!r} has {dim} integer actions that are not one Discrete (a MultiDiscrete or "
    "MultiBinary space): fleetrl's default networks take one Discrete or a Box of actions; "
    "pass networks built for this space in code (e.g. PPO(config, spec, actor=..., "
    "critic=...), Trainer(config, actor=..., critic=...)), or wrap the env's actions"
)


def check_default_actions(spec: EnvSpec) -> None:
    """Refuse to build a default network for actions it cannot produce (before any actor).

    Raises:
        EnvError: a MultiDiscrete or MultiBinary action space.
    """
    if spec.integer_actions:
        raise EnvError(INTEGER_ACTIONS_MSG.format(env_id=spec.env_id, dim=spec.action_dim))


def make_actor(
    spec: EnvSpec,
    hidden: list[int],
    activation: type[nn.Module] = nn.Tanh,
    normalizer: nn.Module | None = None,
    distribution: str | ActionDistribution = ActionDistribution.TANH_NORMAL,
) -> ProbabilisticActor:
    """An MLP policy: Categorical over logits for discrete actions; for continuous ones a
    TanhNormal within the bounds, or CleanRL's Normal (see :class:`ActionDistribution`).

    Writes ``action`` and its log-prob (``action_log_prob``), what the PPO/A2C losses read.
    A ``normalizer`` (:class:`~fleetrl.networks.normalization.ObservationNormalizer`) comes first in
    the network: the policy acts on normalized observations.
    """
    check_default_actions(spec)
    if spec.discrete:
        return _categorical(_mlp_for(spec, spec.num_actions, hidden, activation, normalizer))
    if ActionDistribution(distribution) is ActionDistribution.NORMAL:
        loc_net = _init_cleanrl(
            _mlp_for(spec, spec.action_dim, hidden, activation, normalizer), 0.01
        )
        body = StateIndependentScale(loc_net, spec.action_dim)
        net = TensorDictModule(body, in_keys=[OBSERVATION_KEY], out_keys=["loc", "scale"])
        return ProbabilisticActor(
            net,
            in_keys=["loc", "scale"],
            distribution_class=IndependentNormal,  # log-prob summed over the action dims
            return_log_prob=True,
        )
    body = nn.Sequential(
        _mlp_for(spec, 2 * spec.action_dim, hidden, activation, normalizer),
        NormalParamExtractor(),
    )
    net = TensorDictModule(body, in_keys=[OBSERVATION_KEY], out_keys=["loc", "scale"])
    return ProbabilisticActor(
        net,
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": spec.action_low, "high": spec.action_high},
        return_log_prob=True,
    )


def make_critic(
    spec: EnvSpec,
    hidden: list[int],
    normalizer: nn.Module | None = None,
    *,
    cleanrl_init: bool = False,
) -> ValueOperator:
    """An MLP state value V(s), written to ``state_value`` (``normalizer`` first, if given;
    ``cleanrl_init``: orthogonal, gain 1 on the value head)."""
    net = _mlp_for(spec, 1, hidden, normalizer=normalizer)
    return ValueOperator(
        _init_cleanrl(net, 1.0) if cleanrl_init else net, in_keys=[OBSERVATION_KEY]
    )


def _categorical(logits_net: nn.Module) -> ProbabilisticActor:
    net = TensorDictModule(logits_net, in_keys=[OBSERVATION_KEY], out_keys=["logits"])
    return ProbabilisticActor(
        net,
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )


def make_actor_critic(
    model: str | ModelKind,
    spec: EnvSpec,
    hidden: list[int],
    *,
    actor: nn.Module | None = None,
    critic: nn.Module | None = None,
    normalizer: nn.Module | None = None,
    distribution: str | ActionDistribution = ActionDistribution.TANH_NORMAL,
    recurrent_size: int = 128,
    torso: str | TorsoKind = TorsoKind.AUTO,
    head_sizes: list[int] | tuple[int, ...] = (),
) -> tuple[nn.Module, nn.Module]:
    """PPO/A2C's actor and critic: the given ones, the missing ones built for ``model``.

    ``normalizer`` (``mlp`` only): one
    :class:`~fleetrl.networks.normalization.ObservationNormalizer` shared by the actor and
    the critic built here, first in each network. ``distribution`` picks the
    continuous-action policy of an ``mlp`` model (:class:`ActionDistribution`);
    ``normal`` also inits both MLPs as CleanRL.

    ``cnn``/``impala``: one conv torso shared by a Categorical policy head
    (orthogonal init, gain 0.01) and a value head (gain 1); ``hidden`` is
    unused. When the user gives one of the two, the other gets a torso of its
    own. ``mlp``: separate MLPs of ``hidden`` widths (see :class:`ModelKind`).
    ``lstm``/``gru``: :func:`make_recurrent_actor_critic` with ``recurrent_size`` units
    on a ``torso`` (:class:`TorsoKind`), and heads of ``head_sizes`` hidden widths.

    Examples:
        >>> spec = EnvSpec(4 * 84 * 84, 6, 1, None, None, (4, 84, 84), torch.uint8)
        >>> actor, critic = make_actor_critic("auto", spec, [64, 64])
        >>> [type(m).__name__ for m in critic.module]
        ['NatureTorso', 'Linear']
    """
    kind = resolve_model(model, spec)
    if kind.recurrent:
        return make_recurrent_actor_critic(
            kind,
            spec,
            hidden,
            recurrent_size,
            actor=actor,
            critic=critic,
            normalizer=normalizer,
            distribution=distribution,
            torso=torso,
            head_sizes=head_sizes,
        )
    unread = [key for key, _ in core_only_problems("", kind, torso, head_sizes)]
    if unread:
        raise ValueError(
            f"{' and '.join(unread)}: read only under a recurrent core (model 'lstm' or "
            f"'gru'), not with model={kind.value!r}"
        )
    if kind is ModelKind.MLP:
        cleanrl = not spec.discrete and distribution == ActionDistribution.NORMAL
        if actor is None:
            actor = make_actor(spec, hidden, normalizer=normalizer, distribution=distribution)
        if critic is None:
            critic = make_critic(spec, hidden, normalizer, cleanrl_init=cleanrl)
        return actor, critic
    torso = make_torso(kind, spec) if actor is None or critic is None else None
    body = torso if normalizer is None or torso is None else nn.Sequential(normalizer, torso)
    if actor is None:
        check_default_actions(spec)
        head = layer_init(nn.Linear(torso.out_features, spec.num_actions), std=0.01)
        actor = _categorical(nn.Sequential(body, head))
    if critic is None:
        # the same torso module as the actor's when both are built here: torchrl's
        # losses count a shared parameter once, and the critic's gradient reaches it too
        head = layer_init(nn.Linear(torso.out_features, 1), std=1.0)
        critic = ValueOperator(nn.Sequential(body, head), in_keys=[OBSERVATION_KEY])
    return actor, critic


def make_recurrent_actor_critic(
    kind: ModelKind,
    spec: EnvSpec,
    hidden: list[int],
    recurrent_size: int,
    *,
    actor: nn.Module | None = None,
    critic: nn.Module | None = None,
    normalizer: nn.Module | None = None,
    distribution: str | ActionDistribution = ActionDistribution.TANH_NORMAL,
    torso: str | TorsoKind = TorsoKind.AUTO,
    head_sizes: list[int] | tuple[int, ...] = (),
) -> tuple[nn.Module, nn.Module]:
    """An actor and a critic that share one torso and one recurrent core.

    The torso (:class:`TorsoKind`; ``auto``: the Nature CNN for frames, the MLP otherwise)
    reads ``"observation"`` and writes ``embed``:

    - ``mlp``: ``hidden`` widths with Tanh, ``normalizer`` first;
    - ``cnn`` / ``impala``: the Nature or IMPALA convolutions and their 512 / 256 units
      (``hidden`` unused; frames are scaled inside, so no ``normalizer``). The core then
      gets CleanRL's ``ppo_atari_lstm.py`` init: orthogonal weights, zero biases.

    The core (torchrl's ``LSTMModule`` for ``lstm``, ``GRUModule`` for ``gru``, of
    ``recurrent_size`` units) reads ``embed`` with its state and writes ``memory``; a policy
    head (Categorical, or TanhNormal within the action bounds) and a value head read
    ``memory``, each through its own hidden layers of ``head_sizes`` widths (Tanh; none by
    default: a linear layer on the core, as CleanRL's). Sharing the core means the state the collectors carry for the policy
    is the critic's state too (CleanRL's ``ppo_atari_lstm.py`` shares it as well).
    When the user gives one of the two, the other is the feed-forward default
    (``mlp``): a core of its own would read a state nobody carries.

    Examples:
        >>> spec = EnvSpec(4, 2, 1, None, None, (4,), torch.float32)
        >>> actor, critic = make_recurrent_actor_critic(ModelKind.LSTM, spec, [64], 32)
        >>> sorted(k for k in actor.in_keys)
        ['is_init', 'observation', 'recurrent_state_c', 'recurrent_state_h']
        >>> list(critic.module)[1] is list(actor.module[0].module)[1]
        True
        >>> frames = EnvSpec(4 * 84 * 84, 6, 1, None, None, (4, 84, 84), torch.uint8)
        >>> actor, critic = make_recurrent_actor_critic(ModelKind.GRU, frames, [64], 128)
        >>> [type(m).__name__ for m in critic.module[0].module.modules()][:2]
        ['NatureTorso', 'Sequential']
    """
    if actor is not None or critic is not None:
        return make_actor_critic(
            ModelKind.MLP,
            spec,
            hidden,
            actor=actor,
            critic=critic,
            normalizer=normalizer,
            distribution=distribution,
        )
    check_default_actions(spec)
    torso_kind = resolve_torso(torso, spec)
    if torso_kind is ModelKind.MLP:
        width = hidden[-1] if hidden else spec.obs_dim
        body: nn.Module = (
            nn.Sequential(_mlp_for(spec, width, hidden[:-1], normalizer=normalizer), nn.Tanh())
            if hidden
            else nn.Sequential(
                *([normalizer] if normalizer is not None else []), _FlatInput(spec.obs_shape)
            )
        )
    else:
        if len(spec.obs_shape) != 3:
            raise ValueError(
                f"torso={torso_kind.value!r} needs a 3-D (channels, height, width) "
                f"observation, not shape {spec.obs_shape}"
            )
        pixels = make_torso(torso_kind, spec)
        width = pixels.out_features
        body = pixels if normalizer is None else nn.Sequential(normalizer, pixels)
    trunk = TensorDictModule(body, in_keys=[OBSERVATION_KEY], out_keys=["embed"])
    core_class = LSTMModule if kind is ModelKind.LSTM else GRUModule
    core = core_class(
        input_size=width, hidden_size=recurrent_size, in_key="embed", out_key="memory"
    )
    if torso_kind is not ModelKind.MLP:
        for name, param in core.named_parameters():
            if "bias" in name:
                nn.init.constant_(param, 0.0)
            elif "weight" in name:
                nn.init.orthogonal_(param, 1.0)
    if spec.discrete:
        head = _head(recurrent_size, spec.num_actions, head_sizes, std=0.01)
        policy = TensorDictModule(head, in_keys=["memory"], out_keys=["logits"])
        actor = ProbabilisticActor(
            TensorDictSequential(trunk, core, policy),
            in_keys=["logits"],
            distribution_class=torch.distributions.Categorical,
            return_log_prob=True,
        )
    elif ActionDistribution(distribution) is ActionDistribution.NORMAL:
        # CleanRL's Normal, as make_actor builds it: a state-independent scale
        loc = _head(recurrent_size, spec.action_dim, head_sizes, std=0.01)
        head = StateIndependentScale(loc, spec.action_dim)
        policy = TensorDictModule(head, in_keys=["memory"], out_keys=["loc", "scale"])
        actor = ProbabilisticActor(
            TensorDictSequential(trunk, core, policy),
            in_keys=["loc", "scale"],
            distribution_class=IndependentNormal,  # log-prob summed over the action dims
            return_log_prob=True,
        )
    else:
        head = nn.Sequential(
            _head(recurrent_size, 2 * spec.action_dim, head_sizes, std=0.01),
            NormalParamExtractor(),
        )
        policy = TensorDictModule(head, in_keys=["memory"], out_keys=["loc", "scale"])
        actor = ProbabilisticActor(
            TensorDictSequential(trunk, core, policy),
            in_keys=["loc", "scale"],
            distribution_class=TanhNormal,
            distribution_kwargs={"low": spec.action_low, "high": spec.action_high},
            return_log_prob=True,
        )
    value = ValueOperator(_head(recurrent_size, 1, head_sizes, std=1.0), in_keys=["memory"])
    return actor, TensorDictSequential(trunk, core, value)


def _head(
    in_features: int, out_features: int, hidden: list[int] | tuple[int, ...], std: float
) -> nn.Module:
    """A head on the core's output: a linear layer (orthogonal, gain ``std``), after hidden
    Tanh layers of ``hidden`` widths (gain sqrt(2)) where there are any."""
    last = layer_init(nn.Linear(hidden[-1] if hidden else in_features, out_features), std=std)
    if not hidden:
        return last
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [layer_init(nn.Linear(in_features, width)), nn.Tanh()]
        in_features = width
    return nn.Sequential(*layers, last)


def make_qnet(model: str | ModelKind, spec: EnvSpec, hidden: list[int]) -> nn.Module:
    """DQN's default Q network, observation -> one value per action.

    ``cnn``: CleanRL's ``dqn_atari.py`` network (Nature torso, then a linear
    layer per action); ``impala``: the IMPALA torso instead; ``mlp``: ReLU
    layers of ``hidden`` widths.
    """
    check_default_actions(spec)
    kind = resolve_model(model, spec)
    if kind is ModelKind.MLP:
        return _mlp_for(spec, spec.num_actions, hidden, nn.ReLU)
    torso = make_torso(kind, spec)
    # CleanRL's DQN keeps PyTorch's default init; the shared orthogonal torso does as well
    return nn.Sequential(torso, layer_init(nn.Linear(torso.out_features, spec.num_actions), 1.0))

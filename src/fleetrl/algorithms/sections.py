"""The algorithms' config sections: the ``ppo:``, ``sac:``, ... part of a config, and its checks.

Plain data, no torch: ``fleetrl train`` parses a config and checks every key that needs no
env (:func:`fleetrl.setup.verify.config_rules`) before torch, torchrl or Ray is imported,
so a typo or a value out of range is refused at once. Each algorithm's file
(:mod:`fleetrl.algorithms.ppo`, ...) builds its networks and loss from its section here.

:data:`SECTIONS` is the registry a config's ``algorithm`` is looked up in; each section
class says whether its algorithm learns on-policy (:attr:`~fleetrl.config.AlgorithmConfig.on_policy`)
and whether it trains the agent groups of a multi-agent env (``multi_agent``).

Examples:
    >>> sorted(SECTIONS)
    ['a2c', 'appo', 'dqn', 'impala', 'ippo', 'mappo', 'ppo', 'sac']
    >>> SECTIONS["sac"].on_policy, SECTIONS["mappo"].multi_agent, MULTI_AGENT
    (False, True, ('mappo', 'ippo'))
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fleetrl.config import AlgorithmConfig, Config, Schedule
from fleetrl.errors import Problems
from fleetrl.networks.kinds import (
    BURN_IN_MSG,
    SEQ_LEN_MSG,
    ActionDistribution,
    ModelKind,
    TorsoKind,
    core_only_problems,
)

__all__ = [
    "CRITIC_INPUTS",
    "MULTI_AGENT",
    "SAC_CUDAGRAPHS_MSG",
    "SECTIONS",
    "A2CConfig",
    "APPOConfig",
    "ActorCriticConfig",
    "Advantage",
    "DQNConfig",
    "IMPALAConfig",
    "IPPOConfig",
    "MAPPOConfig",
    "MultiAgentPPOConfig",
    "PPOConfig",
    "PPOFields",
    "ReplayConfig",
    "SACConfig",
    "VTraceConfig",
    "check_clipped_objective",
    "check_clipping",
]


class Advantage(str, enum.Enum):
    """What APPO's clipped objective is given (``appo.advantage``)."""

    VTRACE = "vtrace"  # V-trace's advantages and targets, corrected for the batch's lag
    GAE = "gae"  # GAE's with the current critic; the lag is left to the clip (Sample Factory's)


@dataclass
class ActorCriticConfig(AlgorithmConfig):
    """What the actor-critic sections share (checked here: GAE, the loss coefficients, and
    the sequences a recurrent policy trains on)."""

    recurrent_size: int = 128
    """units of the recurrent core of model lstm or gru (its hidden state's size)."""
    seq_len: int = 16
    """recurrent networks (model lstm or gru, or an LSTMModule / GRUModule passed in code):
    steps per training sequence, burn_in included; gradients flow through these steps."""
    burn_in: int = 0
    """recurrent networks: steps at each sequence's start run without gradient to refresh the
    stored state, left out of the loss (consecutive sequences overlap by these steps)."""
    torso: TorsoKind = TorsoKind.AUTO
    """the torso under the recurrent core of model lstm or gru: 'auto' (cnn for 3-D uint8
    observations, else mlp), 'mlp' (hidden_sizes), 'cnn' (Nature CNN) or 'impala' (IMPALA
    ResNet); a feed-forward model picks its network with model instead."""
    head_sizes: list[int] = field(default_factory=list)
    """recurrent networks (model lstm or gru): hidden Tanh layers after the core, in the
    policy head and, separately, in the value head ([]: a linear layer on the core)."""

    def validate(self, config: Config, check: Problems) -> None:
        super().validate(config, check)
        if hasattr(self, "gae_lambda"):
            check(0 <= self.gae_lambda <= 1, "gae_lambda", self.gae_lambda, "must be in [0, 1]")
        for name in ("entropy_coef", "critic_coef"):
            check(getattr(self, name) >= 0, name, getattr(self, name), "must be >= 0")
        check(self.recurrent_size > 0, "recurrent_size", self.recurrent_size, "must be > 0")
        check(self.seq_len >= 1, "seq_len", self.seq_len, SEQ_LEN_MSG)
        check(
            self.seq_len < 1 or 0 <= self.burn_in < self.seq_len,
            "burn_in",
            self.burn_in,
            BURN_IN_MSG.format(seq_len=self.seq_len),
        )
        model = getattr(self, "model", None)
        recurrent = isinstance(model, ModelKind) and model.recurrent
        check(
            all(isinstance(h, int) and h > 0 for h in self.head_sizes),
            "head_sizes",
            self.head_sizes,
            "must be a list of positive layer widths",
        )
        if isinstance(model, ModelKind):
            for key, text in core_only_problems(
                config.algorithm, model, self.torso, self.head_sizes
            ):
                if not check.has(key):
                    check.say(key, text)
        if recurrent:
            check(
                not self.compile and not self.cudagraphs,
                "compile" if self.compile else "cudagraphs",
                self.compile if self.compile else self.cudagraphs,
                f"must be false with model={model.value!r}: sequence minibatches (padding, "
                "burn-in) have data-dependent shapes",
            )


@dataclass
class PPOFields:
    """The fields the ``ppo``, ``mappo`` and ``ippo`` sections share: PPO's clipped objective
    on GAE advantages, in epochs of minibatches, with PPO's defaults and doc lines.

    Mixed in before the section's base (``PPOConfig(PPOFields, ActorCriticConfig)``), so
    these keys follow the base's in the section; a section whose default or doc line of a
    field differs declares that field again (it keeps its place). The checks they share:
    :func:`check_clipping`.
    """

    lr: float = 3e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_epsilon: float = 0.2
    """PPO ratio clipping."""
    clip_schedule: Schedule = Schedule.CONSTANT
    """'constant' or 'linear' decay of clip_epsilon (to 0 at trainer.total_frames)."""
    entropy_coef: float = 0.0
    """entropy bonus coefficient."""
    critic_coef: float = 0.5
    """value loss coefficient."""
    num_epochs: int = 4
    """passes over each batch."""
    num_mini_batch: int = 4
    """minibatches per epoch."""
    normalize_advantage: bool = True
    """normalize advantages per minibatch."""
    clip_value: float | None = None
    """clip the value update to this range around the old value (None: off)."""
    max_grad_norm: float | None = 0.5
    """clip the gradient norm (None: off)."""


# ------------------------------------------------------------------ the loss terms


def check_clipping(section: Any, check: Problems) -> None:
    """The checks every clipped-objective section shares (``ppo``, ``appo``, ``mappo``,
    ``ippo``), none of which needs the whole config: the clip, the value clip, the epochs."""
    check(section.clip_epsilon > 0, "clip_epsilon", section.clip_epsilon, "must be > 0")
    check(
        section.clip_value is None or section.clip_value > 0,
        "clip_value",
        section.clip_value,
        "must be > 0, or null: off",
    )
    check(section.num_epochs > 0, "num_epochs", section.num_epochs, "must be > 0")


def check_clipped_objective(section: Any, config: Config, check: Problems) -> None:
    """The checks PPO's and APPO's sections share: the clip, the value clip, and epochs of
    minibatches that divide the batch (``section``: a PPOConfig or an APPOConfig)."""
    check_clipping(section, check)
    frames = config.collector.frames_per_batch
    check(
        section.num_mini_batch > 0 and frames % section.num_mini_batch == 0,
        "num_mini_batch",
        section.num_mini_batch,
        f"must be > 0 and divide collector.frames_per_batch ({frames})",
    )


@dataclass
class PPOConfig(PPOFields, ActorCriticConfig):
    """The ``ppo`` section of a config.

    Examples:
        >>> from fleetrl.algorithms.ppo import PPO
        >>> from fleetrl.envs.probe import env_spec
        >>> ppo = PPO(PPOConfig(num_epochs=2, num_mini_batch=4), env_spec("CartPole-v1"))
        >>> ppo.steps_per_batch, ppo.config.clip_epsilon
        (8, 0.2)"""

    # lr to max_grad_norm (the clip and epoch keys): PPOFields's
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    """hidden layers of the actor and critic MLPs."""
    distribution: ActionDistribution = ActionDistribution.TANH_NORMAL
    """continuous actions: 'tanh_normal' (mean and std from the MLP, squashed into the
    bounds) or 'normal' (CleanRL's ppo_continuous_action.py: state-independent log-std,
    the Gaussian sample clipped to the bounds at the env, CleanRL's orthogonal init);
    discrete actions always use a Categorical."""
    model: ModelKind = ModelKind.AUTO
    """default network: 'auto' (cnn for 3-D uint8 observations, else mlp), 'mlp', 'cnn'
    (Nature CNN), 'impala' (IMPALA ResNet), or 'lstm' / 'gru' (a recurrent core of
    recurrent_size units on a torso (torso), trained through time on sequences of seq_len
    steps); modules passed in code win."""

    def validate(self, config: Config, check: Problems) -> None:
        super().validate(config, check)
        check_clipped_objective(self, config, check)


@dataclass
class A2CConfig(ActorCriticConfig):
    """The ``a2c`` section of a config (checks: :class:`ActorCriticConfig`'s).

    Examples:
        >>> from fleetrl.algorithms.a2c import A2C
        >>> from fleetrl.envs.probe import env_spec
        >>> a2c = A2C(A2CConfig(lr=1e-3, hidden_sizes=[32]), env_spec("CartPole-v1"))
        >>> a2c.steps_per_batch, a2c.optimizer.param_groups[0]["lr"]
        (1, 0.001)"""

    lr: float = 7e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """discount factor."""
    gae_lambda: float = 1.0
    """GAE lambda (1.0: n-step returns)."""
    entropy_coef: float = 0.01
    """entropy bonus coefficient."""
    critic_coef: float = 0.5
    """value loss coefficient."""
    max_grad_norm: float | None = 0.5
    """clip the gradient norm (None: off)."""
    normalize_advantage: bool = False
    """normalize advantages per batch."""
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    """hidden layers of the actor and critic MLPs."""
    model: ModelKind = ModelKind.AUTO
    """default network: 'auto' (cnn for 3-D uint8 observations, else mlp), 'mlp', 'cnn'
    (Nature CNN), 'impala' (IMPALA ResNet), or 'lstm' / 'gru' (a recurrent core of
    recurrent_size units on a torso (torso), trained through time on sequences of seq_len
    steps); modules passed in code win."""


@dataclass
class VTraceConfig(ActorCriticConfig):
    """What the ``impala`` and ``appo`` sections share: V-trace truncation and the lag bound."""

    lr: float = 5e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """discount factor."""
    rho_bar: float = 1.0
    """truncation of the importance weights in the V-trace temporal differences and the
    policy-gradient advantage (the paper's rho-bar); > 0 and >= c_bar."""
    c_bar: float = 1.0
    """truncation of the importance weights that carry corrections back in time (the
    paper's c-bar, the 'trace cutting'); > 0 and <= rho_bar."""
    max_learn_lag: int | None = 32
    """drop a batch that arrives more than this many optimizer steps behind the learner
    (counted in train/dropped_batches; null: no bound). Must be at least the lag that
    trainer.weight_update_interval alone gives: (interval - 1) x steps per batch."""
    entropy_coef: float = 0.01
    """entropy bonus coefficient."""
    critic_coef: float = 0.5
    """value loss coefficient."""
    max_grad_norm: float | None = 40.0
    """clip the gradient norm (None: off; the IMPALA paper's 40)."""
    normalize_advantage: bool = False
    """normalize advantages per minibatch."""
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    """hidden layers of the actor and critic MLPs."""
    model: ModelKind = ModelKind.AUTO
    """default network: 'auto' (cnn for 3-D uint8 observations, else mlp), 'mlp', 'cnn'
    (Nature CNN), 'impala' (IMPALA ResNet), or 'lstm' / 'gru' (a recurrent core of
    recurrent_size units on a torso (torso), trained through time on sequences of seq_len
    steps); modules passed in code win."""

    @property
    def steps_per_batch(self) -> int:
        """Optimizer steps on each collected batch."""
        return 1

    def validate(self, config: Config, check: Problems) -> None:
        super().validate(config, check)
        check(self.rho_bar > 0, "rho_bar", self.rho_bar, "must be > 0 (1.0: the paper's)")
        check(
            0 < self.c_bar <= max(self.rho_bar, 0),
            "c_bar",
            self.c_bar,
            f"must be > 0 and <= rho_bar ({self.rho_bar}) (1.0: the paper's)",
        )
        interval = config.trainer.weight_update_interval
        least = max(0, interval - 1) * self.steps_per_batch
        check(
            self.max_learn_lag is None or self.max_learn_lag >= least,
            "max_learn_lag",
            self.max_learn_lag,
            f"must be null (no bound) or >= {least}: with trainer.weight_update_interval="
            f"{interval} and {self.steps_per_batch} optimizer steps per batch, batches arrive "
            f"up to {least} steps behind even without asynchrony, and every one would be dropped",
        )


@dataclass
class IMPALAConfig(VTraceConfig):
    """The ``impala`` section of a config (checks: :class:`VTraceConfig`'s).

    Examples:
        >>> from fleetrl.algorithms.impala import IMPALA
        >>> from fleetrl.envs.probe import env_spec
        >>> impala = IMPALA(IMPALAConfig(hidden_sizes=[32]), env_spec("CartPole-v1"))
        >>> impala.steps_per_batch, impala.on_policy
        (1, True)"""


@dataclass
class APPOConfig(VTraceConfig):
    """The ``appo`` section of a config (Sample Factory's APPO defaults where they apply).

    Examples:
        >>> from fleetrl.algorithms.appo import APPO
        >>> from fleetrl.envs.probe import env_spec
        >>> appo = APPO(APPOConfig(num_epochs=2, num_mini_batch=4), env_spec("CartPole-v1"))
        >>> appo.steps_per_batch, appo.config.clip_epsilon
        (8, 0.1)"""

    lr: float = 3e-4
    """Adam learning rate."""
    clip_epsilon: float = 0.1
    """PPO ratio clipping (of the current over the behaviour policy)."""
    clip_schedule: Schedule = Schedule.CONSTANT
    """'constant' or 'linear' decay of clip_epsilon (to 0 at trainer.total_frames)."""
    clip_value: float | None = None
    """clip the value update to this range around the critic's value of the batch before
    the update (None: off)."""
    num_epochs: int = 1
    """passes over each batch (V-trace targets computed once, at the first)."""
    num_mini_batch: int = 1
    """minibatches per epoch."""
    normalize_advantage: bool = True
    """normalize advantages per minibatch."""
    max_grad_norm: float | None = 0.5
    """clip the gradient norm (None: off)."""
    advantage: Advantage = Advantage.VTRACE
    """'vtrace': the clipped objective on V-trace's advantages and value targets (rho_bar,
    c_bar), corrected for each batch's lag; 'gae': on GAE(gae_lambda) advantages and targets
    from the current critic, the lag left to the clip and max_learn_lag (Sample Factory's
    APPO default, with_vtrace=False)."""
    gae_lambda: float = 0.95
    """advantage 'gae': GAE's lambda."""
    decoupled: bool = False
    """clip the ratio of the current policy over the proximal one (the learner's when the
    batch's first step starts) instead of over the behaviour policy that collected it, and
    correct the lag with the weight min(rho_bar, proximal/behaviour) on the advantages
    (Hilton et al. 2021's decoupled objective): a lagged batch is not clipped before the
    learner moved on it."""

    @property
    def steps_per_batch(self) -> int:
        return self.num_epochs * self.num_mini_batch

    def validate(self, config: Config, check: Problems) -> None:
        super().validate(config, check)
        check_clipped_objective(self, config, check)
        gae = self.advantage == Advantage.GAE
        check(
            not gae or self.c_bar == APPOConfig.c_bar,  # the default: not given
            "c_bar",
            self.c_bar,
            "applies with appo.advantage 'vtrace' only: GAE has no traces to cut "
            "(leave it out, or write appo.advantage: vtrace)",
        )
        check(
            not gae or self.decoupled or self.rho_bar == APPOConfig.rho_bar,
            "rho_bar",
            self.rho_bar,
            "applies with appo.advantage 'vtrace', or 'gae' with appo.decoupled: true (it "
            "truncates the decoupled weight); GAE alone has no importance weights",
        )
        check(
            gae or self.gae_lambda == APPOConfig.gae_lambda,
            "gae_lambda",
            self.gae_lambda,
            "applies with appo.advantage 'gae' only: V-trace's traces are cut by c_bar "
            "(leave it out, or write appo.advantage: gae)",
        )


@dataclass
class ReplayConfig(AlgorithmConfig):
    """What DQN's and SAC's sections share: the buffer and the sampled steps (checked here)."""

    on_policy: ClassVar[bool] = False

    def validate(self, config: Config, check: Problems) -> None:
        super().validate(config, check)
        for name in ("buffer_size", "batch_size", "updates_per_batch"):
            check(getattr(self, name) > 0, name, getattr(self, name), "must be > 0")
        check(self.learning_starts >= 0, "learning_starts", self.learning_starts, "must be >= 0")


@dataclass
class DQNConfig(ReplayConfig):
    """The ``dqn`` section of a config.

    Examples:
        >>> from fleetrl.algorithms.dqn import DQN
        >>> from fleetrl.envs.probe import env_spec
        >>> dqn = DQN(DQNConfig(batch_size=32, hidden_sizes=[32]), env_spec("CartPole-v1"))
        >>> dqn.on_policy, dqn.learning_starts, dqn.config.double_dqn
        (False, 2000, True)"""

    lr: float = 5e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """discount factor."""
    double_dqn: bool = True
    """double-DQN targets."""
    buffer_size: int = 50_000
    """replay buffer capacity (frames)."""
    batch_size: int = 128
    """transitions per gradient step."""
    learning_starts: int = 2_000
    """frames collected before the first gradient step."""
    updates_per_batch: int = 16
    """gradient steps after each collected batch."""
    target_update_interval: int = 250
    """gradient steps between hard target-network updates."""
    eps_init: float = 1.0
    """initial epsilon of epsilon-greedy."""
    eps_end: float = 0.05
    """final epsilon."""
    eps_anneal_frames: int = 30_000
    """frames over which epsilon decays linearly."""
    max_grad_norm: float | None = 10.0
    """clip the gradient norm (None: off)."""
    hidden_sizes: list[int] = field(default_factory=lambda: [128, 128])
    """hidden layers of the Q network."""
    model: ModelKind = ModelKind.AUTO
    """default network: 'auto' (cnn for 3-D uint8 observations, else mlp), 'mlp', 'cnn'
    (Nature CNN) or 'impala' (IMPALA ResNet); modules passed in code win."""

    def validate(self, config: Config, check: Problems) -> None:
        super().validate(config, check)
        for name in ("target_update_interval", "eps_anneal_frames"):
            check(getattr(self, name) > 0, name, getattr(self, name), "must be > 0")
        check(
            0 <= self.eps_end <= self.eps_init <= 1,
            "eps_end",
            self.eps_end,
            "must satisfy 0 <= eps_end <= eps_init <= 1",
        )
        check(
            not (isinstance(self.model, ModelKind) and self.model.recurrent),
            "model",
            getattr(self.model, "value", self.model),
            "must be 'auto', 'mlp', 'cnn' or 'impala': dqn learns from single transitions "
            "of its replay buffer, not sequences, so it cannot train a recurrent network "
            "(recurrent policies train with ppo, a2c, impala or appo)",
        )


SAC_CUDAGRAPHS_MSG = (
    "SAC's update samples actions from torchrl's TanhNormal, and the backward of that "
    "sample cannot be captured in a CUDA graph (cudaErrorStreamCaptureImplicit, torchrl "
    "0.14.1); use sac.compile=true"
)


@dataclass
class SACConfig(ReplayConfig):
    """The ``sac`` section of a config.

    Examples:
        >>> from fleetrl.algorithms.sac import SAC
        >>> from fleetrl.envs.probe import env_spec
        >>> sac = SAC(SACConfig(hidden_sizes=[32, 32]), env_spec("Pendulum-v1"))
        >>> sac.on_policy, sac.config.tau
        (False, 0.005)"""

    lr: float = 3e-4
    """Adam learning rate (actor, Q networks, temperature)."""
    gamma: float = 0.99
    """discount factor."""
    tau: float = 0.005
    """soft target-update rate."""
    alpha_init: float = 1.0
    """initial entropy temperature (learned)."""
    buffer_size: int = 100_000
    """replay buffer capacity (frames)."""
    batch_size: int = 256
    """transitions per gradient step."""
    learning_starts: int = 5_000
    """frames of uniform random actions before the policy acts and learning starts."""
    updates_per_batch: int = 64
    """gradient steps after each collected batch."""
    max_grad_norm: float | None = None
    """clip the gradient norm (None: off)."""
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    """hidden layers of the actor and Q networks."""

    def validate(self, config: Config, check: Problems) -> None:
        super().validate(config, check)
        check(not self.cudagraphs, "cudagraphs", self.cudagraphs, SAC_CUDAGRAPHS_MSG)
        check(self.alpha_init > 0, "alpha_init", self.alpha_init, "must be > 0")
        check(0 < self.tau <= 1, "tau", self.tau, "must be in (0, 1]")


@dataclass
class MultiAgentPPOConfig(PPOFields, AlgorithmConfig):
    """What the ``mappo`` and ``ippo`` sections share (PPO's, plus ``share_params``)."""

    multi_agent: ClassVar[bool] = True

    # lr to max_grad_norm: PPOFields's, these four again (their own default or doc line)
    clip_schedule: Schedule = Schedule.CONSTANT
    """'constant' or 'linear' decay of clip_epsilon (to 1e-3 at trainer.total_frames)."""
    entropy_coef: float = 0.01
    """entropy bonus coefficient (MAPPO's paper and torchrl's MAPPOLoss: 0.01)."""
    num_mini_batch: int = 4
    """minibatches per epoch (of env steps: every agent of a step stays in its minibatch)."""
    normalize_advantage: bool = True
    """standardize advantages per minibatch, each agent's on its own (over the batch dims,
    the agent dim left out of the mean and std, as torchrl's MAPPOLoss does)."""
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    """hidden layers of the actor's and the critic's MultiAgentMLP."""
    share_params: bool = True
    """one actor and one critic for every agent of the group (True), or one per agent."""

    def check(self, check: Problems) -> None:
        super().check(check)  # lr, gamma, hidden_sizes' entries, max_grad_norm
        check(0 <= self.gae_lambda <= 1, "gae_lambda", self.gae_lambda, "must be in [0, 1]")
        check_clipping(self, check)
        for name in ("entropy_coef", "critic_coef"):
            check(getattr(self, name) >= 0, name, getattr(self, name), "must be >= 0")
        check(self.num_mini_batch > 0, "num_mini_batch", self.num_mini_batch, "must be > 0")
        check(
            bool(self.hidden_sizes),
            "hidden_sizes",
            self.hidden_sizes,
            "must be a non-empty list of positive ints",
        )
        check(
            isinstance(self.share_params, bool),
            "share_params",
            self.share_params,
            "must be true or false",
        )
        check(isinstance(self.clip_schedule, Schedule), "clip_schedule", self.clip_schedule,
              "must be 'constant' or 'linear'")  # fmt: skip
        for name in ("compile", "cudagraphs"):
            check(
                not getattr(self, name),
                name,
                getattr(self, name),
                "must be false: the multi-agent update runs eagerly (not built yet)",
            )

    def validate(self, config: Config, check: Problems) -> None:
        # check() refuses cudagraphs outright here: the base's device rule would say it twice
        self.check(check)
        frames = config.collector.frames_per_batch
        check(
            self.num_mini_batch <= 0 or frames % self.num_mini_batch == 0,  # <= 0: said above
            "num_mini_batch",
            self.num_mini_batch,
            f"must divide collector.frames_per_batch ({frames})",
        )


#: what MAPPO's centralised critic may read (``mappo.critic_input``)
CRITIC_INPUTS = ("observations", "state")


@dataclass
class MAPPOConfig(MultiAgentPPOConfig):
    """The ``mappo`` section: a centralised critic (every agent's observation, or the env's
    global state)."""

    critic_input: str = "observations"
    """what the centralised critic reads: 'observations' (every agent's, a MultiAgentMLP;
    share_params applies to it) or 'state' (the env's global "state", e.g. PettingZoo's
    state(): one MLP with a value per agent). Without 'state', a PettingZoo env from a
    config leaves its state out (MPE computes it at a cost)."""

    def check(self, check: Problems) -> None:
        super().check(check)
        check(
            self.critic_input in CRITIC_INPUTS,
            "critic_input",
            self.critic_input,
            f"must be one of {list(CRITIC_INPUTS)}",
        )


@dataclass
class IPPOConfig(MultiAgentPPOConfig):
    """The ``ippo`` section: a decentralised critic (each agent its own observation)."""


#: a config's ``algorithm`` -> its section's class (the algorithm classes that train from
#: them: :data:`fleetrl.algorithms.ALGORITHMS`, in the same order)
SECTIONS: dict[str, type[AlgorithmConfig]] = {
    "ppo": PPOConfig,
    "a2c": A2CConfig,
    "dqn": DQNConfig,
    "sac": SACConfig,
    "impala": IMPALAConfig,
    "appo": APPOConfig,
    "mappo": MAPPOConfig,
    "ippo": IPPOConfig,
}

#: the algorithms that train an agent group of a multi-agent env (``EnvSpec.grouped``)
MULTI_AGENT: tuple[str, ...] = tuple(name for name, cls in SECTIONS.items() if cls.multi_agent)

"""The typed config of a training run: data only.

A config has one section per dataclass below (``env``, ``collector``,
``trainer``, ``scheme``, ``logging``) and one for the algorithm, named after it
in YAML (``ppo:``) and held in :attr:`Config.algo`; each algorithm's section is
a dataclass in its own file (``PPOConfig`` in ``fleetrl/algorithms/ppo.py``),
a subclass of :class:`AlgorithmConfig`. Each field has a doc line; derived
values are properties (:attr:`SchemeConfig.mode`, :attr:`CollectorConfig.mode`).
Modes, schedules and engines are Enums, written as their values in YAML.

Nothing here reads files or checks values: :mod:`fleetrl.setup` loads a config
from YAML with ``key=value`` overrides (:func:`fleetrl.setup.load_config`) and
verifies it as a whole (:func:`fleetrl.setup.verify`).

Examples:
    >>> from fleetrl.algorithms import PPOConfig
    >>> cfg = Config(algorithm="ppo", env=EnvConfig(id="Pendulum-v1"), algo=PPOConfig())
    >>> cfg.scheme.mode, cfg.collector.mode
    (<LearnerMode.CENTRAL: 'central'>, <CollectionMode.RAY_SYNC: 'ray_sync'>)
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from fleetrl.errors import Problems
from fleetrl.fleet_size import FleetSize

__all__ = [
    "EVAL_METRICS",
    "FROZEN_ON_RESUME",
    "AlgorithmConfig",
    "AtariConfig",
    "CollectionMode",
    "CollectorConfig",
    "Config",
    "EnvConfig",
    "EnvEngine",
    "EvalActions",
    "LearnerMode",
    "LoggingConfig",
    "Schedule",
    "SchemeConfig",
    "TrainerConfig",
    "TuneConfig",
    "TuneMode",
    "TuneScheduler",
    "TuneSearcher",
    "WandbMode",
    "enum_of",
    "enum_value",
]


@functools.cache
def type_hints(cls: type) -> types.MappingProxyType:
    """``typing.get_type_hints(cls)``, evaluated once per class (the config classes' string
    annotations cost about 0.5 ms a class to evaluate, and every verification reads them)."""
    return types.MappingProxyType(typing.get_type_hints(cls))


def enum_of(hint: Any) -> type[enum.Enum] | None:
    """The Enum class a type hint names (None for any other hint)."""
    return hint if isinstance(hint, type) and issubclass(hint, enum.Enum) else None


def enum_value(cls: type[enum.Enum], value: Any) -> enum.Enum | None:
    """``value`` as a member of ``cls`` (given by member or by value), None if it is neither."""
    if isinstance(value, cls):
        return value
    try:
        return cls(value)
    except ValueError:
        return None


#: keys a resumed run cannot change, and what in the checkpoint depends on each
#: (``{algo}``: the section of the run's algorithm)
FROZEN_ON_RESUME = {
    "algorithm": "that algorithm's networks and optimizer",
    "env.id": "networks sized for that env's spaces",
    "env.observation_indices": "networks sized for that many observation entries",
    "env.atari.frame_stack": "networks sized for that many stacked frames",
    "env.atari.screen_size": "networks sized for that frame size",
    "env.atari.full_action_space": "networks sized for that many actions",
    "scheme.num_grad_workers": "state for that many gradient workers",
    "{algo}.hidden_sizes": "networks of those sizes",
    "{algo}.model": "networks of that kind",
    "env.normalize_observation": "networks with (or without) observation statistics",
    "env.normalize_reward": "reward-scaling statistics (or none)",
}


class EnvEngine(str, enum.Enum):
    """What steps the envs (``env.engine``): any of the three for Atari games; gymnasium or
    envpool for MuJoCo; gymnasium for every other env (:mod:`fleetrl.envs`).

    Examples:
        >>> EnvEngine("envpool") is EnvEngine.ENVPOOL, [e.value for e in EnvEngine]
        (True, ['gymnasium', 'ale_vector', 'envpool'])"""

    GYMNASIUM = "gymnasium"
    ALE_VECTOR = "ale_vector"
    ENVPOOL = "envpool"


class Schedule(str, enum.Enum):
    """How a hyperparameter changes over a run."""

    CONSTANT = "constant"
    LINEAR = "linear"  # decays to 0 at trainer.total_frames


#: the metrics.csv columns of one evaluation (fleetrl.run.evaluate), on the rows where one ran
EVAL_METRICS = ("eval/return_mean", "eval/return_std")


class EvalActions(str, enum.Enum):
    """How evaluation episodes act (``trainer.eval_actions``).

    ``sample`` plays the policy as trained: actions drawn from its distribution, the policy
    whose return a policy-gradient algorithm maximizes and its training episodes show.
    ``deterministic`` plays the distribution's deterministic action (argmax, or a squashed
    Gaussian's ``tanh(loc)`` scaled to the bounds), the usual choice for DQN's greedy policy
    and SAC's. ``auto`` takes the algorithm's: ``sample`` for PPO, A2C, IMPALA and APPO,
    ``deterministic`` for DQN and SAC.
    """

    AUTO = "auto"
    SAMPLE = "sample"
    DETERMINISTIC = "deterministic"


class LearnerMode(str, enum.Enum):
    """Which learner trains (``scheme``): the central one, or gradient workers that update in
    one of three ways (``scheme.update``).

    Examples:
        >>> LearnerMode.ASYNC == "async", LearnerMode("decentralized").name
        (True, 'DECENTRALIZED')
    """

    CENTRAL = "central"  # one learner in the driver computes and applies the gradients
    SYNC = "sync"  # gradient workers; the update worker averages each step's gradients
    ASYNC = "async"  # gradient workers; the update worker applies gradients first ready
    DECENTRALIZED = "decentralized"  # gradient workers all-reduce and each applies the mean


class CollectionMode(str, enum.Enum):
    """How a learner collects (``collector``): in its own process, from Ray workers round by
    round or first ready, or decoupled (the workers write into a replay buffer actor)."""

    LOCAL = "local"  # collector.num_collectors: 0, a SyncDataCollector in the learner's process
    RAY_SYNC = "ray_sync"  # remote collectors, every one's share stacked into each batch
    RAY_FIRST_READY = "ray_first_ready"  # remote collectors, each batch first ready
    DECOUPLED = "decoupled"  # remote collectors writing into a replay buffer actor


@dataclass
class AtariConfig:
    """Atari preprocessing, with one meaning in every engine (see :mod:`fleetrl.envs.atari`).

    The defaults are the standard ones (Machado et al. 2018; CleanRL, SB3):
    84x84 grayscale, 4 frames per agent step max-pooled over the last two,
    4 stacked frames, up to 30 no-op starts, sticky actions as ALE v5.
    """

    frame_skip: int = 4
    """emulator frames per agent step (the action repeats; the last two frames are max-pooled)."""
    frame_stack: int = 4
    """frames stacked into one observation: shape (frame_stack, screen_size, screen_size)."""
    screen_size: int = 84
    """side of the square grayscale frame, resized with area interpolation."""
    noop_max: int = 30
    """up to this many no-op actions after each reset (0: none)."""
    terminal_on_life_loss: bool = False
    """end the episode at each life loss (gymnasium engine only: a new game starts)."""
    repeat_action_probability: float = 0.25
    """sticky actions: the emulator repeats the previous action with this probability."""
    full_action_space: bool = False
    """all 18 Atari actions instead of the game's minimal set."""
    max_episode_frames: int = 108_000
    """truncate an episode after this many emulator frames (ALE v5's 108,000 = 30 minutes);
    a multiple of frame_skip."""


@dataclass
class EnvConfig:
    id: str = "CartPole-v1"
    """id of the training env (the test env uses the same id): a gymnasium id, a PettingZoo
    env as package:module (mpe2:simple_spread_v3) or a VMAS scenario (vmas:balance)."""
    num_envs: int = 8
    """envs stepped as one batch in each collector."""
    max_episode_steps: int | None = None
    """truncate episodes after this many steps (None: the env's own limit)."""
    engine: EnvEngine = EnvEngine.GYMNASIUM
    """what steps the envs: 'gymnasium' (a gymnasium vector env), 'ale_vector' (ale-py's
    threaded C++ vector env; Atari only) or 'envpool' (C++; Atari and MuJoCo ids, e.g.
    HalfCheetah-v5); other envs use 'gymnasium'."""
    atari: AtariConfig = field(default_factory=AtariConfig)
    """Atari preprocessing (applies to ALE ids, e.g. ALE/Pong-v5, in every engine)."""
    observation_indices: list[int] | None = None
    """keep only these entries of a flat observation, in this order (null: all of it): a
    POMDP by name, e.g. [0, 2] is CartPole without its velocities (fleetrl.envs.PartialEnv);
    training, evaluation and videos all see it; env.engine gymnasium only."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """the env's own arguments: gymnasium.make(id, **kwargs) for a gymnasium id (e.g.
    {continuous: true} for LunarLander-v3), parallel_env(**kwargs) for a PettingZoo id (e.g.
    {continuous_actions: true, N: 4} for mpe2:simple_spread_v3), a VMAS scenario's and
    VmasEnv's (max_steps, required; continuous_actions, n_agents, ...), the MuJoCo env's
    arguments in every engine; an ALE id takes env.atari instead. Training, evaluation and videos all
    build the env with them."""
    normalize_observation: bool = False
    """normalize observations by running mean and variance merged from every collector's
    frames on the learner, published with the weights (fleetrl.networks.normalization; PPO, A2C,
    IMPALA, APPO, in every learner mode); per element, so per pixel of a frame stack in front
    of a conv torso (Sample Factory's normalize_input)."""
    clip_observation: float | None = 10.0
    """clip normalized observations to [-clip, clip] (null: off); CleanRL clips to 10."""
    normalize_reward: bool = False
    """divide the rewards learned from by the running std of the per-env discounted return
    (gamma: the algorithm's), merged from every collector's frames; episode returns stay raw."""
    clip_reward: float | None = 10.0
    """clip scaled rewards to [-clip, clip] (null: off); CleanRL clips to 10."""


@dataclass
class CollectorConfig:
    num_collectors: int | str | list[int] = 2
    """remote collector workers (Ray actors); 0 collects in the training process, without Ray.
    A range, '2-8', or 'auto' (1 to as many as the cluster holds): a fleet that grows as
    nodes join and shrinks as they leave, its maximum asked of Ray's autoscaler."""
    frames_per_batch: int = 2048
    """frames per training batch (sync: summed over collectors)."""
    sync: bool = True
    """stack all collectors' batches (True) or serve the first ready (False). RayCollector's
    own default is False, torchrl's; a training run defaults to the on-policy setting."""
    prefetch: int = 0
    """batches each worker may collect ahead of the learner (0: on-policy in sync mode;
    first-ready lag is bounded only by collector.max_served_lag). RayCollector's own default is 1, for
    throughput; a training run defaults to no lag, which on-policy algorithms need."""
    num_cpus_per_collector: float = 1.0
    """Ray CPUs reserved per collector."""
    compress: str | None = None
    """None, 'lz4' or 'zstd': compress batches sent by workers."""
    fraction_samples: float = 1.0
    """sync, remote collectors: a preempted straggler stops once it holds this fraction of its share."""
    fraction_workers: float = 1.0
    """sync, remote collectors: preempt the stragglers once this fraction of collectors finished."""
    address: str | None = None
    """Ray cluster address to attach to (None: the running instance or a new local one)."""
    max_served_lag: int | None = None
    """remote collectors: a batch more than this many weight versions behind the newest
    published one is not served but collected again (None: no bound; first-ready lag otherwise
    grows with collectors and slow workers)."""
    max_restart_attempts: int = 3
    """remote collectors: replacements of a dead collector worker tried in a row."""
    replacement_timeout_s: float = 120.0
    """remote collectors: how long a dead worker's replacement waits for a node that can host
    it (its resources, on a node not lost) before the run stops, its checkpoints kept for
    --resume; the wait is said at once, naming the resources and the nodes lost."""
    num_threads: int | None = 1
    """remote collectors: torch threads in each worker process (null: torch's default; one
    because workers share the cores, and two threads made CNN inference many times slower)."""
    overlap: str | bool | None = "auto"
    """step one half of the envs while the policy acts on the other: 'auto' (or null) where
    measured faster (env.engine ale_vector or envpool, an even env.num_envs), 'on' (or true)
    required, 'off' (or false)."""
    decoupled: bool = False
    """off-policy (dqn, sac), central learner: the remote collectors write straight into a
    replay buffer actor and keep collecting while the learner samples and updates, at
    updates_per_batch / frames_per_batch updates per frame written (first ready: collector.sync
    is not used); weights are published every trainer.weight_update_interval updates."""
    decoupled_frames_ahead: int | None = None
    """decoupled: frames the collectors may write beyond what the learner's updates so far
    need at the ratio; past it no new task is issued until the learner catches up (null: one
    frames_per_batch per collector)."""

    inference: str = "local"
    """'local': each remote collector runs its copy of the policy; 'server': inference servers
    run it on batched requests from the collectors, which only step envs (double-buffered), and
    get the weights (remote collectors only; guide: docs/guides/inference.md)."""
    num_inference_servers: int = 1
    """collector.inference=server: servers (at most collector.num_collectors); collector i
    uses server i % num_inference_servers."""
    inference_device: str | None = None
    """collector.inference=server: where the servers run the policy (null: the CPU; 'cuda'
    needs a GPU in the Ray cluster, shared by the servers)."""
    inference_max_batch: int | None = None
    """collector.inference=server: observations per server batch at most (null: no bound)."""
    inference_max_wait_ms: float = 0.0
    """collector.inference=server: how long a server waits for a batch to fill once its first
    request is in (0: requests that came while the policy ran form the next batch)."""
    inference_transport: str = "auto"
    """collector.inference=server: 'auto' (shared memory between a collector and its server on
    one node, Ray calls across nodes) or 'ray' (Ray calls only)."""
    num_cpus_per_inference_server: float = 1.0
    """collector.inference=server: Ray CPUs reserved per server (0: the servers share the
    collectors' cores)."""

    @property
    def fleet(self) -> FleetSize:
        """``num_collectors`` as bounds: its ``min`` is the count a run starts with (one that
        is not a valid size reads as 1: the config's checks refuse it)."""
        try:
            return FleetSize.parse(self.num_collectors, zero=True)
        except ValueError:
            return FleetSize(1, 1)

    @property
    def mode(self) -> CollectionMode:
        """How the collectors serve the learner, from ``num_collectors``, ``sync`` and
        ``decoupled``."""
        if self.fleet.min == 0:
            return CollectionMode.LOCAL
        if self.decoupled:
            return CollectionMode.DECOUPLED
        return CollectionMode.RAY_SYNC if self.sync else CollectionMode.RAY_FIRST_READY


@dataclass
class TrainerConfig:
    total_frames: int = 500_000
    """stop after this many frames."""
    target_return: float | None = None
    """stop once the mean return of the last ``return_window`` training episodes reaches this."""
    return_window: int = 20
    """training episodes averaged for ``train/episode_return`` and the target."""
    seed: int = 0
    """seed of torch, the envs and the collectors."""
    weight_update_interval: int = 1
    """publish weights to the collectors every this many batches learned from
    (collector.decoupled: every this many batches' worth of updates, updates_per_batch
    optimizer steps each)."""
    test_every: int = 10
    """evaluate every this many training iterations (0: never). An iteration is one metrics
    row: one batch for the central learner, one batch per gradient worker under a scheme."""
    num_test_episodes: int = 10
    """episodes per evaluation (acting as ``eval_actions`` says)."""
    eval_actions: EvalActions = EvalActions.AUTO
    """how evaluation episodes act: 'sample' (the policy as trained: its actions drawn from
    its distribution), 'deterministic' (its deterministic action: argmax, or tanh(loc)
    in the bounds), or 'auto' (the algorithm's: sample for PPO, A2C, IMPALA and APPO,
    deterministic for DQN and SAC)."""
    checkpoint_every: int = 20
    """write a checkpoint every this many training iterations (0: only at the end)."""
    keep_checkpoints: int = 3
    """checkpoints kept on disk (the newest)."""
    device: str = "cpu"
    """the learner's device: 'cpu', or 'cuda' (or 'cuda:N') on a machine with a GPU; the
    collectors keep their own (the CPU)."""
    backend: str = "ray"
    """where remote collectors and gradient workers run: 'ray' (Ray actors) or 'inprocess'
    (objects in this process, one task at a time: for debugging; fleetrl.distributed.backends)."""


@dataclass
class SchemeConfig:
    """The distributed training scheme (PyTorchRL's): gradient workers and the update worker.

    Each gradient worker owns its collectors (the ``collector`` section applies
    to each: ``num_collectors: 0`` collects inside the gradient worker) and a
    replica of the algorithm. ``num_grad_workers: 1`` is the central learner in
    the driver process.
    """

    num_grad_workers: int = 1
    """gradient workers (Ray actors); 1: the central learner, in this process."""
    update: LearnerMode = LearnerMode.SYNC
    """how 2 or more gradient workers update: 'sync' (the update worker averages every
    worker's gradients per step), 'async' (it applies them first ready, A3C-like) or
    'decentralized' (the workers all-reduce their gradients over gloo and each steps its own
    replica, DD-PPO-like)."""
    max_gradient_lag: int = 4
    """update 'async': drop a gradient computed on weights more than this many versions old."""
    num_cpus_per_grad_worker: float = 1.0
    """Ray CPUs reserved per gradient worker."""
    grad_worker_resources: dict[str, float] = field(default_factory=dict)
    """custom Ray resources per gradient worker, e.g. {node_b: 1}."""
    collective_timeout_s: float = 300.0
    """decentralized: how long an all-reduce waits for a missing worker before failing."""
    max_restart_attempts: int = 3
    """sync/async: replacements of a dead gradient worker tried in a row (doubling wait)."""
    num_threads_per_grad_worker: int | None = 1
    """torch threads in each gradient worker process (null: torch's default)."""

    @property
    def mode(self) -> LearnerMode:
        """The learner that trains: central with one gradient worker, else ``update``'s."""
        return LearnerMode.CENTRAL if self.num_grad_workers == 1 else LearnerMode(self.update)


class WandbMode(str, enum.Enum):
    """Where a W&B run's data goes (``logging.wandb_mode``), as ``wandb.init(mode=...)`` says."""

    ONLINE = "online"  # streamed to the W&B server as the run goes
    OFFLINE = "offline"  # written under the run directory only; `wandb sync` uploads it later
    DISABLED = "disabled"  # nothing is written: W&B calls do nothing


@dataclass
class LoggingConfig:
    run_dir: str | None = None
    """where logs and checkpoints go (None: runs/<run_name>_<time>)."""
    run_name: str | None = None
    """the run's name: its default directory is runs/<run_name>_<time> (None: the config
    file's name, e.g. ppo_cartpole for ppo_cartpole.yaml, which load_config sets; a config
    built in code: <algorithm>_<env>)."""
    tensorboard: bool = True
    """write TensorBoard event files beside the CSV."""
    progress_bar: bool = True
    """show a progress bar with a live view of the last iterations (frames/s, return, lag,
    the shares of collecting, learning and publishing) when stderr is a terminal."""
    plot: bool = True
    """save learning_curve.png at the end."""
    video_every: int | None = None
    """every this many evaluations also record ``video_episodes`` deterministic episodes to
    ``videos/eval_<frames>.mp4`` and (with ``tensorboard``) ``eval/video`` (0 or null: never); needs
    ``trainer.test_every`` > 0 and the ``video`` extra (imageio, imageio-ffmpeg)."""
    video_episodes: int = 1
    """episodes in each such video (episode i seeded as the evaluation's env i)."""
    mlflow: bool = False
    """also track the run in MLflow: the config as parameters, every metrics row, the learning
    curve, videos and the final checkpoint's path; needs the ``mlflow`` extra."""
    mlflow_uri: str | None = None
    """MLflow tracking URI: a server (http://host:5000), a database, or a folder for a local
    file store (null: the MLFLOW_TRACKING_URI environment variable, else ./mlruns)."""
    mlflow_experiment: str | None = None
    """MLflow experiment of the run, created if missing (null: the MLFLOW_EXPERIMENT_NAME
    environment variable, else 'fleetrl')."""
    wandb: bool = False
    """also track the run in Weights & Biases: the config, every metrics row (against
    train/frames), the learning curve, videos and the final checkpoint's path; needs the
    ``wandb`` extra."""
    wandb_project: str | None = None
    """W&B project of the run (null: the WANDB_PROJECT environment variable, else 'fleetrl')."""
    wandb_entity: str | None = None
    """W&B team or user that owns the project (null: W&B's default entity for the login)."""
    wandb_mode: WandbMode = WandbMode.ONLINE
    """'online' (streamed to the W&B server), 'offline' (written under the run directory,
    uploaded later with wandb sync) or 'disabled' (nothing tracked); this key decides, not
    the WANDB_MODE environment variable."""


class TuneScheduler(str, enum.Enum):
    """How a sweep stops or changes trials (``fleetrl tune --scheduler``)."""

    FIFO = "fifo"
    """every trial runs to its end."""
    ASHA = "asha"
    """asynchronous successive halving: trials behind the others at a rung stop early."""
    PBT = "pbt"
    """population-based training: trials behind copy a better one's checkpoint and perturb
    its hyperparameters."""


class TuneSearcher(str, enum.Enum):
    """How a sweep picks each trial's hyperparameters (``fleetrl tune --searcher``)."""

    RANDOM = "random"
    """independent draws from each distribution (grid points: every one)."""
    OPTUNA = "optuna"
    """Optuna's TPE sampler, fed the finished trials' results (needs the ``tune`` extra)."""


class TuneMode(str, enum.Enum):
    """Whether a sweep's metric is better high or low."""

    MAX = "max"
    MIN = "min"


@dataclass
class TuneConfig:
    """A hyperparameter sweep on Ray Tune (``fleetrl tune``; ``fleetrl train`` ignores it).

    Each trial is a training run of the rest of the config with the ``search``
    keys drawn from their distributions.
    """

    search: dict[str, str] = field(default_factory=dict)
    """config key -> distribution: uniform(a, b), loguniform(a, b), randint(a, b) (a to b-1),
    choice(v1, v2, ...) or grid(v1, v2, ...), e.g. {ppo.lr: 'loguniform(1e-4, 1e-2)'}."""
    samples: int = 8
    """trials to run (with grid keys: draws of the other keys, each run at every grid point)."""
    scheduler: TuneScheduler = TuneScheduler.FIFO
    """'fifo' (every trial runs its budget), 'asha' (stop trials behind early) or 'pbt'
    (trials behind copy a better trial and perturb its hyperparameters)."""
    searcher: TuneSearcher = TuneSearcher.RANDOM
    """'random' draws, or 'optuna' (TPE, fed the results so far)."""
    metric: str = "train/episode_return"
    """the metrics.csv column trials are compared on (its last value in a trial)."""
    mode: TuneMode = TuneMode.MAX
    """'max' or 'min': which way the metric is better."""
    max_concurrent: int | None = None
    """trials running at once (null: as many as the cluster's CPUs hold)."""
    grace_frames: int | None = None
    """asha: frames every trial trains before it can be stopped (null: a tenth of
    trainer.total_frames)."""
    perturbation_frames: int | None = None
    """pbt: frames between a trial's exploit-and-explore steps (null: a quarter of
    trainer.total_frames); each trial checkpoints at least that often."""
    synchronous: bool = False
    """pbt: wait for every trial at each perturbation point, then copy-and-perturb the
    bottom quarter together (reproducible decisions; the slowest trial holds the others)."""
    dir: str | None = None
    """where the sweep writes its trials and results (null: runs/tune_<algorithm>_<env>_<time>)."""
    seed: int = 0
    """seed of the searcher's draws (each trial trains with trainer.seed; PBT's perturbations
    are Ray Tune's own draws, unseeded)."""


@dataclass
class AlgorithmConfig:
    """Base of the algorithms' config sections (:mod:`fleetrl.algorithms.sections`).

    The fields here are every algorithm's; a subclass declares its own (each
    with a doc line) and extends :meth:`validate` with its ranges and
    cross-checks. The fields every algorithm has besides these (``lr``,
    ``gamma``, ``hidden_sizes``, ``max_grad_norm``) are checked here too.
    """

    #: the algorithm learns from the batch just collected (False: from a replay buffer)
    on_policy: typing.ClassVar[bool] = True
    #: the algorithm trains the agent groups of a multi-agent env (MAPPO, IPPO)
    multi_agent: typing.ClassVar[bool] = False

    lr_schedule: Schedule = Schedule.CONSTANT
    """'constant' or 'linear' (the learning rate decays to 0 at trainer.total_frames)."""
    compile: bool | dict[str, Any] = False
    """run the update step under torch.compile: true, or a dict of torch.compile keyword
    arguments (e.g. {mode: max-autotune}); the first step compiles (logged once)."""
    cudagraphs: bool = False
    """capture the (compiled) update step in a CUDA graph: needs trainer.device=cuda."""

    def __post_init__(self) -> None:
        # an Enum field set by value in code (model="cnn") becomes its member, as from YAML
        for name, hint in type_hints(type(self)).items():
            member = enum_value(hint, getattr(self, name)) if enum_of(hint) else None
            if member is not None:  # an unknown value is left for the checks to report
                setattr(self, name, member)

    def check(self, check: Problems) -> None:
        """Append the problems of this section's own keys, which need no other section: what
        an algorithm's constructor asks of a section built in code (``check`` prefixes the
        keys with the section). A subclass extends it with its own keys' rules."""
        check(self.lr > 0, "lr", self.lr, "must be > 0")
        check(0 < self.gamma <= 1, "gamma", self.gamma, "must be in (0, 1]")
        check(
            all(h > 0 for h in self.hidden_sizes),
            "hidden_sizes",
            self.hidden_sizes,
            "must be positive ints",
        )
        check(
            self.max_grad_norm is None or self.max_grad_norm > 0,
            "max_grad_norm",
            self.max_grad_norm,
            "must be > 0, or null: off",
        )

    def validate(self, config: Config, check: Problems) -> None:
        """Append this section's problems in a whole config: :meth:`check`'s, and the rules
        that tie its keys to other sections' (a subclass extends it with its own)."""
        self.check(check)
        device = config.trainer.device
        check(
            not self.cudagraphs or str(device).startswith("cuda"),
            "cudagraphs",
            self.cudagraphs,
            f"CUDA graphs capture GPU work and the learner runs on trainer.device={device!r}; "
            "set trainer.device=cuda on a machine with a GPU, or use "
            f"{config.algorithm}.compile=true on the CPU",
        )


@dataclass
class Config:
    """A whole training run: env, collectors, trainer, scheme, logging and one algorithm.

    ``algo`` is the section of ``algorithm`` (a ``PPOConfig`` for ``"ppo"``):
    :func:`fleetrl.setup.load_config` builds it from the YAML's ``ppo:`` section, and a
    config built in code passes it (:func:`fleetrl.setup.verify` says when it does not fit).

    Examples:
        >>> from fleetrl.setup.load import config_from_dict
        >>> config = config_from_dict({"algorithm": "a2c", "env": {"id": "CartPole-v1"}})
        >>> config.algorithm, type(config.algo).__name__, config.env.num_envs
        ('a2c', 'A2CConfig', 8)
    """

    algorithm: str = "ppo"
    """which algorithm trains: ppo, a2c, dqn, sac, impala, appo, mappo or ippo."""
    env: EnvConfig = field(default_factory=EnvConfig)
    collector: CollectorConfig = field(default_factory=CollectorConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    scheme: SchemeConfig = field(default_factory=SchemeConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    tune: TuneConfig = field(default_factory=TuneConfig)
    algo: AlgorithmConfig | None = None
    """the chosen algorithm's section, written under its name (``ppo:``) in YAML."""

    @property
    def verification(self) -> Any:
        """What verified this config as a whole, and the config as it was then
        (:func:`fleetrl.setup.verify.checked_config` reads it; None: not verified). It is
        not a key: equality, copies and pickles leave it out, so a copy is checked again."""
        return self.__dict__.get("_verification")

    @verification.setter
    def verification(self, value: Any) -> None:
        self.__dict__["_verification"] = value

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_verification", None)
        return state

    @property
    def uses_ray(self) -> bool:
        """Whether the run starts Ray: remote collectors or gradient workers on Ray actors."""
        remote = self.collector.fleet.min > 0 or self.scheme.num_grad_workers > 1
        return remote and self.trainer.backend == "ray"

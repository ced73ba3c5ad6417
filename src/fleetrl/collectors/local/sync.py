"""SyncDataCollector: one process steps a batch of envs and writes TensorDict batches.

The collector is made of parts that each own their state:

- the envs (:mod:`fleetrl.envs`), or their two halves for overlapped
  collection (:mod:`fleetrl.collectors.local.overlap`);
- one rollout, decided when the collector is built:
  :class:`~fleetrl.collectors.local.single.SingleRollout` (the policy's plan, its step
  input, the episode bookkeeping and the numpy loop) or, for a torchrl env with
  agent groups, :class:`~fleetrl.collectors.local.grouped.GroupedRollout`;
- the budget, the policy version and weights, and the tags every batch gets.

Batches use torchrl's keys and layout, so torchrl loss modules and value
estimators run on them unchanged: batch dims ``[*env_batch, time]``,
``observation``, ``action``, policy outputs, ``("next", "observation")``,
``("next", "reward")``, ``("next", "done")``, ``("next", "terminated")``,
``("next", "truncated")``, ``("collector", "traj_ids")``; plus
``("collector", "policy_version")``, ``("collector", "worker_id")`` and the
running ``("next", "episode_return")`` / ``("next", "episode_length")`` that
:func:`fleetrl.episode_stats` reads.

A torchrl env with agent groups (a multi-agent env) is collected in torchrl's
grouped layout (:mod:`fleetrl.collectors.local.grouped`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import InteractionType as ExplorationType
from torch import nn

from fleetrl._perf import skip_absent_pandas_probe
from fleetrl.batch_sizes import BatchSizeNames, batch_size_problems
from fleetrl.collectors.arguments import check_env, check_feature_arguments, check_weight_update
from fleetrl.collectors.base import (
    DataCollectorBase,
    as_device,
    as_exploration_type,
    check_common_arguments,
)
from fleetrl.collectors.inference.checks import SERVER_WEIGHTS_MSG, check_served
from fleetrl.collectors.inference.client import ServerClient
from fleetrl.collectors.inference.options import TRANSPORT
from fleetrl.collectors.local.grouped import GroupedRollout, check_grouped_arguments
from fleetrl.collectors.local.overlap import HalvedEnv, Overlap, SplitEnv, as_overlap, overlap_spec
from fleetrl.collectors.local.single import SingleRollout
from fleetrl.collectors.local.trajectories import TrajectoryBatcher
from fleetrl.collectors.rollout_options import RolloutOptions, given_rollout
from fleetrl.collectors.rules import Audience
from fleetrl.collectors.timing import CollectTimes
from fleetrl.envs.base import BatchedEnv
from fleetrl.envs.grouped import GroupedEnv
from fleetrl.envs.make import make_env
from fleetrl.errors import ConfigError, Problems, bad_value
from fleetrl.keys import POLICY_VERSION_KEY, WORKER_ID_KEY, NestedKey
from fleetrl.networks.policies import as_policy, as_weights

__all__ = ["SyncDataCollector"]

logger = logging.getLogger(__name__)

#: collect(frames): the rule of frames_per_batch, for one call
FRAMES_NAMES = BatchSizeNames(frames_per_batch="frames")


WHOLE_BATCHES_MSG = (
    "splits each batch over {split} collectors, and a SyncDataCollector gathers whole "
    "batches: pass RolloutOptions(split=1), or one collector's part (RolloutOptions.share)"
)
CLIENT_TRANSPORT_MSG = (
    "is given twice: the ServerClient passed as inference_server holds its transport; "
    "leave inference_transport at 'auto'"
)


class SyncDataCollector(DataCollectorBase):
    """Collects TensorDict batches from a batch of envs in the calling process.

    Args:
        create_env_fn: a gymnasium id, a gymnasium ``Env`` or ``VectorEnv``, a
            torchrl ``EnvBase`` (a multi-agent one with agent groups too: its batches
            are torchrl's grouped layout, :mod:`fleetrl.collectors.local.grouped`), or a
            callable returning one of these.
        policy: a ``TensorDictModule`` (or any TensorDict -> TensorDict callable),
            a plain ``nn.Module`` (wrapped to read ``observation`` and write
            ``action``), or ``None`` for uniform random actions (per agent, for a
            multi-agent env, whose policy writes each group's action key).

    Keyword Args:
        frames_per_batch: frames (env steps summed over envs) per batch; a
            multiple of the number of envs.
        total_frames: frame budget, -1 for endless. The last batch holds exactly
            the remaining frames (it is shorter in time), so the collector
            delivers exactly ``total_frames`` in ``ceil(total_frames /
            frames_per_batch)`` batches; must be a multiple of the number of envs.
        num_envs: copies of a gymnasium id or factory stepped as one batch.
        create_env_kwargs: keyword arguments for ``create_env_fn``.
        max_frames_per_traj: truncate (and reset) an episode after this many
            steps; ``None`` or -1 for no limit.
        init_random_frames: frames collected with uniform random actions before
            the policy is used, rounded up to whole batches. Random batches hold
            only ``action`` from the policy's outputs.
        reset_at_each_iter: reset every env at the start of each batch.
        split_trajs: split each batch into trajectories with torchrl's
            ``split_trajectories`` (padded, with ``("collector", "mask")``).
        postproc: a callable (e.g. a torchrl ``Transform``) applied to each batch.
        exploration_type: ``ExplorationType`` (or its name) set around the policy.
        device: default for the three devices below.
        env_device: device of a torchrl env (gymnasium envs run on the CPU).
        policy_device: device the policy runs on; a policy on another device
            is copied there (the original is left untouched).
        storing_device: device of the batches returned.
        worker_id: written to ``("collector", "worker_id")``.
        traj_id_start: first trajectory id (a RayCollector gives each worker
            its own range so trajectory ids are unique across workers).
        overlap: step one half of the envs while the policy acts on the other
            (:mod:`fleetrl.collectors.local.overlap`): ``None`` (default) where measured
            faster (a C++ Atari engine, an even ``num_envs``), ``True`` required
            (a ConfigError where the envs cannot be split), ``False`` off.
        policy_factory: a callable with no argument returning the policy, called
            here (for a policy that cannot be pickled, or must be built on this
            process's device); mutually exclusive with ``policy``, as in torchrl.
        trajs_per_batch: yield batches of this many whole trajectories,
            ``[trajs_per_batch, max_len]`` zero-padded with ``("collector", "mask")``
            (:mod:`fleetrl.collectors.local.trajectories`); ``total_frames`` then bounds
            the frames collected, and :attr:`frames` counts them.
        compile_policy: ``True`` or a dict of ``torch.compile`` options: the
            policy acts compiled (the same module and parameters).
        cudagraph_policy: ``True`` or a dict of ``CudaGraphModule`` options;
            CUDA only (a ConfigError when the policy runs on the CPU).
        set_truncated: mark the last step of every batch truncated (and done,
            not terminated), as torchrl does; the env is not reset, so the
            episode and its trajectory id go on in the next batch.
        inference_server: central inference (:mod:`fleetrl.collectors.inference`): an
            :class:`~fleetrl.collectors.inference.InferenceServer` actor that runs the
            policy for this collector, which then only steps envs, in two groups
            (double-buffered: :class:`~fleetrl.collectors.local.overlap.SplitEnv`) where the
            envs can be split. ``policy`` is still given: it is probed here for what it
            writes, and never run. Each step is tagged with the version the server
            answered with. A RayCollector with ``inference="server"`` passes each worker
            a :class:`~fleetrl.collectors.inference.client.ServerClient` on its server,
            with the transport its options chose; what the driver checked is not checked
            again.
        return_discount: track each env's running discounted return with this
            discount and write it to ``("next", "discounted_return")``, what
            reward scaling takes the variance of (:mod:`fleetrl.networks.normalization`);
            part of :meth:`state_dict`. None (default): off.
        rollout: a :class:`~fleetrl.collectors.rollout_options.RolloutOptions` holding
            ``frames_per_batch``, ``total_frames``, ``num_envs`` and
            ``max_frames_per_traj`` at once, checked when it was made (a config builds
            one; a RayCollector's worker gets its share), instead of those keywords.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> policy = TensorDictModule(lambda obs: (obs[..., :1] > 0).long().squeeze(-1),
        ...                           in_keys=["observation"], out_keys=["action"])
        >>> collector = SyncDataCollector("CartPole-v1", policy, frames_per_batch=64,
        ...                               total_frames=128, num_envs=4)
        >>> [batch.batch_size for batch in collector]
        [torch.Size([4, 16]), torch.Size([4, 16])]
        >>> collector.frames
        128
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fn: Any,
        policy: Any = None,
        *,
        frames_per_batch: int | None = None,
        total_frames: int = -1,
        num_envs: int | None = None,
        create_env_kwargs: dict[str, Any] | None = None,
        max_frames_per_traj: int | None = None,
        init_random_frames: int | None = None,
        reset_at_each_iter: bool = False,
        split_trajs: bool = False,
        postproc: Callable[[TensorDictBase], TensorDictBase] | None = None,
        exploration_type: ExplorationType | str = ExplorationType.RANDOM,
        device: Any = None,
        env_device: Any = None,
        policy_device: Any = None,
        storing_device: Any = None,
        worker_id: int = 0,
        traj_id_start: int = 0,
        overlap: bool | Overlap | str | None = None,
        policy_factory: Callable[[], Any] | None = None,
        trajs_per_batch: int | None = None,
        compile_policy: bool | dict[str, Any] | None = None,
        cudagraph_policy: bool | dict[str, Any] | None = None,
        set_truncated: bool = False,
        return_discount: float | None = None,
        inference_server: Any = None,
        inference_transport: str = "auto",
        rollout: RolloutOptions | None = None,
    ):
        super().__init__()
        p = Problems()
        # the sizes: one object, checked once (a RayCollector's worker gets its share, checked)
        sizes = given_rollout(
            p,
            rollout,
            frames_per_batch=frames_per_batch,
            total_frames=total_frames,
            num_envs=num_envs,
            max_frames_per_traj=max_frames_per_traj,
        )
        if sizes is not None and sizes.split != 1:
            p.add("rollout", sizes, WHOLE_BATCHES_MSG.format(split=sizes.split))
        self.exploration_type = as_exploration_type(exploration_type, p)
        device = as_device(device, "device", p)
        self.env_device = as_device(env_device, "env_device", p) or device
        self.policy_device = as_device(policy_device, "policy_device", p) or device
        self.storing_device = as_device(storing_device, "storing_device", p) or device
        user_policy = check_common_arguments(
            p,
            policy=policy,
            postproc=postproc,
            init_random_frames=init_random_frames,
        )
        check_feature_arguments(
            p,
            policy=policy,
            policy_factory=policy_factory,
            trajs_per_batch=trajs_per_batch,
            split_trajs=split_trajs,
            compile_policy=compile_policy,
            cudagraph_policy=cudagraph_policy,
            set_truncated=set_truncated,
            policy_devices=self.policy_device,
        )
        num_envs = sizes.num_envs if sizes is not None else num_envs
        split = overlap_spec(create_env_fn, num_envs, create_env_kwargs, as_overlap(overlap, p), p)
        if isinstance(inference_server, ServerClient):  # a RayCollector's: checked there
            if inference_transport != "auto":
                p.add("inference_transport", inference_transport, CLIENT_TRANSPORT_MSG)
        else:
            TRANSPORT.check(p, inference_transport, Audience.ARGUMENTS)
            if inference_server is not None:
                check_served(
                    p, policy, policy_factory, self.policy_device, compile_policy, cudagraph_policy
                )
        if return_discount is not None and not 0 < return_discount <= 1:
            p.add("return_discount", return_discount, "must be in (0, 1], or None: off")
        p.raise_if_any()

        assert sizes is not None  # its problems were raised with the others
        #: the rollout's sizes (:class:`~fleetrl.collectors.rollout_options.RolloutOptions`)
        self.rollout_options = sizes
        self.frames_per_batch = sizes.frames_per_batch
        self.return_discount = return_discount
        self.total_frames = sizes.total_frames
        self.max_frames_per_traj = sizes.max_frames_per_traj
        self.init_random_frames = init_random_frames if init_random_frames not in (None, -1) else 0
        self.reset_at_each_iter = reset_at_each_iter
        self.split_trajs = split_trajs
        self.postproc = postproc
        self.worker_id = worker_id
        self.policy_version = 0
        self.set_truncated = set_truncated
        self.trajs_per_batch = trajs_per_batch
        self._trajs = (
            None
            if trajs_per_batch is None
            else TrajectoryBatcher(trajs_per_batch, drop_partial=reset_at_each_iter)
        )
        #: where collection's time went since this collector was built (:meth:`stats`)
        self._times = CollectTimes()
        self._taken = CollectTimes()  # since the last take_times()

        skip_absent_pandas_probe()
        #: central inference: how the rollout reaches the server (None: the policy runs here)
        self.server = (
            inference_server
            if inference_server is None or isinstance(inference_server, ServerClient)
            else ServerClient(inference_server, inference_transport)
        )
        if self.server is not None:  # two groups where the envs split: double buffering
            # num_envs as given: None lets a prebuilt or self-batched env keep its own size
            self.env: BatchedEnv = SplitEnv.build(create_env_fn, num_envs, create_env_kwargs)
        elif split is None:
            self.env = make_env(create_env_fn, num_envs, create_env_kwargs)
        else:
            self.env = HalvedEnv(split, num_envs)
        #: whether policy batches overlap env steps with inference
        self.overlap = isinstance(self.env, SplitEnv)
        #: central inference: the oldest version in the last batch (the lag it is served with)
        self.batch_version = 0
        try:
            check_env(self.env, rollout=sizes, env_device=self.env_device)
            if isinstance(self.env, GroupedEnv):  # what its rollout does not take yet
                check_grouped_arguments(
                    overlap=True if as_overlap(overlap, p) is Overlap.ON else None,
                    trajs_per_batch=trajs_per_batch, split_trajs=split_trajs,
                    max_frames_per_traj=self.max_frames_per_traj, return_discount=return_discount,
                    set_truncated=set_truncated, compile_policy=compile_policy,
                    cudagraph_policy=cudagraph_policy, env_device=self.env_device,
                    policy_device=self.policy_device,
                )  # fmt: skip
            if policy_factory is not None:  # built here, where it acts (torchrl's meaning)
                user_policy = as_policy(policy_factory())
            self._user_policy = user_policy
            #: the rollout: the policy's plan and the episodes in progress (probes the
            #: policy, resets the envs)
            self._rolling: SingleRollout | GroupedRollout
            if isinstance(self.env, GroupedEnv):
                self._rolling = GroupedRollout(
                    self.env, user_policy, self.exploration_type, traj_id_start, self.server
                )
            else:
                self._rolling = SingleRollout(
                    self.env,
                    user_policy,
                    self.exploration_type,
                    policy_device=self.policy_device,
                    traj_id_start=traj_id_start,
                    return_discount=return_discount,
                    compile_policy=compile_policy,
                    cudagraph_policy=cudagraph_policy,
                    serve=self.server,
                    max_frames_per_traj=self.max_frames_per_traj,
                    set_truncated=set_truncated,
                )
                self.policy_device = self._rolling.policy_device
            self.policy = self._rolling.policy
        except Exception:
            self.env.close()
            raise

    # ----------------------------------------------------------- public API
    @property
    def num_envs(self) -> int:
        return self.env.num_envs

    @property
    def compact_keys(self) -> list[NestedKey]:
        """Observation keys ``k`` whose ``("next", k)`` in :meth:`collect`'s batches is ``k``
        shifted by one step, wherever the step did not end an episode.

        In a rollout, ``("next", k)[..., t]`` is ``k[..., t + 1]`` for ``t < T - 1``
        unless ``("next", "done")[..., t]``: every engine's ``StepResult.obs`` is its
        ``next_obs`` where no episode ended. A RayCollector worker sends such keys in
        the compact wire layout (:mod:`fleetrl.distributed.wire`). Empty with
        ``split_trajs`` or a ``postproc``, which may change the batch, and for a
        multi-agent env, whose groups end episodes of their own; a subclass
        that changes batches after the rollout must return an empty list.
        """
        if self.split_trajs or self.postproc is not None or isinstance(self.env, GroupedEnv):
            return []
        return list(self.env.observation_spec)

    def acts_with(self, policy: Any) -> bool:
        return policy is not None and self.policy is policy

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Seed the envs, the random-action sampler and torch; returns the next seed.

        As torchrl's: env i gets ``seed + i`` and ``seed + num_envs`` is returned;
        with ``static_seed=True`` the seed is not incremented: every env gets
        ``seed``, and ``seed`` is returned (gymnasium and torchrl envs; other
        engines refuse it with an ``EnvError``). Resets every env, so the
        episodes in progress end here (their frames already delivered stay valid).
        """
        self._check_open()
        torch.manual_seed(seed)
        self.env.seed_actions(seed)
        obs = self.env.reset_static(seed) if static_seed else self.env.reset(seed=seed)
        self._start_episodes(obs)
        return seed if static_seed else seed + self.env.num_envs

    def update_policy_weights_(
        self,
        policy_or_weights: Any = None,
        *,
        weights: Any = None,
        policy: Any = None,
        worker_ids: int | list[int] | None = None,
        model_id: str | None = None,
        version: int | None = None,
    ) -> None:
        """Load new policy weights and advance the policy version.

        Takes torchrl's arguments: a policy module (its weights are taken), a
        TensorDict keyed like the policy's parameters
        (``TensorDict.from_module(policy)``) or a ``state_dict``, positionally
        or as ``policy=`` / ``weights=``. Nothing copies from the module the
        collector was given when it acts on a copy (another device), and
        otherwise only advances the version. ``worker_ids``: this collector is
        one worker, :attr:`worker_id`; naming it (or None) updates it, any
        other id is a ``ConfigError``. ``version``: the version these weights
        are (default: current + 1); versions never go back, as on a ``RayCollector``:
        one below :attr:`policy_version` is a ``ConfigError``.
        """
        self._check_open()
        if self.server is not None:
            raise ConfigError([bad_value("update_policy_weights_", "weights", SERVER_WEIGHTS_MSG)])
        value = check_weight_update(
            policy_or_weights,
            weights=weights,
            policy=policy,
            worker_ids=worker_ids,
            model_id=model_id,
            worker_range=[self.worker_id],
            version=version,
            current_version=self.policy_version,
            name="SyncDataCollector",
        )
        source = value if isinstance(value, TensorDictBase) else as_weights(value)
        if (
            source is None
            and self.policy is not self._user_policy
            and isinstance(self._user_policy, nn.Module)
        ):
            source = TensorDict.from_module(self._user_policy)
        if source is not None:
            # copy into our parameters: the caller's tensors are never aliased
            with torch.no_grad():
                TensorDict.from_module(self.policy).update_(source.to(self.policy_device or "cpu"))
        self.policy_version = self.policy_version + 1 if version is None else int(version)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to go on collecting exactly where this collector is.

        Frame count, trajectory-id counter, policy version and weights; the
        episodes in progress (trajectory ids, running returns and lengths, the
        observation and recurrent state the policy sees next); and under
        ``"env"`` the envs' own state and random generators, or None where the
        env cannot be saved (see :mod:`fleetrl.envs.state`). Tensors and plain
        values only, so it loads with ``torch.load(weights_only=True)``. The
        policy's random draws come from torch's global generator, which the
        caller saves.
        """
        state: dict[str, Any] = {
            "frames": self._frames,
            "policy_version": self.policy_version,
            **self._rolling.episodes.state_dict(),
            **self._rolling.state_dict(),
            "env": self.env.state_dict(),
        }
        if isinstance(self.policy, nn.Module) and self.policy is not self._rolling.random:
            state["policy_state_dict"] = self.policy.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s counters and weights; with a saved env state
        (``state["env"]`` not None), also the envs and the episodes in progress."""
        self._frames = int(state["frames"])
        self.policy_version = int(state["policy_version"])
        if "policy_state_dict" in state:
            self.policy.load_state_dict(state["policy_state_dict"])
        saved_envs = state.get("env") is not None
        self._rolling.episodes.load_state_dict(state, episodes=saved_envs)
        if saved_envs:
            self.env.load_state_dict(state["env"])
            self._rolling.load_state_dict(state)

    def collect(
        self,
        frames: int,
        *,
        random: bool = False,
        min_frames: int | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> TensorDictBase:
        """Collect ``frames`` frames (a multiple of ``num_envs``) outside the iterator's budget.

        With ``should_stop``, the rollout stops early, once it holds at least ``min_frames``
        frames, at the first step where ``should_stop()`` is true (straggler preemption);
        the batch is then shorter in time. The check costs one call per step.

        ``frames`` is checked here, where a caller passes it; the iterator and a
        RayCollector's workers, whose sizes were checked when they were set, call
        :meth:`collect_planned`.
        """
        self._check_open()
        problems = batch_size_problems(
            frames_per_batch=frames, total_frames=None, num_envs=self.env.num_envs,
            names=FRAMES_NAMES,
        )  # fmt: skip
        if not isinstance(frames, int) or frames <= 0 or problems:
            raise ConfigError(problems or [bad_value("frames", frames, "must be > 0")])
        return self.collect_planned(
            frames, random=random, min_frames=min_frames, should_stop=should_stop
        )

    def collect_planned(
        self,
        frames: int,
        *,
        random: bool = False,
        min_frames: int | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> TensorDictBase:
        """:meth:`collect` of a size already known to be a positive multiple of ``num_envs``
        (this collector's ``frames_per_batch``, or a RayCollector task's share, checked
        against each worker's envs before any worker started): what a remote worker runs
        per task."""
        start = time.perf_counter()
        self._check_open()
        n = self.env.num_envs
        stop_from = frames // n if min_frames is None else max(1, -(-min_frames // n))
        times = CollectTimes(env_s=0.0, policy_s=0.0, batches=1)
        batch = self._rollout(
            frames // n, random=random, stop_from=stop_from, should_stop=should_stop, times=times
        )
        times.frames = batch.numel()
        if self.split_trajs:
            from torchrl.collectors.utils import split_trajectories

            batch = split_trajectories(batch)
        if self.postproc is not None:
            batch = self.postproc(batch)
        # the rest of the call built the batch around the loop (three clock reads per batch)
        times.pack_s = time.perf_counter() - start - times.env_s - times.policy_s
        self._times.add(times)
        self._taken.add(times)
        return batch

    def take_times(self) -> CollectTimes:
        """Where :meth:`collect`'s time went since the last call (reset): ``env_s``,
        ``policy_s`` and ``pack_s`` (:mod:`fleetrl.collectors.timing`; the parts of remote
        workers are NaN here), the frames and the batches they took."""
        taken, self._taken = self._taken, CollectTimes()
        return taken

    def stats(self) -> dict[str, Any]:
        """``frames`` delivered by the iterator, and under ``"time"`` where :meth:`collect`'s
        time went since the collector was built: the seconds of ``env_s``, ``policy_s`` and
        ``pack_s`` (:mod:`fleetrl.collectors.timing`), the ``frames`` and ``batches`` they
        took (every :meth:`collect`, a remote worker's tasks included), and ``per_batch``,
        each part's seconds per batch.

        Examples:
            >>> c = SyncDataCollector("CartPole-v1", None, frames_per_batch=64, num_envs=4)
            >>> _ = c.next()
            >>> t = c.stats()["time"]
            >>> t["frames"], t["batches"], sorted(t["per_batch"])[:3]
            (64, 1, ['env_s', 'pack_s', 'policy_s'])
            >>> c.shutdown()
        """
        seconds = self._times.seconds()
        local = {k: v for k, v in seconds.items() if k in ("env_s", "policy_s", "pack_s")}
        per_batch = self._times.per_batch()
        return {
            **super().stats(),
            "time": {
                **local,
                "frames": self._times.frames,
                "batches": self._times.batches,
                "per_batch": {k: per_batch[k] for k in local},
            },
        }

    def _next_batch(self) -> TensorDictBase | None:
        if self._trajs is None:
            return self._next_frames()
        # whole trajectories: poll frames_per_batch at a time
        return self._trajs.next_batch(self._next_frames)

    def _next_frames(self) -> TensorDictBase | None:
        remaining = self.remaining_frames
        frames = (
            self.frames_per_batch if remaining is None else min(self.frames_per_batch, remaining)
        )
        if frames <= 0:
            return None
        batch = self.collect_planned(frames, random=self._frames < self.init_random_frames)
        self._frames += frames
        return batch

    def _shutdown(self) -> None:
        if self.server is not None:
            self.server.close()
        self.env.close()

    # ------------------------------------------------------------- rollout
    def _start_episodes(self, obs: Any = None) -> None:
        """Start fresh episodes in every env (after a full reset, whose ``obs`` the policy
        sees next; None: the current observation). A multi-agent env's ``obs`` is the
        TensorDict its reset returned."""
        self._rolling.start_episodes(obs)

    def _rollout(
        self,
        steps: int,
        *,
        random: bool,
        stop_from: int | None = None,
        should_stop: Callable[[], bool] | None = None,
        times: CollectTimes | None = None,
    ) -> TensorDictBase:
        """One batch of ``steps`` steps: the envs in one group, or in two halves that step
        while the policy acts on the other (overlap, policy batches only). The loop's
        seconds are added to ``times`` (a reset at each batch counts as env time)."""
        if self.reset_at_each_iter:
            reset_start = time.perf_counter()
            self._start_episodes(self.env.reset())
            if times is not None:
                times.env_s += time.perf_counter() - reset_start
        batch = self._rolling.rollout(steps, random, stop_from, should_stop, times)
        return self._tag_batch(batch, self._rolling.versions)

    def _tag_batch(self, td: TensorDict, versions: np.ndarray | None) -> TensorDictBase:
        """Version and worker tags, env batch dims, names and device of a batch, given
        ``[num_envs, steps]`` or already ``[*env_batch, steps]``."""
        shape, steps = td.batch_size, td.batch_size[-1]
        if versions is None:
            tags = torch.full(shape, self.policy_version, dtype=torch.int64)
            self.batch_version = self.policy_version
        else:  # central inference: each step as its server answered
            tags = torch.from_numpy(versions[:, :steps]).reshape(shape)
            self.batch_version = int(tags.min())
            self.policy_version = max(self.policy_version, int(tags.max()))
        td.set(POLICY_VERSION_KEY, tags)
        td.set(WORKER_ID_KEY, torch.full(shape, self.worker_id, dtype=torch.int64))
        if td.batch_size[:-1] != self.env.batch_shape:
            td = td.reshape(*self.env.batch_shape, steps)
        td.names = [None] * (td.batch_dims - 1) + ["time"]
        if self.storing_device is not None and self.storing_device.type != "cpu":
            td = td.to(self.storing_device)
        return td

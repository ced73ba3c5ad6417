"""The rollout of a single-agent batch of envs (:class:`~fleetrl.envs.base.BatchedEnv`).

A :class:`~fleetrl.collectors.SyncDataCollector` holds one rollout: this one,
or :class:`~fleetrl.collectors.local.grouped.GroupedRollout` for a multi-agent env,
decided once when it is built. Both answer the same calls: ``rollout`` (one
batch, episode columns filled), ``start_episodes``, ``state_dict`` /
``load_state_dict`` (the episodes in progress) and ``versions``; the collector
tags and shapes the batch they return.

This one owns the single-agent parts: the policy's
:class:`~fleetrl.collectors.local.acting_setup.ActingSetup` (how it is called and what it
writes, from a pure probe when built), its step input
(:class:`~fleetrl.collectors.local.rollout.StepInput`: the observation and the states it
carries), and the episode bookkeeping (:class:`~fleetrl.collectors.local.episodes.EpisodeBook`).
The loop itself is :func:`~fleetrl.collectors.local.rollout.rollout`, over the envs in one
group or in two halves (overlap).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType as ExplorationType

from fleetrl.collectors.arguments import compile_options
from fleetrl.collectors.inference.checks import PER_ENV_MSG
from fleetrl.collectors.inference.client import ServerClient
from fleetrl.collectors.local.acting_setup import (
    accelerate,
    initial_states,
    place_policy,
    set_up_acting,
)
from fleetrl.collectors.local.episodes import EpisodeBook
from fleetrl.collectors.local.overlap import SplitEnv
from fleetrl.collectors.local.rollout import StepInput, alloc_batch, rollout
from fleetrl.collectors.timing import CollectTimes
from fleetrl.envs.base import BatchedEnv
from fleetrl.errors import PolicyError
from fleetrl.keys import ACTION_KEY, DISCOUNTED_RETURN_KEY, DONE_KEY, TRUNCATED_KEY, NestedKey
from fleetrl.networks.policies import PerEnvPolicy, RandomPolicy

__all__ = ["SingleRollout"]


class SingleRollout:
    """The episodes in progress of a single-agent batch of envs, the policy's plan, and
    the rollout.

    The envs are reset, the policy placed on its device and probed
    (:func:`~fleetrl.collectors.local.acting_setup.set_up_acting`), when built.

    Args:
        env: the envs (a :class:`~fleetrl.collectors.local.overlap.SplitEnv` steps in halves).
        policy: the acting policy, or None: uniform random actions.
        exploration_type: set around every policy call.
        policy_device: where the policy acts (None: where it is);
            :attr:`policy_device` is where it was placed.
        traj_id_start: the first trajectory id.
        return_discount: track the discounted return with this discount (None: off).
        compile_policy: ``torch.compile`` options (None: eager).
        cudagraph_policy: ``CudaGraphModule`` options (None: off).
        serve: central inference: the server runs the policy, which is only probed here.
        max_frames_per_traj: truncate an episode after this many steps (None: no limit).
        set_truncated: mark the last step of every batch truncated (and done).
    """

    def __init__(
        self,
        env: BatchedEnv,
        policy: Any,
        exploration_type: ExplorationType,
        *,
        policy_device: torch.device | None = None,
        traj_id_start: int = 0,
        return_discount: float | None = None,
        compile_policy: bool | dict[str, Any] | None = None,
        cudagraph_policy: bool | dict[str, Any] | None = None,
        serve: ServerClient | None = None,
        max_frames_per_traj: int | None = None,
        set_truncated: bool = False,
    ):
        self.env = env
        self.exploration_type = exploration_type
        self.serve = serve
        self.max_frames_per_traj = max_frames_per_traj
        self.set_truncated = set_truncated
        self.random = RandomPolicy(env.random_action)
        states: dict[NestedKey, torch.Tensor] = {}
        if policy is None:
            self.policy: Any = self.random
        else:
            policy, policy_device = place_policy(policy, policy_device)
            self.policy = policy
            states = initial_states(policy, env.num_envs)
        self.policy_device = policy_device
        #: what the policy reads at each step: the observation and the states it carries
        self.step = StepInput(env, states)
        self.step.set_obs(env.reset())
        plan = set_up_acting(
            self.policy, env, self.step.for_policy(policy_device), exploration_type
        )
        if serve is not None and isinstance(plan.act, PerEnvPolicy):
            raise PolicyError(PER_ENV_MSG.format(policy=policy))
        if self.policy is not self.random:
            plan = accelerate(
                plan,
                self.policy,
                compile_options=compile_options(compile_policy),
                cudagraph_options=compile_options(cudagraph_policy),
                device=policy_device,
            )
        #: how the policy is called and what it writes
        self.plan = plan
        #: the episodes in progress and the trajectory ids
        self.episodes = EpisodeBook(env.num_envs, traj_id_start, return_discount)
        #: each env's and step's policy version of the last batch, ``[num_envs, steps]``,
        #: as the server answered (None: the policy acted here)
        self.versions: np.ndarray | None = None
        self.start_episodes()

    def start_episodes(self, obs: Any = None) -> None:
        """Fresh episodes in every env, after a full reset whose ``obs`` the policy sees
        next (None: the current observation)."""
        if obs is not None:
            self.step.set_obs(obs)
        self.step.start_episodes()
        self.episodes.start_all()

    def rollout(
        self,
        steps: int,
        random: bool,
        stop_from: int | None = None,
        should_stop: Callable[[], bool] | None = None,
        times: CollectTimes | None = None,
    ) -> TensorDict:
        """``steps`` steps of every env, ``[num_envs, steps]`` (fewer when ``should_stop``
        is true from step ``stop_from`` on), with the episode columns filled: the envs in
        one group, or in two halves that step while the policy acts on the other (overlap,
        policy batches only). The loop's seconds are added to ``times``."""
        env, plan = self.env, self.plan
        # Everything below is decided once per batch, not per step.
        random = random or self.policy is self.random
        if random:
            act, out_keys, to_env, carried = self.random, [ACTION_KEY], None, []
        else:
            act, out_keys = plan.act, plan.out_keys
            to_env, carried = plan.action_to_env, plan.carried
        overlap = isinstance(env, SplitEnv)
        groups = env.groups if overlap and not random else [(env, slice(None))]
        device = self.policy_device
        on_device = device is not None and device.type != "cpu" and not random
        specs = {k: plan.out_specs[k] for k in out_keys}
        td, views = alloc_batch(env, self.step, specs, plan.state_keys, steps)
        serve = None if random else self.serve
        versions = None if serve is None else np.empty((env.num_envs, steps), dtype=np.int64)
        max_len = self.max_frames_per_traj
        taken = rollout(
            groups,
            self.step,
            td,
            views,
            act=act,
            out_keys=out_keys,
            state_keys=plan.state_keys,
            carried=carried,
            uses_is_init=plan.uses_is_init,
            to_env=to_env,
            device=device if on_device else None,
            exploration_type=self.exploration_type,
            ages=self.episodes.lengths.copy() if max_len is not None else None,
            max_len=max_len,
            stop_from=stop_from if should_stop is not None else None,
            should_stop=should_stop,
            times=times,
            serve=serve,
            versions=versions,
        )
        if taken < steps:  # preempted: keep the steps collected
            td = td[:, :taken]
            views = {k: v[:, :taken] for k, v in views.items()}
        self.versions = None if versions is None else versions[:, :taken]
        # once per batch with numpy cumulative sums, not five writes per step in the hot loop
        g = self.episodes.fill(views)
        if g is not None:
            td.set(DISCOUNTED_RETURN_KEY, torch.from_numpy(g.astype(np.float32)[..., None]))
        if self.set_truncated:  # after the bookkeeping: the episodes go on in the next batch
            views[TRUNCATED_KEY][:, -1] = True
            views[DONE_KEY][:, -1] = True
        return td

    def state_dict(self) -> dict[str, Any]:
        """What the collector's state adds for this rollout: the observation and states
        the policy sees next, as tensors (``"obs"``, ``"step_state"``); the episodes are
        :attr:`episodes`'s, saved by the collector."""
        return self.step.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` from the collector's ``state``, with the envs saved
        with it (their episodes go on)."""
        self.step.load_state_dict(state)

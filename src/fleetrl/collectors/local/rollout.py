"""The rollout: one loop over env groups that fills a batch's preallocated buffers.

:class:`StepInput` is what the policy reads at every step. :func:`alloc_batch`
allocates a batch's buffers once, before its first step. :func:`rollout` runs
the hot loop over one or more env *groups*: the whole env batch (one group),
or its two halves (:mod:`fleetrl.collectors.local.overlap`), each a C++ engine that
steps in threads of its own while the policy runs on the other half (Sample
Factory's double-buffered sampling). With one group the loop is the plain
step-then-infer loop::

    infer group 0 at step 0, send its actions
    for t: for each group g:
        receive g's step t, write its rows; infer g at t + 1, send its actions

The hot-loop rules:

- every buffer of a batch is allocated once, before the first step, and
  written by index through a numpy view (a numpy slice assignment costs about
  0.6 us against about 2 us for the same torch indexing);
- the policy runs on a whole group under ``torch.inference_mode()``, reading a
  step TensorDict whose observation tensors share memory with numpy arrays
  that are refreshed in place;
- every choice (random or learned policy, one-hot actions, recurrent state,
  forced truncation) is made before the loop; the only per-step branches are
  numpy ``any()`` checks for episode ends;
- where the time goes (:class:`~fleetrl.collectors.timing.CollectTimes`) is
  measured with a ``perf_counter`` pair around each policy call (about 100 ns
  against the tens of microseconds of a step): ``policy_s`` is their sum,
  ``env_s`` the rest of the loop.

Row ``i`` of a batch is env ``i`` at every step, in every group layout, so a
policy that acts on each env's row alone gives bit-identical batches with one
group or two.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import InteractionType as ExplorationType
from tensordict.nn import set_interaction_type as set_exploration_type

from fleetrl.collectors.inference.client import ServerClient
from fleetrl.collectors.timing import CollectTimes
from fleetrl.envs.base import BatchedEnv
from fleetrl.keys import (
    ACTION_KEY,
    DONE_KEY,
    EPISODE_LENGTH_KEY,
    EPISODE_RETURN_KEY,
    IS_INIT_KEY,
    REWARD_KEY,
    TERMINATED_KEY,
    TRAJ_IDS_KEY,
    TRUNCATED_KEY,
    NestedKey,
)
from fleetrl.networks.acting import TensorActor

__all__ = ["StepInput", "alloc_batch", "next_key", "rollout"]


def next_key(key: NestedKey) -> tuple[str, ...]:
    """``k`` -> ``("next", k)``."""
    return ("next", *key) if isinstance(key, tuple) else ("next", key)


class StepInput:
    """What the policy reads at every step: the observation and the states it carries.

    The observation tensors of :attr:`td` share memory with the numpy arrays of
    :attr:`obs`: refreshing the arrays in place refreshes what the policy sees,
    at no allocation. The states (``is_init``, recurrent states) live in
    :attr:`td` only.

    Args:
        env: the envs (their observation spec and count).
        states: the states the policy reads besides the observation, as at an
            episode's start (:func:`fleetrl.collectors.local.acting_setup.initial_states`).
    """

    def __init__(self, env: BatchedEnv, states: dict[NestedKey, torch.Tensor]):
        n = env.num_envs
        self.td = TensorDict(batch_size=[n])
        #: the observation the policy sees next, per key (refreshed in place)
        self.obs: dict[NestedKey, np.ndarray] = {}
        for key, (shape, dtype) in env.observation_spec.items():
            arr = np.zeros((n, *shape), dtype=dtype)
            self.obs[key] = arr
            self.td.set(key, torch.from_numpy(arr))
        self._start = {key: value.clone() for key, value in states.items()}
        for key, value in states.items():
            self.td.set(key, value)

    def set_obs(self, obs: dict[NestedKey, np.ndarray]) -> None:
        for key, arr in self.obs.items():
            arr[:] = obs[key]

    def start_episodes(self) -> None:
        """Every state as at an episode's start (recurrent states zero, ``is_init`` True)."""
        for key, value in self._start.items():
            self.td.get(key).copy_(value)

    def for_policy(self, device: torch.device | None) -> TensorDictBase:
        """The step TensorDict on the policy's device."""
        if device is not None and device.type != "cpu":
            return self.td.to(device, non_blocking=True)
        return self.td

    def state_dict(self) -> dict[str, Any]:
        """The observation and states the policy sees next (tensors, keys as lists)."""
        return {
            "obs": [[key, torch.from_numpy(arr.copy())] for key, arr in self.obs.items()],
            "step_state": [[key, self.td.get(key).clone()] for key in self._start],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state["obs"]:
            self.obs[_as_key(key)][:] = value.numpy()
        for key, value in state["step_state"]:
            self.td.get(_as_key(key)).copy_(value)


def _as_key(key: Any) -> NestedKey:
    """A nested key as saved (a tuple may come back from a checkpoint as a list)."""
    return tuple(key) if isinstance(key, list) else key


def alloc_batch(
    env: BatchedEnv,
    step: StepInput,
    out_specs: dict[NestedKey, tuple[tuple[int, ...], torch.dtype]],
    state_keys: Sequence[NestedKey],
    steps: int,
) -> tuple[TensorDict, dict[NestedKey, np.ndarray]]:
    """One batch of buffers on the CPU, ``[N, steps, ...]``, with numpy views to write them."""
    n = env.num_envs
    tensors: dict[NestedKey, torch.Tensor] = {}
    for key, (shape, dtype) in env.observation_spec.items():
        tensors[key] = torch.from_numpy(np.empty((n, steps, *shape), dtype=dtype))
        tensors[next_key(key)] = torch.from_numpy(np.empty((n, steps, *shape), dtype=dtype))
    for key in state_keys:
        ref = step.td.get(key)
        tensors[key] = torch.empty(n, steps, *ref.shape[1:], dtype=ref.dtype)
    for key, (shape, dtype) in out_specs.items():
        tensors[key] = torch.empty(n, steps, *shape, dtype=dtype)
    tensors[REWARD_KEY] = torch.empty(n, steps, 1, dtype=torch.float32)
    for key in (DONE_KEY, TERMINATED_KEY, TRUNCATED_KEY):
        tensors[key] = torch.empty(n, steps, 1, dtype=torch.bool)
    tensors[EPISODE_RETURN_KEY] = torch.empty(n, steps, 1, dtype=torch.float32)
    tensors[EPISODE_LENGTH_KEY] = torch.empty(n, steps, 1, dtype=torch.int64)
    tensors[TRAJ_IDS_KEY] = torch.empty(n, steps, dtype=torch.int64)
    views = {k: v.numpy() for k, v in tensors.items()}
    td = TensorDict(batch_size=[n, steps])
    for k, v in tensors.items():
        td.set(k, v)
    return td, views


class _Group:
    """One env group: its engine, its rows of the batch, its rows of the step input."""

    __slots__ = ("asked", "call", "env", "in_flight", "index", "out", "rows", "td")

    def __init__(self, env: BatchedEnv, rows: slice, td: TensorDictBase, index: int = 0):
        self.index = index
        self.env = env
        self.rows = rows
        self.td = td  # a view of the step TensorDict's rows: refreshed in place
        self.out: TensorDictBase | None = None
        self.in_flight = False
        self.asked: Any = None  # central inference: the request sent for the next step
        #: the policy's call on this group's step input (:func:`_step_call`)
        self.call: Callable[[], TensorDictBase] | None = None


def _step_call(
    act: Callable[[TensorDictBase], Any], td: TensorDictBase, device: torch.device | None
) -> Callable[[], Any]:
    """The policy's call on ``td`` (refreshed in place at every step), as a function of
    nothing, made once per batch under the batch's interaction type: a tensor actor reads
    its input tensors and the interaction type once (:meth:`TensorActor.bind`); a policy on
    another device gets ``td``'s copy there at every call."""
    if device is not None:
        return lambda: act(td.to(device, non_blocking=True))
    if isinstance(act, TensorActor):
        return act.bind(td)
    return functools.partial(act, td)


def rollout(
    groups: Sequence[tuple[BatchedEnv, slice]],
    step: StepInput,
    td: TensorDict,
    views: dict[NestedKey, np.ndarray],
    *,
    act: Callable[[TensorDictBase], TensorDictBase],
    out_keys: Sequence[NestedKey],
    state_keys: Sequence[NestedKey],
    carried: Sequence[tuple[NestedKey, NestedKey]],
    uses_is_init: bool,
    to_env: Callable[[torch.Tensor], torch.Tensor] | None,
    device: torch.device | None,
    exploration_type: ExplorationType,
    ages: np.ndarray | None,
    max_len: int | None,
    stop_from: int | None = None,
    should_stop: Callable[[], bool] | None = None,
    times: CollectTimes | None = None,
    serve: ServerClient | None = None,
    versions: np.ndarray | None = None,
) -> int:
    """Fill ``views`` (from :func:`alloc_batch`) step by step; returns the steps taken.

    Args:
        groups: ``(env, rows)`` per group: the envs that step rows ``rows`` of
            the batch (one group: the whole batch, ``slice(None)``).
        step: the policy's input; left as the policy sees the step after the last.
        act: the policy call (a random policy for random batches).
        out_keys: what ``act`` writes that the batch keeps.
        state_keys: the states the policy reads, recorded as inputs.
        carried: (state key, output key) pairs carried to the next step.
        uses_is_init: the policy reads ``is_init``, set at each episode's start.
        to_env: turns actions into the env's (None: as is).
        device: the policy's device when not the CPU (outputs are copied back).
        ages: each env's steps into its episode (updated in place) when
            ``max_len`` forces truncation; None without a limit.
        stop_from: the step from which ``should_stop`` is asked, once per step
            (straggler preemption); the batch then holds the steps taken.
        times: where the loop's seconds are added: ``policy_s`` (the policy calls) and
            ``env_s`` (the rest of the loop); None: measured, not kept.
        serve: central inference (:mod:`fleetrl.collectors.inference`): each group's
            step input goes to an inference server instead of ``act``, and the groups
            are double-buffered (see below); ``policy_s`` is then the time spent sending
            requests and waiting for answers.
        versions: with ``serve``, ``[N, steps]``: each step's policy version, as answered.

    With ``serve``, a group's request for step t + 1 is sent as soon as its step t is
    received, and its answer is taken only when its turn comes again, so the server
    works on one group while the other steps::

        ask A(0), ask B(0)
        for t: take A(t), send A, recv A(t), write A's rows, ask A(t + 1)
               take B(t), send B, recv B(t), write B's rows, ask B(t + 1)
    """
    steps = views[REWARD_KEY].shape[1]
    obs_views = [(k, views[k], views[next_key(k)]) for k in step.obs]
    state_views = [(views[k], step.td.get(k).numpy()) for k in state_keys]
    out_views = [(k, views[k]) for k in out_keys]
    v_reward = views[REWARD_KEY][..., 0]
    v_term, v_trunc = views[TERMINATED_KEY][..., 0], views[TRUNCATED_KEY][..., 0]
    step_np = step.obs
    carried_t = [(step.td.get(key), out_key) for key, out_key in carried]
    is_init = step.td.get(IS_INIT_KEY).numpy() if uses_is_init else None
    track_starts = bool(carried_t) or is_init is not None
    whole = len(groups) == 1
    gs = [
        _Group(env, rows, step.td if whole else step.td[rows], i)
        for i, (env, rows) in enumerate(groups)
    ]
    clock = time.perf_counter  # a local name: no attribute lookup per step
    policy_s = 0.0

    def infer(g: _Group, t: int) -> None:
        nonlocal policy_s
        r = g.rows
        started = clock()
        out = g.call()  # type: ignore[misc]
        policy_s += clock() - started
        for view, state in state_views:
            view[r, t] = state[r]
        for key, view in out_views:
            value = out.get(key)
            view[r, t] = (value.cpu() if device is not None else value).numpy()
        for key, view, _ in obs_views:
            view[r, t] = step_np[key][r]
        action = out.get(ACTION_KEY)
        g.env.send(action if to_env is None else to_env(action))  # steps while we go on
        g.out, g.in_flight = out, True

    def ask(g: _Group, t: int) -> None:
        nonlocal policy_s
        r = g.rows
        for view, state in state_views:
            view[r, t] = state[r]
        for key, view, _ in obs_views:
            view[r, t] = step_np[key][r]
        started = clock()
        g.asked = serve.ask(g.td, g.index)  # type: ignore[union-attr]
        policy_s += clock() - started

    def take(g: _Group, t: int) -> None:
        nonlocal policy_s
        r = g.rows
        started = clock()
        out, version = serve.take(g.asked, g.td)  # type: ignore[union-attr]
        policy_s += clock() - started
        g.asked = None
        versions[r, t] = version  # type: ignore[index]
        for key, view in out_views:
            view[r, t] = out.get(key).numpy()
        action = out.get(ACTION_KEY)
        g.env.send(action if to_env is None else to_env(action))
        g.out, g.in_flight = out, True

    def finish(g: _Group, t: int) -> None:
        r = g.rows
        g.in_flight = False  # even if recv raises: never received twice
        res = g.env.recv()
        for key, _, next_view in obs_views:
            next_view[r, t] = res.next_obs[key]
        truncated, obs = res.truncated, res.obs
        if ages is not None:
            rows_ages = ages[r]  # a view: updated in place
            rows_ages += 1
            forced = (rows_ages >= max_len) & ~(res.terminated | truncated)
            if forced.any():
                truncated = truncated | forced
                obs = g.env.reset_envs(forced)
            rows_ages[res.terminated | truncated] = 0
        v_reward[r, t] = res.reward
        v_term[r, t] = res.terminated
        v_trunc[r, t] = truncated
        for key, arr in step_np.items():
            arr[r] = obs[key]
        if track_starts:
            done = res.terminated | truncated
            for state, out_key in carried_t:
                rows = state[r]
                rows.copy_(g.out.get(out_key))  # in place: the groups' views stay valid
                if done.any():
                    rows[torch.from_numpy(done)] = 0
            if is_init is not None:
                is_init[r, 0] = done

    stop_at = steps if should_stop is None or stop_from is None else stop_from
    taken = steps
    loop_start = clock()
    try:
        with torch.inference_mode(), set_exploration_type(exploration_type):
            start = infer if serve is None else ask
            for g in gs:
                if serve is None:
                    g.call = _step_call(act, g.td, device)
                start(g, 0)
            for t in range(steps):
                go_on = t + 1 < steps
                for i, g in enumerate(gs):
                    if serve is not None:
                        take(g, t)
                    finish(g, t)
                    if i == 0 and go_on and t + 1 >= stop_at and should_stop():
                        go_on, taken = False, t + 1  # the other groups are received below
                    if go_on:
                        start(g, t + 1)
                if not go_on:
                    break
    except BaseException:
        for g in gs:  # leave no step in flight, so the engines can be used or closed
            if g.in_flight:
                g.env.cancel()
        raise
    if times is not None:
        times.policy_s = _plus_zero(times.policy_s) + policy_s
        times.env_s = _plus_zero(times.env_s) + (clock() - loop_start - policy_s)
    return taken


def _plus_zero(seconds: float) -> float:
    """NaN (not measured yet) as 0."""
    return 0.0 if math.isnan(seconds) else seconds

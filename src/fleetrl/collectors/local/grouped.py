"""The rollout of a multi-agent env in torchrl's grouped layout (:class:`~fleetrl.envs.GroupedEnv`).

A :class:`~fleetrl.collectors.SyncDataCollector` given a torchrl env with
agent groups decides, once when built, to collect it here instead of through
the single-agent numpy loop (:mod:`fleetrl.collectors.local.rollout`), whose
``StepResult`` has one reward and one done per env. The env is stepped as
torchrl's ``Collector`` steps it: the policy writes into the step TensorDict,
``step_and_maybe_reset`` adds ``"next"`` (whose observations are the last of
an episode that ended) and returns what the policy reads next, reset where
torchrl's ``_reset`` rules for grouped dones say. A batch is therefore exactly
torchrl's: the same leaf keys, shapes and dtypes (groups nested, the agent dim
after ``[*env_batch, time]``), one frame per env step; fleetrl adds its
``("collector", ...)`` tags and the episode columns below.

Episode columns (filled once per batch with :class:`~fleetrl.collectors.local.episodes.EpisodeBook`'s
vectorized sums, not in the step loop):

- the *team* episode of an env ends where any of the env's dones is set,
  torchrl's trajectory rule (its ``("collector", "traj_ids")`` change there too):
  ``("next", "episode_end")``, and ``("next", "episode_return")`` /
  ``("next", "episode_length")`` as for a single agent, where the team's reward
  is the sum over groups of each group's mean agent reward;
- a *group*'s episode ends where one of its own dones or a root done is set:
  ``("next", "group_end", group)`` and ``("next", "group_return", group)``, the
  running sum of the group's mean agent reward (the sum over the episode of each
  agent's reward, averaged over the group's agents).

Cost: torchrl builds TensorDicts at every step, and the batch is stacked once at
its end (one allocation per batch); the single-agent loop is not touched.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType as ExplorationType
from tensordict.nn import set_interaction_type as set_exploration_type

from fleetrl.collectors.inference.client import ServerClient
from fleetrl.collectors.local.episodes import EpisodeBook
from fleetrl.collectors.timing import CollectTimes
from fleetrl.envs.grouped import GroupedEnv
from fleetrl.errors import PolicyError, Problems
from fleetrl.keys import (
    ACTION_KEY,
    DONE_KEY,
    EPISODE_END_KEY,
    EPISODE_LENGTH_KEY,
    EPISODE_RETURN_KEY,
    GROUP_END_KEY,
    GROUP_RETURN_KEY,
    REWARD_KEY,
    TERMINATED_KEY,
    TRAJ_IDS_KEY,
    TRUNCATED_KEY,
    NestedKey,
)
from fleetrl.networks.acting import TeamActor, TensorActor, tensor_actor

__all__ = [
    "GROUPED_ARGUMENT_MSG",
    "GROUP_ACTION_MSG",
    "GROUP_PROBE_MSG",
    "ROOT_ACTION_MSG",
    "GroupedRollout",
    "check_grouped_arguments",
    "check_grouped_policy",
]

ROOT_ACTION_MSG = (
    "policy={policy!r} writes a root 'action', but this env's actions are per agent group: "
    "{keys}; write each group's action key instead, e.g. "
    "TensorDictModule(net, in_keys=[{obs!r}], out_keys=[{key!r}]) (or a ProbabilisticActor "
    "over torchrl's MultiAgentMLP with out_keys=[{key!r}]), or pass policy=None for random "
    "actions per agent"
)
GROUP_PROBE_MSG = (
    "policy={policy!r} raised {err} on the env's first step: it reads {reads}, and this "
    "multi-agent env's observations are {obs}; read those and write each group's action "
    "key, e.g. out_keys=[{key!r}]"
)
GROUP_ACTION_MSG = (
    "policy={policy!r} did not write the env's action keys {missing} (it wrote {keys}); a "
    "policy for a multi-agent env writes every group's action key, e.g. out_keys=[{key!r}]"
)
GROUP_ACTION_SHAPE_MSG = (
    "policy={policy!r} wrote {key!r} of shape {got}; the env's action spec needs {want} "
    "([*env_batch, *agent_dims, ...])"
)
GROUPED_ARGUMENT_MSG = (
    "is not supported yet for a multi-agent env (agent groups, torchrl's grouped layout); "
    "leave it at {default!r}"
)


def check_grouped_arguments(**given: Any) -> None:
    """Refuse, all at once, every argument of ``SyncDataCollector`` given away from its
    default that the grouped rollout does not take yet (a device: other than the CPU).

    Raises:
        ConfigError: each such argument, its value, and its default.
    """
    p = Problems()
    for name, value in given.items():
        default = _DEFAULTS.get(name)
        if name.endswith("_device"):
            value = None if value is None or torch.device(value).type == "cpu" else value
        if value is not default and value != default:
            p.add(name, value, GROUPED_ARGUMENT_MSG.format(default=default))
    p.raise_if_any()


#: the defaults of the arguments that :func:`check_grouped_arguments` checks (others: None)
_DEFAULTS: dict[str, Any] = {"split_trajs": False, "set_truncated": False}


def check_grouped_policy(
    policy: Any, env: GroupedEnv, td: TensorDictBase, exploration_type: ExplorationType
) -> list[NestedKey]:
    """Run ``policy`` once on a copy of the first step (torch's generator untouched) and
    refuse it unless it writes every action key of the env in its spec's shape.

    Returns:
        the leaf keys the policy wrote (those the step did not hold).

    Raises:
        PolicyError: a root ``"action"`` for an env whose actions are per group, a missing
            action key, or an action of the wrong shape.
    """
    with (
        torch.random.fork_rng(devices=[]),
        torch.inference_mode(),
        set_exploration_type(exploration_type),
    ):
        try:
            out = policy(td.clone())
        except Exception as err:  # a policy built for another layout: say what this one has
            raise PolicyError(
                GROUP_PROBE_MSG.format(
                    policy=policy,
                    err=f"{type(err).__name__}: {err}".splitlines()[0],
                    reads=getattr(policy, "in_keys", "?"),
                    obs=observation_keys(env),
                    key=_example_action(env),
                )
            ) from err
    if not isinstance(out, TensorDictBase):
        raise PolicyError(
            f"policy={policy!r} returned {type(out).__name__}; it must return a TensorDict"
        )
    written = list(out.keys(include_nested=True, leaves_only=True))
    action_keys = env.action_keys
    example = _example_action(env)
    if ACTION_KEY in written and ACTION_KEY not in action_keys:
        group = example[:-1] if isinstance(example, tuple) else ()
        obs = observation_keys(env)
        # the observation of the example's group, as the env names it
        in_group = [k for k in obs if isinstance(k, tuple) and k[: len(group)] == group]
        raise PolicyError(
            ROOT_ACTION_MSG.format(
                policy=policy, keys=action_keys, key=example, obs=(in_group or obs)[0]
            )
        )
    missing = [k for k in action_keys if k not in written]
    if missing:
        raise PolicyError(
            GROUP_ACTION_MSG.format(policy=policy, missing=missing, keys=written, key=example)
        )
    for key in action_keys:
        want = tuple(env.env.full_action_spec[key].shape)
        got = tuple(out.get(key).shape)
        if got != want:
            raise PolicyError(
                GROUP_ACTION_SHAPE_MSG.format(policy=policy, key=key, got=got, want=want)
            )
    given = set(td.keys(include_nested=True, leaves_only=True))
    return [k for k in written if k not in given]


def observation_keys(env: GroupedEnv) -> list[NestedKey]:
    """The leaf keys of the env's observations (what a policy may read), as it names them."""
    return list(env.env.observation_spec.keys(include_nested=True, leaves_only=True))


def _example_action(env: GroupedEnv) -> NestedKey:
    """A group's action key (the first nested one), for the messages' examples."""
    keys = env.action_keys
    return next((k for k in keys if isinstance(k, tuple)), keys[0])


class GroupedRollout:
    """The episodes in progress of a :class:`~fleetrl.envs.GroupedEnv` and its rollout.

    The envs are reset, and the policy probed (:func:`check_grouped_policy`), when built.

    Args:
        env: the envs.
        policy: the acting policy (TensorDict in, TensorDict out), or None: random
            actions per agent from the env's action spec.
        exploration_type: set around every policy call.
        traj_id_start: the first trajectory id.
        serve: central inference (:mod:`fleetrl.collectors.inference`): each step's policy
            inputs (every agent of every env, one request) go to the server, which runs
            the policy in one batched forward with other workers' requests; the policy here
            is only probed. None: the policy acts here.
    """

    def __init__(
        self,
        env: GroupedEnv,
        policy: Any,
        exploration_type: ExplorationType,
        traj_id_start: int = 0,
        serve: ServerClient | None = None,
    ):
        self.env = env
        self.serve = None if policy is None else serve
        #: what a server is sent each step: the policy's in-keys (every leaf where it has none)
        self._served_keys = _leaf_in_keys(policy) if self.serve is not None else None
        self.random = env.random_policy()
        self.policy = self.random if policy is None else policy
        self.exploration_type = exploration_type
        n = env.num_envs
        #: the team's episodes: trajectory ids, running return and length
        self.episodes = EpisodeBook(n, traj_id_start)
        #: each group's episodes (only their running returns are used)
        self.groups = {name: EpisodeBook(n) for name in env.groups}
        #: what the policy reads next
        self.td: TensorDictBase = env.reset()
        #: the policy's call per step: on tensors where that is exactly the same call
        self._act: Callable[[TensorDictBase], TensorDictBase] = self.policy
        if policy is not None:
            written = check_grouped_policy(policy, env, self.td, exploration_type)
            fast = (
                None
                if self.serve is not None
                else tensor_actor(policy, self.td, written, exploration_type)
            )
            if fast is not None:
                self._act = _WrittenIntoStep(fast)
        self.start_episodes()

    def start_episodes(self, td: TensorDictBase | None = None) -> None:
        """Fresh episodes in every env, after a full reset whose output ``td`` the policy
        reads next (None: the current step)."""
        if td is not None:
            self.td = td
        self.episodes.start_all()
        for book in self.groups.values():
            book.start_all()

    def rollout(
        self,
        steps: int,
        random: bool,
        stop_from: int | None = None,
        should_stop: Callable[[], bool] | None = None,
        times: CollectTimes | None = None,
    ) -> TensorDictBase:
        """``steps`` steps of every env, ``[*env_batch, steps]`` (fewer when ``should_stop``
        is true from step ``stop_from`` on), with the episode columns filled. With a
        server, :attr:`versions` holds each step's policy version, as answered."""
        act = self.random if random else self._act
        serve = None if random else self.serve
        env, td = self.env, self.td
        ask_from = steps if should_stop is None or stop_from is None else stop_from
        clock = time.perf_counter
        policy_s = 0.0
        frames: list[TensorDictBase] = []
        versions: list[int] = []
        loop_start = clock()
        with torch.inference_mode(), set_exploration_type(self.exploration_type):
            for t in range(steps):
                started = clock()
                if serve is None:
                    td = act(td)
                else:
                    keys = self._served_keys
                    asked = serve.ask(td if keys is None else td.select(*keys, strict=False))
                    td, version = serve.take(asked, td)
                    versions.append(version)
                policy_s += clock() - started
                transition, td = env.step(td)
                frames.append(transition)
                if ask_from <= t + 1 < steps and should_stop():  # type: ignore[misc]
                    break
        self.td = td
        #: each env's and step's policy version, ``[num_envs, steps]``, as the server answered
        #: (None: the policy acted here)
        self.versions = (
            None
            if serve is None
            else np.repeat(np.asarray(versions, dtype=np.int64)[None], env.num_envs, 0)
        )
        if times is not None:
            times.policy_s = policy_s
            times.env_s = clock() - loop_start - policy_s
        # one stack per batch; torchrl's step already built a TensorDict per step
        batch = torch.stack(frames, dim=len(env.batch_shape))
        self._fill_episodes(batch)
        return batch

    def _fill_episodes(self, batch: TensorDictBase) -> None:
        """Write the team's and each group's episode columns (see the module docstring)."""
        env = self.env
        n, steps = env.num_envs, batch.shape[-1]
        flat = batch.reshape(n, steps)
        root_end = _any_of(flat, env.root_done_keys, n, steps)
        team_reward = torch.zeros(n, steps, dtype=torch.float64)
        for name, group in env.groups.items():
            rewards = [
                flat.get(("next", *_tuple(k))).reshape(n, steps, -1) for k in group.reward_keys
            ]
            reward = torch.cat(rewards, -1).to(torch.float64).mean(-1)
            team_reward += reward
            end = root_end | _any_of(flat, group.done_keys, n, steps)
            running, ended, _, _ = _columns(self.groups[name], reward, end)
            batch.set((*GROUP_RETURN_KEY, name), _shaped(running, batch))
            batch.set((*GROUP_END_KEY, name), _shaped(ended, batch))
        team_end = root_end | _any_of(
            flat, [k for g in env.groups.values() for k in g.done_keys], n, steps
        )
        running, ended, length, traj_ids = _columns(self.episodes, team_reward, team_end)
        batch.set(EPISODE_RETURN_KEY, _shaped(running, batch))
        batch.set(EPISODE_LENGTH_KEY, _shaped(length, batch))
        batch.set(EPISODE_END_KEY, _shaped(ended, batch))
        batch.set(TRAJ_IDS_KEY, torch.from_numpy(traj_ids).reshape(batch.shape))

    def state_dict(self) -> dict[str, Any]:
        """What the collector's state adds for this rollout, under ``"grouped"``: each
        group's episodes in progress and the step the policy reads next, as tensors and
        plain values (the team's episodes are in :attr:`episodes`, saved by the collector)."""
        step = [
            [list(_tuple(key)), value.clone()]
            for key, value in self.td.items(include_nested=True, leaves_only=True)
        ]
        groups = {n: b.state_dict() for n, b in self.groups.items()}
        return {"grouped": {"groups": groups, "step": step}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` from the collector's ``state``, with the envs saved
        with it (their episodes go on)."""
        saved = state["grouped"]
        for name, book in self.groups.items():
            book.load_state_dict(saved["groups"][name])
        td = self.td.clone()
        for key, value in saved["step"]:
            td.set(tuple(key), value)
        self.td = td


class _WrittenIntoStep:
    """A :class:`~fleetrl.networks.acting.TensorActor` (or ``TeamActor``) as the
    policy's call: its outputs written into the step, which it returns (at evaluation,
    where it is the actor itself, the actor's own TensorDict)."""

    def __init__(self, fast: TensorActor | TeamActor):
        self.fast = fast

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        out = self.fast(td)
        if not isinstance(out, dict):
            return out
        for key, value in out.items():
            td.set(key, value)
        return td


def _leaf_in_keys(policy: Any) -> list[NestedKey] | None:
    """The keys a policy reads (its ``in_keys``), or None where it does not say."""
    keys = getattr(policy, "in_keys", None)
    return list(keys) if keys else None


def _tuple(key: NestedKey) -> tuple[str, ...]:
    return key if isinstance(key, tuple) else (key,)


def _any_of(flat: TensorDictBase, keys: list[NestedKey], n: int, steps: int) -> torch.Tensor:
    """Whether any entry of ``("next", key)`` for ``key`` in ``keys`` is set, ``[n, steps]``."""
    out = torch.zeros(n, steps, dtype=torch.bool)
    for key in keys:
        out |= flat.get(("next", *_tuple(key))).reshape(n, steps, -1).any(-1)
    return out


def _columns(
    book: EpisodeBook, reward: torch.Tensor, end: torch.Tensor
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Running return, episode end, running length and trajectory ids, ``[n, steps]``, from
    one reward and one episode end per env and step, carried on by ``book``."""
    n, steps = reward.shape
    views = {
        REWARD_KEY: reward.numpy()[..., None],
        TERMINATED_KEY: end.numpy()[..., None],
        TRUNCATED_KEY: np.zeros((n, steps, 1), dtype=bool),
        DONE_KEY: np.empty((n, steps, 1), dtype=bool),
        EPISODE_RETURN_KEY: np.empty((n, steps, 1), dtype=np.float32),
        EPISODE_LENGTH_KEY: np.empty((n, steps, 1), dtype=np.int64),
        TRAJ_IDS_KEY: np.empty((n, steps), dtype=np.int64),
    }
    book.fill(views)
    return (
        views[EPISODE_RETURN_KEY][..., 0],
        views[DONE_KEY][..., 0],
        views[EPISODE_LENGTH_KEY][..., 0],
        views[TRAJ_IDS_KEY],
    )


def _shaped(column: np.ndarray, batch: TensorDictBase) -> torch.Tensor:
    """A ``[n, steps]`` column as ``[*env_batch, steps, 1]``."""
    return torch.from_numpy(column).reshape(*batch.shape, 1)

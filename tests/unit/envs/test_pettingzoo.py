"""fleetrl's PettingZoo parallel-API adapter: MPE games collected in torchrl's grouped layout."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo")
mpe2 = pytest.importorskip("mpe2")

from gymnasium import spaces  # noqa: E402
from mpe2 import simple_adversary_v3, simple_spread_v3, simple_tag_v3  # noqa: E402
from pettingzoo.utils.env import ParallelEnv  # noqa: E402

from fleetrl import EnvError, SyncDataCollector  # noqa: E402
from fleetrl.envs import GroupedEnv, make_env  # noqa: E402
from fleetrl.envs.pettingzoo import AEC_MSG, AGENTS_LEFT_MSG, PettingZooEnv  # noqa: E402
from fleetrl.keys import (  # noqa: E402
    EPISODE_END_KEY,
    EPISODE_LENGTH_KEY,
    EPISODE_RETURN_KEY,
    POLICY_VERSION_KEY,
    TRAJ_IDS_KEY,
    WORKER_ID_KEY,
)

#: MPE truncates every episode after max_cycles steps
MAX_CYCLES = 3
FLAGS = ("done", "terminated", "truncated")


def _layout(batch):
    return {
        key: (tuple(batch.get(key).shape), batch.get(key).dtype)
        for key in batch.keys(include_nested=True, leaves_only=True)
    }


def _collect(make, frames_per_batch, total_frames, seed=0):
    collector = SyncDataCollector(
        make, None, frames_per_batch=frames_per_batch, total_frames=total_frames
    )
    try:
        collector.set_seed(seed)
        batches = list(collector)
        assert collector.frames == total_frames
        return batches
    finally:
        collector.shutdown()


def _spread():
    return PettingZooEnv(simple_spread_v3.parallel_env, max_cycles=MAX_CYCLES)


def test_simple_spread_is_one_group_of_three_agents():
    env = _spread()
    try:
        assert env.group_map == {"agents": ["agent_0", "agent_1", "agent_2"]}
        assert isinstance(make_env(env), GroupedEnv)
        assert env.full_action_spec["agents", "action"].n == 5  # MPE's Discrete(5) moves
    finally:
        env.close()


def test_simple_spread_batch_has_torchrl_grouped_layout():
    (batch,) = _collect(_spread, frames_per_batch=8, total_frames=8)
    group = {
        ("agents", "action"): ((8, 3), torch.int64),
        ("agents", "observation"): ((8, 3, 18), torch.float32),
        **{("agents", k): ((8, 3, 1), torch.bool) for k in FLAGS},
    }
    root = {"state": ((8, 54), torch.float32), **{k: ((8, 1), torch.bool) for k in FLAGS}}
    nxt = {("next", *((k,) if isinstance(k, str) else k)): v for k, v in {**group, **root}.items()}
    del nxt["next", "agents", "action"]
    expected = {
        **group,
        **root,
        **nxt,
        ("next", "agents", "reward"): ((8, 3, 1), torch.float32),
        POLICY_VERSION_KEY: ((8,), torch.int64),
        WORKER_ID_KEY: ((8,), torch.int64),
        TRAJ_IDS_KEY: ((8,), torch.int64),
        EPISODE_END_KEY: ((8, 1), torch.bool),
        EPISODE_RETURN_KEY: ((8, 1), torch.float32),
        EPISODE_LENGTH_KEY: ((8, 1), torch.int64),
        ("next", "group_end", "agents"): ((8, 1), torch.bool),
        ("next", "group_return", "agents"): ((8, 1), torch.float32),
    }
    assert _layout(batch) == expected


def test_simple_spread_episodes_end_at_max_cycles_and_restart_from_a_reset():
    batches = _collect(_spread, frames_per_batch=8, total_frames=16)
    batch = torch.cat(batches)
    nxt = batch["next"]
    ends = [t for t in range(16) if (t + 1) % MAX_CYCLES == 0]
    # every agent and the root are truncated (never terminated) after max_cycles steps
    assert nxt["done"].squeeze(-1).nonzero().flatten().tolist() == ends
    assert torch.equal(nxt["truncated"], nxt["done"])
    assert not nxt["terminated"].any() and not nxt["agents", "terminated"].any()
    assert torch.equal(nxt["agents", "truncated"], nxt["done"].unsqueeze(-1).expand(16, 3, 1))
    assert batch[EPISODE_LENGTH_KEY][batch[EPISODE_END_KEY]].tolist() == [MAX_CYCLES] * len(ends)
    # traj ids change exactly where an episode ended
    traj = batch[TRAJ_IDS_KEY]
    assert (traj[1:] != traj[:-1]).nonzero().flatten().tolist() == [t for t in ends if t < 15]
    obs, next_obs = batch["agents", "observation"], nxt["agents", "observation"]
    for t in range(15):
        if t in ends:
            # the terminal next observation is the episode's last: MPE agents move, so their
            # velocity (entries 0:2) is set; the next step starts from a reset, at rest
            assert not torch.equal(obs[t + 1], next_obs[t])
            assert torch.count_nonzero(obs[t + 1, :, :2]) == 0
        else:
            assert torch.equal(obs[t + 1], next_obs[t])
    assert torch.count_nonzero(next_obs[ends, :, :2]) > 0
    # the global state is MPE's state(): every agent's observation, concatenated
    assert torch.equal(batch["state"], obs.reshape(16, 54))


def test_same_seed_gives_the_same_batch():
    first = torch.cat(_collect(_spread, 8, 16, seed=3))
    again = torch.cat(_collect(_spread, 8, 16, seed=3))
    assert torch.equal(
        first["next", "agents", "observation"], again["next", "agents", "observation"]
    )
    assert torch.equal(first["agents", "action"], again["agents", "action"])


@pytest.mark.parametrize(
    ("game", "groups"),
    [
        (simple_tag_v3, {"adversary": (3, 16), "agent": (1, 14)}),
        (simple_adversary_v3, {"adversary": (1, 8), "agent": (2, 10)}),
    ],
)
def test_two_team_games_give_one_group_per_team(game, groups):
    env = PettingZooEnv(game.parallel_env, max_cycles=MAX_CYCLES)
    assert {name: len(agents) for name, agents in env.group_map.items()} == {
        name: n for name, (n, _) in groups.items()
    }
    env.close()
    (batch,) = _collect(lambda: PettingZooEnv(game.parallel_env, max_cycles=MAX_CYCLES), 6, 6)
    for name, (n, size) in groups.items():
        assert batch[name, "observation"].shape == (6, n, size)
        assert batch[name, "action"].shape == (6, n)
        assert batch["next", name, "reward"].shape == (6, n, 1)
        assert batch["next", name, "done"].shape == (6, n, 1)
        assert batch["next", "group_return", name].shape == (6, 1)
    # both teams' episodes end together, with the root's
    ends = batch["next", "done"].squeeze(-1)
    assert ends.nonzero().flatten().tolist() == [2, 5]
    for name in groups:
        assert torch.equal(batch["next", name, "done"].all(-2).squeeze(-1), ends)


@pytest.mark.parametrize("aec", [simple_spread_v3.env, lambda: simple_spread_v3.env()])
def test_turn_based_envs_are_refused_when_built(aec):
    env = aec() if aec is not simple_spread_v3.env else aec
    prefix = re.escape(AEC_MSG.split("{env!r}")[1][:40])
    with pytest.raises(EnvError, match=prefix):
        PettingZooEnv(env)


def test_a_factory_returning_a_turn_based_env_is_refused():
    with pytest.raises(EnvError, match="is a turn-based \\(AEC\\) PettingZoo env"):
        SyncDataCollector(
            lambda: PettingZooEnv(simple_spread_v3.env), None, frames_per_batch=4, total_frames=4
        )


class _LeavingEnv(ParallelEnv):
    """Two agents; ``agent_1`` terminates after one step while ``agent_0`` goes on."""

    metadata = {"name": "leaving_v0"}

    def __init__(self):
        self.possible_agents = ["agent_0", "agent_1"]
        self.agents = list(self.possible_agents)

    def observation_space(self, agent):
        return spaces.Box(-1.0, 1.0, (2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return {a: np.zeros(2, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        obs = {a: np.zeros(2, np.float32) for a in self.agents}
        terminated = {a: a == "agent_1" for a in self.agents}
        truncated = dict.fromkeys(self.agents, False)
        self.agents = ["agent_0"]
        return obs, dict.fromkeys(obs, 0.0), terminated, truncated, {a: {} for a in obs}


def test_agents_that_leave_mid_episode_are_refused_with_what_works():
    env = PettingZooEnv(_LeavingEnv)
    assert env.group_map == {"agents": ["agent_0", "agent_1"]}
    env.reset()
    action = env.full_action_spec.zero()
    with pytest.raises(EnvError, match=r"agents \['agent_1'\] left the episode while others"):
        env.step(env.reset().update(action))
    assert "PettingZooWrapper(use_mask=True)" in AGENTS_LEFT_MSG


def test_a_pettingzoo_id_resolves_to_the_adapter():
    from fleetrl.config import EnvConfig
    from fleetrl.envs.engine import resolve_env
    from fleetrl.envs.pettingzoo import PettingZooId
    from fleetrl.envs.registry import EnvKind

    resolved = resolve_env(EnvConfig(id="mpe2:simple_spread_v3"))
    assert (resolved.kind, resolved.registered, resolved.problems) == (EnvKind.PETTINGZOO, True, ())
    assert resolved.create_env_fn == PettingZooId("mpe2:simple_spread_v3")
    assert not resolve_env(EnvConfig(id="mpe2:no_such_game_v0")).registered
    (problem,) = resolve_env(EnvConfig(id="mpe2:simple_spread_v3", engine="envpool")).problems
    assert problem.startswith("env.engine='envpool' is invalid with env.id='mpe2:simple_spread_v3'")
    env = make_env("mpe2:simple_spread_v3", 2, {"max_cycles": MAX_CYCLES})
    try:
        assert isinstance(env, GroupedEnv) and env.num_envs == 2
    finally:
        env.close()
    (batch,) = _collect(
        PettingZooId("mpe2:simple_spread_v3", {"max_cycles": MAX_CYCLES}).build, 6, 6
    )
    assert batch["next", "done"].squeeze(-1).nonzero().flatten().tolist() == [2, 5]


# --- several copies as one batched adapter -----------------------------------------------------


class _CountingGame(ParallelEnv):
    """Two agents that observe the step count and its agent's index; the episode ends for
    both after ``length`` steps (terminated, or truncated where ``truncate``). Each copy
    built gets the next length of ``lengths``."""

    metadata = {"name": "counting_v0"}
    lengths: list[int] = []

    def __init__(self, truncate=False):
        self.length = _CountingGame.lengths.pop(0)
        self.truncate = truncate
        self.possible_agents = ["agent_0", "agent_1"]
        self.agents = list(self.possible_agents)
        self.t = 0
        self.resets = []

    def observation_space(self, agent):
        return spaces.Box(-100.0, 100.0, (2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(3)

    def _obs(self):
        return {a: np.array([self.t, i], np.float32) for i, a in enumerate(self.agents)}

    def reset(self, seed=None, options=None):
        self.t = 0
        self.resets.append(seed)
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        end = self.t == self.length
        rewards = {a: float(actions[a]) + self.t for a in self.agents}
        terminated = dict.fromkeys(self.agents, end and not self.truncate)
        truncated = dict.fromkeys(self.agents, end and self.truncate)
        return self._obs(), rewards, terminated, truncated, {a: {} for a in self.agents}


def _counting(lengths, **kwargs):
    _CountingGame.lengths = list(lengths)
    return PettingZooEnv(_CountingGame, num_envs=len(lengths), **kwargs)


def test_copies_step_as_one_env_and_reset_alone_where_their_episodes_end():
    env = _counting([2, 3, 4])
    try:
        assert env.batch_size == (3,)
        assert env.observation_spec["agents", "observation"].shape == (3, 2, 2)
        td = env.reset()
        steps = []
        for t in range(7):
            td["agents", "action"] = torch.full((3, 2), t % 3)
            transition, td = env.step_and_maybe_reset(td)
            steps.append(transition)
        batch = torch.stack(steps, 1)
    finally:
        env.close()
    nxt = batch["next"]
    for i, length in enumerate([2, 3, 4]):
        ends = [t for t in range(7) if (t + 1) % length == 0]
        assert nxt["done"][i].squeeze(-1).nonzero().flatten().tolist() == ends
        assert torch.equal(nxt["terminated"][i], nxt["done"][i])
        assert not nxt["truncated"][i].any()
        assert torch.equal(nxt["agents", "done"][i], nxt["done"][i].unsqueeze(-1).expand(7, 2, 1))
        # the count restarts only in the env whose episode ended; the terminal next
        # observation is the episode's last count
        counts = [t % length for t in range(7)]
        assert batch["agents", "observation"][i, :, 0, 0].tolist() == counts
        assert nxt["agents", "observation"][i, ends, 0, 0].tolist() == [length] * len(ends)
        assert batch["agents", "observation"][i, 0, :, 1].tolist() == [0, 1]
        reward = [(t % 3) + c + 1 for t, c in enumerate(counts)]
        assert nxt["agents", "reward"][i, :, 0, 0].tolist() == reward
        assert nxt["agents", "reward"].dtype == torch.float32


def test_truncated_copies_are_truncated_at_the_root():
    env = _counting([2, 2], truncate=True)
    try:
        td = env.rollout(2, break_when_any_done=False)
    finally:
        env.close()
    assert td["next", "truncated"].squeeze(-1).tolist() == [[False, True]] * 2
    assert not td["next", "terminated"].any()


def test_a_seed_reaches_each_copy_once_as_seed_plus_its_index():
    env = _counting([5, 5, 5])
    try:
        env.set_seed(10)
        env.reset()
        env.reset()
        assert [pz.resets[1:] for pz in env.pz_envs] == [[10, None], [11, None], [12, None]]
    finally:
        env.close()


def test_the_batched_adapter_equals_its_copies_stepped_alone():
    steps, n = 7, 3
    batched = PettingZooEnv(simple_spread_v3.parallel_env, num_envs=n, max_cycles=MAX_CYCLES)
    singles = [_spread() for _ in range(n)]
    try:
        batched.set_seed(4)
        td = batched.reset()
        tds = []
        for i, single in enumerate(singles):
            single.set_seed(4 + i)
            tds.append(single.reset())
        generator = torch.Generator().manual_seed(0)
        out, alone = [], [[] for _ in range(n)]
        for _ in range(steps):
            action = torch.randint(0, 5, (n, 3), generator=generator)
            td["agents", "action"] = action
            transition, td = batched.step_and_maybe_reset(td)
            out.append(transition)
            for i, single in enumerate(singles):
                tds[i]["agents", "action"] = action[i]
                step, tds[i] = single.step_and_maybe_reset(tds[i])
                alone[i].append(step)
    finally:
        batched.close()
        for single in singles:
            single.close()
    batch = torch.stack(out, 1)
    for i in range(n):
        assert (batch[i] == torch.stack(alone[i])).all()


def test_a_factory_of_single_adapters_collects_as_one_batched_adapter():
    collector = SyncDataCollector(_spread, None, frames_per_batch=12, total_frames=12, num_envs=3)
    try:
        assert isinstance(collector.env.env, PettingZooEnv)
        assert collector.env.env.batch_size == (3,)
        (batch,) = list(collector)
    finally:
        collector.shutdown()
    assert batch.shape == (3, 4)
    assert batch["next", "done"].squeeze(-1).tolist() == [[False, False, True, False]] * 3
    assert batch["state"].shape == (3, 4, 54)
    # the three copies step their own episodes: their traj ids differ
    assert len(set(batch[TRAJ_IDS_KEY][:, 0].tolist())) == 3


@pytest.mark.parametrize(
    ("num_envs", "env", "match"),
    [
        (0, simple_spread_v3.parallel_env, "num_envs=0 is invalid: a count of env copies"),
        (True, simple_spread_v3.parallel_env, "num_envs=True is invalid"),
        (2, "built", "num_envs=2 copies need a callable building one env, not the built env"),
    ],
)
def test_bad_copy_counts_are_refused(num_envs, env, match):
    if env == "built":
        env = simple_spread_v3.parallel_env(max_cycles=MAX_CYCLES)
    with pytest.raises(EnvError, match=match):
        PettingZooEnv(env, num_envs=num_envs)


def test_an_env_id_leaves_the_state_out_where_nothing_reads_it():
    from fleetrl.envs.pettingzoo import PettingZooId

    pz = PettingZooId("mpe2:simple_spread_v3", {"max_cycles": MAX_CYCLES})
    assert pz.reading([("agents", "observation"), "state"]) == pz
    lean = pz.reading([("agents", "observation")])
    assert lean.state is False and lean.reading(["state"]).state is False
    for num_envs in (1, 3):
        env = lean.make(num_envs)
        try:
            assert "state" not in env.env.observation_spec
            td = env.reset()
            assert "state" not in td
            td.set(("agents", "action"), env.env.full_action_spec["agents", "action"].zero())
            transition, _ = env.step(td)
            assert "state" not in transition["next"]
        finally:
            env.close()


def test_stacking_copies_that_differ_is_refused_and_closes_them():
    single = _spread()
    other = PettingZooEnv(simple_tag_v3.parallel_env, max_cycles=MAX_CYCLES)
    with pytest.raises(EnvError, match="the env copies differ"):
        PettingZooEnv.stack([single, other])
    assert single.is_closed and other.is_closed

    def lean():
        return PettingZooEnv(simple_spread_v3.parallel_env, state=False, max_cycles=MAX_CYCLES)

    stacked = PettingZooEnv.stack([lean(), lean()])  # the copies' state choice is kept
    try:
        assert stacked.has_state is False and "state" not in stacked.observation_spec
    finally:
        stacked.close()


# --- saved state (exact resume) -----------------------------------------------------------


def _step_fixed(env: PettingZooEnv, td, steps: int, seed: int):
    """``steps`` steps of every copy from ``td`` with actions drawn from ``seed``, reset
    where done; the transitions and the step read next."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        for group in env.group_map:
            spec = env.full_action_spec[group, "action"]
            td.set((group, "action"), torch.randint(0, spec.space.n, spec.shape, generator=gen))
        step, td = env.step_and_maybe_reset(td)
        out.append(step.get("next").clone())
    return out, td


@pytest.mark.parametrize("game", [simple_tag_v3, simple_spread_v3])
def test_a_saved_mpe_state_goes_on_exactly_in_another_adapter(game, tmp_path):
    """Copies saved mid-episode (with the latest observations and pending seeds, through a
    weights_only checkpoint file) step on in a new adapter exactly as the original goes on:
    observations, rewards and dones."""
    env = PettingZooEnv(game.parallel_env, num_envs=2, max_cycles=6)
    env.set_seed(3)
    _, td = _step_fixed(env, env.reset(), 8, seed=0)  # past an episode end, into the next
    torch.save(env.saved_state(), tmp_path / "env.pt")
    state = torch.load(tmp_path / "env.pt", weights_only=True)
    assert len(state["envs"]) == 2
    want, _ = _step_fixed(env, td.clone(), 9, seed=1)
    other = PettingZooEnv(game.parallel_env, num_envs=2, max_cycles=6)
    other.load_saved_state(state)
    got, _ = _step_fixed(other, td.clone(), 9, seed=1)
    for a, b in zip(want, got):
        for key in a.keys(True, True):
            assert torch.equal(a.get(key), b.get(key)), key
    fresh = PettingZooEnv(game.parallel_env, num_envs=2, max_cycles=6)  # not loaded: differs
    fresh.set_seed(3)
    fresh.reset()
    other_run, _ = _step_fixed(fresh, td.clone(), 9, seed=1)
    assert not all(torch.equal(a.get(k), b.get(k)) for a, b in zip(want, other_run)
                   for k in a.keys(True, True))  # fmt: skip
    for e in (env, other, fresh):
        e.close()


def test_mpe_scenarios_with_other_episode_state_are_not_saved_and_misfits_are_refused():
    """simple_adversary draws a goal per episode (not saved): no state, the resume reseeds;
    a state loaded into another scenario or copy count is refused, naming what differs."""
    from fleetrl.envs.mpe_state import MPE_SCENARIOS

    assert "simple_adversary" not in MPE_SCENARIOS
    adversary = PettingZooEnv(simple_adversary_v3.parallel_env, max_cycles=5)
    assert adversary.saved_state() is None
    tag = PettingZooEnv(simple_tag_v3.parallel_env, num_envs=2, max_cycles=5)
    spread = PettingZooEnv(simple_spread_v3.parallel_env, num_envs=2, max_cycles=5)
    with pytest.raises(EnvError, match="does not fit the env built now"):
        spread.load_saved_state(tag.saved_state())
    one = PettingZooEnv(simple_tag_v3.parallel_env, num_envs=1, max_cycles=5)
    with pytest.raises(EnvError, match="2 env copies from the checkpoint"):
        one.load_saved_state(tag.saved_state())
    for e in (adversary, tag, spread, one):
        e.close()

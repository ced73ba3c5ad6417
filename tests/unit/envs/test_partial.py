"""A POMDP by name: a gymnasium env keeping chosen observation entries (``env.observation_indices``).

The kept entries are exactly the raw env's on the same seed and actions; the spec, the
default networks and every builder (collectors, evaluation, videos) see them; bad
indices and engines that cannot apply them are refused by key before anything starts.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from fleetrl.config import EnvConfig
from fleetrl.envs import make_env
from fleetrl.envs.engine import resolve_env
from fleetrl.envs.make import create_env_fn
from fleetrl.envs.partial import (
    INDICES_ENGINE_MSG,
    INDICES_MSG,
    INDICES_RANGE_MSG,
    KeepEntries,
    PartialEnv,
)
from fleetrl.envs.probe import env_spec
from fleetrl.errors import ConfigError
from fleetrl.run.evaluate import evaluate
from fleetrl.setup import parse_config
from fleetrl.setup.build import make_algorithm
from fleetrl.setup.verify.env import describe

KEY = "env.observation_indices"


def test_the_kept_entries_are_the_raw_envs_on_the_same_seed_and_actions():
    kept, raw = make_env(PartialEnv("CartPole-v1", [2, 0]), 3), make_env("CartPole-v1", 3)
    assert kept.observation_spec == {"observation": ((2,), np.dtype(np.float32))}
    obs, full = kept.reset_static(7)["observation"], raw.reset_static(7)["observation"]
    np.testing.assert_array_equal(obs, full[:, [2, 0]])  # in the order given
    ends = 0
    for t in range(60):  # past the first episode ends: final and reset observations too
        action = np.array([t % 2, 1, 0])
        a, b = kept.step(action), raw.step(action)
        np.testing.assert_array_equal(
            a.next_obs["observation"], b.next_obs["observation"][:, [2, 0]]
        )
        np.testing.assert_array_equal(a.obs["observation"], b.obs["observation"][:, [2, 0]])
        np.testing.assert_array_equal(a.terminated, b.terminated)
        ends += int(b.terminated.sum())
    assert ends > 0
    kept.close(), raw.close()


def test_the_wrapper_keeps_the_bounds_of_the_kept_entries_and_saves_for_exact_resume():
    env = KeepEntries(gym.make("CartPole-v1"), [0, 2])
    full = gym.make("CartPole-v1").observation_space
    assert env.observation_space == gym.spaces.Box(
        full.low[[0, 2]], full.high[[0, 2]], dtype=np.float32
    )
    vector = make_env(PartialEnv("CartPole-v1", (0, 2)), 2)
    vector.reset_static(0)
    assert vector.state_dict() is not None  # a stateless wrapper: the classic-control state saves
    vector.close()


def test_a_config_builds_it_and_the_spec_and_default_networks_agree():
    config, problems = parse_config(
        {"algorithm": "ppo", "env": {"id": "CartPole-v1", "observation_indices": [0, 2]}}
    )
    assert problems == []
    resolved = resolve_env(config.env)
    assert create_env_fn(resolved) == PartialEnv("CartPole-v1", (0, 2))
    spec, problems = describe(config, resolved)
    assert (spec.obs_shape, spec.num_actions, problems) == ((2,), 2, [])
    assert env_spec(PartialEnv("CartPole-v1", (0, 2))).obs_shape == (2,)
    policy = make_algorithm(config).policy
    returns = evaluate(policy, create_env_fn(config.env), 2, seed=0, max_episode_steps=10)
    assert returns.shape == (2,)  # the networks take the 2 kept entries


def test_a_recurrent_policy_evaluates_on_it():
    config, problems = parse_config(
        {
            "algorithm": "ppo",
            "env": {"observation_indices": [0, 2]},
            "ppo": {"model": "lstm", "recurrent_size": 8, "hidden_sizes": [8]},
        }
    )
    assert problems == []
    torch.manual_seed(0)
    policy = make_algorithm(config).policy
    returns = evaluate(policy, create_env_fn(config.env), 2, seed=0, max_episode_steps=10)
    assert returns.shape == (2,)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ([], "it keeps no entry"),
        ([0, 0], "an index is repeated"),
        ([-1, 2], "negative indices are not accepted"),
    ],
)
def test_bad_indices_are_refused_by_key(value, why):
    config, _ = parse_config({"algorithm": "ppo", "env": {"observation_indices": value}})
    spec, problems = describe(config)
    assert spec is None
    assert [(p.key, str(p)) for p in problems] == [
        (KEY, INDICES_MSG.format(key=KEY, value=value, why=why))
    ]
    with pytest.raises(ConfigError, match="observation_indices"):
        PartialEnv("CartPole-v1", value)


def test_an_index_past_the_last_entry_is_refused_by_key_before_any_worker_builds_it():
    config, _ = parse_config({"algorithm": "ppo", "env": {"observation_indices": [0, 4]}})
    spec, problems = describe(config)
    text = INDICES_RANGE_MSG.format(key=KEY, value=[0, 4], env_id="CartPole-v1", n=4, shape=(4,))
    assert (spec, [(p.key, str(p)) for p in problems]) == (None, [(KEY, text)])
    with pytest.raises(ConfigError, match=r"observation_indices=\[0, 4\] is invalid"):
        make_env(PartialEnv("CartPole-v1", (0, 4)), 2)


def test_a_type_that_is_no_list_of_integers_is_refused_by_the_loader():
    _, problems = parse_config({"algorithm": "ppo", "env": {"observation_indices": "0,2"}})
    assert [str(p) for p in problems] == [f"{KEY}='0,2' is invalid: must be list[int] | None"]


@pytest.mark.parametrize(
    ("env", "fix"),
    [
        (
            {"id": "ALE/Pong-v5"},
            "an ALE game's observation is a stack of frames: remove the key (null)",
        ),
        (
            {"id": "ALE/Pong-v5", "engine": "envpool"},
            "an ALE game's observation is a stack of frames: remove the key (null)",
        ),
        (
            {"id": "CartPole-v1", "engine": "envpool"},
            "use env.engine='gymnasium', or remove the key (null)",
        ),
    ],
)
def test_engines_that_cannot_apply_it_are_refused_by_key(env, fix):
    section = EnvConfig(**env, observation_indices=[0, 2])
    text = INDICES_ENGINE_MSG.format(
        key=KEY, value=[0, 2], env_id=section.id, engine=env.get("engine", "gymnasium"), fix=fix
    )
    assert text in resolve_env(section).problems
    config, _ = parse_config({"algorithm": "ppo", "env": {**env, "observation_indices": [0, 2]}})
    assert (KEY, text) in [(p.key, str(p)) for p in describe(config)[1]]
    with pytest.raises(ConfigError, match="observation_indices"):
        create_env_fn(section)


def test_a_non_flat_observation_is_refused():
    with pytest.raises(ConfigError, match="flat"):
        KeepEntries(gym.make("FrozenLake-v1"), [0])


def test_the_video_env_shows_the_policy_the_kept_entries_and_films_the_whole_env():
    from fleetrl.collectors.video import video_env

    env, fps = video_env(PartialEnv("CartPole-v1", (0, 2)))
    raw, raw_fps = video_env("CartPole-v1")
    obs, full = env.reset(seed=3)[0], raw.reset(seed=3)[0]
    np.testing.assert_array_equal(obs, full[[0, 2]])
    assert fps == raw_fps and env.render().shape == raw.render().shape
    env.close(), raw.close()

"""An env section resolved once: its kind, its registration, what builds it, its engine's problems.

ALE ids are registered by one explicit call (:func:`fleetrl.envs.registry.register_ale`),
which a look-up makes for ids written like ALE's only: asked in a fresh process.
"""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest

from fleetrl.collectors import SyncDataCollector
from fleetrl.config import AtariConfig, EnvConfig, EnvEngine
from fleetrl.envs.atari import NOT_ENVPOOL_ID_MSG, AtariEnv, is_atari_id
from fleetrl.envs.engine import EnvKind, ResolvedEnv, engine_problems, env_kind, resolve_env
from fleetrl.envs.make import create_env_fn
from fleetrl.envs.mujoco import MUJOCO_ENGINE_MSG, MujocoEnv
from fleetrl.envs.registry import lookup_id, names_ale_game
from fleetrl.errors import ConfigError, EnvError
from fleetrl.setup.load import config_from_dict

try:
    import envpool  # noqa: F401

    HAVE_ENVPOOL = True
except ImportError:
    HAVE_ENVPOOL = False


def test_a_gymnasium_id_resolves_to_itself():
    env = resolve_env(EnvConfig(id="CartPole-v1", num_envs=3))
    assert isinstance(env, ResolvedEnv)
    assert (env.kind, env.registered, env.create_env_fn, env.problems) == (
        EnvKind.GYMNASIUM,
        True,
        "CartPole-v1",
        (),
    )
    assert create_env_fn(env) == create_env_fn(EnvConfig(id="CartPole-v1")) == "CartPole-v1"


def test_an_id_that_names_its_module_imports_it_first_in_every_lookup(
    tmp_path, monkeypatch, request
):
    """gymnasium's ``module:Id`` form: the module registers the id when imported, in any
    process that reads the id (a Ray worker too); the id stays as written."""
    (tmp_path / "my_maze_envs.py").write_text(
        "import gymnasium as gym\n"
        "gym.register('FleetrlMaze-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv',"
        " max_episode_steps=7)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    request.addfinalizer(lambda: gym.registry.pop("FleetrlMaze-v0", None))
    request.addfinalizer(lambda: sys.modules.pop("my_maze_envs", None))
    env = resolve_env(EnvConfig(id="my_maze_envs:FleetrlMaze-v0", num_envs=2))
    assert (env.kind, env.registered, env.create_env_fn, env.problems) == (
        EnvKind.GYMNASIUM,
        True,
        "my_maze_envs:FleetrlMaze-v0",
        (),
    )
    assert "FleetrlMaze-v0" in gym.registry  # registered by the import
    assert lookup_id("fakes:FleetrlFakePixel-v0") == (EnvKind.GYMNASIUM, True)
    assert lookup_id("fakes:NoSuchFake-v0") == (EnvKind.GYMNASIUM, False)
    assert lookup_id("no_such_module_here:Maze-v0") == (EnvKind.GYMNASIUM, False)
    with SyncDataCollector(
        "my_maze_envs:FleetrlMaze-v0", None, frames_per_batch=14, num_envs=2
    ) as collector:
        batch = collector.next()
    assert batch.batch_size == (2, 7)
    assert batch["next", "truncated"][:, -1].all()  # the registered 7-step limit acts


def test_an_unknown_module_id_says_what_failed():
    with pytest.raises(EnvError) as info:
        SyncDataCollector("no_such_module_here:Maze-v0", None, frames_per_batch=8)
    assert str(info.value).startswith(
        "create_env_fn='no_such_module_here:Maze-v0' is not a registered gymnasium id (the "
        "module 'no_such_module_here' that 'no_such_module_here:Maze-v0' names cannot be "
        "imported here: No module named 'no_such_module_here')"
    )
    with pytest.raises(ConfigError) as info:
        config_from_dict({"algorithm": "ppo", "env": {"id": "no_such_module_here:Maze-v0"}})
    assert info.value.problems == [
        "env.id='no_such_module_here:Maze-v0' is invalid: no gymnasium env is registered under "
        "that id; its module 'no_such_module_here' cannot be imported (No module named "
        "'no_such_module_here'): install it, or put it on the PYTHONPATH of this process and "
        "of the Ray workers"
    ]
    with pytest.raises(ConfigError) as info:
        config_from_dict({"algorithm": "ppo", "env": {"id": "fakes:FleetrlFakePixl-v0"}})
    assert (
        "is invalid: no gymnasium env is registered under that id; did you mean "
        "'fakes:FleetrlFakePixel-v0'" in info.value.problems[0]
    )
    with pytest.raises(ConfigError) as info:
        config_from_dict({"algorithm": "ppo", "env": {"id": "fakes:Zzzzzzzz-v0"}})
    assert info.value.problems[0].endswith("importing 'fakes' registers no env named 'Zzzzzzzz-v0'")


def test_an_ale_id_resolves_to_its_atari_spec_in_the_configured_engine():
    section = EnvConfig(id="ALE/Pong-v5", engine="ale_vector", atari=AtariConfig(frame_stack=2))
    env = resolve_env(section)
    assert (env.kind, env.registered, env.problems) == (EnvKind.ATARI, True, ())
    assert env.create_env_fn == AtariEnv(
        "ALE/Pong-v5", EnvEngine.ALE_VECTOR, AtariConfig(frame_stack=2)
    )
    assert env.create_env_fn.atari is not section.atari  # never the caller's section
    assert create_env_fn(env) is env.create_env_fn  # what the run resolved, passed down


def test_a_mujoco_id_is_an_id_in_gymnasium_and_a_spec_in_envpool():
    hopper = resolve_env(EnvConfig(id="Hopper-v5"))
    assert (hopper.kind, hopper.create_env_fn) == (EnvKind.MUJOCO, "Hopper-v5")
    refused = resolve_env(EnvConfig(id="Hopper-v5", engine="ale_vector"))
    assert refused.problems == (
        MUJOCO_ENGINE_MSG.format(
            prefix="env.",
            engine="ale_vector",
            id_key="env.id",
            env_id="Hopper-v5",
            allowed="'gymnasium' or 'envpool'",
        ),
    )
    if HAVE_ENVPOOL:
        env = resolve_env(EnvConfig(id="Hopper-v5", engine="envpool", max_episode_steps=50))
        assert env.create_env_fn == MujocoEnv("Hopper-v5", "envpool", 50)


def test_an_engine_that_cannot_step_the_env_is_said_once_and_builds_nothing():
    section = EnvConfig(id="CartPole-v1", engine="envpool")
    env = resolve_env(section)
    said = NOT_ENVPOOL_ID_MSG.format(
        prefix="env.", engine="envpool", id_key="env.id", env_id="CartPole-v1"
    )
    assert env.problems == (said,) and engine_problems(section) == [said]
    for build in (lambda: env.create_env_fn, lambda: create_env_fn(section)):
        with pytest.raises(ConfigError) as info:
            build()
        assert info.value.problems == [said]


def test_an_unregistered_id_has_no_engine_problem_its_id_is_the_problem():
    env = resolve_env(EnvConfig(id="ALE/Breakot-v5", engine="envpool"))
    assert (env.kind, env.registered, env.problems) == (EnvKind.GYMNASIUM, False, ())
    assert env.create_env_fn == "ALE/Breakot-v5"  # make_env names the unknown id


def test_the_resolution_is_of_the_section_as_it_was():
    section = EnvConfig(id="CartPole-v1")
    env = resolve_env(section)
    section.id = "Pendulum-v1"
    assert env.env.id == "CartPole-v1" and env.create_env_fn == "CartPole-v1"


def test_the_kind_of_anything_make_env_takes():
    built = gym.make("CartPole-v1")
    try:
        assert env_kind(built) is EnvKind.BUILT
    finally:
        built.close()
    assert env_kind("CartPole-v1") is EnvKind.GYMNASIUM
    assert env_kind("ALE/Pong-v5") is EnvKind.ATARI
    assert env_kind("Hopper-v5") is EnvKind.MUJOCO
    assert env_kind(AtariEnv("ALE/Pong-v5")) is EnvKind.ATARI
    assert env_kind(lambda: gym.make("CartPole-v1")) is EnvKind.CALLABLE
    assert env_kind(42) is None


def test_ale_ids_are_registered_by_one_explicit_call_made_for_ids_written_like_them():
    code = (
        "import sys, gymnasium as gym\n"
        "from fleetrl.envs.registry import EnvKind, lookup_id, register_ale\n"
        "assert 'ALE/Pong-v5' not in gym.registry\n"
        "assert lookup_id('CartPole-v1') == (EnvKind.GYMNASIUM, True)\n"
        "assert 'ale_py' not in sys.modules  # another id does not import ale-py\n"
        "assert lookup_id('ALE/Pong-v5') == (EnvKind.ATARI, True)  # registered, then looked up\n"
        "assert register_ale() and 'ALE/Pong-v5' in gym.registry\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert names_ale_game("PongNoFrameskip-v4") and not names_ale_game("CartPole-v1")
    assert lookup_id("PongNoFrameskip-v4") == (EnvKind.ATARI, True) and is_atari_id("ALE/Pong-v5")

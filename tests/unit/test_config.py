from __future__ import annotations

import logging
import re

import pytest
import yaml

from fleetrl import ConfigError, RayCollector, SyncDataCollector
from fleetrl.algorithms import (
    A2C,
    ALGORITHMS,
    APPO,
    DQN,
    IMPALA,
    IPPO,
    MAPPO,
    PPO,
    SAC,
    A2CConfig,
    APPOConfig,
    DQNConfig,
    IMPALAConfig,
    IPPOConfig,
    MAPPOConfig,
    PPOConfig,
    SACConfig,
)
from fleetrl.config import Config, EnvConfig, LearnerMode, Schedule
from fleetrl.networks.models import ModelKind
from fleetrl.setup.load import config_from_dict, load_config
from fleetrl.setup.parse import CHANGELOG_SECTION, RENAMED, RENAMED_MSG, config_to_dict
from fleetrl.setup.reference import config_keys
from fleetrl.setup.verify import check
from runs import ROOT

CONFIGS = sorted(ROOT.joinpath("configs").glob("*.yaml"))
PPO_CARTPOLE = ROOT / "configs" / "ppo_cartpole.yaml"
#: collect in this process: no Ray, and a config valid with any env count
LOCAL = ["collector.num_collectors=0", "logging.tensorboard=false", "logging.progress_bar=false"]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_load(path):
    cfg = load_config(path)
    assert cfg.algorithm in path.name


def test_overrides_are_typed_and_applied():
    cfg = load_config(
        PPO_CARTPOLE,  # a PPO config: ppo.* overrides of an a2c config are refused
        [
            "ppo.lr=1e-3",
            "collector.num_collectors=4",
            "ppo.hidden_sizes=[32, 32]",
            "trainer.target_return=null",
        ],
    )
    assert cfg.algo.lr == 0.001 and cfg.collector.num_collectors == 4
    assert cfg.algo.hidden_sizes == [32, 32] and cfg.trainer.target_return is None


def test_every_problem_is_listed_at_once():
    with pytest.raises(ConfigError) as info:
        config_from_dict(
            {
                "algorithm": "ppo",
                "env": {"idd": "CartPole-v1", "num_envs": 0},
                "ppo": {"lr": "fast", "gamma": 2},
            },
            ["collector.frames_per_batch=100", "ppo.lr_schedule=cosine"],
        )
    msg = str(info.value)
    assert "env.idd is not a config key; did you mean 'env.id'?" in msg
    assert "ppo.lr='fast' is invalid: must be float" in msg
    assert "env.num_envs=0 is invalid: must be > 0" in msg
    assert "ppo.gamma=2.0 is invalid: must be in (0, 1]" in msg
    assert "ppo.lr_schedule='cosine' is invalid: must be 'constant' or 'linear'" in msg
    assert len(info.value.problems) >= 5


def test_off_policy_sections_have_no_dead_keys():
    with pytest.raises(ConfigError, match=r"dqn.gae_lambda is not a config key"):
        config_from_dict({"algorithm": "dqn", "dqn": {"gae_lambda": 0.9}})


def test_missing_file_and_bad_override():
    with pytest.raises(ConfigError, match=r"config='nope.yaml' is invalid: no such file"):
        load_config("nope.yaml")
    with pytest.raises(ConfigError, match=r"override 'ppo.lr' is invalid: write key=value"):
        load_config(CONFIGS[0], ["ppo.lr"])


# ------------------------------------------------- algorithms own their config


def test_a_run_dir_config_yaml_holds_only_the_chosen_section(tmp_path):
    from fleetrl.run.trainer import Trainer

    cfg = load_config(PPO_CARTPOLE, [*LOCAL, "ppo.clip_schedule=linear"])
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    trainer.metrics.close()
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert sorted(saved) == ["algorithm", "collector", "env", "logging", "ppo", "scheme", "trainer"]
    assert saved["ppo"]["clip_schedule"] == "linear" and saved["ppo"]["model"] == "auto"
    assert "clip_schedule" not in saved["trainer"]
    # it loads back to the same config, with no warning about other sections
    again = config_from_dict(saved)
    assert config_to_dict(again) == saved
    assert again.algo.clip_schedule is Schedule.LINEAR


def test_the_chosen_section_is_config_algo_and_its_name_only():
    cfg = config_from_dict({"algorithm": "dqn", "env": {"id": "CartPole-v1"}}, LOCAL)
    assert type(cfg.algo) is DQNConfig and ALGORITHMS[cfg.algorithm] is DQN
    assert not hasattr(cfg, "dqn") and not hasattr(cfg, "ppo")
    assert "ppo" not in config_to_dict(cfg) and config_to_dict(cfg)["dqn"]["lr"] == 5e-4


def test_one_registry_knows_each_config_class_and_behaviour():
    assert ALGORITHMS == {
        "ppo": PPO,
        "a2c": A2C,
        "dqn": DQN,
        "sac": SAC,
        "impala": IMPALA,
        "appo": APPO,
        "mappo": MAPPO,
        "ippo": IPPO,
    }
    configs = {name: cls.config_class for name, cls in ALGORITHMS.items()}
    assert configs == {
        "ppo": PPOConfig,
        "a2c": A2CConfig,
        "dqn": DQNConfig,
        "sac": SACConfig,
        "impala": IMPALAConfig,
        "appo": APPOConfig,
        "mappo": MAPPOConfig,
        "ippo": IPPOConfig,
    }
    # IMPALA and APPO learn from each arriving batch (no replay), lag-corrected by V-trace
    assert {name for name, cls in ALGORITHMS.items() if cls.on_policy} == {
        "ppo",
        "a2c",
        "impala",
        "appo",
        "mappo",
        "ippo",
    }
    assert {name for name, cls in ALGORITHMS.items() if cls.random_start} == {"sac"}


ALGORITHM_PROBLEMS = [
    ("ppo", "CartPole-v1", "ppo.clip_epsilon=0", "ppo.clip_epsilon=0.0 is invalid: must be > 0"),
    (
        "ppo",
        "CartPole-v1",
        "ppo.num_mini_batch=3",
        "ppo.num_mini_batch=3 is invalid: must be > 0 and divide collector.frames_per_batch (64)",
    ),
    (
        "ppo",
        "CartPole-v1",
        "ppo.clip_schedule=cosine",
        "ppo.clip_schedule='cosine' is invalid: must be 'constant' or 'linear'",
    ),
    (
        "ppo",
        "CartPole-v1",
        "ppo.clip_value=0",
        "ppo.clip_value=0.0 is invalid: must be > 0, or null: off",
    ),
    (
        "a2c",
        "CartPole-v1",
        "a2c.gae_lambda=1.5",
        "a2c.gae_lambda=1.5 is invalid: must be in [0, 1]",
    ),
    ("a2c", "CartPole-v1", "a2c.entropy_coef=-1", "a2c.entropy_coef=-1.0 is invalid: must be >= 0"),
    (
        "a2c",
        "CartPole-v1",
        "a2c.model=resnet",
        "a2c.model='resnet' is invalid: must be one of ['auto', 'mlp', 'cnn', 'impala', 'lstm', 'gru']",
    ),
    ("dqn", "CartPole-v1", "dqn.buffer_size=0", "dqn.buffer_size=0 is invalid: must be > 0"),
    (
        "dqn",
        "CartPole-v1",
        "dqn.eps_end=1.5",
        "dqn.eps_end=1.5 is invalid: must satisfy 0 <= eps_end <= eps_init <= 1",
    ),
    (
        "dqn",
        "CartPole-v1",
        "dqn.learning_starts=-1",
        "dqn.learning_starts=-1 is invalid: must be >= 0",
    ),
    ("sac", "Pendulum-v1", "sac.tau=2", "sac.tau=2.0 is invalid: must be in (0, 1]"),
    ("sac", "Pendulum-v1", "sac.alpha_init=0", "sac.alpha_init=0.0 is invalid: must be > 0"),
    ("sac", "Pendulum-v1", "sac.lr=0", "sac.lr=0.0 is invalid: must be > 0"),
]


@pytest.mark.parametrize(
    ("algorithm", "env_id", "override", "problem"),
    ALGORITHM_PROBLEMS,
    ids=[case[2] for case in ALGORITHM_PROBLEMS],
)
def test_each_algorithm_checks_its_own_section(algorithm, env_id, override, problem):
    data = {"algorithm": algorithm, "env": {"id": env_id, "num_envs": 4}}
    with pytest.raises(ConfigError) as info:
        config_from_dict(data, [*LOCAL, "collector.frames_per_batch=64", override])
    assert info.value.problems == [problem]


def test_a_config_built_by_hand_is_checked_by_its_algorithm():
    cfg = Config(algorithm="sac", env=EnvConfig(id="Pendulum-v1"), algo=SACConfig(tau=0.0))
    cfg.collector.num_collectors = 0
    with pytest.raises(ConfigError) as info:
        check(cfg)
    assert info.value.problems == ["sac.tau=0.0 is invalid: must be in (0, 1]"]
    cfg = Config(algorithm="sac", env=EnvConfig(id="Pendulum-v1"), algo=PPOConfig())
    with pytest.raises(ConfigError, match=r"sac='PPOConfig' is invalid: must be a SACConfig"):
        check(cfg)


def test_modes_and_schedules_are_enums_inside_and_values_outside():
    cfg = config_from_dict(
        {"algorithm": "ppo"},
        [
            "ppo.lr_schedule=linear",
            "ppo.clip_schedule=linear",
            "ppo.model=mlp",
            "scheme.num_grad_workers=2",
            "scheme.update=async",
        ],
    )
    assert cfg.algo.lr_schedule is Schedule.LINEAR and cfg.algo.clip_schedule is Schedule.LINEAR
    assert cfg.algo.model is ModelKind.MLP
    assert cfg.scheme.update is LearnerMode.ASYNC
    plain = config_to_dict(cfg)
    assert (plain["ppo"]["lr_schedule"], plain["scheme"]["update"]) == (
        "linear",
        "async",
    )
    assert yaml.safe_load(yaml.safe_dump(plain)) == plain  # safe_dump refuses Enum members
    assert PPOConfig(model="cnn").model is ModelKind.CNN  # by value in code too


def test_sections_of_other_algorithms_load_with_one_warning(tmp_path, caplog):
    path = tmp_path / "old.yaml"
    path.write_text(
        "algorithm: ppo\nppo: {lr: 0.001, clip_schedule: linear}\ndqn: {lr: 0.5}\nsac: {tau: 0.1}\n"
    )
    with caplog.at_level(logging.WARNING, logger="fleetrl.setup.load"):
        cfg = load_config(path, LOCAL)
    assert [r.getMessage() for r in caplog.records] == [
        "config: ignored the dqn section, the sac section (this config trains algorithm='ppo' "
        "and holds only its section; a run's config.yaml keeps just that one)"
    ]
    assert cfg.algo.lr == 0.001 and cfg.algo.clip_schedule is Schedule.LINEAR
    assert sorted(config_to_dict(cfg)) == sorted(
        ["algorithm", "collector", "env", "logging", "ppo", "scheme", "trainer"]
    )


def test_overrides_of_another_section_or_an_unknown_key_are_refused():
    with pytest.raises(ConfigError) as info:
        load_config(PPO_CARTPOLE, ["dqn.lr=1e-3", "trainer.clip_schedule=linear"])
    assert info.value.problems == [
        "dqn.lr is invalid here: the dqn section belongs to algorithm='dqn' and this config "
        "trains algorithm='ppo'; set ppo.lr instead, or train dqn with algorithm=dqn",
        "trainer.clip_schedule is not a config key: it was renamed; write ppo.clip_schedule "
        "(appo.clip_schedule for APPO) (see the changelog)",
    ]
    # switching the algorithm on the command line: the file's ppo section is dropped
    cfg = load_config(PPO_CARTPOLE, ["algorithm=a2c", "a2c.lr=1e-3"])
    assert cfg.algo.lr == 1e-3 and type(cfg.algo) is A2CConfig


def test_atari_keys_on_an_env_that_is_not_atari_are_refused():
    # they would preprocess nothing: refused, not silently ignored
    with pytest.raises(ConfigError) as info:
        load_config(PPO_CARTPOLE, ["env.atari.frame_stack=2", "env.atari.noop_max=0"])
    said = (
        "env.atari preprocesses ALE games (e.g. ALE/Pong-v5) and env.id='CartPole-v1' is not "
        "one, so it would do nothing; remove the key"
    )
    assert info.value.problems == [
        f"env.atari.frame_stack=2 is invalid: {said}",
        f"env.atari.noop_max=0 is invalid: {said}",
    ]
    # the defaults (every saved config.yaml holds them) are no problem
    assert load_config(PPO_CARTPOLE, ["env.atari.frame_stack=4"]).env.atari.frame_stack == 4


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_a_renamed_key_names_its_new_name(old, tmp_path):
    section, _, name = old.partition(".")
    algorithm = section if section in ALGORITHMS else "ppo"
    path = tmp_path / "old.yaml"
    env = "Pendulum-v1" if algorithm == "sac" else "CartPole-v1"
    path.write_text(f"algorithm: {algorithm}\nenv:\n  id: {env}\n{section}:\n  {name}: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(path), [])
    assert info.value.problems == [RENAMED_MSG.format(key=old, fix=RENAMED[old])]
    named = re.findall(r"write ([a-z_]+\.[a-z_]+)", RENAMED[old])
    assert named and set(named) <= {k.key for k in config_keys()}, named
    assert old not in {k.key for k in config_keys()}


def changelog_renames() -> set[str]:
    """The keys in the "before" column of the changelog's table of renamed config keys."""
    text = (ROOT / "docs" / "changelog.md").read_text()
    section = text.split(CHANGELOG_SECTION, 1)[1].split("\n### ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    before = [row.split(" | ")[0] for row in rows]
    return {token.split(":")[0] for cell in before for token in re.findall(r"`([^`]+)`", cell)}


def test_every_rename_in_the_changelog_gets_the_renamed_key_message():
    """The changelog's table and RENAMED list the same keys (issue 35.13: trainer.lr_schedule
    and sac.start_steps got the generic "not a config key" message); each one's message is
    held by test_a_renamed_key_names_its_new_name."""
    listed = changelog_renames()
    assert {"trainer.lr_schedule", "sac.start_steps", "collector.max_policy_lag"} <= listed
    assert listed == set(RENAMED)


# ---------------------------------------------------------- one rule per fact


#: PPO's minibatches divide any batch: only the batch-size rule speaks
ONE_MINIBATCH = ["ppo.num_mini_batch=1"]


def _as_arguments(problem: str) -> str:
    """A config problem in the collectors' argument names."""
    return (
        problem.replace("collector.sync=true", "sync=True")
        .replace("collector.", "")
        .replace("trainer.", "")
    )


def test_batch_size_rule_says_the_same_in_config_and_local_collector():
    with pytest.raises(ConfigError) as info:
        config_from_dict(
            {"algorithm": "ppo"},
            [
                *LOCAL,
                *ONE_MINIBATCH,
                "env.num_envs=4",
                "collector.frames_per_batch=10",
                "trainer.total_frames=30",
            ],
        )
    assert info.value.problems == [
        "collector.frames_per_batch=10 is invalid: must be a multiple of the number of envs (4); "
        "use 8 or 12",
        "trainer.total_frames=30 is invalid: must be a multiple of the number of envs (4); "
        "use 28 or 32",
    ]
    with pytest.raises(ConfigError) as local:
        SyncDataCollector("CartPole-v1", None, frames_per_batch=10, total_frames=30, num_envs=4)
    assert local.value.problems == [_as_arguments(p) for p in info.value.problems]


def test_batch_size_rule_says_the_same_in_config_and_ray_collector():
    with pytest.raises(ConfigError) as info:
        config_from_dict(
            {"algorithm": "ppo"},
            [
                *ONE_MINIBATCH,
                "collector.num_collectors=2",
                "env.num_envs=4",
                "collector.frames_per_batch=60",
            ],
        )
    assert info.value.problems == [
        "collector.frames_per_batch=60 is invalid: collector.sync=true splits each batch across "
        "the 2 collectors: collector.frames_per_batch / collector.num_collectors = 30 frames per "
        "collector must be a multiple of each collector's 4 envs; use "
        "collector.frames_per_batch=56 or 64"
    ]
    with pytest.raises(ConfigError) as remote:
        RayCollector(
            "CartPole-v1",
            None,
            frames_per_batch=60,
            num_collectors=2,
            sync=True,
            num_workers_per_collector=4,
            backend="inprocess",
        )
    assert remote.value.problems == [_as_arguments(p) for p in info.value.problems]
    # first ready: each collector gathers whole batches, as a local one does
    with pytest.raises(ConfigError) as info:
        config_from_dict(
            {"algorithm": "ppo"},
            [
                *ONE_MINIBATCH,
                "collector.num_collectors=2",
                "collector.sync=false",
                "env.num_envs=4",
                "collector.frames_per_batch=10",
            ],
        )
    with pytest.raises(ConfigError) as remote:
        RayCollector(
            "CartPole-v1",
            None,
            frames_per_batch=10,
            num_collectors=2,
            num_workers_per_collector=4,
            backend="inprocess",
        )
    assert remote.value.problems == [_as_arguments(p) for p in info.value.problems]
    assert remote.value.problems == [
        "frames_per_batch=10 is invalid: must be a multiple of the number of envs (4); use 8 or 12"
    ]


REPLAY_MEMORY = (
    "dqn.buffer_size=1,000,000 is invalid on this machine: {buffers} of 1,000,000 transitions "
    "x 56.5 kB (the observation and the next one, 4x84x84 uint8, and the action, reward and "
    "flags) {verb} {need} of memory, and this machine has 8.0 GB; lower dqn.buffer_size (e.g. "
    "{fit}: half the memory), or train on a machine with more"
)


@pytest.mark.parametrize(
    ("workers", "expected"),
    [
        (1, REPLAY_MEMORY.format(buffers="one buffer", verb="needs", need="56.5 GB", fit="70,811")),
        (
            2,
            REPLAY_MEMORY.format(
                buffers="2 buffers (one per gradient worker)",
                verb="need",
                need="113.0 GB",
                fit="35,405",
            ),
        ),
    ],
)
def test_a_replay_buffer_bigger_than_the_machine_is_refused_before_the_run(
    monkeypatch, workers, expected
):
    """torchrl allocates the whole storage at the first write: a buffer that cannot fit would
    fail deep inside torch after the actors started (dqn_atari.yaml's 1M on 8 GB)."""
    from fakes import PIXEL_ENV_ID
    from fleetrl.setup.verify import env as env_checks  # the replay buffer is the env's check

    monkeypatch.setattr(env_checks, "physical_memory", lambda: 8_000_000_000)
    overrides = [*LOCAL, f"env.id={PIXEL_ENV_ID}", f"scheme.num_grad_workers={workers}"]
    with pytest.raises(ConfigError) as info:
        check(
            load_config(
                ROOT / "configs" / "dqn_atari.yaml", [*overrides, "dqn.buffer_size=1000000"]
            )
        )
    assert info.value.problems == [expected]
    # what fits is not refused: the suggestion itself, and one buffer of the shipped 100,000
    fit = expected.split("(e.g. ")[1].split(":")[0].replace(",", "")
    for size in (fit, "100000") if workers == 1 else (fit,):
        check(
            load_config(
                ROOT / "configs" / "dqn_atari.yaml", [*overrides, f"dqn.buffer_size={size}"]
            )
        )


@pytest.mark.parametrize(
    ("env_id", "engine", "closest"),
    [
        ("ALE/Breakot-v5", "envpool", "ALE/Breakout-v5"),
        ("Hoper-v5", "envpool", "Hopper-v5"),
        ("ALE/Breakot-v5", "ale_vector", "ALE/Breakout-v5"),
    ],
)
def test_a_misspelt_id_in_another_engine_is_named_as_the_id_not_the_engine(env_id, engine, closest):
    """The engine cannot be judged for an id nothing is registered under: the id is the
    problem, with the closest ids (not 'use env.engine=gymnasium', which would not help)."""
    data = {"algorithm": "ppo", "env": {"id": env_id, "engine": engine}}
    with pytest.raises(ConfigError) as info:
        config_from_dict(data, LOCAL)  # its checks build the env section's spec
    (problem,) = info.value.problems
    assert problem.startswith(f"env.id={env_id!r} is invalid: no gymnasium env is registered")
    assert f"did you mean {closest!r}" in problem

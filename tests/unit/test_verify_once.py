"""One pass through the front door: a config is verified once, its env resolved once.

Counted by wrapping :func:`fleetrl.setup.verify.verify` (the whole config's checks) and
:func:`fleetrl.envs.engine.resolve_env` wherever fleetrl's modules hold them, for one
``fleetrl train`` and one ``fleetrl train --resume`` (before issue 36: 2 verifications and
3 engine checks per train, 3 and 3 per resume). A config built in code, or changed since
it was checked, is checked where the run starts; nothing checks a config by changing it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest
import yaml

import fleetrl.envs.engine
import fleetrl.envs.spec
import fleetrl.run.trainer
import fleetrl.setup.build
import fleetrl.setup.load
import fleetrl.setup.resume
import fleetrl.setup.verify.checked
from fleetrl.algorithms import PPOConfig
from fleetrl.cli import main
from fleetrl.config import CollectorConfig, Config, EnvConfig, LoggingConfig, TrainerConfig
from fleetrl.errors import ConfigError
from fleetrl.networks.models import ModelKind
from fleetrl.run.trainer import Trainer
from fleetrl.setup.load import load_config
from fleetrl.setup.parse import config_to_dict, with_value
from fleetrl.setup.resume import FROZEN_MSG, check_resume_overrides
from fleetrl.setup.verify import CheckedConfig, check, check_config, checked_config, verified
from runs import ONE_UPDATE, ROOT

PPO_CARTPOLE = str(ROOT / "configs" / "ppo_cartpole.yaml")


def counting(monkeypatch, function: Callable[..., Any]) -> list[tuple]:
    """The calls of ``function``, wherever a fleetrl module holds it (its own module's
    global and every ``from ... import`` of it)."""
    calls: list[tuple] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return function(*args, **kwargs)

    for module in list(sys.modules.values()):
        if not getattr(module, "__name__", "").startswith("fleetrl"):
            continue
        for name, value in list(vars(module).items()):
            if value is function:
                monkeypatch.setattr(module, name, counted)
    return calls


@pytest.fixture
def counts(monkeypatch) -> dict[str, list[tuple]]:
    return {
        "verifications": counting(monkeypatch, fleetrl.setup.verify.checked.verify),
        "resolutions": counting(monkeypatch, fleetrl.envs.engine.resolve_env),
        "env builds": counting(monkeypatch, fleetrl.envs.probe.env_spec),
    }


def tally(counts: dict[str, list[tuple]]) -> dict[str, int]:
    found = {key: len(calls) for key, calls in counts.items()}
    for calls in counts.values():
        calls.clear()
    return found


def test_a_train_and_its_resume_each_verify_the_config_once_and_resolve_its_env_once(
    tmp_path, counts
):
    run = tmp_path / "run"
    assert main(["train", PPO_CARTPOLE, *ONE_UPDATE, "--run-dir", str(run)]) == 0
    train = tally(counts)
    assert main(["train", "--resume", str(run), "trainer.total_frames=512"]) == 0
    resume = tally(counts)
    assert (train["verifications"], train["resolutions"]) == (1, 1)
    assert (resume["verifications"], resume["resolutions"]) == (1, 1)
    # the env's spaces are read once (none here where this process read them already)
    assert train["env builds"] <= 1 and resume["env builds"] <= 1


def test_the_trainer_takes_a_loaded_config_as_checked_and_checks_one_changed_since(
    tmp_path, counts
):
    config = load_config(PPO_CARTPOLE, ONE_UPDATE)
    assert tally(counts)["verifications"] == 1
    trainer = Trainer(config, run_dir=tmp_path / "a")
    trainer.metrics.close()
    assert tally(counts)["verifications"] == 0
    assert trainer.config is config and trainer.env_spec.num_actions == 2
    assert trainer.resolved_env.create_env_fn == "CartPole-v1"
    config.env.num_envs = 2  # a change in code: the loaded verification no longer holds
    assert verified(config) is None
    Trainer(config, run_dir=tmp_path / "b").metrics.close()
    assert tally(counts)["verifications"] == 1
    config.env.num_envs = 3  # 256 frames per batch are no multiple of 3 envs
    with pytest.raises(ConfigError, match=r"collector.frames_per_batch=256 is invalid"):
        Trainer(config, run_dir=tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_a_checked_config_is_frozen_with_its_env_and_spec_and_holds_until_a_key_changes(
    tmp_path, counts
):
    config = load_config(PPO_CARTPOLE, ONE_UPDATE)
    checked = checked_config(config)
    assert tally(counts)["verifications"] == 1  # load_config's, remembered
    assert isinstance(checked, CheckedConfig) and checked.holds
    assert (checked.env.kind.value, checked.spec.obs_shape) == ("gymnasium", (4,))
    with pytest.raises(AttributeError):
        checked.spec = None  # frozen
    trainer = Trainer(checked, run_dir=tmp_path / "run")
    trainer.metrics.close()
    assert trainer.config is config and trainer.env_spec is checked.spec
    assert tally(counts)["verifications"] == 0
    config.algo.lr = 0.0123
    assert not checked.holds and checked_config(checked).holds
    assert tally(counts)["verifications"] == 1


def test_check_changes_nothing_and_a_config_built_without_its_section_gets_its_defaults(
    tmp_path,
):
    config = Config(
        algorithm="ppo",
        env=EnvConfig(id="CartPole-v1", num_envs=4),
        collector=CollectorConfig(num_collectors=0, frames_per_batch=256),
        trainer=TrainerConfig(total_frames=256, test_every=0),
        logging=LoggingConfig(progress_bar=False, tensorboard=False, plot=False),
    )
    with pytest.raises(ConfigError) as info:
        check(config)  # the section is the caller's to give: check says so, and sets nothing
    assert info.value.problems == ["ppo='NoneType' is invalid: must be a PPOConfig"]
    assert config.algo is None
    trainer = Trainer(config, run_dir=tmp_path / "run")  # a run starts from the defaults
    trainer.metrics.close()
    assert config.algo is None and trainer.config is not config
    assert trainer.config.algo == PPOConfig()
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["ppo"]["lr"] == 3e-4


def test_a_resume_compares_the_frozen_keys_on_the_mappings_and_verifies_once(counts):
    saved = config_to_dict(load_config(PPO_CARTPOLE, ONE_UPDATE))
    del saved["env"]["normalize_reward"]  # an older config.yaml without the key
    tally(counts)
    # the key set to its default is no change
    config = check_resume_overrides(saved, ["env.normalize_reward=false"], "runs/x")
    assert config.env.normalize_reward is False
    assert tally(counts)["verifications"] == 1
    assert verified(config) is not None  # the run takes this verification
    with pytest.raises(ConfigError) as info:
        check_resume_overrides(saved, ["env.normalize_reward=true"], "runs/x")
    assert info.value.problems == [
        FROZEN_MSG.format(
            key="env.normalize_reward",
            value=True,
            before=False,
            run_dir="runs/x",
            what="reward-scaling statistics (or none)",
        )
    ]


def test_a_searched_value_is_set_on_a_copy_as_an_override_would_set_it():
    config = check_config(load_config(PPO_CARTPOLE)).config
    stacked, problems = with_value(config, "env.atari.frame_stack", 2)
    assert problems == [] and stacked.env.atari.frame_stack == 2
    assert config.env.atari.frame_stack == 4  # the config is not changed
    assert stacked.collector is config.collector  # sections off the key's path are shared
    assert with_value(config, "ppo.lr", 1)[0].algo.lr == 1.0  # an int for a float key
    assert with_value(config, "ppo.model", "cnn")[0].algo.model is ModelKind.CNN
    said = [str(p) for p in with_value(config, "ppo.num_epochs", 1.5)[1]]
    assert said == ["ppo.num_epochs=1.5 is invalid: must be int"]
    said = [str(p) for p in with_value(config, "ppo.nope", 1)[1]]
    assert said[0].startswith("ppo.nope is not a config key")
    said = [str(p) for p in with_value(config, "sac.tau", 0.1)[1]]
    assert said[0].startswith("sac.tau is invalid here: the sac section belongs to")

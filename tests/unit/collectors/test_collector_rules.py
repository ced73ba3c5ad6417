"""The rules a config's ``collector`` section and RayCollector's arguments share are written
once (:data:`fleetrl.collectors.rules.COLLECTOR_KEYS`): the config's verification and the
constructor say the same rule, each in its reader's words (issue 59)."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from fleetrl import ConfigError, RayCollector
from fleetrl.collectors.remote.fleet_options import FleetOptions
from fleetrl.collectors.rules import CODECS, COLLECTOR_KEYS, Audience
from fleetrl.config import CollectorConfig
from fleetrl.distributed.wire import Compression
from fleetrl.setup.load import config_from_dict
from fleetrl.setup.verify import RANGES
from policies import weight_echo

#: a value each rule refuses, and what the two readers are told
REFUSED = {
    "prefetch": (-1, "must be an int >= 0", "must be >= 0"),
    "num_threads": (
        0,
        "must be an int >= 1, or None for torch's default",
        "must be >= 1, or null for torch's default",
    ),
    "max_served_lag": (-1, "must be None (no bound) or an int >= 0", "must be null (no bound) or >= 0"),
    "max_restart_attempts": (
        -2,
        "must be an int >= 0 (0: a collector worker's death ends the run)",
        "must be >= 0 (0: a collector worker's death ends the run)",
    ),
    "replacement_timeout_s": (0, "must be a number > 0", "must be > 0"),
    "fraction_samples": (1.5, "must be in (0, 1]", "must be in (0, 1]"),
    "fraction_workers": (0, "must be in (0, 1]", "must be in (0, 1]"),
    "compress": ("gzip", "must be None, 'lz4' or 'zstd'", "must be null, 'lz4' or 'zstd'"),
}  # fmt: skip


def test_every_shared_rule_is_a_config_key_whose_range_is_the_rule():
    fields = {f.name for f in dataclasses.fields(CollectorConfig)}
    assert {r.argument for r in COLLECTOR_KEYS} == set(REFUSED)
    for rule in COLLECTOR_KEYS:
        assert rule.config_key.removeprefix("collector.") in fields
        ok, allowed = RANGES[rule.config_key]
        assert ok is rule.ok and allowed == rule.says(Audience.CONFIG)
    assert tuple(Compression.NAMES) == CODECS


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_shared_rule_refuses_the_config_key_and_the_argument_alike(name):
    value, for_arguments, for_config = REFUSED[name]
    with pytest.raises(ConfigError) as config_error:
        config_from_dict({"algorithm": "ppo"}, [f"collector.{name}={value}"])
    assert any(
        p.startswith(f"collector.{name}=") and p.endswith(f" is invalid: {for_config}")
        for p in config_error.value.problems
    ), config_error.value.problems
    with pytest.raises(ConfigError) as argument_error:
        RayCollector("CartPole-v1", None, frames_per_batch=8, backend="inprocess", **{name: value})
    assert f"{name}={value!r} is invalid: {for_arguments}" in argument_error.value.problems


def test_fleet_options_check_themselves_once_made_in_either_readers_words():
    with pytest.raises(ConfigError) as arguments:
        FleetOptions(prefetch=-1, compress="gzip", fraction_workers=0.5)
    assert arguments.value.problems == [
        "prefetch=-1 is invalid: must be an int >= 0",
        "compress='gzip' is invalid: must be None, 'lz4' or 'zstd'",
        "fraction_workers=0.5 is invalid: straggler preemption only applies to sync=True; "
        "leave it at 1.0 for sync=False",
    ]
    config = CollectorConfig(prefetch=-1, num_threads=0)
    with pytest.raises(ConfigError) as keys:
        FleetOptions.from_config(config)
    assert keys.value.problems == [
        "collector.prefetch=-1 is invalid: must be >= 0",
        "collector.num_threads=0 is invalid: must be >= 1, or null for torch's default",
    ]
    options = FleetOptions.from_config(CollectorConfig(sync=True, prefetch=0, compress="lz4"))
    assert (options.sync, options.prefetch, options.compress) == (True, 0, "lz4")
    assert FleetOptions.from_config(CollectorConfig(sync=True), sync=False).sync is False
    assert options.arguments()["prefetch"] == 0 and "said_as" not in options.arguments()


def test_a_collector_takes_the_fleet_options_as_one_object_or_as_keywords_not_both():
    fleet = FleetOptions(sync=True, prefetch=0, max_served_lag=3)
    collector = RayCollector(
        "CartPole-v1", None, frames_per_batch=8, total_frames=16, num_collectors=2,
        backend="inprocess", fleet=fleet,
    )  # fmt: skip
    try:
        assert (collector.sync, collector.prefetch, collector.max_served_lag) == (True, 0, 3)
        assert collector.fleet_options is fleet
        assert [tuple(b.batch_size) for b in collector] == [
            (2, 1, 4),
            (2, 1, 4),
        ]  # stacked: [collectors, envs, time]
    finally:
        collector.shutdown()
    with pytest.raises(ConfigError) as both:
        RayCollector(
            "CartPole-v1", None, frames_per_batch=8, backend="inprocess", fleet=fleet, prefetch=2
        )
    assert both.value.problems == [
        "prefetch=2 is invalid: is given twice: fleet=FleetOptions(...) holds the fleet's "
        "options; set FleetOptions(prefetch=...) there instead"
    ]


@pytest.fixture
def rule_runs(monkeypatch):
    """How often each Rule ran, by its argument's name (the options' cache emptied first)."""
    from collections import Counter

    import fleetrl.collectors.remote.checks
    import fleetrl.setup.verify.rules  # noqa: F401
    from fleetrl.batch_sizes import batch_size_problems
    from fleetrl.collectors import rollout_options, rules
    from fleetrl.collectors.inference import options as inference_options
    from fleetrl.collectors.remote import fleet_options

    fleet_options._from_config.cache_clear()
    inference_options._from_config.cache_clear()
    rollout_options._from_config.cache_clear()
    runs: Counter[str] = Counter()
    check = rules.Rule.check
    context = inference_options._check_context

    def counted_batch_sizes(**kwargs):
        runs["batch sizes"] += 1
        return batch_size_problems(**kwargs)

    # every module that asks the batch-size rule (fleetrl.batch_sizes), wherever it is
    for module in list(sys.modules.values()):
        if getattr(module, "batch_size_problems", None) is batch_size_problems:
            monkeypatch.setattr(module, "batch_size_problems", counted_batch_sizes)

    def counted(self, p, value, audience, **values):
        runs[self.argument] += 1
        return check(self, p, value, audience, **values)

    def counted_context(*args, **kwargs):
        runs["inference context"] += 1
        return context(*args, **kwargs)

    monkeypatch.setattr(rules.Rule, "check", counted)
    monkeypatch.setattr(inference_options, "_check_context", counted_context)
    return runs


#: the rules the fleet's options hold, and the batch-size rule of the rollout's options
FLEET_RULES = (*sorted(REFUSED), "sync", "batch sizes")


def test_a_runs_fleet_rules_run_once_from_its_config_to_its_collector(rule_runs):
    from fleetrl.setup.build import make_collector

    config = config_from_dict(
        {
            "env": {"id": "CartPole-v1", "num_envs": 1},
            "collector": {"num_collectors": 2, "frames_per_batch": 8, "prefetch": 2},
            "trainer": {"backend": "inprocess", "total_frames": 16},
        }
    )
    collector = make_collector(config, None, total_frames=16, seed=0)
    try:
        assert collector.prefetch == 2 and sum(b.numel() for b in collector) == 16
    finally:
        collector.shutdown()
    assert {name: rule_runs[name] for name in FLEET_RULES} == dict.fromkeys(FLEET_RULES, 1)


def test_a_collectors_fleet_rules_run_once_from_its_keywords(rule_runs):
    collector = RayCollector(
        "CartPole-v1", None, frames_per_batch=8, total_frames=16, num_collectors=2,
        backend="inprocess", prefetch=2, sync=True,
    )  # fmt: skip
    collector.shutdown()
    # the two rules only a caller's arguments have (a config has no such keys) run too
    once = (*FLEET_RULES, "max_weight_update_interval", "update_after_each_batch")
    assert {name: rule_runs[name] for name in once} == dict.fromkeys(once, 1)


def test_the_fleet_options_defaults_are_the_collectors_and_the_configs():
    import inspect

    from fleetrl.collectors.remote.fleet_options import FLEET_ARGUMENTS, FLEET_CONFIG_KEYS
    from fleetrl.distributed.workers import DEFAULT_MAX_RESTART_ATTEMPTS

    signature = inspect.signature(RayCollector).parameters
    defaults = FleetOptions()
    assert {n: signature[n].default for n in FLEET_ARGUMENTS} == defaults.arguments()
    assert defaults.max_restart_attempts == DEFAULT_MAX_RESTART_ATTEMPTS
    config = CollectorConfig()
    # a config's defaults differ only where an on-policy run's do: stacked rounds, no prefetch
    differ = {n for n in FLEET_CONFIG_KEYS if getattr(config, n) != getattr(defaults, n)}
    assert differ == {"sync", "prefetch"}


#: central inference's own rules, and the rules that tie them to the run (servers per
#: collector, a GPU: one check of the context)
INFERENCE_RULES = (
    "inference",
    "num_inference_servers",
    "inference_device",
    "inference_max_batch",
    "inference_max_wait_ms",
    "inference_transport",
    "inference_remote_config['num_cpus']",
    "inference context",
)


def test_a_runs_inference_rules_run_once_from_its_config_to_its_collector(rule_runs):
    from fleetrl.collectors.inference import InferenceOptions
    from fleetrl.setup.build import make_collector

    config = config_from_dict(
        {
            "env": {"id": "CartPole-v1", "num_envs": 2},
            "collector": {
                "num_collectors": 2,
                "frames_per_batch": 8,
                "inference": "server",
                "num_inference_servers": 2,
            },
            "trainer": {"backend": "inprocess"},
        }
    )
    options = InferenceOptions.from_config(config.collector)
    collector = make_collector(config, weight_echo(), total_frames=16, seed=0)
    try:
        assert collector.inference_options is options and options.num_servers == 2
        assert sum(b.numel() for b in collector) == 16
    finally:
        collector.shutdown()
    assert {name: rule_runs[name] for name in INFERENCE_RULES} == dict.fromkeys(INFERENCE_RULES, 1)


def test_a_collectors_inference_rules_run_once_from_its_keywords(rule_runs):
    collector = RayCollector(
        "CartPole-v1", weight_echo(), frames_per_batch=8, total_frames=16, num_collectors=2,
        backend="inprocess", inference="server", num_inference_servers=2,
        num_workers_per_collector=2, inference_remote_config={"num_cpus": 1},
    )  # fmt: skip
    collector.shutdown()
    # a caller's remote_config is a dict of Ray options first: one rule more than a config's
    once = (*INFERENCE_RULES, "inference_remote_config")
    assert {name: rule_runs[name] for name in once} == dict.fromkeys(once, 1)


# ------------------------------------------------------------ the rollout's sizes


def test_a_local_collectors_batch_size_rule_runs_once_known_or_first_known_at_its_env(
    rule_runs,
):
    from fakes import counting_vec
    from fleetrl import SyncDataCollector

    with SyncDataCollector(
        "CartPole-v1", None, frames_per_batch=8, total_frames=16, num_envs=2
    ) as collector:
        assert sum(b.numel() for b in collector) == 16
    assert rule_runs["batch sizes"] == 1  # when made: the count is given
    # a vector env of its own size: its count is known once it is built, and checked then
    with SyncDataCollector(lambda: counting_vec([3, 4, 5]), None, frames_per_batch=9) as c:
        assert c.rollout_options.num_envs is None and c.num_envs == 3
    assert rule_runs["batch sizes"] == 2
    with pytest.raises(ConfigError) as error:
        SyncDataCollector(lambda: counting_vec([3, 4, 5]), None, frames_per_batch=8)
    assert error.value.problems == [
        "frames_per_batch=8 is invalid: must be a multiple of the number of envs (3); use 6 or 9"
    ]


def test_a_fleet_whose_env_counts_its_workers_first_know_checks_them_once_on_the_driver(
    rule_runs,
):
    from fakes import counting_vec

    factory = [lambda: counting_vec([3, 4]), lambda: counting_vec([3, 4])]
    collector = RayCollector(
        factory, None, frames_per_batch=8, total_frames=16, sync=True, backend="inprocess"
    )
    try:
        # the split when made; the counts (2 and 2) as the workers report them
        assert collector.rollout_options.num_envs is None
        assert sum(b.numel() for b in collector) == 16
    finally:
        collector.shutdown()
    assert rule_runs["batch sizes"] == 2
    with pytest.raises(ConfigError) as error:
        RayCollector(
            factory, None, frames_per_batch=6, total_frames=12, sync=True, backend="inprocess"
        )
    assert error.value.problems == [
        "frames_per_batch=6 is invalid: sync=True splits each batch across the 2 "
        "collectors: frames_per_batch / num_collectors = 3 frames per collector must be a "
        "multiple of each collector's 2 envs; use frames_per_batch=4 or 8"
    ]


def test_rollout_options_are_taken_as_one_object_or_as_keywords_not_both():
    from fleetrl import SyncDataCollector
    from fleetrl.collectors.rollout_options import RolloutOptions

    sizes = RolloutOptions(frames_per_batch=8, total_frames=16, num_envs=2)
    with SyncDataCollector("CartPole-v1", None, rollout=sizes) as collector:
        assert collector.rollout_options is sizes
        assert [b.batch_size for b in collector] == [(2, 4), (2, 4)]
    with pytest.raises(ConfigError) as both:
        SyncDataCollector("CartPole-v1", None, rollout=sizes, frames_per_batch=8)
    assert both.value.problems == [
        "frames_per_batch=8 is invalid: is given twice: rollout=RolloutOptions(...) holds "
        "the rollout's sizes; set RolloutOptions(frames_per_batch=...) there instead"
    ]
    with pytest.raises(ConfigError) as neither:
        SyncDataCollector("CartPole-v1", None)
    assert neither.value.problems == [
        "frames_per_batch=None is invalid: is required (or rollout=RolloutOptions(...), "
        "which holds it)"
    ]
    split = RolloutOptions(frames_per_batch=8, num_envs=2, split=2)
    with pytest.raises(ConfigError, match=r"splits each batch over 2 collectors"):
        SyncDataCollector("CartPole-v1", None, rollout=split)
    collector = RayCollector(
        "CartPole-v1", None, rollout=split, num_collectors=2, num_workers_per_collector=2,
        sync=True, backend="inprocess",
    )  # fmt: skip
    try:
        assert next(iter(collector)).batch_size == (2, 2, 2)
    finally:
        collector.shutdown()
    with pytest.raises(ConfigError) as first_ready:
        RayCollector("CartPole-v1", None, rollout=split, num_collectors=2, backend="inprocess")
    assert [p.split(" is invalid: ")[1] for p in first_ready.value.problems] == [
        "splits each batch over 2 collectors; these collectors need 1 (a sync fleet of a "
        "fixed size splits it over its collectors, any other takes whole batches)",
        "is given twice: rollout=RolloutOptions(num_envs=2) holds the envs per collector; "
        "leave it out here, or make them agree",
    ]


def test_rollout_options_from_a_config_say_its_keys_and_split_a_sync_fleets_batch():
    from fleetrl.collectors.rollout_options import RolloutOptions

    config = config_from_dict(
        {
            "env": {"id": "CartPole-v1", "num_envs": 2},
            "collector": {"num_collectors": 2, "frames_per_batch": 8, "sync": True},
            "trainer": {"total_frames": 16},
        }
    )
    sizes = RolloutOptions.from_config(config)
    assert (sizes.frames_per_batch, sizes.total_frames, sizes.num_envs, sizes.split) == (
        8, 16, 2, 2,
    )  # fmt: skip
    assert RolloutOptions.from_config(config) is sizes  # made once for the same values
    assert sizes.share(num_envs=2).frames_per_batch == 4
    with pytest.raises(ConfigError) as error:
        config_from_dict(
            {
                "env": {"id": "CartPole-v1", "num_envs": 2},
                "collector": {"num_collectors": 2, "frames_per_batch": 6, "sync": True},
                "trainer": {"total_frames": 12},
            }
        )
    assert (
        "collector.frames_per_batch=6 is invalid: collector.sync=true splits each batch "
        "across the 2 collectors: collector.frames_per_batch / collector.num_collectors = 3 "
        "frames per collector must be a multiple of each collector's 2 envs; use "
        "collector.frames_per_batch=4 or 8"
    ) in error.value.problems

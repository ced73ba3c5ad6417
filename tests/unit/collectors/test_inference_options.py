"""Central inference's options as one object (issue 36, 3): ``RayCollector(inference=
InferenceOptions(...))`` collects as the separate keywords do, one list names each option's
keyword and config key, and each rule is written once and said in a caller's arguments or in
a config's keys."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

from fleetrl import Collector, ConfigError, RayCollector, SyncDataCollector
from fleetrl.collectors.inference import (
    FIELDS,
    INFERENCE_ARGUMENTS,
    INFERENCE_CONFIG_KEYS,
    InferenceMode,
    InferenceOptions,
    check_options,
    config_problems,
)
from fleetrl.collectors.rules import MAX_RESTART_ATTEMPTS, MAX_SERVED_LAG, Audience
from fleetrl.config import CollectorConfig
from fleetrl.errors import Problems
from policies import weight_echo


def ray_collector(**kwargs):
    args = dict(
        frames_per_batch=160,
        total_frames=480,
        num_collectors=2,
        num_workers_per_collector=4,
        backend="inprocess",
    )
    args.update(kwargs)
    return RayCollector("CartPole-v1", weight_echo(), **args)


def test_an_options_object_collects_as_the_separate_keywords_do():
    options = InferenceOptions("server", num_servers=2, max_batch=8)
    for given in ({"inference": options}, options.arguments()):
        with ray_collector(sync=True, **given) as c:
            assert sum(b.numel() for b in c) == c.frames == 480
            assert (c.inference, c.inference_options) == ("server", options)
            stats = c.stats()["inference"]
            assert [s["server"] for s in stats["servers"]] == [0, 1]
            assert stats["observations"] == 480


def test_an_options_object_and_a_separate_keyword_are_refused_together():
    with pytest.raises(ConfigError) as err:
        ray_collector(inference=InferenceOptions("server"), inference_max_batch=64)
    assert err.value.problems == [
        "inference_max_batch=64 is invalid: is given twice: inference=InferenceOptions(...) "
        "holds the inference options; set InferenceOptions(max_batch=...) there instead"
    ]
    # its own values are checked by the same rules, named by their keywords
    with pytest.raises(ConfigError, match="inference_max_batch=0 is invalid: must be an int >= 1"):
        ray_collector(inference=InferenceOptions("server", max_batch=0))


def test_one_list_names_every_field_its_keyword_and_its_config_key():
    assert [f.field for f in FIELDS] == [
        f.name for f in dataclasses.fields(InferenceOptions) if f.init and f.name != "said_as"
    ]
    parameters = inspect.signature(RayCollector.__init__).parameters
    assert set(INFERENCE_ARGUMENTS) <= set(parameters)
    for f in FIELDS:  # RayCollector's default is the options' default
        assert parameters[f.argument].default == getattr(InferenceOptions(), f.field)
    keys = {f.name for f in dataclasses.fields(CollectorConfig)}
    assert set(INFERENCE_CONFIG_KEYS) <= keys
    assert INFERENCE_CONFIG_KEYS[0] == "inference"
    assert "num_cpus_per_inference_server" in INFERENCE_CONFIG_KEYS


def test_options_from_a_config_section_are_the_keywords_setup_builds():
    served = CollectorConfig(inference="server", inference_max_wait_ms=0.5)
    options = InferenceOptions.from_config(served)
    assert options.mode is InferenceMode.SERVER
    assert options.arguments() == {
        "inference": "server",
        "num_inference_servers": 1,
        "inference_device": None,
        "inference_max_batch": None,
        "inference_max_wait_ms": 0.5,
        "inference_remote_config": {"num_cpus": 1.0},
        "inference_transport": "auto",
    }
    assert InferenceOptions.from_config(CollectorConfig()).arguments() == {}
    cuda = InferenceOptions("server", num_servers=4, device="cuda", remote_config={"num_cpus": 0})
    assert cuda.ray_options() == {"num_cpus": 0, "num_gpus": 0.25}


def test_the_options_keep_their_own_dict():
    given = {"num_cpus": 2}
    options = InferenceOptions("server", remote_config=given)
    given["num_cpus"] = 0
    assert options.remote_config == {"num_cpus": 2}


def said(options, **kwargs):
    p = Problems()
    check_options(p, options, **kwargs)
    return [str(x) for x in p]


def refused(**fields):
    """What ``InferenceOptions(**fields)`` is refused with, when made."""
    with pytest.raises(ConfigError) as err:
        InferenceOptions(**fields)
    return err.value.problems


@pytest.mark.parametrize(
    ("field", "value", "argument_text", "config_text"),
    [
        ("mode", "gpu", "must be 'local' or 'server'", "must be 'local' or 'server'"),
        ("num_servers", 0, "must be an int >= 1", "must be >= 1"),
        (
            "max_batch",
            0,
            "must be an int >= 1, or None: no bound",
            "must be >= 1, or null: no bound",
        ),
        ("max_wait_ms", -1, "must be a number >= 0 (milliseconds)", "must be >= 0 (milliseconds)"),
        ("transport", "tcp", "must be 'auto' or 'ray'", "must be 'auto' or 'ray'"),
        (
            "device",
            "gpu0",
            "must be None (the CPU) or a torch device such as 'cpu' or 'cuda'",
            "must be null (the CPU) or a torch device such as 'cpu' or 'cuda'",
        ),
    ],
)
def test_each_rule_is_said_in_the_arguments_or_in_the_config_keys(
    field, value, argument_text, config_text
):
    by_field = {f.field: f for f in FIELDS}
    argument = by_field[field].argument
    assert refused(**{"mode": "server", field: value}) == [
        f"{argument}={value!r} is invalid: {argument_text}"
    ]
    config = CollectorConfig(**{"inference": "server", by_field[field].key: value})
    key = f"collector.{by_field[field].key}"
    assert [str(p) for p in config_problems(config)] == [
        f"{key}={value!r} is invalid: {config_text}"
    ]


def test_the_rules_that_tie_options_to_other_settings_in_both_words():
    options = InferenceOptions("server", num_servers=3)
    assert said(options, num_collectors=2) == [
        "num_inference_servers=3 is invalid: must be <= num_collectors=2: each server serves "
        "at least one collector"
    ]
    assert [
        str(p)
        for p in config_problems(CollectorConfig(inference="server", num_inference_servers=3))
    ] == [
        "collector.num_inference_servers=3 is invalid: must be <= collector.num_collectors=2: "
        "each server serves at least one collector"
    ]
    assert refused(mode="local", max_batch=64, transport="ray") == [
        "inference_max_batch=64 is invalid: only takes effect with inference='server'",
        "inference_transport='ray' is invalid: only takes effect with inference='server'",
    ]
    assert [
        str(p) for p in config_problems(CollectorConfig(num_cpus_per_inference_server=0.0))
    ] == [
        "collector.num_cpus_per_inference_server=0.0 is invalid: only takes effect with "
        "collector.inference='server'"
    ]
    no_remote = CollectorConfig(inference="server", num_collectors=0)
    assert "collector.inference='server' is invalid: serves remote collectors" in str(
        config_problems(no_remote)[0]
    )
    assert refused(mode="server", remote_config={"num_cpus": -1}) == [
        "inference_remote_config['num_cpus']=-1 is invalid: must be a number >= 0 (0: the "
        "servers share the collectors' cores)"
    ]


def test_a_cuda_device_needs_a_gpu_here_unless_a_cluster_is_named(monkeypatch):
    import fleetrl.distributed.runtime

    monkeypatch.setattr(fleetrl.distributed.runtime, "ray_running", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cuda = InferenceOptions("server", device="cuda")
    assert said(cuda, num_collectors=1) == [
        "inference_device='cuda' is invalid: needs a GPU, and CUDA is not available here; use "
        "None (the CPU), or ray_init_config['address'] of a Ray cluster with a GPU"
    ]
    assert said(cuda, num_collectors=1, address="ray://head:10001") == []  # checked once up
    config = CollectorConfig(inference="server", inference_device="cuda")
    assert [str(p) for p in config_problems(config)] == [
        "collector.inference_device='cuda' is invalid: needs a GPU, and CUDA is not available "
        "here; use null (the CPU), or collector.address of a Ray cluster with a GPU"
    ]
    assert config_problems(dataclasses.replace(config, address="ray://head:10001")) == []


def test_the_collector_bounds_are_said_as_the_config_says_them():
    p = Problems()
    for audience in Audience:
        MAX_SERVED_LAG.check(p, -1, audience)
        MAX_RESTART_ATTEMPTS.check(p, -2, audience)
    assert [str(x) for x in p] == [
        "max_served_lag=-1 is invalid: must be None (no bound) or an int >= 0",
        "max_restart_attempts=-2 is invalid: must be an int >= 0 (0: a collector worker's "
        "death ends the run)",
        "collector.max_served_lag=-1 is invalid: must be null (no bound) or >= 0",
        "collector.max_restart_attempts=-2 is invalid: must be >= 0 (0: a collector worker's "
        "death ends the run)",
    ]


def test_the_front_door_and_the_sync_collector_read_the_same_rules():
    with Collector(
        "CartPole-v1", weight_echo(), frames_per_batch=8, inference=InferenceOptions()
    ) as c:
        assert c.next().numel() == 8
    with pytest.raises(ConfigError, match=r"inference=InferenceOptions.* is central inference's"):
        Collector(
            "CartPole-v1", weight_echo(), frames_per_batch=8, inference=InferenceOptions("server")
        )
    with pytest.raises(
        ConfigError, match="inference_transport='tcp' is invalid: must be 'auto' or 'ray'"
    ):
        SyncDataCollector("CartPole-v1", None, frames_per_batch=8, inference_transport="tcp")


def test_config_problems_add_none_for_a_key_that_has_one():
    p = Problems()
    p.add("collector.inference_max_batch", "x", "must be an int or null")  # the type check
    config = CollectorConfig(inference="server", inference_max_batch="x", inference_max_wait_ms=-1)
    new = config_problems(config, p)
    assert [str(x) for x in new] == [
        "collector.inference_max_wait_ms=-1 is invalid: must be >= 0 (milliseconds)"
    ]
    assert len(p) == 2

"""Overlapped collection (env steps of one half while the policy acts on the other): the
batches are bit-identical to the plain step-then-infer loop's for a policy that acts on
each env's row alone, on real ALE games in both C++ engines."""

from __future__ import annotations

import io
import re
import time

import pytest
import torch
from tensordict.nn import TensorDictModule
from torchrl.data import Unbounded

from collecting import HAVE_ENVPOOL
from collecting import OVERLAP_ENVS as N
from collecting import OVERLAP_STEPS as STEPS
from collecting import assert_same_batches as assert_same
from collecting import breakout as spec
from collecting import collect_breakout as collect
from fleetrl import ConfigError, SyncDataCollector
from fleetrl.collectors.local.overlap import (
    OVERLAP_ENV_MSG,
    OVERLAP_NUM_ENVS_MSG,
    OVERLAP_VALUE_MSG,
    Overlap,
    available_cores,
    pays_off,
    worker_overlap,
)
from fleetrl.setup.build import make_collector
from fleetrl.setup.load import config_from_dict
from policies import atari_row_policy, frame_hash

ENGINES = [
    "ale_vector",
    pytest.param("envpool", marks=pytest.mark.skipif(not HAVE_ENVPOOL, reason="no envpool")),
]


class StepCounter(TensorDictModule):
    """A recurrent policy in exact arithmetic: its state counts the steps of the episode."""

    def __init__(self):
        super().__init__(
            self._forward,
            in_keys=["observation", "count", "is_init"],
            out_keys=["action", ("next", "count")],
        )

    @staticmethod
    def _forward(obs, count, is_init):
        count = torch.where(is_init, 0, count)
        return (frame_hash(obs) + count[:, 0]) % 4, count + 1

    def make_tensordict_primer(self):
        from torchrl.envs import TensorDictPrimer

        return TensorDictPrimer(count=Unbounded(shape=(1,), dtype=torch.int64))


CASES = {
    # the engine truncates at 15 agent steps: episodes end inside both batches
    "engine_time_limit": dict(atari={"max_episode_frames": 4 * 15}),
    # the collector truncates at 17 steps (max_frames_per_traj), across the batch border too
    "max_frames_per_traj": dict(max_frames_per_traj=17),
    # every env reset (unseeded) at each batch start
    "reset_at_each_iter": dict(atari={"max_episode_frames": 4 * 15}, reset_at_each_iter=True),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("engine", ENGINES)
def test_overlap_batches_are_bit_identical(engine, case):
    want, want_state = collect(engine, False, **CASES[case])
    got, got_state = collect(engine, True, **CASES[case])
    assert_same(got, want)
    batch = got[0]
    assert batch.batch_size == (N, STEPS)
    assert batch["observation"].dtype == torch.uint8
    assert {"sample_log_prob", "state_value"} <= set(batch.keys())
    truncated = batch["next", "truncated"][..., 0]
    assert truncated.sum(1).min() >= 2  # every env ended episodes inside the batch
    length = 17 if case == "max_frames_per_traj" else 15
    assert batch["next", "episode_length"][truncated].eq(length).all()
    for key in ("frames", "next_traj_id", "traj_ids", "episode_length", "episode_return"):
        assert torch.equal(torch.as_tensor(got_state[key]), torch.as_tensor(want_state[key])), key
    assert torch.equal(got_state["obs"][0][1], want_state["obs"][0][1])


@pytest.mark.parametrize("engine", ENGINES)
def test_random_frames_then_policy_are_identical(engine):
    kwargs = dict(init_random_frames=N * STEPS, atari={"max_episode_frames": 4 * 30})
    want, _ = collect(engine, False, **kwargs)
    got, _ = collect(engine, True, **kwargs)
    assert_same(got, want)
    assert "sample_log_prob" not in got[0]  # a random batch holds the action only
    assert "sample_log_prob" in got[1]


def test_recurrent_state_is_carried_per_half():
    kwargs = dict(atari={"max_episode_frames": 4 * 30}, policy=StepCounter())
    want, _ = collect("ale_vector", False, **kwargs)
    got, _ = collect("ale_vector", True, **kwargs)
    assert_same(got, want)
    for batch in got:
        count, is_init = batch["count"][..., 0], batch["is_init"][..., 0]
        # the carried state counts the steps before this one in the episode, zeroed at starts
        assert torch.equal(count, batch["next", "episode_length"][..., 0] - 1)
        assert torch.equal(is_init, count == 0)
        assert torch.equal(batch["next", "count"][..., 0], count + 1)


def _through_checkpoint(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_state_dict_round_trip_and_versions():
    with SyncDataCollector(
        spec("ale_vector"), atari_row_policy(), frames_per_batch=N * 8, num_envs=N, overlap=True
    ) as first:
        first.set_seed(0)
        first.next()
        first.update_policy_weights_(version=5)
        assert first.next()["collector", "policy_version"].unique().tolist() == [5]
        state = _through_checkpoint(first.state_dict())
    assert state["env"] is None  # C++ engines cannot be saved: counters and episodes only
    with SyncDataCollector(
        spec("ale_vector"), atari_row_policy(), frames_per_batch=N * 8, num_envs=N, overlap=True
    ) as second:
        second.load_state_dict(state)
        assert (second.frames, second.policy_version) == (2 * N * 8, 5)
        assert second.state_dict()["next_traj_id"] == state["next_traj_id"]
        batch = second.next()
    assert batch["collector", "policy_version"].unique().tolist() == [5]


class StopAfter:
    """``should_stop`` that answers True from its ``k``-th call on, counting the calls."""

    def __init__(self, k: int):
        self.k, self.calls = k, 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.calls >= self.k


@pytest.mark.parametrize("engine", ENGINES)
def test_preemption_stops_where_the_plain_loop_stops(engine):
    batches, calls = {}, {}
    for overlap in (False, True):
        with SyncDataCollector(
            spec(engine),
            atari_row_policy(),
            frames_per_batch=N * STEPS,
            num_envs=N,
            overlap=overlap,
        ) as c:
            c.set_seed(1)
            stop = StopAfter(3)
            batches[overlap] = c.collect(N * STEPS, min_frames=N * 10, should_stop=stop)
            calls[overlap] = stop.calls
            # no step was left in flight: the next batch is whole and continues the episodes
            after = c.collect(N * 4)
        assert after.batch_size == (N, 4)
        assert torch.equal(
            after["observation"][:, 0], batches[overlap]["next", "observation"][:, -1]
        )
    assert batches[True].batch_size == (N, 12)  # min 10 steps, then stopped at the 3rd check
    assert calls[True] == calls[False] == 3
    assert_same([batches[True]], [batches[False]])


@pytest.mark.parametrize(
    ("engine", "num_envs", "expected"),
    [("ale_vector", 4, True), ("ale_vector", 3, False), ("gymnasium", 2, False)],
)
def test_automatic_overlap_where_the_envs_split(engine, num_envs, expected):
    with SyncDataCollector(spec(engine), None, frames_per_batch=num_envs, num_envs=num_envs) as c:
        # automatic overlap also needs a core for the engine besides the policy's
        assert c.overlap is (expected and pays_off(1, available_cores()))


def test_ray_workers_overlap_automatically_only_with_a_core_each_for_their_engines():
    assert pays_off(1, 2) and pays_off(2, 4) and not pays_off(2, 2) and not pays_off(1, 1)
    # 2 workers on 2 cores: measured slower with overlap, so automatic becomes off
    assert worker_overlap(None, 2, 2) is Overlap.OFF
    assert worker_overlap("auto", 2, 3) is Overlap.OFF
    assert worker_overlap(None, 2, 4) is None  # stays automatic: each worker decides
    assert worker_overlap("auto", 1, 2) == "auto"
    assert worker_overlap(True, 2, 2) is True  # asked for: kept
    assert worker_overlap(False, 1, 8) is False


def test_an_ale_id_with_a_cpp_engine_overlaps():
    with SyncDataCollector(
        "ALE/Breakout-v5",
        None,
        frames_per_batch=4,
        num_envs=2,
        create_env_kwargs={"engine": "ale_vector", "num_threads": 1},
        overlap="on",
    ) as c:
        assert c.overlap is True
        assert c.next().batch_size == (2, 2)


def _refused(message: str, **kwargs) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        SyncDataCollector(policy=None, frames_per_batch=4, **kwargs)


def test_overlap_errors_name_the_argument():
    gym_spec = spec("gymnasium")
    _refused(
        f"overlap=True is invalid: {OVERLAP_ENV_MSG.format(env=gym_spec)}",
        create_env_fn=gym_spec,
        num_envs=2,
        overlap=True,
    )
    _refused(
        f"overlap=True is invalid: {OVERLAP_ENV_MSG.format(env='CartPole-v1')}",
        create_env_fn="CartPole-v1",
        num_envs=2,
        overlap=Overlap.ON,
    )
    _refused(
        f"overlap=True is invalid: {OVERLAP_NUM_ENVS_MSG.format(n=1, even=2)}",
        create_env_fn=spec("ale_vector"),
        num_envs=1,
        overlap=True,
    )
    _refused(
        f"overlap='sideways' is invalid: {OVERLAP_VALUE_MSG}",
        create_env_fn="CartPole-v1",
        overlap="sideways",
    )


def test_config_collector_overlap():
    def config(overlap, engine="ale_vector", num_envs=2):
        return config_from_dict(
            {
                "algorithm": "ppo",
                "env": {"id": "ALE/Breakout-v5", "engine": engine, "num_envs": num_envs},
                "collector": {"num_collectors": 0, "frames_per_batch": 4, "overlap": overlap},
                "trainer": {"total_frames": 4},
            }
        )

    assert config_from_dict({"algorithm": "ppo"}).collector.overlap == "auto"
    auto = pays_off(1, available_cores())
    for value, expected in (("auto", auto), (None, auto), ("off", False), (False, False)):
        collector = make_collector(config(value), None, total_frames=4, seed=0)
        try:
            assert collector.overlap is expected
        finally:
            collector.shutdown()
    with pytest.raises(ConfigError) as err:
        config("sideways")
    assert err.value.problems == [
        "collector.overlap='sideways' is invalid: must be auto (or null), on (or true) or off "
        "(or false)"
    ]
    with pytest.raises(ConfigError) as err:
        config("on", engine="gymnasium")
    assert err.value.problems == [
        "collector.overlap='on' is invalid: steps two halves of a C++ Atari engine: needs "
        "env.engine 'ale_vector' or 'envpool' and an even env.num_envs >= 2 (here "
        "env.engine='gymnasium', env.num_envs=2); use auto or off"
    ]
    with pytest.raises(ConfigError, match=re.escape("env.num_envs=3); use auto or off")):
        config(True, num_envs=3)


@pytest.mark.parametrize("engine", ENGINES)
def test_overlapped_collection_times_its_policy_calls_and_the_rest_of_the_loop(engine):
    with SyncDataCollector(
        spec(engine), atari_row_policy(), frames_per_batch=N * STEPS, num_envs=N, overlap=True
    ) as c:
        start = time.perf_counter()
        c.collect(N * STEPS)
        wall = time.perf_counter() - start
        times = c.take_times()
    local = [times.env_s, times.policy_s, times.pack_s]
    assert (times.frames, times.batches) == (N * STEPS, 1)
    assert all(s >= 0 for s in local) and times.policy_s > 0
    assert sum(local) <= wall

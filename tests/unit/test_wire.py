"""Every format that crosses Ray (fleetrl.distributed.wire), without Ray: batches, policy weights, parameters.

tests/collectors/test_ray.py sends the same batches through a real Ray and compares them with a
local SyncDataCollector's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from fakes import PIXEL_SHAPE, counting_vec, invert_next_observation, pixel_vec
from fleetrl import SyncDataCollector
from fleetrl.distributed.wire import empty_round, pack_batch, unpack_batch

OBS_BYTES = int(np.prod(PIXEL_SHAPE))  # uint8
NEXT_OBS = ("next", "observation")


def rollouts(factory, frames: int, **kwargs):
    """Two batches of a local collector with random actions, and its compact keys."""
    collector = SyncDataCollector(
        factory, None, frames_per_batch=frames, total_frames=2 * frames, **kwargs
    )
    collector.set_seed(3)
    batches = list(collector)
    keys = collector.compact_keys
    collector.shutdown()
    return batches, keys


def assert_same(got, want):
    assert got.batch_size == want.batch_size
    assert got.names == want.names
    assert set(got.keys(True, True)) == set(want.keys(True, True))
    for key in want.keys(True, True):
        assert got[key].dtype == want[key].dtype, key
        assert torch.equal(got[key], want[key]), key


def read_only(packed):
    """Leaves as Ray hands them over: read-only views of its object store."""
    leaves = list(packed["leaves"].values())
    compact = packed["compact"] or {"keys": {}}
    leaves += [compact["ended_at"]] if "ended_at" in compact else []
    leaves += [v for parts in compact["keys"].values() for v in parts.values()]
    for leaf in leaves:
        if isinstance(leaf, np.ndarray):
            leaf.flags.writeable = False
    return packed


@pytest.mark.parametrize("codec", [None, "lz4"])
def test_compact_pixel_batches_round_trip_bit_for_bit_with_episodes_ending_inside(codec):
    # episodes of 3, 5 and 7 steps: they end at different steps in each env, inside each batch
    batches, keys = rollouts(lambda: pixel_vec([3, 5, 7]), frames=3 * 8)
    assert keys == ["observation"]
    for batch in batches:
        done = batch["next", "done"][..., 0]
        ends = int(done[:, :-1].sum())
        assert ends >= 2 and done[:, :-1].any(dim=1).all()
        # the relation the compact layout relies on holds in the rollout's batch
        shifted = batch[NEXT_OBS][:, :-1] == batch["observation"][:, 1:]
        assert shifted.flatten(2).all(-1).logical_or(done[:, :-1]).all()
        assert not shifted.flatten(2).all(-1)[done[:, :-1]].any()  # reset frames differ
        packed, raw, sent = pack_batch(batch, codec, keys)
        full, full_raw, full_sent = pack_batch(batch, codec)
        assert NEXT_OBS not in packed["leaves"] and NEXT_OBS in full["leaves"]
        assert (
            raw == full_raw == sum(v.numel() * v.element_size() for v in batch.values(True, True))
        )
        if codec is None:
            # next observations cost the last step (3 envs) and the ends, plus their positions
            assert sent == full_sent - batch.numel() * OBS_BYTES + (3 + ends) * OBS_BYTES + 8 * ends
        else:
            assert sent < full_sent
        assert_same(unpack_batch(read_only(packed)), batch)
        assert_same(unpack_batch(packed, copy=False), batch)


def test_unpacked_compact_batches_are_fresh_and_writable():
    (batch, _), keys = rollouts(lambda: pixel_vec([3, 4]), frames=2 * 6)
    packed = read_only(pack_batch(batch, None, keys)[0])
    got = unpack_batch(packed)
    for value in got.values(True, True):
        value.copy_(~value if value.dtype == torch.bool else value + 1)  # in place
    assert torch.equal(got[NEXT_OBS], batch[NEXT_OBS] + 1)
    assert torch.equal(got["observation"], batch["observation"] + 1)
    mapped = unpack_batch(packed, copy=False)  # observation on Ray's memory, next rebuilt fresh
    assert np.shares_memory(mapped["observation"].numpy(), packed["leaves"]["observation"])
    mapped[NEXT_OBS].add_(1)
    assert torch.equal(mapped[NEXT_OBS], batch[NEXT_OBS] + 1)


def synthetic(env_shape: tuple[int, ...], steps: int, ends: list[tuple[int, ...]]) -> TensorDict:
    """A batch that keeps the relation for two keys, with episode ends at ``ends`` (env..., t)."""
    g = torch.Generator().manual_seed(0)
    shape = (*env_shape, steps)

    def obs_and_next(feat, dtype):
        obs = torch.randint(0, 256, (*shape, *feat), generator=g).to(dtype)
        nxt = torch.randint(0, 256, (*shape, *feat), generator=g).to(dtype)  # ends and T-1
        for idx in np.ndindex(*env_shape, steps - 1):
            if idx not in ends:
                nxt[idx] = obs[(*idx[:-1], idx[-1] + 1)]
        return obs, nxt

    obs, nxt = obs_and_next((2, 3), torch.uint8)
    state, next_state = obs_and_next((4,), torch.float32)
    done = torch.zeros(*shape, 1, dtype=torch.bool)
    for end in ends:
        done[end] = True
    td = TensorDict(
        {"observation": obs, "state": state, "action": torch.randn(shape)},
        batch_size=shape,
        names=[None] * len(env_shape) + ["time"],
    )
    td.set(NEXT_OBS, nxt)
    td.set(("next", "state"), next_state)
    td.set(("next", "reward"), torch.randn(*shape, 1))  # no observation: sent as it is
    td.set(("next", "done"), done)
    return td


@pytest.mark.parametrize(
    "env_shape, steps, ends",
    [
        ((2, 3), 5, [(0, 1, 0), (1, 2, 3), (1, 2, 4), (0, 0, 2)]),  # two env dims; an end at T-1
        ((), 6, [(2,), (3,)]),  # an unbatched torchrl env: batch dims [time]
        ((4,), 1, [(1, 0)]),  # one step: everything is the last step
        ((3,), 4, []),  # no episode ends
    ],
)
@pytest.mark.parametrize("codec", [None, "zstd"])
def test_compact_layout_for_any_env_dims_and_into_a_round(env_shape, steps, ends, codec):
    batch = synthetic(env_shape, steps, ends)
    packed, _, _ = pack_batch(batch, codec, ["observation", "state", "not_a_key"])
    assert set(packed["compact"]["keys"]) == {NEXT_OBS, ("next", "state")}
    inner = [e for e in ends if e[-1] < steps - 1]  # an end at T-1 travels as the last step
    ended = packed["compact"]["keys"][NEXT_OBS]["ended"]
    assert (ended.shape if codec is None else ended[1]) == (len(inner), 2, 3)
    assert_same(unpack_batch(read_only(packed)), batch)
    # a sync round: this batch as collector 1's slice, padded to steps + 2
    rnd = empty_round(packed, 2, steps + 2)
    assert rnd.batch_size == (2, *env_shape, steps + 2)
    view = rnd[1][..., :steps]
    assert unpack_batch(packed, out=view) is view
    view.names = batch.names
    assert_same(view, batch)


def test_a_batch_that_breaks_the_relation_is_exact_only_when_sent_in_full():
    (batch, _), _ = rollouts(lambda: pixel_vec([3, 4]), frames=2 * 6)
    batch = invert_next_observation(batch)
    assert_same(unpack_batch(pack_batch(batch, None)[0]), batch)
    wrong = unpack_batch(pack_batch(batch, None, ["observation"])[0])  # nothing is checked
    assert not torch.equal(wrong[NEXT_OBS], batch[NEXT_OBS])


@pytest.mark.parametrize(
    "kwargs, keys",
    [
        ({}, ["observation"]),
        ({"max_frames_per_traj": 2}, ["observation"]),  # forced truncation ends episodes too
        ({"postproc": invert_next_observation}, []),
        ({"split_trajs": True}, []),
    ],
)
def test_collectors_vouch_for_the_compact_layout_only_for_unchanged_rollouts(kwargs, keys):
    batches, compact_keys = rollouts(lambda: counting_vec([3, 4]), frames=2 * 5, **kwargs)
    assert compact_keys == keys
    for batch in batches:
        packed, _, _ = pack_batch(batch, None, compact_keys)
        assert (packed["compact"] is not None) == bool(keys)
        assert_same(unpack_batch(packed), batch)

"""A replay buffer's saved state: restored into another capacity (a resume with another
``buffer_size``), and saved as a learner counted its writes (decoupled collection, tasks in
flight)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

from fleetrl.collectors.remote.replay import (
    CountedWrites,
    ReplayBufferActor,
    buffer_state,
    load_buffer_state,
)
from fleetrl.distributed.wire import pack_samples, unpack_samples


def _buffer(capacity: int) -> TensorDictReplayBuffer:
    return TensorDictReplayBuffer(storage=LazyTensorStorage(capacity))


def _rows(start: int, n: int) -> TensorDict:
    """Rows ``start .. start + n - 1``: each row's ``obs`` is its write number."""
    obs = torch.arange(start, start + n)
    return TensorDict({"obs": obs, "next": {"obs": obs + 1}}, [n])


def _held(buffer: TensorDictReplayBuffer) -> list[int]:
    """The write numbers in the buffer's filled slots, slot by slot."""
    return buffer.storage[: len(buffer)]["obs"].tolist()


# (saved capacity, writes, new capacity): the slots' rows after the load, then after one more
# write (its write number 100) and where it landed
RESIZES = {
    "part filled, bigger": (10, 7, 20, list(range(7)), 7),
    "part filled, smaller": (10, 7, 5, [2, 3, 4, 5, 6], 0),
    "part filled, as many as it holds": (10, 7, 7, list(range(7)), 0),
    "wrapped, bigger": (10, 13, 20, [3, 4, 5, 6, 7, 8, 9, 10, 11, 12], 10),
    "wrapped, smaller": (10, 13, 5, [8, 9, 10, 11, 12], 0),
    "full, smaller": (10, 10, 4, [6, 7, 8, 9], 0),
}


@pytest.mark.parametrize("case", sorted(RESIZES))
def test_a_buffer_restored_into_another_capacity_keeps_the_newest_rows_in_write_order(case):
    saved_capacity, writes, capacity, kept, next_slot = RESIZES[case]
    saved = _buffer(saved_capacity)
    saved.extend(_rows(0, writes))
    restored = _buffer(capacity)
    load_buffer_state(restored, buffer_state(saved))
    assert restored.storage.max_size == capacity
    assert len(restored) == len(kept)
    assert _held(restored) == kept
    assert restored.storage[: len(kept)]["next", "obs"].tolist() == [k + 1 for k in kept]
    # the next write goes after the newest row: into free room, or over the oldest row
    index = restored.extend(_rows(100, 1))
    assert index.tolist() == [next_slot]
    after = [*kept[:next_slot], 100, *kept[next_slot + 1 :]]
    assert _held(restored) == after
    assert len(restored) == min(len(kept) + 1, capacity)
    # and samples come from the rows held only
    assert set(restored.sample(64)["obs"].tolist()) <= set(after)
    # a capacity's more writes leave the newest of them all, each slot written in turn
    restored.extend(_rows(200, capacity))
    assert len(restored) == capacity
    assert _held(restored) == [
        *range(200 + capacity - next_slot - 1, 200 + capacity),
        *range(200, 200 + capacity - next_slot - 1),
    ]


def test_a_bigger_buffer_fills_its_room_then_overwrites_the_oldest_row():
    saved = _buffer(10)
    saved.extend(_rows(0, 13))  # 3 .. 12 held
    restored = _buffer(12)
    load_buffer_state(restored, buffer_state(saved))
    restored.extend(_rows(13, 3))  # two into the room left, the third over write 3
    assert _held(restored) == [15, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]


def test_an_emptied_buffer_restores_into_another_capacity_empty():
    saved = _buffer(10)
    saved.extend(_rows(0, 4))
    saved.empty()
    restored = _buffer(3)
    load_buffer_state(restored, buffer_state(saved))
    assert len(restored) == 0
    assert restored.extend(_rows(0, 1)).tolist() == [0]


# --------------------------------------------------- the writes a learner counted


def _actor(capacity: int, *chunks: int) -> ReplayBufferActor:
    """An actor written ``chunks`` (each a task's write), numbered from 0 on."""
    actor = ReplayBufferActor(capacity, 4, num_threads=None)
    start = 0
    for n in chunks:
        actor.extend(_rows(start, n))
        start += n
    return actor


def test_a_buffer_saved_as_counted_leaves_out_the_writes_of_tasks_in_flight():
    actor = _actor(20, 3, 3, 2)  # writes 0-2, 3-5 (a task in flight), 6-7
    counted = CountedWrites(0)
    counted.add(8, 2)  # the third task's record came first
    counted.add(3, 3)
    assert (counted.upto, counted.total) == (3, 5)
    state = actor.state_dict(counted)
    assert state["written"] == 5
    buffer = state["buffer"]
    assert buffer["_storage"]["_len"] == buffer["_writer"]["_write_count"] == 5
    restored = ReplayBufferActor(20, 4, num_threads=None)
    restored.load_state_dict(state)
    assert _held(restored.buffer) == [0, 1, 2, 6, 7]
    assert restored.write_count() == 5
    assert restored.buffer.extend(_rows(8, 1)).tolist() == [5]  # writes on after them
    # every write counted: the buffer as it is
    counted.add(6, 3)
    assert actor.state_dict(counted)["written"] == 8
    assert _held(actor.buffer) == list(range(8))


def test_writes_no_record_counts_are_left_out_while_the_buffer_holds_them():
    """A task whose worker died after writing is issued again: its first write is never
    counted. While the buffer holds it, a checkpoint leaves it out; once overwritten, the
    account of it is dropped."""
    actor = _actor(6, 2, 2, 2)  # writes 0-1, 2-3 (its worker died), 4-5
    counted = CountedWrites(0)
    for written, frames in ((2, 2), (6, 2)):
        counted.add(written, frames)
        counted.forget_below(written - 6)
    assert (counted.upto, counted.total) == (2, 4)
    state = actor.state_dict(counted)
    restored = ReplayBufferActor(6, 4, num_threads=None)
    restored.load_state_dict(state)
    assert _held(restored.buffer) == [0, 1, 4, 5]
    assert state["written"] == 4
    # writes 6-9 (counted) overwrite 0-3: the lost write is out of the buffer
    actor.extend(_rows(6, 4))
    counted.add(10, 4)
    counted.forget_below(10 - 6)
    assert (counted.upto, counted.total) == (10, 8)
    state = actor.state_dict(counted)
    assert state["written"] == 8
    restored = ReplayBufferActor(6, 4, num_threads=None)
    restored.load_state_dict(state)
    assert _held(restored.buffer) == [6, 7, 8, 9, 4, 5]  # as the actor holds them
    assert restored.buffer.extend(_rows(10, 1)).tolist() == [4]  # over the oldest


def test_samples_are_minibatches_of_stored_rows_and_cross_the_wire_as_fresh_memory():
    """``sample(n)`` is ``[n, batch_size]`` rows of the buffer (one uniform draw); on the
    wire (:func:`fleetrl.distributed.wire.pack_samples`) it comes back equal, keys, dtypes and batch
    size kept, in writable memory of its own."""
    actor = _actor(50, 30)
    torch.manual_seed(0)
    got = actor.sample(3)
    assert got.batch_size == (3, 4)
    stored = {int(v) for v in actor.buffer.storage.get(list(range(30)))["obs"]}
    assert {int(v) for v in got["obs"].reshape(-1)} <= stored
    wire = pack_samples(got)
    back = unpack_samples(wire)
    assert back.batch_size == got.batch_size
    assert set(back.keys(True, True)) == set(got.keys(True, True))
    for key in got.keys(True, True):
        assert back.get(key).dtype == got.get(key).dtype
        assert torch.equal(back.get(key), got.get(key))
    pairs = dict(wire[1])
    back["obs"].add_(1000)  # a loss may write into its minibatch: never into the wire's arrays
    assert int(pairs["obs"].max()) < 1000 and torch.equal(
        torch.from_numpy(pairs["obs"]), got["obs"]
    )
    torch.manual_seed(1)
    wired = unpack_samples(actor.sample_wire(2))
    torch.manual_seed(1)
    assert torch.equal(wired["obs"], actor.sample(2)["obs"])

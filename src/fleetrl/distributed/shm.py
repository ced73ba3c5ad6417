"""The shared-memory transport of central inference, between processes on one node.

A Ray actor call costs about a millisecond on a busy 2-core node, and several where a
request holds Pong frames (over Ray's 100 kB inline limit, through the object store),
while writing the same request into shared memory and waking the server over a pipe costs
tens of microseconds (``benchmarks/inference_server.py``). So a worker on the server's node
talks to it through shared memory; a worker on another node, through Ray calls.

A **channel** is one env group of one worker (:class:`ShmChannel`): a shared-memory segment
the worker creates, holding the group's request (its step input: observation, states), the
answer (every output of the policy) and a header (version, answer time), and a named pipe
(FIFO) the server writes one byte to when the answer is there. The layouts are learned from
the group's first request, which goes through a Ray call; the channel is then registered
with the server (one Ray call) and every later request is: write the input into the
segment, write the channel's id (4 bytes, atomic) into the server's request FIFO, wait for
the byte. Once both sides have them open, the segment's and the FIFO's names are removed,
so a killed worker or server leaves no channel behind. The server's request FIFO keeps its
name while the server lives (workers that start later open it); the server removes it when
it closes, which :meth:`~fleetrl.collectors.inference.InferenceServers.shutdown` asks before
it ends the actor. The server (:class:`ShmEndpoint`) reads request ids in a thread and
answers each through the same batching as Ray calls
(:class:`~fleetrl.collectors.inference.InferenceServer`). A worker registers a group's
channel anew only once its old one is closed (the worker was replaced, or its server
restarted); the server then drops the old one, so it holds one mapping and one descriptor
per live channel.

Only one request per channel is in flight, so the segment needs no lock: the worker writes
the input only after it took the previous answer, and the server writes the answer only
after it read the input.

**Faults.** A server that died and was restarted by Ray has a new token and knows no
channel. A worker waiting for an answer checks the server's token every second; on a new
one (or a broken request pipe) it drops its channels and sends the request again as a Ray
call, which Ray delivers to the restarted server. Its next request registers anew.
"""

from __future__ import annotations

import contextlib
import os
import select
import struct
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from fleetrl.keys import NestedKey

__all__ = ["TRANSPORTS", "Layout", "ShmChannel", "ShmEndpoint"]

#: ``inference_transport=``: shared memory on the server's node and Ray calls across nodes
#: (``auto``), or Ray calls only (``ray``)
TRANSPORTS = ("auto", "ray")
#: how often a worker waiting for an answer checks that its server is the same incarnation
CHECK_EVERY_S = 1.0
_HEADER = 16  # version (int64), answered_at (float64)

#: (key, per-row shape, numpy dtype string) per array of a request or an answer
Layout = list[tuple[NestedKey, tuple[int, ...], str]]


def _attach(name: str) -> shared_memory.SharedMemory:
    """Open a segment another process owns, without this process's resource tracker
    unlinking it at exit (Python < 3.13 registers every attached segment)."""
    shm = shared_memory.SharedMemory(name=name)
    with contextlib.suppress(Exception):
        from multiprocessing import resource_tracker

        # the tracker knows a POSIX segment by its name with the leading slash
        resource_tracker.unregister(f"/{shm.name}", "shared_memory")
    return shm


def _views(buf: Any, layout: Layout, rows: int, offset: int) -> tuple[list[np.ndarray], int]:
    """Arrays of ``rows`` rows laid out one after the other in ``buf`` from ``offset``."""
    views = []
    for _, shape, dtype in layout:
        dt = np.dtype(dtype)
        count = rows * int(np.prod(shape, dtype=np.int64))
        views.append(np.ndarray((rows, *shape), dtype=dt, buffer=buf, offset=offset))
        offset += count * dt.itemsize
        offset += -offset % 8  # keep every array 8-byte aligned
    return views, offset


def _size(layout: Layout, rows: int) -> int:
    total = 0
    for _, shape, dtype in layout:
        total += rows * int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        total += -total % 8
    return total


def layout_of(arrays: list[tuple[NestedKey, np.ndarray]]) -> Layout:
    return [(key, tuple(a.shape[1:]), a.dtype.str) for key, a in arrays]


# ---------------------------------------------------------------------- server side
class _Registered:
    """A channel as the server sees it."""

    def __init__(self, shm_name: str, inputs: Layout, outputs: Layout, rows: int, fifo: str):
        self.shm = _attach(shm_name)
        self.inputs, self.outputs, self.rows = inputs, outputs, rows
        self.header = np.ndarray((2,), dtype=np.float64, buffer=self.shm.buf)
        self.in_views, end = _views(self.shm.buf, inputs, rows, _HEADER)
        self.out_views, _ = _views(self.shm.buf, outputs, rows, end)
        self.fd = os.open(fifo, os.O_WRONLY)  # its reader is open already

    def request(self) -> list[tuple[NestedKey, np.ndarray]]:
        return [(key, view) for (key, _, _), view in zip(self.inputs, self.in_views)]

    def answer(self, outputs: list[tuple[NestedKey, np.ndarray]], version: int, at: float) -> None:
        for view, (_, array) in zip(self.out_views, outputs, strict=True):
            view[...] = array
        self.header[0], self.header[1] = float(version), at
        os.write(self.fd, b"1")

    def orphaned(self) -> bool:
        """Whether the worker closed its end of the answer pipe (closed the channel, or died):
        Linux reports a pipe's write end with no reader left as an error to poll."""
        if self.header is None:
            return True
        poll = select.poll()
        poll.register(self.fd, select.POLLOUT)
        return any(event & (select.POLLERR | select.POLLHUP) for _, event in poll.poll(0))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.header = None  # type: ignore[assignment]
        self.in_views = self.out_views = []
        with contextlib.suppress(Exception):
            self.shm.close()


class ShmEndpoint:
    """The server's side: a request FIFO read by a thread, and the channels registered.

    Args:
        serve: answers one request (the server's batching); returns ``(outputs, version,
            answered_at)`` as a Ray call's answer.
        threads: requests served at once (each waits in the batching).
    """

    def __init__(self, serve: Callable[[Any], tuple[Any, int, float]], threads: int):
        self.serve = serve
        self.dir = tempfile.mkdtemp(prefix="fleetrl-inference-")
        self.path = os.path.join(self.dir, "requests")
        os.mkfifo(self.path)
        # read and write: reads block while no worker writes, and never see end-of-file
        self.fd = os.open(self.path, os.O_RDWR)
        #: the registered channels by id
        self.channels: dict[int, _Registered] = {}
        self._next_id = 0
        #: requests answered through shared memory
        self.requests = 0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="shm-request")
        self._reader = threading.Thread(target=self._read, name="shm-requests", daemon=True)
        self._reader.start()

    def register(self, shm_name: str, inputs: Layout, outputs: Layout, rows: int, fifo: str) -> int:
        """Open a worker's channel; returns its id. The channels whose worker closed its end
        are dropped first: a worker registers anew only once its old channel is closed (it
        was replaced, or it saw this server restart), so a long run keeps one mapping and
        one descriptor per live channel, not one per channel ever registered."""
        channel = _Registered(shm_name, inputs, outputs, rows, fifo)
        with self._lock:
            for index in [i for i, c in self.channels.items() if c.orphaned()]:
                self.channels.pop(index).close()
            # ids are never reused: a request a dead worker left in the FIFO names no channel
            index, self._next_id = self._next_id, self._next_id + 1
            self.channels[index] = channel
            return index

    def _read(self) -> None:
        pending = b""
        while True:
            try:
                data = os.read(self.fd, 4096)
            except OSError:  # closed: the server shuts down
                return
            pending += data
            whole = len(pending) - len(pending) % 4
            for (index,) in struct.iter_unpack("i", pending[:whole]):
                self._pool.submit(self._answer, index)
            pending = pending[whole:]

    def _answer(self, index: int) -> None:
        channel = self.channels.get(index)
        if channel is None:  # dropped: its worker is gone
            return
        try:
            outputs, version, at = self.serve(channel.request())
            with self._lock:  # counted before the worker holds its answer (and reads stats)
                self.requests += 1
            channel.answer(outputs, version, at)
        except Exception:  # the worker sees no answer, finds the server alive, and waits;
            # a policy that raises is raised again by the Ray call the worker then makes
            channel.header[1] = -1.0
            with contextlib.suppress(OSError):
                os.write(channel.fd, b"1")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for channel in self.channels.values():
                channel.close()
            self.channels.clear()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(self.dir)


# ---------------------------------------------------------------------- worker side
class ShmChannel:
    """One env group's channel to its server (see the module docstring).

    Args:
        endpoint: the server's request FIFO path.
        inputs: the request's arrays (their layout), ``outputs`` the answer's.
        rows: the group's envs.
        register: registers the channel with the server, returns its id (a Ray call).
    """

    def __init__(
        self,
        endpoint: str,
        inputs: list[tuple[NestedKey, np.ndarray]],
        outputs: list[tuple[NestedKey, np.ndarray]],
        rows: int,
        register: Callable[..., int],
    ):
        in_layout, out_layout = layout_of(inputs), layout_of(outputs)
        size = _HEADER + _size(in_layout, rows) + _size(out_layout, rows)
        self.shm = shared_memory.SharedMemory(create=True, size=size)
        self.dir = tempfile.mkdtemp(prefix="fleetrl-answers-")
        self.fifo = os.path.join(self.dir, "answers")
        self.fd = -1
        self.req_fd = -1
        try:
            os.mkfifo(self.fifo)
            self.fd = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
            self.header = np.ndarray((2,), dtype=np.float64, buffer=self.shm.buf)
            self.in_views, end = _views(self.shm.buf, in_layout, rows, _HEADER)
            self.out_views, _ = _views(self.shm.buf, out_layout, rows, end)
            self.out_keys = [key for key, _, _ in out_layout]
            self.id = register(self.shm.name, in_layout, out_layout, rows, self.fifo)
            self.req_fd = os.open(endpoint, os.O_WRONLY | os.O_NONBLOCK)
        except BaseException:
            self.close()
            raise
        finally:
            self._unlink()  # both sides hold them open now: nothing is left if either is killed

    def send(self, inputs: list[tuple[NestedKey, np.ndarray]]) -> None:
        """Write a request and wake the server (OSError: its pipe is broken)."""
        for view, (_, array) in zip(self.in_views, inputs):
            view[...] = array
        os.write(self.req_fd, struct.pack("i", self.id))

    def wait(self, timeout: float) -> bool:
        """Whether the answer came within ``timeout`` seconds.

        Raises:
            ConnectionError: the server's end of the pipe closed (it died): what the
                segment holds is no answer to this request.
        """
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        if not os.read(self.fd, 16):  # end of file, not the server's byte
            raise ConnectionError("the inference server closed its end of the channel")
        return True

    def answer(self) -> tuple[list[tuple[NestedKey, np.ndarray]], int, float] | None:
        """The answer the server wrote (copies), or None where it failed to make one."""
        version, at = self.header
        if at < 0:
            return None
        outputs = [(key, view.copy()) for key, view in zip(self.out_keys, self.out_views)]
        return outputs, int(version), float(at)

    def close(self) -> None:
        for fd in (self.fd, self.req_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fd = self.req_fd = -1
        self.header = None  # type: ignore[assignment]
        self.in_views = self.out_views = []
        with contextlib.suppress(Exception):
            self.shm.close()
        self._unlink()

    def _unlink(self) -> None:
        """Remove the segment's and the FIFO's names (open mappings and descriptors stay
        valid), once: a killed worker leaves nothing behind."""
        if getattr(self, "_unlinked", False):
            return
        self._unlinked = True
        with contextlib.suppress(Exception):
            self.shm.unlink()
        with contextlib.suppress(OSError):
            os.unlink(self.fifo)
        with contextlib.suppress(OSError):
            os.rmdir(self.dir)


def new_token() -> str:
    """An incarnation's token: a restarted server has another."""
    return f"{uuid.uuid4().hex}-{time.time():.0f}"

"""How a worker's rollout reaches its inference server: :class:`ServerClient`.

Shared memory where the server runs on the worker's node (:mod:`fleetrl.distributed.shm`:
tens of microseconds a request), Ray calls across nodes or with ``transport="ray"`` (about
a millisecond). A request lost with its server (the pipe closed, or the server's token
changed: Ray restarted it) is asked again as a Ray call, which Ray delivers to the restarted
server, so every request is answered once.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import torch
from tensordict import TensorDictBase

from fleetrl.distributed.backends import Actor, Backend, WorkerDied, WorkerRaised
from fleetrl.distributed.shm import CHECK_EVERY_S, ShmChannel
from fleetrl.errors import PolicyError, WorkerError
from fleetrl.keys import NestedKey

__all__ = ["ServerClient"]


class ServerClient:
    """How a worker's rollout reaches its server: :meth:`ask` sends a group's step input,
    :meth:`take` waits for the answer. Keeps each request's latency (see :meth:`take`).

    Args:
        server: the server actor.
        transport: ``"auto"``: shared memory where the server runs on this node
            (:mod:`fleetrl.distributed.shm`), else Ray calls; ``"ray"``: Ray calls only.
    """

    def __init__(self, server: Actor, transport: str = "auto"):
        self.server = server
        self.backend: Backend = server.backend
        self.inline = server.backend.name != "ray"  # in process: answered at once
        self.transport = transport
        self.latencies: list[float] = []
        self._keys: list[NestedKey] | None = None
        #: per env group: its shared-memory channel, once open
        self._channels: dict[int, ShmChannel] = {}
        #: the server's shared-memory endpoint: None until asked, False where it is not used
        self._endpoint: dict[str, Any] | bool | None = None

    def ask(self, td: TensorDictBase, group: int = 0) -> tuple[Any, float]:
        """Send the step input of env group ``group`` (its rows); returns what :meth:`take`
        needs."""
        if self._keys is None:
            self._keys = list(td.keys(include_nested=True, leaves_only=True))
        inputs = [(key, td.get(key).numpy()) for key in self._keys]
        asked_at = time.time()
        if self.inline:
            return ("done", self._answer(lambda: self.server.ask("infer", inputs))), asked_at
        channel = self._channels.get(group)
        if channel is not None:
            try:
                channel.send(inputs)
                return ("shm", group, inputs), asked_at
            except OSError:  # the server's request pipe broke: it died
                self._drop()
        return ("ray", self.server.call("infer", inputs), group, inputs), asked_at

    def take(self, asked: tuple[Any, float], td: TensorDictBase) -> tuple[TensorDictBase, int]:
        """The step input ``td`` (the group's rows, as asked) with the policy's outputs set,
        as a local call leaves it, and the version that produced them.

        The request's latency is from :meth:`ask` to when the answer was ready here: the
        server's answer time if it came before this call, else the end of the wait.
        """
        how, asked_at = asked
        started = time.time()
        if how[0] == "done":
            answer = how[1]
        elif how[0] == "shm":
            answer = self._take_shm(how[1], how[2])
        else:
            _, ref, group, inputs = how
            answer = self._answer(lambda: self.backend.get(ref))
            if group not in self._channels and self._shm_endpoint():
                self._open(group, inputs, answer[0])
        outputs, version, answered_at = answer
        done = time.time()
        self.latencies.append((done if started < answered_at else answered_at) - asked_at)
        out = td.copy()  # shallow: the inputs the policy did not write stay what they were
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # read-only buffers: copied from, never written
            for key, array in outputs:
                out.set(key, torch.from_numpy(array))
        return out, version

    # ------------------------------------------------------------ shared memory
    def _shm_endpoint(self) -> dict[str, Any] | bool:
        """The server's endpoint where it runs on this node and shared memory is allowed."""
        if self._endpoint is None:
            if self.transport == "ray":
                self._endpoint = False
            else:
                from fleetrl.distributed.runtime import node_id

                info = self._answer(lambda: self.backend.get(self.server.call("endpoint")))
                self._endpoint = info if info["node"] == node_id() else False
        return self._endpoint

    def _open(self, group: int, inputs: Any, outputs: Any) -> None:
        endpoint = self._shm_endpoint()
        assert isinstance(endpoint, dict)

        def register(*args: Any) -> int:
            return self._answer(lambda: self.backend.get(self.server.call("register", *args)))

        try:
            self._channels[group] = ShmChannel(
                endpoint["path"], inputs, outputs, len(inputs[0][1]), register
            )
        except OSError:  # no shared memory or FIFOs here: Ray calls it is
            self._endpoint = False

    def _take_shm(self, group: int, inputs: Any) -> tuple[Any, int, float]:
        channel = self._channels.get(group)
        if channel is None:  # dropped since it was sent (its server died): ask by Ray
            return self._answer(lambda: self.backend.get(self.server.call("infer", inputs)))
        while True:
            try:
                if channel.wait(CHECK_EVERY_S):
                    break
                lost = self._server_changed()  # restarted: it knows no channel
            except OSError:  # its end of the pipe closed: it died
                lost = True
            if lost:  # ask again by Ray call, which Ray delivers to the restarted server
                self._drop()
                return self._answer(lambda: self.backend.get(self.server.call("infer", inputs)))
        answer = channel.answer()
        if answer is None:  # the server failed on it: the Ray call raises its error
            return self._answer(lambda: self.backend.get(self.server.call("infer", inputs)))
        return answer

    def _server_changed(self) -> bool:
        token = self._answer(lambda: self.backend.get(self.server.call("token")))
        endpoint = self._endpoint
        return not isinstance(endpoint, dict) or token != endpoint["token"]

    def _drop(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        self._endpoint = None  # asked again: a restarted server has a new one

    def close(self) -> None:
        """Release the shared-memory channels."""
        self._drop()

    def _answer(self, get: Any) -> Any:
        try:
            return get()
        except WorkerRaised as err:
            if isinstance(err.error, Exception):
                raise err.error from None
            raise PolicyError(f"the inference server raised:\n{err.text}") from None
        except WorkerDied as err:
            raise WorkerError(f"the inference server died: {err.cause}") from None

    def take_latencies(self) -> list[float]:
        taken, self.latencies = self.latencies, []
        return taken

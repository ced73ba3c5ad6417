r"""Central batched inference: env workers step envs, inference servers run the policy.

With ``RayCollector(..., inference="server")`` (config ``collector.inference:
server``) the policy no longer runs in each collector worker. One or more
:class:`InferenceServer` actors hold it, on ``inference_device`` (a GPU when
it is ``"cuda"``); each worker sends its observations (and the states the
policy reads: ``is_init``, recurrent states) to its server and receives the
actions, every other output of the policy (log-probs, values, the next
recurrent state) and the version of the weights that produced them. Worker
``i`` uses server ``i % num_inference_servers``.

**Batching.** A server batches the requests that are ready: once the first
is in, it waits up to ``max_wait_ms`` for more, until they hold
``max_batch`` observations (``None``: no bound), runs the policy once on the
batch and answers each request with its rows. A request is never split; a
batch holds at least one. With ``max_wait_ms=0`` (the default) nothing waits:
requests that arrive while the policy runs form the next batch, which is how
batches grow with the number of workers.

**Double buffering** (Sample Factory's). A worker steps its envs as two
groups (:class:`~fleetrl.collectors.overlap.SplitEnv`): it sends group A's
observations, then steps group B with the actions that came back for B, and
so on, so each group's env step overlaps the server's work on the other
group (:func:`fleetrl.collectors.rollout.rollout`). No request is in flight
across batches.

**Transport** (``inference_transport``). ``"auto"``: a worker on the server's node
reaches it through shared memory (:mod:`fleetrl.collectors.shm`: tens of microseconds a
request), a worker on another node through Ray actor calls (about a millisecond, numpy
arrays shipped without pickling their data); ``"ray"``: Ray calls only. The figures
behind the choice are in ``docs/guides/inference.md``.

**Weights** go to the servers only: one ``put`` per version and one load per
server (:meth:`InferenceServers.publish`, which returns once every server holds the
version, so tasks issued after a publish act with it, as with local inference), never
per worker. Each answer says the version that produced it, and the batch tags every step
with it
(``("collector", "policy_version")``), so tags stay truthful even when the
weights change in the middle of a batch.

**Faults.** Servers are Ray actors with unlimited restarts and task retries:
a killed server is restarted by Ray, starts from the newest weights on the
:class:`WeightsBoard`, and the requests it held are sent again to the restarted actor:
by Ray for Ray calls, by the worker (as a Ray call) for shared memory, once it sees the
server's end of the pipe close or its token change. A request is answered once, so no
frame is lost or counted twice; the worker only waits longer. A killed env worker is replaced as
without servers (:mod:`fleetrl.collectors.pool`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torchrl.envs.utils import ExplorationType, set_exploration_type

from fleetrl.backends import Actor, Backend, WorkerDied, WorkerRaised
from fleetrl.collectors.shm import (
    CHECK_EVERY_S,
    TRANSPORTS,
    ShmChannel,
    ShmEndpoint,
    new_token,
)
from fleetrl.errors import PolicyError, Problems, WorkerError
from fleetrl.keys import NestedKey
from fleetrl.runtime import pin_threads
from fleetrl.wire import unpack_weights

__all__ = [
    "INFERENCE_MODES",
    "InferenceServer",
    "InferenceServers",
    "ServerClient",
    "WeightsBoard",
    "check_inference",
    "check_served",
    "check_server_resources",
    "latency_summary",
    "probe_batched",
]

logger = logging.getLogger(__name__)

#: ``inference=``: the policy runs in each worker (``local``) or on inference servers
INFERENCE_MODES = ("local", "server")
NO_POLICY_MSG = (
    "inference='server' runs the policy on inference servers, and there is no policy to serve "
    "(policy=None acts at random in each worker); pass a policy, or inference='local'"
)
FACTORY_MSG = (
    "inference='server' builds the policy once per server from the policy itself; "
    "policy_factory builds it in each worker: pass policy=..., or inference='local'"
)
NOT_MODULE_MSG = (
    "inference='server' needs a policy that maps a batch of observations to a batch of "
    "actions (a TensorDictModule or nn.Module); {policy!r} is not one"
)
NEEDS_ENV_MSG = (
    "inference='server' runs the policy on batches from many envs, and {policy!r} {why}; "
    "use a policy that reads only the TensorDict it is given, or inference='local'"
)
CLASS_MSG = (
    "inference='server' is built into fleetrl's SyncDataCollector; collector_class={cls!r} "
    "runs its own policy: use collector_class=SyncDataCollector, or inference='local'"
)
LOCAL_ONLY_MSG = (
    "only takes effect with inference='local': the policy runs on the inference servers, "
    "on inference_device; {fix}"
)
CUDA_MSG = (
    "needs a GPU in the Ray cluster, and it has {gpus}; use inference_device='cpu' (or None), "
    "or start Ray on a machine with a GPU"
)
CUDA_LOCAL_MSG = "needs CUDA, which this torch build does not see; use inference_device='cpu'"
SERVERS_MSG = "must be an int in [1, num_collectors={n}]: each server serves at least one worker"
WEIGHTS_TARGET_MSG = (
    "with inference='server' the weights go to the inference servers, which serve every "
    "worker; publish to all workers (worker_ids=None)"
)
SERVER_START_MSG = (
    "inference server {index} could not start (the policy could not be sent to it, or it "
    "could not be built there); the server's error:\n{cause}"
)
#: how long :meth:`InferenceServers.shutdown` waits for its servers to close (their request
#: FIFOs removed) before it kills them
CLOSE_WAIT_S = 5.0
SERVER_WEIGHTS_MSG = (
    "this collector acts through an inference server, which holds the weights; publish them "
    "with the RayCollector (or InferenceServers.publish)"
)


# ---------------------------------------------------------------------- checks
def check_inference(
    p: Problems,
    *,
    inference: Any,
    num_inference_servers: Any,
    inference_device: Any,
    max_batch: Any,
    max_wait_ms: Any,
    num_collectors: int | None,
    policy: Any,
    policy_factory: Any,
    collector_class: Any,
    native: bool,
    devices: dict[str, Any],
    compile_policy: Any,
    cudagraph_policy: Any,
    max_weight_update_interval: Any,
    remote_config: Any = None,
    transport: Any = "auto",
) -> None:
    """Refuse inference arguments that cannot work, each naming its argument, before any actor
    starts. ``inference='local'`` with server-only arguments left at their defaults passes.
    ``native``: ``collector_class`` is fleetrl's SyncDataCollector (or a subclass)."""
    if inference not in INFERENCE_MODES:
        p.add("inference", inference, f"must be one of {list(INFERENCE_MODES)}")
        return
    n = num_collectors if isinstance(num_collectors, int) else None
    ok_servers = (
        isinstance(num_inference_servers, int)
        and not isinstance(num_inference_servers, bool)
        and num_inference_servers >= 1
        and (n is None or num_inference_servers <= n)
    )
    p.check(ok_servers, "num_inference_servers", num_inference_servers, SERVERS_MSG.format(n=n))
    ok_batch = max_batch is None or (
        isinstance(max_batch, int) and not isinstance(max_batch, bool) and max_batch >= 1
    )
    p.check(ok_batch, "inference_max_batch", max_batch, "must be an int >= 1, or None: no bound")
    ok_wait = (
        isinstance(max_wait_ms, (int, float))
        and not isinstance(max_wait_ms, bool)
        and math.isfinite(max_wait_ms)
        and max_wait_ms >= 0
    )
    p.check(ok_wait, "inference_max_wait_ms", max_wait_ms, "must be a number >= 0 (milliseconds)")
    if transport not in TRANSPORTS:
        p.add("inference_transport", transport, f"must be one of {list(TRANSPORTS)}")
    if remote_config is not None and not isinstance(remote_config, dict):
        p.add("inference_remote_config", remote_config, "must be a dict of Ray actor options")
    device = None
    if inference_device is not None:
        try:
            device = torch.device(inference_device)
        except (RuntimeError, TypeError):
            p.add(
                "inference_device",
                inference_device,
                "must be a torch device such as 'cpu' or 'cuda', or None (the CPU)",
            )
    if inference == "local":
        for key, value, default in (
            ("num_inference_servers", num_inference_servers, 1),
            ("inference_device", inference_device, None),
            ("inference_max_batch", max_batch, None),
            ("inference_max_wait_ms", max_wait_ms, 0.0),
            ("inference_remote_config", remote_config, None),
            ("inference_transport", transport, "auto"),
        ):
            if value != default and not p.has(key):
                p.add(key, value, "only takes effect with inference='server'")
        return
    if policy_factory is not None:
        p.add("policy_factory", policy_factory, FACTORY_MSG)
    elif policy is None:
        p.add("policy", None, NO_POLICY_MSG)
    else:
        why = needs_env(policy)
        if why is not None:
            p.add("inference", "server", NEEDS_ENV_MSG.format(policy=policy, why=why))
        elif not isinstance(policy, nn.Module):
            p.add("inference", "server", NOT_MODULE_MSG.format(policy=policy))
    if not native:
        p.add("collector_class", collector_class, CLASS_MSG.format(cls=collector_class))
    for key in ("device", "policy_device"):
        value = devices.get(key)
        if value is not None and not _all_cpu(value):
            p.add(key, value, LOCAL_ONLY_MSG.format(fix="set inference_device instead"))
    for key, value in (("compile_policy", compile_policy), ("cudagraph_policy", cudagraph_policy)):
        if value not in (None, False):
            p.add(key, value, LOCAL_ONLY_MSG.format(fix=f"leave {key} unset"))
    if isinstance(max_weight_update_interval, int) and max_weight_update_interval > 0:
        p.add(
            "max_weight_update_interval",
            max_weight_update_interval,
            "only takes effect with inference='local': the servers load each version as it "
            "is published; leave it at -1",
        )
    if device is not None and device.type == "cuda":
        _check_cuda(p, inference_device)


def check_served(
    p: Problems,
    policy: Any,
    policy_factory: Any,
    policy_device: Any,
    compile_policy: Any,
    cudagraph_policy: Any,
) -> None:
    """What a :class:`~fleetrl.SyncDataCollector` given an ``inference_server`` refuses."""
    if policy_factory is not None:
        p.add("policy_factory", policy_factory, FACTORY_MSG)
    elif policy is None:
        p.add("policy", None, NO_POLICY_MSG)
    if policy_device is not None and not _all_cpu(policy_device):
        p.add("policy_device", str(policy_device), LOCAL_ONLY_MSG.format(fix="leave it unset"))
    for key, value in (("compile_policy", compile_policy), ("cudagraph_policy", cudagraph_policy)):
        if value not in (None, False):
            p.add(key, value, LOCAL_ONLY_MSG.format(fix=f"leave {key} unset"))


PER_ENV_MSG = (
    "inference='server' runs the policy on batches from many envs, and {policy!r} acts on "
    "one env at a time (it is built for one env's shapes, e.g. from one env's action spec); "
    "use a policy that acts on a batch of envs, or inference='local'"
)


def probe_batched(
    policy: Any,
    create_env_fn: Any,
    num_envs: int | None,
    create_env_kwargs: dict[str, Any] | None,
    exploration_type: ExplorationType,
) -> None:
    """Refuse, before any actor starts, a policy that must be fed one env at a time (built
    for one env's shapes): a server feeds it batches from many envs. The env is built here
    once, as a worker builds it, and the policy probed on its first step; anything else
    that fails here is left to the workers, which report what they meet.

    Raises:
        PolicyError: the policy acts on one env at a time.
    """
    from fleetrl.collectors.plan import initial_states, plan_policy
    from fleetrl.envs.make import make_env
    from fleetrl.policies import PerEnvPolicy

    try:
        env = make_env(create_env_fn, num_envs, create_env_kwargs)
    except Exception:  # a package or device only the workers have
        return
    try:
        n = env.num_envs
        step = TensorDict(batch_size=[n])
        for key, value in env.reset().items():
            step.set(key, torch.as_tensor(value))
        for key, value in initial_states(policy, n).items():
            step.set(key, value)
        plan = plan_policy(policy, env, step, exploration_type)
    except Exception:
        return
    finally:
        env.close()
    if isinstance(plan.act, PerEnvPolicy):
        raise PolicyError(PER_ENV_MSG.format(policy=policy))


def _all_cpu(value: Any) -> bool:
    values = value if isinstance(value, (list, tuple)) else [value]
    try:
        return all(v is None or torch.device(v).type == "cpu" for v in values)
    except (RuntimeError, TypeError):
        return True  # a malformed device is reported by the device checks


def _check_cuda(p: Problems, inference_device: Any) -> None:
    """``inference_device='cuda'`` needs a GPU where the servers run: in the Ray cluster when
    Ray is up (a cluster that is not up yet is checked once it starts), else here."""
    from fleetrl.runtime import ray_running

    if ray_running():
        import ray

        gpus = ray.cluster_resources().get("GPU", 0)
        if gpus < 1:
            p.add("inference_device", inference_device, CUDA_MSG.format(gpus=f"{gpus:g} GPUs"))
    elif not torch.cuda.is_available():
        p.add("inference_device", inference_device, CUDA_LOCAL_MSG)


def needs_env(policy: Any) -> str | None:
    """Why ``policy`` cannot run away from its env, or None: it (or a submodule, or a function
    it closes over) holds an env object, which a server serving many workers does not have."""
    from fleetrl.envs.base import BatchedEnv

    env_types: list[type] = [BatchedEnv]
    try:
        from torchrl.envs import EnvBase

        env_types.append(EnvBase)
    except ImportError:  # pragma: no cover - torchrl is a dependency
        pass
    try:
        import gymnasium

        env_types += [gymnasium.Env, gymnasium.vector.VectorEnv]
    except ImportError:  # pragma: no cover - gymnasium is a dependency
        pass
    kinds = tuple(env_types)
    if isinstance(policy, kinds):
        return "is an env"
    seen: set[int] = set()
    objects = list(policy.modules()) if isinstance(policy, nn.Module) else [policy]
    for obj in objects:
        for name, value in _attributes(obj):
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, kinds):
                return f"holds an env object ({name}={type(value).__name__})"
    return None


def _attributes(obj: Any) -> list[tuple[str, Any]]:
    """An object's attributes, and what it (a function) or a function attribute closes over."""
    out: list[tuple[str, Any]] = list(getattr(obj, "__dict__", {}).items())
    for name, value in list(out):
        out += _closed_over(value, f"{name}.")
    if not isinstance(obj, nn.Module):
        out += _closed_over(obj, "")
    return out


def _closed_over(fn: Any, prefix: str) -> list[tuple[str, Any]]:
    """``(prefix<name>, value)`` of each variable a function closes over (none: not one)."""
    cells = getattr(fn, "__closure__", None) if callable(fn) else None
    if not cells:
        return []
    found = []
    for free, cell in zip(fn.__code__.co_freevars, cells):
        with contextlib.suppress(ValueError):  # an empty cell
            found.append((f"{prefix}<{free}>", cell.cell_contents))
    return found


# ---------------------------------------------------------------------- server
class WeightsBoard:
    """The newest weights published to the servers: what a restarted server loads first.
    The ref sits in a list so that Ray does not resolve it when it is passed around."""

    def __init__(self) -> None:
        self.publish = 0
        self.version = 0
        self.ref: list[Any] = [None]

    def post(self, publish: int, version: int, ref: list[Any]) -> None:
        if publish > self.publish:
            self.publish, self.version, self.ref = publish, version, ref

    def newest(self) -> tuple[int, int, list[Any]]:
        return self.publish, self.version, self.ref


@dataclass
class _Request:
    inputs: list[tuple[NestedKey, np.ndarray]]
    size: int
    arrived: float
    answer: Any = None
    error: BaseException | None = None


class InferenceServer:
    """An actor that holds the policy and answers batched requests (see the module docstring).

    Args:
        policy: the policy (a TensorDict -> TensorDict module).
        server_id: this server's index.
        device: where the policy runs (None: the CPU).
        max_batch: observations per policy call at most (None: no bound).
        max_wait_ms: how long the first request of a batch waits for more.
        exploration_type: set around every policy call, as in the workers.
        num_threads: torch threads in this process (None: torch's default).
        board: a :class:`WeightsBoard` actor to load the newest weights from at start
            (a restarted server), or None.
        concurrent: requests arrive from several threads (a Ray actor); in process, False:
            each request is served at once, as its own batch.
        clients: the env workers it serves (two requests in flight each at most).
    """

    def __init__(
        self,
        policy: Any,
        server_id: int = 0,
        *,
        device: Any = None,
        max_batch: int | None = None,
        max_wait_ms: float = 0.0,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        num_threads: int | None = 1,
        board: Actor | None = None,
        concurrent: bool = True,
        clients: int = 1,
    ):
        pin_threads(num_threads)
        self.server_id = server_id
        self.device = torch.device(device if device is not None else "cpu")
        self.policy = policy.to(self.device) if isinstance(policy, nn.Module) else policy
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000.0 if concurrent else 0.0
        self.exploration_type = exploration_type
        self.publish = 0
        self.version = 0
        self._cond = threading.Condition()
        self._weights_lock = threading.Lock()  # a load never lands in the middle of a batch
        self._queue: list[_Request] = []
        self._leading = False
        self._in_keys: set[NestedKey] | None = None
        self.counts = {"requests": 0, "batches": 0, "observations": 0, "compute_s": 0.0}
        self.restarted = _reconstructed()
        self._token = new_token()
        self._clients = clients
        self._endpoint: ShmEndpoint | None = None  # made on the first worker's ask
        self._endpoint_lock = threading.Lock()
        if board is not None:
            publish, version, (ref,) = board.ask("newest")
            if ref is not None:
                self.load_weights(board.backend.get(ref), version, publish)

    # --------------------------------------------------------------- weights
    def load_weights(self, wire: Any, version: int, publish: int) -> None:
        """Load a published version (older publishes, which may arrive late, are skipped)."""
        if publish <= self.publish:
            return
        weights = unpack_weights(wire).to(self.device)
        with self._weights_lock, torch.no_grad():
            TensorDict.from_module(self.policy).update_(weights)
            self.publish, self.version = publish, int(version)

    # --------------------------------------------------------------- requests
    def infer(self, inputs: list[tuple[NestedKey, np.ndarray]]) -> tuple[Any, int, float]:
        """Answer one request: ``(outputs, version, answered_at)``, outputs as ``(key, array)``
        pairs of the rows asked for, ``answered_at`` the wall-clock time they were ready."""
        return self._serve(inputs)

    def token(self) -> str:
        """This incarnation's token (a server restarted by Ray has a new one)."""
        return self._token

    def endpoint(self) -> dict[str, Any]:
        """Where workers on this node reach the server through shared memory
        (:mod:`fleetrl.collectors.shm`): its node, request FIFO and token."""
        from fleetrl.runtime import node_id

        with self._endpoint_lock:
            if self._endpoint is None:
                self._endpoint = ShmEndpoint(self._serve, self._clients)
        return {"node": node_id(), "path": self._endpoint.path, "token": self._token}

    def register(self, shm_name: str, inputs: Any, outputs: Any, rows: int, fifo: str) -> int:
        """A worker's shared-memory channel for one env group; returns its id."""
        self.endpoint()
        return self._endpoint.register(shm_name, inputs, outputs, rows, fifo)  # type: ignore[union-attr]

    def close(self) -> dict[str, Any]:
        """Release the shared-memory endpoint (its request FIFO and directory, the channels'
        mappings); returns this server's node and process id."""
        from fleetrl.runtime import node_id

        with self._endpoint_lock:
            if self._endpoint is not None:
                self._endpoint.close()
                self._endpoint = None
        return {"node": node_id(), "pid": os.getpid()}

    def _serve(self, inputs: list[tuple[NestedKey, np.ndarray]]) -> tuple[Any, int, float]:
        request = _Request(inputs, len(inputs[0][1]), time.perf_counter())
        with self._cond:
            self._queue.append(request)
            self._cond.notify_all()
            while request.answer is None and request.error is None:
                if self._leading:
                    self._cond.wait()
                    continue
                self._leading = True
                try:
                    self._lead()
                finally:
                    self._leading = False
                    self._cond.notify_all()
        if request.error is not None:
            raise request.error
        return request.answer

    def _queued(self) -> int:
        return sum(r.size for r in self._queue)

    def _lead(self) -> None:
        """Form a batch from the queue (waiting up to ``max_wait_ms`` for it to fill), run it
        without the lock, and answer its requests. Called holding the lock."""
        bound = math.inf if self.max_batch is None else self.max_batch
        deadline = self._queue[0].arrived + self.max_wait_s
        while self._queued() < bound and (left := deadline - time.perf_counter()) > 0:
            self._cond.wait(left)
        batch, size = [], 0
        while self._queue and (not batch or size + self._queue[0].size <= bound):
            request = self._queue.pop(0)
            batch.append(request)
            size += request.size
        self._cond.release()
        try:
            self._run(batch)
        finally:
            self._cond.acquire()

    def _run(self, batch: list[_Request]) -> None:
        started = time.perf_counter()
        try:
            keys = [key for key, _ in batch[0].inputs]
            td = TensorDict(batch_size=[sum(r.size for r in batch)])
            for i, key in enumerate(keys):
                td.set(key, torch.from_numpy(np.concatenate([r.inputs[i][1] for r in batch])))
            if self.device.type != "cpu":
                td = td.to(self.device, non_blocking=True)
            given = {key: td.get(key) for key in keys}  # what the policy did not write
            with (
                self._weights_lock,
                torch.inference_mode(),
                set_exploration_type(self.exploration_type),
            ):
                out = self.policy(td)
                version = self.version
            outputs = [
                (key, value.cpu().numpy())
                for key, value in out.items(include_nested=True, leaves_only=True)
                if given.get(key) is not value
            ]
        except Exception as err:
            for request in batch:
                request.error = err
            return
        answered_at = time.time()
        start = 0
        for request in batch:
            rows = slice(start, start + request.size)
            start += request.size
            request.answer = ([(k, v[rows]) for k, v in outputs], version, answered_at)
        c = self.counts
        c["requests"] += len(batch)
        c["batches"] += 1
        c["observations"] += start
        c["compute_s"] += time.perf_counter() - started

    def stats(self) -> dict[str, Any]:
        """Requests, batches, observations served and seconds computing, since this server
        (or its last restart) started; its version and device; the requests that came
        through shared memory (``shm_requests``; the others came as Ray calls)."""
        c = self.counts
        return {
            **c,
            "mean_batch": c["observations"] / c["batches"] if c["batches"] else 0.0,
            "version": self.version,
            "device": str(self.device),
            "restarted": self.restarted,
            "shm_requests": 0 if self._endpoint is None else self._endpoint.requests,
        }

    def ping(self) -> int:
        return self.server_id

    def pid(self) -> int:
        """This server's process id (fault-injection tests kill it)."""
        import os

        return os.getpid()


def _reconstructed() -> bool:
    """Whether this is a Ray actor restarted after a death."""
    from fleetrl.runtime import ray_running

    if not ray_running():
        return False
    import ray

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Ray's own deprecation notice inside the property
            return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # outside an actor
        return False


# ---------------------------------------------------------------------- client
class ServerClient:
    """How a worker's rollout reaches its server: :meth:`ask` sends a group's step input,
    :meth:`take` waits for the answer. Keeps each request's latency (see :meth:`take`).

    Args:
        server: the server actor.
        transport: ``"auto"``: shared memory where the server runs on this node
            (:mod:`fleetrl.collectors.shm`), else Ray calls; ``"ray"``: Ray calls only.
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
                from fleetrl.runtime import node_id

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


# ---------------------------------------------------------------------- group
class InferenceServers:
    """The driver's servers: started with the policy, given each published version, asked
    for their statistics.

    Args:
        backend: where they run (:mod:`fleetrl.backends`).
        policy_ref: the policy, stored once with the backend.
        count: how many servers.
        device, max_batch, max_wait_ms, exploration_type, num_threads: as
            :class:`InferenceServer` takes them.
        clients: workers per server (each has two requests in flight at most).
        remote_config: Ray actor options per server (:func:`server_options`).
        transport: how the workers reach the servers (``"auto"`` or ``"ray"``).
    """

    def __init__(
        self,
        backend: Backend,
        policy_ref: Any,
        *,
        count: int,
        device: Any,
        max_batch: int | None,
        max_wait_ms: float,
        exploration_type: ExplorationType,
        num_threads: int | None,
        clients: int,
        remote_config: dict[str, Any] | None = None,
        transport: str = "auto",
    ):
        self.backend = backend
        self.device = device
        #: how the workers reach the servers (:data:`~fleetrl.collectors.shm.TRANSPORTS`)
        self.transport = transport
        self.board: Actor = backend.start(WeightsBoard, options={"num_cpus": 0})
        self.servers: list[Actor] = []
        options = server_options(device, count, remote_config)
        options.update(
            max_restarts=-1,  # a killed server comes back, and Ray sends its requests again
            max_task_retries=-1,
            max_concurrency=2 * clients + 8,  # every request a thread, and room for loads
        )
        self._options = options
        self._publish = 0
        try:
            for i in range(count):
                self.servers.append(
                    backend.start(
                        InferenceServer,
                        policy_ref,
                        i,
                        device=device,
                        max_batch=max_batch,
                        max_wait_ms=max_wait_ms,
                        exploration_type=exploration_type,
                        num_threads=num_threads,
                        board=self.board,
                        concurrent=backend.name == "ray",
                        clients=2 * clients,
                        options=options,
                    )
                )
            for i, ref in enumerate([s.call("ping") for s in self.servers]):
                try:  # up before any worker
                    backend.get(ref)
                except (WorkerDied, WorkerRaised) as err:
                    text = err.cause if isinstance(err, WorkerDied) else err.text
                    raise WorkerError(SERVER_START_MSG.format(index=i, cause=text)) from None
        except BaseException:
            self.shutdown()
            raise

    def for_worker(self, worker_id: int) -> Actor:
        return self.servers[worker_id % len(self.servers)]

    def publish(self, ref: Any, version: int) -> None:
        """Give every server a stored version (its ref from :class:`WeightStore`): posted on the
        board first, so a server restarting meanwhile starts from it; returns once every
        server holds it, so that every task issued after a publish acts with it (with local
        inference the weights travel with the next task: the same guarantee)."""
        self._publish += 1
        self.board.fire("post", self._publish, version, [ref])
        loads = [s.call("load_weights", ref, version, self._publish) for s in self.servers]
        for load in loads:
            with contextlib.suppress(WorkerDied):  # gone for good: nothing to serve with it
                self.backend.get(load)

    def stats(self, timeout: float | None = 10.0) -> list[dict[str, Any]]:
        refs = [s.call("stats") for s in self.servers]
        ready, _ = self.backend.wait(refs, num_returns=len(refs), timeout=timeout)
        out = []
        for i, ref in enumerate(refs):
            if ref in ready:
                try:
                    out.append({"server": i, **self.backend.get(ref)})
                    continue
                except (WorkerDied, WorkerRaised):
                    pass
            out.append({"server": i, "unavailable": True})
        return out

    def shutdown(self) -> None:
        """End the servers and the board; returns once the servers' resources are free.

        Each server closes first (within :data:`CLOSE_WAIT_S`): a killed server would leave
        its request FIFO's directory behind. Then they end through
        :meth:`~fleetrl.backends.Backend.kill_all`, which on Ray waits until the cluster has
        their CPUs (and GPU shares) back, so a collector started right after finds them free.
        """
        servers, self.servers = self.servers, []
        closes = [s.call("close") for s in servers]
        ready, _ = self.backend.wait(closes, num_returns=len(closes), timeout=CLOSE_WAIT_S)
        for ref in ready:
            with contextlib.suppress(WorkerDied, WorkerRaised):  # gone already
                self.backend.get(ref)
        self.backend.kill_all([*servers, self.board])


def server_options(device: Any, count: int, given: dict[str, Any] | None = None) -> dict[str, Any]:
    """Ray options of a server: ``given`` (``inference_remote_config``) over the defaults, one
    CPU, and on CUDA an equal share of one GPU."""
    options: dict[str, Any] = {"num_cpus": 1}
    if device is not None and torch.device(device).type == "cuda":
        options["num_gpus"] = 1.0 / count
    options.update(given or {})
    return options


def check_server_resources(
    inference_device: Any,
    count: int,
    server_config: dict[str, Any],
    collector_configs: list[dict[str, Any]],
) -> None:
    """Once Ray is up, before any actor starts: ``inference_device='cuda'`` needs a GPU in
    its cluster, and the servers' requests (``inference_remote_config``) must fit beside the
    collectors' (a request that never fits would leave an actor waiting forever)."""
    from fleetrl.runtime import resource_shortfalls

    p = Problems()
    if inference_device is not None and torch.device(inference_device).type == "cuda":
        _check_cuda(p, inference_device)
        p.raise_if_any()
    collectors = [_wants(c) for c in collector_configs]
    if resource_shortfalls(collectors):
        return  # the collectors' own check says what they ask too much of
    for short in resource_shortfalls(collectors + [_wants(server_config)] * count):
        p.add(
            "inference_remote_config",
            server_config,
            SERVER_RESOURCES_MSG.format(
                count=count,
                asked=short.asked,
                name=short.resource,
                have=short.have,
                alone=sum(c.get(short.resource, 0) for c in collectors),
            ),
        )
        break
    p.raise_if_any()


SERVER_RESOURCES_MSG = (
    "the collectors ({alone:g} {name}) and {count} inference server(s) together ask {asked:g} "
    "{name}, and the Ray cluster has {have:g}; ask less per server (e.g. "
    "inference_remote_config={{'num_cpus': 0}}: the servers then share the collectors' "
    "cores), or fewer collectors or servers"
)


def _wants(config: dict[str, Any]) -> dict[str, float]:
    wants = {"CPU": config.get("num_cpus", 1), "GPU": config.get("num_gpus", 0) or 0}
    wants.update(config.get("resources") or {})
    return wants


def latency_summary(latencies: Sequence[float]) -> dict[str, Any]:
    """Median and 95th percentile of request latencies, in milliseconds."""
    if not latencies:
        return {"count": 0, "median_ms": math.nan, "p95_ms": math.nan}
    arr = np.asarray(latencies, dtype=np.float64) * 1000.0
    return {
        "count": len(arr),
        "median_ms": float(np.median(arr)),
        "p95_ms": float(np.percentile(arr, 95)),
    }

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
groups (:class:`~fleetrl.collectors.local.overlap.SplitEnv`): it sends group A's
observations, then steps group B with the actions that came back for B, and
so on, so each group's env step overlaps the server's work on the other
group (:func:`fleetrl.collectors.local.rollout.rollout`). No request is in flight
across batches.

**Transport** (``inference_transport``). ``"auto"``: a worker on the server's node
reaches it through shared memory (:mod:`fleetrl.distributed.shm`: tens of microseconds a
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

**Options.** :class:`InferenceOptions` holds them as one object
(``RayCollector(inference=InferenceOptions("server", num_servers=2))``), the same values as
``RayCollector``'s separate keywords; their rules are written once
(:mod:`~fleetrl.collectors.inference.options`) and said to a caller in its arguments or to a
config's author in its keys.

**Faults.** Servers are Ray actors with unlimited restarts and task retries:
a killed server is restarted by Ray, starts from the newest weights on the
:class:`WeightsBoard`, and the requests it held are sent again to the restarted actor:
by Ray for Ray calls, by the worker (as a Ray call) for shared memory, once it sees the
server's end of the pipe close or its token change. A request is answered once, so no
frame is lost or counted twice; the worker only waits longer. A killed env worker is replaced as
without servers (:mod:`fleetrl.collectors.remote.pool`).

The modules: :mod:`~fleetrl.collectors.inference.options` (the options and their rules),
:mod:`~fleetrl.collectors.inference.checks` (what is refused before anything starts),
:mod:`~fleetrl.collectors.inference.server` (the server actor),
:mod:`~fleetrl.collectors.inference.client` (a worker's end) and
:mod:`~fleetrl.collectors.inference.servers` (the driver's servers). Their names are imported
from here when first used (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetrl._lazy import lazy_exports

_EXPORTS = {
    "CLASS_MSG": "fleetrl.collectors.inference.checks",
    "CLOSE_WAIT_S": "fleetrl.collectors.inference.servers",
    "FACTORY_MSG": "fleetrl.collectors.inference.checks",
    "FIELDS": "fleetrl.collectors.inference.options",
    "INFERENCE_ARGUMENTS": "fleetrl.collectors.inference.options",
    "INFERENCE_CONFIG_KEYS": "fleetrl.collectors.inference.options",
    "INFERENCE_MODES": "fleetrl.collectors.inference.options",
    "InferenceMode": "fleetrl.collectors.inference.options",
    "InferenceOptions": "fleetrl.collectors.inference.options",
    "InferenceServer": "fleetrl.collectors.inference.server",
    "InferenceServers": "fleetrl.collectors.inference.servers",
    "LOCAL_ONLY_MSG": "fleetrl.collectors.inference.checks",
    "NEEDS_ENV_MSG": "fleetrl.collectors.inference.checks",
    "NOT_MODULE_MSG": "fleetrl.collectors.inference.checks",
    "NO_POLICY_MSG": "fleetrl.collectors.inference.checks",
    "OptionField": "fleetrl.collectors.inference.options",
    "PER_ENV_MSG": "fleetrl.collectors.inference.checks",
    "SERVER_RESOURCES_MSG": "fleetrl.collectors.inference.checks",
    "SERVER_START_MSG": "fleetrl.collectors.inference.servers",
    "SERVER_WEIGHTS_MSG": "fleetrl.collectors.inference.checks",
    "ServerClient": "fleetrl.collectors.inference.client",
    "WEIGHTS_TARGET_MSG": "fleetrl.collectors.inference.checks",
    "WeightsBoard": "fleetrl.collectors.inference.server",
    "check_cuda": "fleetrl.collectors.inference.options",
    "check_inference": "fleetrl.collectors.inference.checks",
    "check_options": "fleetrl.collectors.inference.options",
    "check_served": "fleetrl.collectors.inference.checks",
    "check_server_resources": "fleetrl.collectors.inference.checks",
    "config_problems": "fleetrl.collectors.inference.options",
    "given_options": "fleetrl.collectors.inference.options",
    "latency_summary": "fleetrl.collectors.inference.servers",
    "needs_env": "fleetrl.collectors.inference.checks",
    "probe_batched": "fleetrl.collectors.inference.checks",
    "server_options": "fleetrl.collectors.inference.options",
}

__all__ = [
    "CLASS_MSG",
    "CLOSE_WAIT_S",
    "FACTORY_MSG",
    "FIELDS",
    "INFERENCE_ARGUMENTS",
    "INFERENCE_CONFIG_KEYS",
    "INFERENCE_MODES",
    "LOCAL_ONLY_MSG",
    "NEEDS_ENV_MSG",
    "NOT_MODULE_MSG",
    "NO_POLICY_MSG",
    "PER_ENV_MSG",
    "SERVER_RESOURCES_MSG",
    "SERVER_START_MSG",
    "SERVER_WEIGHTS_MSG",
    "WEIGHTS_TARGET_MSG",
    "InferenceMode",
    "InferenceOptions",
    "InferenceServer",
    "InferenceServers",
    "OptionField",
    "ServerClient",
    "WeightsBoard",
    "check_cuda",
    "check_inference",
    "check_options",
    "check_served",
    "check_server_resources",
    "config_problems",
    "given_options",
    "latency_summary",
    "needs_env",
    "probe_batched",
    "server_options",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:
    from fleetrl.collectors.inference.checks import (
        CLASS_MSG,
        FACTORY_MSG,
        LOCAL_ONLY_MSG,
        NEEDS_ENV_MSG,
        NO_POLICY_MSG,
        NOT_MODULE_MSG,
        PER_ENV_MSG,
        SERVER_RESOURCES_MSG,
        SERVER_WEIGHTS_MSG,
        WEIGHTS_TARGET_MSG,
        check_inference,
        check_served,
        check_server_resources,
        needs_env,
        probe_batched,
    )
    from fleetrl.collectors.inference.client import ServerClient
    from fleetrl.collectors.inference.options import (
        FIELDS,
        INFERENCE_ARGUMENTS,
        INFERENCE_CONFIG_KEYS,
        INFERENCE_MODES,
        InferenceMode,
        InferenceOptions,
        OptionField,
        check_cuda,
        check_options,
        config_problems,
        given_options,
        server_options,
    )
    from fleetrl.collectors.inference.server import InferenceServer, WeightsBoard
    from fleetrl.collectors.inference.servers import (
        CLOSE_WAIT_S,
        SERVER_START_MSG,
        InferenceServers,
        latency_summary,
    )

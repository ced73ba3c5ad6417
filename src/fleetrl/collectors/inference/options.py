"""Central inference's options as one object, and their rules, said to a caller or a config.

:class:`InferenceOptions` holds what ``RayCollector(inference=...)`` takes;
:data:`FIELDS` names each field's ``RayCollector`` keyword and config key once,
so the front door, the config builder and the config checks read one list
(:data:`INFERENCE_ARGUMENTS`, :data:`INFERENCE_CONFIG_KEYS`). Each rule is one
:class:`~fleetrl.collectors.rules.Rule`, said in its reader's words
(:func:`~fleetrl.collectors.rules.phrase`): a caller's arguments, or a config's
``collector`` keys (:meth:`InferenceOptions.from_config`, :func:`config_problems`).

An :class:`InferenceOptions` checks its own values when it is made, once: what holds
one holds valid options. The rules that tie the options to the rest of a run (servers per
collector, a GPU for ``device="cuda"``) are checked by :meth:`InferenceOptions.check_context`
where the run's collectors and cluster are known, once per context.

Examples:
    >>> options = InferenceOptions("server", num_servers=2, max_wait_ms=0.5)
    >>> options.served, options.arguments()["inference_max_wait_ms"]
    (True, 0.5)
    >>> try:
    ...     InferenceOptions("server", max_batch=0)
    ... except ConfigError as err:
    ...     print(err)
    inference_max_batch=0 is invalid: must be an int >= 1, or None: no bound
    >>> p = Problems()
    >>> check_options(p, InferenceOptions("server", num_servers=3), num_collectors=2)
    >>> [str(x) for x in p]  # doctest: +NORMALIZE_WHITESPACE
    ['num_inference_servers=3 is invalid: must be <= num_collectors=2: each server serves at
    least one collector']
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetrl.collectors.rules import (
    Audience,
    Rule,
    named,
    number_at_least,
    optional,
    phrase,
    whole_at_least,
)
from fleetrl.config import CollectorConfig
from fleetrl.distributed.shm import TRANSPORTS
from fleetrl.errors import ConfigError, Problem, Problems

__all__ = [
    "DEVICE",
    "FIELDS",
    "INFERENCE_ARGUMENTS",
    "INFERENCE_CONFIG_KEYS",
    "INFERENCE_MODES",
    "MAX_BATCH",
    "MAX_WAIT_MS",
    "MODE",
    "NUM_SERVERS",
    "REMOTE_CONFIG",
    "SERVER_CPUS",
    "TRANSPORT",
    "InferenceMode",
    "InferenceOptions",
    "OptionField",
    "check_cuda",
    "check_options",
    "config_problems",
    "given_options",
    "server_options",
]


class InferenceMode(str, enum.Enum):
    """Where the policy runs: in each collector worker, or on inference servers."""

    LOCAL = "local"
    SERVER = "server"


#: ``inference=``: the policy runs in each worker (``local``) or on inference servers
INFERENCE_MODES = tuple(m.value for m in InferenceMode)


@dataclass(frozen=True)
class InferenceOptions:
    """Central inference's options (:mod:`fleetrl.collectors.inference`), as one object.

    ``RayCollector(inference=InferenceOptions(...))`` takes it, as it takes the
    same values as separate keywords (:data:`FIELDS` pairs them). It checks its
    own values when made, naming every problem at once in its reader's words
    (:attr:`said_as`); the rules that need the rest of the run (servers per
    collector, a GPU) are :meth:`check_context`'s.

    Raises:
        ConfigError: every value out of its range at once.

    Examples:
        >>> options = InferenceOptions("server", num_servers=2, device="cuda", max_batch=256)
        >>> options.mode, options.served, options.ray_options()
        (<InferenceMode.SERVER: 'server'>, True, {'num_cpus': 1, 'num_gpus': 0.5})
        >>> RayCollector("CartPole-v1", policy, frames_per_batch=400,
        ...              num_collectors=4, inference=options)  # doctest: +SKIP
    """

    mode: InferenceMode | str = InferenceMode.LOCAL
    """``"local"`` (each worker runs its copy of the policy) or ``"server"`` (inference
    servers run it on batched requests from the workers, which only step envs)."""
    num_servers: int = 1
    """servers with ``"server"`` (at most one per collector); worker i uses server
    ``i % num_servers``."""
    device: Any = None
    """where the servers run the policy (None: the CPU; ``"cuda"`` needs a GPU in the Ray
    cluster, shared by the servers)."""
    max_batch: int | None = None
    """observations per server batch at most (None: no bound)."""
    max_wait_ms: float = 0.0
    """how long a server waits for a batch to fill once its first request is in (0: requests
    that came while the policy ran form the next batch)."""
    remote_config: dict[str, Any] | None = None
    """Ray actor options of each server (default ``{"num_cpus": 1}``, plus an equal share of
    one GPU on CUDA): :meth:`ray_options`."""
    transport: str = "auto"
    """how workers reach their server: ``"auto"`` (shared memory on one node, Ray calls
    across nodes) or ``"ray"`` (Ray calls only)."""

    said_as: Audience = field(default=Audience.ARGUMENTS, compare=False, repr=False)
    """whose words a problem is said in: a caller's arguments, or a config's keys."""
    _context: tuple[Any, ...] | None = field(
        default=None, init=False, compare=False, repr=False
    )  # the last context check_context found nothing in

    def __post_init__(self) -> None:
        if self.mode in INFERENCE_MODES:  # a bad mode stays as given, for the check to name
            object.__setattr__(self, "mode", InferenceMode(self.mode))
        if isinstance(self.remote_config, dict):  # the caller's dict is never changed
            object.__setattr__(self, "remote_config", dict(self.remote_config))
        p = Problems()
        _check_own(p, self._values(), self.said_as)
        p.raise_if_any()

    def _values(self) -> dict[str, Any]:
        return {f.field: getattr(self, f.field) for f in FIELDS}

    def check_context(self, p: Problems, *, num_collectors: Any, address: Any = None) -> None:
        """Add to ``p`` the problems of these options with the rest of the run, in
        :attr:`said_as`'s words: servers need remote collectors, at most one per collector,
        and a CUDA ``device`` a GPU. ``num_collectors``: the collectors (anything but an
        int >= 0: not known yet); ``address``: the Ray cluster to attach to, if any (its
        GPUs are checked once it is up). A context found fine is not checked again: a run's
        config and its collector ask the same options the same question once."""
        context = (num_collectors, address)
        if self._context == context:
            return
        before = len(p)
        _check_context(p, self._values(), self.said_as, num_collectors, address)
        if len(p) == before:
            object.__setattr__(self, "_context", context)

    @property
    def served(self) -> bool:
        """Whether the policy runs on inference servers."""
        return self.mode is InferenceMode.SERVER

    def ray_options(self) -> dict[str, Any]:
        """Ray actor options of each server (:func:`server_options`)."""
        return server_options(self.device, self.num_servers, self.remote_config)

    def arguments(self) -> dict[str, Any]:
        """The same options as ``RayCollector``'s separate keywords; none where they are all
        the defaults (local inference)."""
        if self == InferenceOptions():
            return {}
        mode = self.mode.value if isinstance(self.mode, InferenceMode) else self.mode
        values = {**{f.field: getattr(self, f.field) for f in FIELDS}, "mode": mode}
        return {f.argument: values[f.field] for f in FIELDS}

    @classmethod
    def from_config(cls, collector: CollectorConfig) -> InferenceOptions:
        """The options a config's ``collector`` section holds (``collector.inference`` and
        the keys :data:`INFERENCE_CONFIG_KEYS` lists; the servers' CPUs,
        ``collector.num_cpus_per_inference_server``, go to :attr:`remote_config`), problems
        said in config keys. Made once per process for the same values: the config's
        verification makes them, and the run's collector takes the same object."""
        values = tuple((f.field, getattr(collector, f.key)) for f in FIELDS)
        try:
            hash(values)
        except TypeError:  # a YAML list or dict where a number goes: refused, never kept
            return _from_config.__wrapped__(values)
        return _from_config(values)


@functools.lru_cache(maxsize=32)
def _from_config(values: tuple[tuple[str, Any], ...]) -> InferenceOptions:
    """Options of a config section's values (see :meth:`InferenceOptions.from_config`); a
    refusal is not kept: the same values are refused again."""
    given = dict(values)
    cpus = given.pop("remote_config")
    served = given["mode"] == InferenceMode.SERVER
    # the servers' CPUs go with a server; a local run keeps them only to refuse them
    keep = served or cpus != _DEFAULTS[Audience.CONFIG]["remote_config"]
    return InferenceOptions(
        **given, remote_config={"num_cpus": cpus} if keep else None, said_as=Audience.CONFIG
    )


@dataclass(frozen=True)
class OptionField:
    """One of :class:`InferenceOptions`' fields, and its names elsewhere."""

    field: str
    """the field of :class:`InferenceOptions`."""
    argument: str
    """``RayCollector``'s keyword for it (and ``fleetrl.Collector``'s)."""

    @property
    def key(self) -> str:
        """Its key in a config's ``collector`` section."""
        return named(self.argument, Audience.CONFIG).removeprefix("collector.")


#: every option: its field, its RayCollector keyword and (:attr:`OptionField.key`) config key
FIELDS = (
    OptionField("mode", "inference"),
    OptionField("num_servers", "num_inference_servers"),
    OptionField("device", "inference_device"),
    OptionField("max_batch", "inference_max_batch"),
    OptionField("max_wait_ms", "inference_max_wait_ms"),
    OptionField("remote_config", "inference_remote_config"),
    OptionField("transport", "inference_transport"),
)
#: RayCollector's keywords for central inference (``inference`` first)
INFERENCE_ARGUMENTS = tuple(f.argument for f in FIELDS)
#: the ``collector`` config keys that hold them (``inference`` first)
INFERENCE_CONFIG_KEYS = tuple(f.key for f in FIELDS)
#: each field's default, for a caller (InferenceOptions') and for a config (its keys')
_DEFAULTS = {
    Audience.ARGUMENTS: {f.name: f.default for f in dataclasses.fields(InferenceOptions) if f.init},
    Audience.CONFIG: {f.field: getattr(CollectorConfig(), f.key) for f in FIELDS},
}


# ----------------------------------------------------------------------- rules
def _is_device(value: Any) -> bool:
    import torch

    try:
        torch.device(value)
    except (RuntimeError, TypeError):
        return False
    return True


MODE = Rule("inference", lambda v: v in INFERENCE_MODES, "must be 'local' or 'server'")
NUM_SERVERS = Rule("num_inference_servers", whole_at_least(1), "must be {int}>= 1")
DEVICE = Rule(
    "inference_device",
    optional(_is_device),
    "must be {None} (the CPU) or a torch device such as 'cpu' or 'cuda'",
)
MAX_BATCH = Rule(
    "inference_max_batch", optional(whole_at_least(1)), "must be {int}>= 1, or {None}: no bound"
)
MAX_WAIT_MS = Rule(
    "inference_max_wait_ms", number_at_least(0), "must be {number}>= 0 (milliseconds)"
)
TRANSPORT = Rule(
    "inference_transport",
    lambda v: v in TRANSPORTS,
    "must be " + " or ".join(repr(t) for t in TRANSPORTS),
)
REMOTE_CONFIG = Rule(
    "inference_remote_config",
    lambda v: v is None or isinstance(v, dict),
    "must be {None} or a dict of Ray actor options",
)
SERVER_CPUS = Rule(
    "inference_remote_config['num_cpus']",
    number_at_least(0),
    "must be {number}>= 0 (0: the servers share the collectors' cores)",
    key="num_cpus_per_inference_server",
)
#: each server serves at least one collector
SERVERS_PER_COLLECTOR = "must be <= {num_collectors}={n}: each server serves at least one collector"
#: a server option with local inference
LOCAL_ONLY = "only takes effect with {inference}='server'"
#: ``collector.inference: server`` with ``collector.num_collectors: 0``
REMOTE_ONLY = (
    "serves remote collectors: needs {num_collectors} >= 1 (0 collects in this process, with "
    "the learner's own policy)"
)
CUDA_HERE = (
    "needs a GPU, and CUDA is not available here; use {None} (the CPU), or {address} of a Ray "
    "cluster with a GPU"
)
CUDA_CLUSTER = (
    "needs a GPU in the Ray cluster, and it has {gpus:g} GPUs; use {None} (the CPU), or a Ray "
    "cluster with a GPU"
)
BOTH_MSG = (
    "is given twice: inference=InferenceOptions(...) holds the inference options; set "
    "InferenceOptions({field}=...) there instead"
)


def given_options(p: Problems, inference: Any, **keywords: Any) -> InferenceOptions | None:
    """The options a collector was given: ``inference=InferenceOptions(...)``, or
    ``inference="local"|"server"`` and the separate keywords (:data:`INFERENCE_ARGUMENTS`);
    their problems are added to ``p`` (None where the keywords have some).

    An options object and a separate keyword that is not its default are refused together,
    naming the field to set instead.
    """
    if not isinstance(inference, InferenceOptions):
        by_argument = {f.argument: f.field for f in FIELDS}
        try:
            return InferenceOptions(inference, **{by_argument[k]: v for k, v in keywords.items()})
        except ConfigError as err:
            p.items += err.details
            return None
    defaults = _DEFAULTS[Audience.ARGUMENTS]
    for f in FIELDS[1:]:
        value = keywords.get(f.argument, defaults[f.field])
        if value != defaults[f.field]:
            p.add(f.argument, value, BOTH_MSG.format(field=f.field))
    return inference


def check_options(
    p: Problems, options: InferenceOptions, *, num_collectors: Any, address: Any = None
) -> None:
    """The rules that tie ``options`` (valid since made) to the rest of a collector's
    arguments, said in its reader's words: :meth:`InferenceOptions.check_context`.
    ``num_collectors``: the collectors (anything but an int >= 0: not known yet);
    ``address``: the Ray cluster to attach to, if any (its GPUs are checked once it is up:
    :func:`check_cuda`)."""
    options.check_context(p, num_collectors=num_collectors, address=address)


def config_problems(collector: CollectorConfig, p: Problems | None = None) -> list[Problem]:
    """Central inference's problems in a config's ``collector`` section, in config keys: the
    options' own rules (:meth:`InferenceOptions.from_config` makes them, once), and those
    that tie them to the section (servers serve remote collectors, at most one per
    collector; a GPU). With ``p`` (a config's problems so far), they are added to it, none
    for a key that has one already; either way the new ones are returned."""
    p = Problems() if p is None else p
    before = len(p)
    try:
        options = InferenceOptions.from_config(collector)
    except ConfigError as err:
        for problem in err.details:
            if not p.has(problem.key):
                p.items.append(problem)
        return list(p)[before:]
    options.check_context(p, num_collectors=collector.fleet.min, address=collector.address)
    return list(p)[before:]


def _check_own(p: Problems, values: Mapping[str, Any], audience: Audience) -> None:
    """The options' own rules, on their values by field (a config's ``remote_config`` holds
    the servers' CPU count as ``{"num_cpus": n}``, said as the count)."""
    mode = values["mode"]
    if not MODE.check(p, mode, audience):
        return
    defaults = _DEFAULTS[audience]
    NUM_SERVERS.check(p, values["num_servers"], audience)
    MAX_BATCH.check(p, values["max_batch"], audience)
    MAX_WAIT_MS.check(p, values["max_wait_ms"], audience)
    TRANSPORT.check(p, values["transport"], audience)
    DEVICE.check(p, values["device"], audience)
    remote = values["remote_config"]
    if audience is Audience.CONFIG:
        cpus = remote["num_cpus"] if remote else defaults["remote_config"]
        values = {**values, "remote_config": cpus}
        SERVER_CPUS.check(p, cpus, audience)
    elif REMOTE_CONFIG.check(p, remote, audience) and remote and "num_cpus" in remote:
        SERVER_CPUS.check(p, remote["num_cpus"], audience)
    if mode == InferenceMode.LOCAL:
        for f in FIELDS[1:]:
            name, value = named(f.argument, audience), values[f.field]
            if value != defaults[f.field] and not p.has(name):
                p.add(name, value, phrase(LOCAL_ONLY, audience))


def _check_context(
    p: Problems, values: Mapping[str, Any], audience: Audience, num_collectors: Any, address: Any
) -> None:
    """The rules that tie valid options to the run's collectors and cluster."""
    if values["mode"] != InferenceMode.SERVER:
        return
    n = num_collectors if whole_at_least(0)(num_collectors) else None
    if n == 0 and audience is Audience.CONFIG:
        p.add(MODE.name(audience), values["mode"], phrase(REMOTE_ONLY, audience))
    elif n:
        p.check(
            values["num_servers"] <= n,
            NUM_SERVERS.name(audience),
            values["num_servers"],
            phrase(SERVERS_PER_COLLECTOR, audience, n=n),
        )
    if values["device"] is not None:
        check_cuda(p, values["device"], audience, address=address)


def check_cuda(
    p: Problems, device: Any, audience: Audience = Audience.ARGUMENTS, *, address: Any = None
) -> None:
    """A CUDA ``device`` needs a GPU where the servers run: in the Ray cluster when Ray is up,
    else here; a cluster given by ``address`` and not up yet is checked once it is."""
    import torch

    from fleetrl.distributed.runtime import ray_running

    if torch.device(device).type != "cuda" or (address is not None and not ray_running()):
        return
    name = DEVICE.name(audience)
    if ray_running():
        import ray

        gpus = ray.cluster_resources().get("GPU", 0)
        if gpus < 1:
            p.add(name, device, phrase(CUDA_CLUSTER, audience, gpus=gpus))
    elif not torch.cuda.is_available():
        p.add(name, device, phrase(CUDA_HERE, audience))


def server_options(device: Any, count: int, given: dict[str, Any] | None = None) -> dict[str, Any]:
    """Ray options of a server: ``given`` (``inference_remote_config``) over the defaults, one
    CPU, and on CUDA an equal share of one GPU."""
    import torch

    options: dict[str, Any] = {"num_cpus": 1}
    if device is not None and torch.device(device).type == "cuda":
        options["num_gpus"] = 1.0 / count
    options.update(given or {})
    return options

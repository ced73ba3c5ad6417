"""Checks of the arguments both collectors take with torchrl 0.14's meaning.

:class:`~fleetrl.collectors.SyncDataCollector` and
:class:`~fleetrl.collectors.RayCollector` take ``policy_factory``,
``trajs_per_batch``, ``compile_policy``, ``cudagraph_policy`` and
``set_truncated`` as torchrl's ``Collector`` and ``RayCollector`` do, and
``update_policy_weights_`` takes torchrl's arguments. The checks live here,
once, so that both collectors refuse the same values with the same message,
and a RayCollector refuses them before any actor starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from fleetrl.collectors.inference.checks import WEIGHTS_TARGET_MSG
from fleetrl.collectors.rollout_options import RolloutOptions
from fleetrl.envs.base import BatchedEnv
from fleetrl.envs.grouped import GroupedEnv
from fleetrl.envs.torchrl_env import TorchRLEnv
from fleetrl.errors import Problems

__all__ = [
    "BOTH_POLICIES_MSG",
    "COMPILE_MSG",
    "CUDAGRAPH_CPU_MSG",
    "CUDAGRAPH_MSG",
    "MODEL_ID_MSG",
    "POLICY_FACTORY_MSG",
    "SET_TRUNCATED_MSG",
    "TRAJS_PER_BATCH_MSG",
    "VERSION_MSG",
    "WEIGHTS_TWICE_MSG",
    "WORKER_IDS_MSG",
    "check_env",
    "check_feature_arguments",
    "check_weight_update",
    "compile_options",
]

GYM_DEVICE_MSG = "gymnasium envs run on the CPU; leave env_device=None or 'cpu'"
POLICY_FACTORY_MSG = (
    "must be None or a callable taking no argument that returns the policy (it is called "
    "where the collector runs, e.g. functools.partial(make_policy, device='cuda:0'))"
)
BOTH_POLICIES_MSG = (
    "policy and policy_factory are mutually exclusive (as in torchrl): pass the policy "
    "itself, or a factory that builds it where the collector runs, not both"
)
COMPILE_MSG = (
    "must be None, False, True (torch.compile with its defaults) or a dict of "
    "torch.compile keyword arguments such as {'mode': 'reduce-overhead'}"
)
CUDAGRAPH_MSG = (
    "must be None, False, True (tensordict's CudaGraphModule with its defaults) or a dict "
    "of CudaGraphModule keyword arguments"
)
CUDAGRAPH_CPU_MSG = (
    "CUDA graphs only run on a CUDA device, and the policy runs on {device}; pass "
    "policy_device='cuda' (or device='cuda') with a CUDA build of torch, or leave "
    "cudagraph_policy=None on the CPU (compile_policy=True speeds up a CPU policy)"
)
TRAJS_PER_BATCH_MSG = (
    "must be None (batches of frames_per_batch frames) or an int > 0: the number of whole "
    "trajectories per batch"
)
TRAJS_SPLIT_MSG = (
    "trajs_per_batch already yields whole trajectories (padded, with ('collector', 'mask')); "
    "leave split_trajs=False"
)
SET_TRUNCATED_MSG = "must be True or False"
WEIGHTS_TWICE_MSG = "pass the weights once: as the first argument, as weights= or as policy="
MODEL_ID_MSG = "{name} carries one model, the policy: leave model_id=None or use 'policy'"
WORKER_IDS_MSG = "must be a worker id or a list of worker ids, each in {ids}"
VERSION_MSG = (
    "must be None (the newest published version + 1) or an int >= the newest published "
    "version, {current}: versions never go back (a learner publishes its optimizer-step "
    "count; the same count again republishes weights changed without a step)"
)


def compile_options(value: Any) -> dict[str, Any] | None:
    """torchrl's reading of ``compile_policy``/``cudagraph_policy`` (and an algorithm's
    ``<algo>.compile``): None when off, else ``torch.compile``'s keyword arguments.

    Examples:
        >>> compile_options(True), compile_options(None), compile_options({"mode": "default"})
        ({}, None, {'mode': 'default'})
        >>> compile_options(False), compile_options({"mode": "max-autotune"})
        (None, {'mode': 'max-autotune'})
    """
    if value is None or value is False:
        return None
    return {} if value is True else dict(value)


def _is_switch(value: Any) -> bool:
    return value is None or isinstance(value, (bool, Mapping))


def check_feature_arguments(
    p: Problems,
    *,
    policy: Any,
    policy_factory: Any,
    trajs_per_batch: Any,
    split_trajs: Any,
    compile_policy: Any,
    cudagraph_policy: Any,
    set_truncated: Any,
    policy_devices: Any,
) -> None:
    """Add the problems of torchrl 0.14's collector arguments to ``p``.

    ``policy_devices``: where the policy will run, one device or a list with
    one per collector (None: not said, i.e. the CPU unless the policy module
    already lives on CUDA). ``cudagraph_policy`` needs a CUDA device in every entry.
    """
    if policy_factory is not None and not callable(policy_factory):
        p.add("policy_factory", policy_factory, POLICY_FACTORY_MSG)
    elif policy_factory is not None and policy is not None:
        p.add("policy_factory", policy_factory, BOTH_POLICIES_MSG)
    if trajs_per_batch is not None:
        ok = isinstance(trajs_per_batch, int) and not isinstance(trajs_per_batch, bool)
        p.check(ok and trajs_per_batch > 0, "trajs_per_batch", trajs_per_batch, TRAJS_PER_BATCH_MSG)
        if split_trajs:
            p.add("split_trajs", split_trajs, TRAJS_SPLIT_MSG)
    p.check(_is_switch(compile_policy), "compile_policy", compile_policy, COMPILE_MSG)
    if not _is_switch(cudagraph_policy):
        p.add("cudagraph_policy", cudagraph_policy, CUDAGRAPH_MSG)
    elif compile_options(cudagraph_policy) is not None:
        devices = policy_devices if isinstance(policy_devices, (list, tuple)) else [policy_devices]
        for device in devices:
            device = _policy_device(device, policy)
            if device.type != "cuda":
                p.add("cudagraph_policy", cudagraph_policy, CUDAGRAPH_CPU_MSG.format(device=device))
                break
    p.check(isinstance(set_truncated, bool), "set_truncated", set_truncated, SET_TRUNCATED_MSG)


def _policy_device(device: Any, policy: Any) -> torch.device:
    if device is not None:
        return torch.device(device)
    from fleetrl.networks.policies import module_device

    return module_device(policy) or torch.device("cpu")


def check_weight_update(
    policy_or_weights: Any,
    *,
    weights: Any,
    policy: Any,
    worker_ids: Any,
    model_id: Any,
    worker_range: range | list[int],
    version: Any = None,
    current_version: int = 0,
    name: str = "RayCollector",
    served: bool = False,
) -> Any:
    """Check ``update_policy_weights_``'s arguments (torchrl's names, and ``version`` against
    the newest published ``current_version``); return the one weights source.

    ``worker_range``: the worker ids ``worker_ids`` may name (a RayCollector's
    ``range(num_collectors)``; a SyncDataCollector's own ``[worker_id]``). ``served``: the
    weights go to inference servers, which serve every worker (no ``worker_ids``).
    """
    p = Problems()
    given = [v for v in (policy_or_weights, weights, policy) if v is not None]
    if len(given) > 1:
        p.add("policy_or_weights", f"<{len(given)} sources>", WEIGHTS_TWICE_MSG)
    p.check(model_id in (None, "policy"), "model_id", model_id, MODEL_ID_MSG.format(name=name))
    if worker_ids is not None:
        ids = [worker_ids] if isinstance(worker_ids, int) else worker_ids
        ok = isinstance(ids, (list, tuple)) and all(
            isinstance(i, int) and not isinstance(i, bool) and i in worker_range for i in ids
        )
        shown = (
            f"range({worker_range.stop})"
            if isinstance(worker_range, range) and worker_range.start == 0
            else str(list(worker_range))
        )
        p.check(ok, "worker_ids", worker_ids, WORKER_IDS_MSG.format(ids=shown))
        p.check(not served, "worker_ids", worker_ids, WEIGHTS_TARGET_MSG)
    if version is not None:
        ok = (
            isinstance(version, int)
            and not isinstance(version, bool)
            and version >= current_version
        )
        p.check(ok, "version", version, VERSION_MSG.format(current=current_version))
    p.raise_if_any()
    return given[0] if given else None


def check_env(
    env: BatchedEnv | GroupedEnv,
    *,
    rollout: RolloutOptions,
    env_device: torch.device | None,
) -> None:
    """Refuse batch sizes the built envs cannot split into (where their count was not known
    before: :meth:`RolloutOptions.env_problems`), and an ``env_device`` other than the CPU
    for envs that run on the CPU; a torchrl env is moved to ``env_device``."""
    p = Problems()
    p.items += rollout.env_problems(env.num_envs)
    torchrl = isinstance(env, (TorchRLEnv, GroupedEnv))
    if not torchrl and env_device not in (None, torch.device("cpu")):
        p.add("env_device", str(env_device), GYM_DEVICE_MSG)
    p.raise_if_any()
    if env_device is not None and isinstance(env, TorchRLEnv):
        env.env = env.env.to(env_device)

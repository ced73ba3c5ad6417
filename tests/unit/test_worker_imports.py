"""What a collector worker's process imports: none of torchrl's envs, data or modules.

Any of ``torchrl.envs``, ``torchrl.data`` or ``torchrl.modules`` loads all three (and
mujoco, where it is installed): 36 MB resident in each worker, 64 workers 2.3 GB. A
worker over a gymnasium env, acting at random or with a policy of tensordict's modules,
needs none of them; a torchrl policy or env brings them itself. Asked in a fresh process,
as a Ray worker starts one.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: loaded by any of torchrl's envs, data and modules packages
HEAVY = ("torchrl.envs", "torchrl.data", "torchrl.modules", "mujoco")

WORKER = """
import json, sys
import torch
from tensordict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential
from tensordict.nn import TensorDictModule
from torch import nn

from fleetrl.collectors.local.sync import SyncDataCollector
from fleetrl.collectors.remote.worker import CollectorWorker

imported = sorted(m for m in {heavy!r} if m in sys.modules)
net = TensorDictModule(nn.Linear(4, 2), in_keys=["observation"], out_keys=["logits"])
actor = ProbabilisticTensorDictSequential(
    net,
    ProbabilisticTensorDictModule(
        in_keys=["logits"], out_keys=["action"],
        distribution_class=torch.distributions.Categorical, return_log_prob=True,
    ),
)
frames = []
for policy in (None, actor):
    worker = CollectorWorker(0, 0, SyncDataCollector, {{"create_env_fn": "CartPole-v1"}}, policy, 32)
    worker.setup()
    frames.append(worker.collect(32, 0, None).frames)
    worker.shutdown()
print(json.dumps({{
    "imported": imported,
    "collected": sorted(m for m in {heavy!r} if m in sys.modules),
    "torchrl": "torchrl" in sys.modules,
    "frames": frames,
}}))
"""


def test_a_collector_worker_imports_none_of_torchrls_envs_data_or_modules():
    done = subprocess.run(
        [sys.executable, "-c", WORKER.format(heavy=HEAVY)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["frames"] == [32, 32]
    assert found["imported"] == []  # by the worker's module
    assert found["collected"] == []  # by its setup and a batch, at random and with an actor
    assert found["torchrl"]  # torchrl's own package, for what it sets for the process

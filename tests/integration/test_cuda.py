"""The GPU path: a CUDA learner (``trainer.device: cuda``) with collectors on the CPU.

- a PPO run trains end to end: the learner's parameters on CUDA, Ray collectors acting
  with a CPU copy of the policy, every batch tagged with the version it was collected with;
- a publish copies the weights from the GPU to the host once (one copy per dtype, whatever
  the number of workers), and the collectors get exactly the learner's weights;
- the learner moves each collected batch to the GPU once, from pinned memory, and every
  optimizer step trains on CUDA tensors.

Every test carries the marker ``cuda``: skipped ("needs CUDA") where torch sees no GPU
(tests/conftest.py). The same paths without a GPU: tests/unit/learners/test_host_policy.py
and tests/unit/algorithms/test_learner_device.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tensordict import TensorDict, TensorDictBase
from torch.utils._python_dispatch import TorchDispatchMode

import fleetrl.algorithms.base as algorithm_base
from fleetrl import Trainer, load_config
from fleetrl.learners.collection import Collection
from fleetrl.learners.versions import batch_version
from fleetrl.setup.build import make_algorithm
from fleetrl.setup.load import config_from_dict
from runs import PPO_LOCAL, ROOT, rows

pytestmark = pytest.mark.cuda

FPB = 64
SEED = 2
EPOCHS, MINIBATCHES = 2, 2
aten = torch.ops.aten


class DeviceCopies(TorchDispatchMode):
    """The copies between devices that the code run inside it makes (every ``.to``,
    ``.cpu()`` and ``copy_`` across devices reaches aten as ``_to_copy`` or ``copy_``): each
    as (source device type, destination device type, elements, source pinned)."""

    def __init__(self) -> None:
        super().__init__()
        self.copies: list[tuple[str, str, int, bool]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is aten._to_copy.default:
            src, dst = args[0], out
        elif func is aten.copy_.default:
            dst, src = args[0], args[1]
        else:
            return out
        if src.device.type != dst.device.type:
            pinned = src.device.type == "cpu" and src.is_pinned()
            self.copies.append((src.device.type, dst.device.type, src.numel(), pinned))
        return out

    def between(self, src: str, dst: str) -> list[tuple[str, str, int, bool]]:
        return [c for c in self.copies if c[:2] == (src, dst)]


def config(num_collectors: int = 2) -> Any:
    return config_from_dict(
        {
            "algorithm": "ppo",
            "env": {"id": "CartPole-v1", "num_envs": 2},
            "collector": {"num_collectors": num_collectors, "frames_per_batch": FPB},
            "trainer": {"device": "cuda", "total_frames": 4 * FPB, "seed": SEED},
            "ppo": {"hidden_sizes": [16], "num_epochs": EPOCHS, "num_mini_batch": MINIBATCHES},
        }
    )


def on_cuda(data: TensorDictBase) -> bool:
    return all(t.is_cuda for t in data.values(include_nested=True, leaves_only=True))


def test_ppo_trains_on_cuda_with_ray_collectors_on_the_cpu(tmp_path):
    cfg = load_config(
        ROOT / "configs" / "ppo_cartpole.yaml",
        [
            *PPO_LOCAL,
            "trainer.device=cuda",
            "collector.num_collectors=2",
            "env.num_envs=2",
            f"collector.frames_per_batch={FPB}",
            f"trainer.total_frames={4 * FPB}",
            f"ppo.num_epochs={EPOCHS}",
            f"ppo.num_mini_batch={MINIBATCHES}",
            "trainer.test_every=2",
        ],
    )
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    algorithm = trainer.algorithm
    tags: list[tuple[int, int]] = []  # (the batch's tag, the learner's version) at each learn
    hosts = []  # the CPU copy the collectors act with, at each learn
    learn = algorithm.learn

    def tagged_learn(batch: TensorDictBase) -> dict[str, float]:
        tags.append((batch_version(batch), algorithm.num_updates))
        hosts.append(trainer.learner.collection.host)
        return learn(batch)

    algorithm.learn = tagged_learn
    metrics = trainer.train()
    assert trainer.frames == metrics["train/frames"] == 4 * FPB
    frames = [int(r["train/frames"]) for r in rows(trainer.run_dir)]
    assert frames == [FPB * i for i in (1, 2, 3, 4)]
    assert all(p.is_cuda for p in algorithm.loss_module.parameters())
    steps = EPOCHS * MINIBATCHES
    # on-policy (sync, prefetch 0): each batch was collected with the weights just published
    assert tags == [(steps * i, steps * i) for i in range(4)]
    assert algorithm.num_updates == 4 * steps
    host = hosts[0]
    assert host is not None and all(h is host for h in hosts)
    assert all(t.device.type == "cpu" for t in host.targets)
    assert trainer.eval_history and all(frames > 0 for frames, _ in trainer.eval_history)


def test_a_publish_copies_the_weights_from_the_gpu_once_for_every_worker():
    cfg = config(num_collectors=2)
    algorithm = make_algorithm(cfg, SEED)
    collection = Collection(cfg, algorithm, total_frames=-1, seed=SEED)
    try:
        host = collection.host
        assert host is not None and collection.collector.policy is host.module
        algorithm.learn(collection.next_batch())
        assert algorithm.num_updates == EPOCHS * MINIBATCHES > collection.published
        with DeviceCopies() as copies:
            collection.publish()
        # PPO's actor is float32 only: one device-to-host copy, for both workers
        assert len(host.groups) == 1
        assert len(copies.between("cuda", "cpu")) == 1
        assert copies.between("cpu", "cuda") == []
        learner = TensorDict.from_module(algorithm.policy)
        published = TensorDict.from_module(collection.collector.policy)
        for key in learner.keys(True, True):
            assert published.get(key).device.type == "cpu"
            assert torch.equal(published.get(key), learner.get(key).cpu())
        # the workers act with those weights: the next batch carries their version
        assert batch_version(collection.next_batch()) == algorithm.num_updates
    finally:
        collection.shutdown()


def test_the_learner_moves_a_batch_to_cuda_once_pinned_and_trains_on_cuda(monkeypatch):
    cfg = config(num_collectors=1)
    algorithm = make_algorithm(cfg, SEED)
    collection = Collection(cfg, algorithm, total_frames=-1, seed=SEED)
    try:
        batch = collection.next_batch()
    finally:
        collection.shutdown()
    assert all(t.device.type == "cpu" for t in batch.values(True, True))
    # what to_learner_device moved (not given back as it was), with its leaves counted at
    # the move: the learner writes more into it afterwards (advantages, value targets), on
    # the GPU, and those were never copied
    moves: list[tuple[TensorDictBase, int]] = []
    to_device = algorithm_base.to_learner_device

    def recorded(data: TensorDictBase, device: torch.device) -> TensorDictBase:
        out = to_device(data, device)
        if out is not data:
            moves.append((out, len(list(out.keys(True, True)))))
        return out

    monkeypatch.setattr(algorithm_base, "to_learner_device", recorded)
    trained_on: list[bool] = []
    run_step = algorithm._run_train_step

    def step(data: TensorDictBase) -> dict[str, torch.Tensor]:
        trained_on.append(on_cuda(data))
        return run_step(data)

    monkeypatch.setattr(algorithm, "_run_train_step", step)
    with DeviceCopies() as copies:
        algorithm.learn(batch)
        torch.cuda.synchronize()
    assert trained_on == [True] * (EPOCHS * MINIBATCHES)  # every optimizer step, on CUDA
    assert len(moves) == 1 and on_cuda(moves[0][0])  # one move per batch, not per epoch or step
    # the batch's data reached the GPU leaf by leaf, once, from pinned memory (small copies:
    # scalars a step may build on the host, not the batch)
    leaves = moves[0][1]
    batch_copies = [c for c in copies.between("cpu", "cuda") if c[2] >= FPB]
    assert len(batch_copies) == leaves
    assert all(pinned for *_, pinned in batch_copies)

"""Configs and comparisons for the gradient-worker (update worker) tests, on either backend."""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict
from torchrl.modules import ValueOperator

from fakes import ExitOnUnpickle
from fleetrl.learners import make_learner
from fleetrl.learners.report import METRIC_COLUMNS
from fleetrl.learners.versions import batch_version
from fleetrl.setup.build import make_algorithm
from fleetrl.setup.load import config_from_dict
from policies import mlp

FPB = 64  # per gradient worker: 4 envs x 16 steps


def scheme_config(backend: str = "ray", **scheme):
    """PPO on CartPole with 2 gradient workers (each collecting locally) on ``backend``."""
    return config_from_dict(
        {
            "algorithm": "ppo",
            "env": {"id": "CartPole-v1", "num_envs": 4},
            "collector": {"num_collectors": 0, "frames_per_batch": FPB},
            "scheme": {"num_grad_workers": 2, **scheme},
            "trainer": {"total_frames": 4096, "seed": 3, "backend": backend},
            "ppo": {"num_epochs": 2, "num_mini_batch": 2, "hidden_sizes": [16]},
        }
    )


def replay_config(algorithm: str, env: str, backend: str = "ray", **scheme):
    """DQN or SAC with 2 gradient workers, each with its own replay buffer, on ``backend``."""
    sections = {
        "dqn": {"learning_starts": 64, "target_update_interval": 3, "eps_anneal_frames": 512},
        "sac": {"learning_starts": 64},
    }
    return config_from_dict(
        {
            "algorithm": algorithm,
            "env": {"id": env, "num_envs": 4},
            "collector": {"num_collectors": 0, "frames_per_batch": 32},
            "scheme": {"num_grad_workers": 2, **scheme},
            "trainer": {"total_frames": 4096, "seed": 5, "backend": backend},
            algorithm: {
                "updates_per_batch": 2,
                "batch_size": 16,
                "hidden_sizes": [16],
                **sections[algorithm],
            },
        }
    )


def weights_equal(a: TensorDict, b: TensorDict) -> bool:
    return all(torch.equal(a.get(k), b.get(k)) for k in a.keys(True, True))


def states_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def trainable_numel(algorithm) -> int:
    return sum(p.numel() for p in algorithm.loss_module.parameters() if p.requires_grad)


def dying_critic(budget_file) -> dict:
    """A custom critic whose unpickling kills a new gradient worker while the budget lasts."""
    return {
        "critic": ValueOperator(
            ExitOnUnpickle(mlp(4, 1, 16), str(budget_file)), in_keys=["observation"]
        )
    }


# ----------------------------------------------------------- one version, one lag

STEPS = 4  # optimizer steps per batch: 2 epochs x 2 minibatches
ON_POLICY = {"train/policy_lag": 1.5, "train/policy_lag_max": 3.0}
ONE_PUBLISH_BEHIND = {"train/policy_lag": 5.5, "train/policy_lag_max": 7.0}


def lag_config(collector=None, backend="inprocess", **scheme):
    """PPO on CartPole, 4 optimizer steps per batch, on ``backend`` (see tests/unit/learners/test_versions.py)."""
    return config_from_dict(
        {
            "algorithm": "ppo",
            "env": {"id": "CartPole-v1", "num_envs": 4},
            "collector": {"num_collectors": 0, "frames_per_batch": FPB, **(collector or {})},
            "scheme": {"num_grad_workers": 1, **scheme},
            "trainer": {"total_frames": 4096, "seed": 3, "backend": backend},
            "ppo": {"num_epochs": 2, "num_mini_batch": 2, "hidden_sizes": [16]},
        }
    )


def lag_of(metrics):
    return {k: metrics[k] for k in ("train/policy_lag", "train/policy_lag_max")}


def run_learner(cfg, iterations=3, tags=None):
    """The metrics of ``iterations`` iterations of the configured scheme; the central
    learner's batch tags are appended to ``tags`` as the batches are learned from.

    Every scheme reports the same columns, in the same order (the metric schema)."""
    algorithm = make_algorithm(cfg, cfg.trainer.seed)
    scheme = make_learner(cfg, algorithm, seed=cfg.trainer.seed)
    try:
        if tags is not None:
            next_batch = scheme.collection.next_batch

            def tagged():
                batch = next_batch()
                if batch is not None:
                    tags.append(batch_version(batch))
                return batch

            scheme.collection.next_batch = tagged
        results = [scheme.run_iteration().metrics for _ in range(iterations)]
        assert algorithm.num_updates == scheme.version
        assert all(list(m) == list(METRIC_COLUMNS) for m in results)
        central = cfg.scheme.num_grad_workers == 1
        # the central learner measures its update whole; gradient workers, its parts
        absent = {"train/grad_workers_restarted", "time/grad_s", "time/update_s"}
        if not central:
            absent = {"time/learn_s", "time/optimize_s"}
        if cfg.collector.num_collectors == 0:  # local collection: no weights or wire to time
            absent |= {"time/weights_s", "time/transfer_s", "time/unpack_s"}
        if cfg.collector.num_collectors == 0 or not central:  # no fleet of the learner's
            absent |= {
                "train/collectors",
                "train/collectors_joined",
                "train/collectors_left",
                "train/collectors_restarted",
            }
        assert {k for k, v in results[-1].items() if math.isnan(v)} == absent
        return results
    finally:
        scheme.shutdown()


# ----------------------------------------------------------- teams of agents


def team_scheme_config(backend: str = "ray", **scheme):
    """MAPPO on MPE's simple_tag (two teams: one set of networks per group) with 2 gradient
    workers (each collecting locally) on ``backend``."""
    return config_from_dict(
        {
            "algorithm": "mappo",
            "env": {"id": "mpe2:simple_tag_v3", "num_envs": 4},
            "collector": {"num_collectors": 0, "frames_per_batch": FPB},
            "scheme": {"num_grad_workers": 2, **scheme},
            "trainer": {"total_frames": 4096, "seed": 3, "backend": backend},
            "mappo": {"num_epochs": 2, "num_mini_batch": 2, "hidden_sizes": [16]},
        }
    )


def group_weights_moved(before: TensorDict, after: TensorDict) -> set[str]:
    """The agent groups (``losses.<group>...`` keys) whose weights differ."""
    return {k[1] for k in after.keys(True, True) if not torch.equal(before.get(k), after.get(k))}

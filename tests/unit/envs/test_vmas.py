"""VMAS (vectorized in torch) through torchrl's ``VmasEnv``, as a user builds it: collected in
torchrl's grouped layout, trained by MAPPO, served by an inference server. VMAS steps its
envs as one torch batch: the env keeps its own ``num_envs``."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vmas")

from torchrl.collectors import Collector
from torchrl.envs.libs.vmas import VmasEnv
from torchrl.envs.utils import ExplorationType

from fleetrl import SyncDataCollector, episode_stats
from fleetrl.algorithms import MAPPO, MAPPOConfig
from fleetrl.collectors.inference import InferenceServers
from fleetrl.distributed.backends import make_backend
from fleetrl.keys import EPISODE_END_KEY, POLICY_VERSION_KEY, WORKER_ID_KEY

#: VMAS truncates every env after max_steps
MAX_STEPS = 5


def balance(num_envs: int = 4) -> VmasEnv:
    """Three agents carrying a package (continuous forces), ``num_envs`` in one torch batch."""
    return VmasEnv(
        scenario="balance", num_envs=num_envs, continuous_actions=True, max_steps=MAX_STEPS, seed=0
    )


def _layout(batch) -> dict:
    return {
        k: (tuple(batch.get(k).shape), batch.get(k).dtype)
        for k in batch.keys(include_nested=True, leaves_only=True)
    }


def _own(key) -> bool:
    """fleetrl's additions to torchrl's batch: the tags and the episode columns."""
    return key in (POLICY_VERSION_KEY, WORKER_ID_KEY) or any(
        part.startswith(("episode_", "group_"))
        for part in (key if isinstance(key, tuple) else (key,))
    )


def test_a_vmas_batch_is_torchrls_and_its_episodes_end_at_max_steps():
    torchrl_collector = Collector(
        balance, None, frames_per_batch=40, total_frames=40, auto_register_policy_transforms=False
    )
    want = _layout(next(iter(torchrl_collector)))
    torchrl_collector.shutdown()
    with SyncDataCollector(balance, None, frames_per_batch=40, total_frames=80) as c:
        batches = list(c)
        assert c.frames == 80  # a frame is an env step: 4 envs x 10 steps a batch
    for batch in batches:
        got = _layout(batch)
        # torchrl's keys, and fleetrl's tags and episode columns beside them
        assert {k: v for k, v in got.items() if not _own(k)} == want
        assert batch["agents", "action"].shape == (4, 10, 3, 2)
        assert batch["next", "agents", "reward"].shape == (4, 10, 3, 1)
        # every env's episode ends at max_steps, twice a batch
        assert batch[EPISODE_END_KEY].squeeze(-1).sum(-1).tolist() == [2, 2, 2, 2]
        assert episode_stats(batch).lengths.tolist() == [MAX_STEPS] * 8


def test_mappo_trains_a_vmas_team_and_a_server_acts_for_it():
    torch.manual_seed(0)
    mappo = MAPPO(MAPPOConfig(num_epochs=1, num_mini_batch=2, hidden_sizes=[16]), balance())
    assert mappo.layout.continuous and mappo.layout.n_agents == 3
    before = [p.detach().clone() for p in mappo.loss_module.parameters()]
    with SyncDataCollector(balance, mappo.policy, frames_per_batch=40) as c:
        batch = c.next()
    low, high = mappo.layout.action_low, mappo.layout.action_high
    action = batch["agents", "action"]
    assert bool(((action >= low) & (action <= high)).all())  # TanhNormal within the bounds
    info = mappo.learn(batch)
    assert mappo.num_updates == 2 and "loss/objective" in info
    assert any(not torch.equal(a, b) for a, b in zip(before, mappo.loss_module.parameters()))
    # served: every agent of the 4 envs in one request a step
    backend = make_backend("inprocess")
    servers = InferenceServers(
        backend, backend.put(mappo.policy), count=1, device=None, max_batch=None,
        max_wait_ms=0.0, exploration_type=ExplorationType.RANDOM, num_threads=None, clients=1,
    )  # fmt: skip
    with SyncDataCollector(
        balance, mappo.policy, frames_per_batch=40, inference_server=servers.for_worker(0)
    ) as c:
        served = c.next()
    assert served["agents", "action"].shape == (4, 10, 3, 2)
    assert served[POLICY_VERSION_KEY].unique().tolist() == [0]
    assert servers.stats()[0]["requests"] == 10 and servers.stats()[0]["observations"] == 40


# ------------------------------------------------------------------ from a config


def test_a_vmas_id_builds_the_scenario_with_the_runs_num_envs():
    from fleetrl.envs import make_env

    env = make_env("vmas:balance", 3, {"max_steps": 4, "continuous_actions": True})
    try:
        assert env.num_envs == 3 and list(env.groups) == ["agents"]
    finally:
        env.close()


def test_a_vmas_config_is_refused_by_key_without_an_episode_length_or_a_scenario():
    from fleetrl.errors import ConfigError
    from fleetrl.setup.load import load_config
    from runs import ROOT

    config = ROOT / "configs" / "mappo_simple_spread.yaml"
    with pytest.raises(ConfigError) as err:
        load_config(config, ["env.id=vmas:balance"])
    assert {p.key for p in err.value.details} == {"env.kwargs.max_steps"}
    assert "env.kwargs.max_steps=None is invalid with env.id='vmas:balance'" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config(config, ["env.id=vmas:balanse", "env.kwargs.max_steps=10"])
    assert {p.key for p in err.value.details} == {"env.id"}
    assert "VMAS has no scenario 'balanse'" in str(err.value)


def test_mappo_trains_resumes_and_evaluates_a_vmas_scenario_from_a_config(tmp_path, capsys):
    from fleetrl.cli import main
    from runs import ROOT, rows

    run = tmp_path / "run"
    args = [
        "env.id=vmas:balance", "env.kwargs.max_steps=10", "env.kwargs.continuous_actions=true",
        "env.num_envs=4", "collector.frames_per_batch=80", "trainer.total_frames=160",
        "trainer.test_every=2", "trainer.num_test_episodes=2", "mappo.num_epochs=1",
        "mappo.num_mini_batch=2", "logging.progress_bar=false", "logging.tensorboard=false",
        "logging.plot=false",
    ]  # fmt: skip
    config = str(ROOT / "configs" / "mappo_simple_spread.yaml")
    assert main(["train", config, *args, "--run-dir", str(run)]) == 0
    last = rows(run)[-1]
    assert int(float(last["train/frames"])) == 160
    assert int(float(last["train/episodes"])) == 16  # 4 envs x 2 batches x 20 steps / 10
    assert last["eval/return_mean"] != ""
    assert main(["train", "--resume", str(run), "trainer.total_frames=240"]) == 0
    assert int(float(rows(run)[-1]["train/frames"])) == 240
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    assert "mappo on vmas:balance, 2 episodes" in capsys.readouterr().out

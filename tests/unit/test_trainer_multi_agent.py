"""MAPPO and IPPO from the shipped configs through the CLI, with local collection: train,
resume, eval; the team and per-group returns in metrics.csv; the keys a multi-agent run
refuses, by name, before anything is built."""

from __future__ import annotations

import math
import re

import pytest

from fleetrl.algorithms.mappo import SINGLE_AGENT_MSG
from fleetrl.cli import GROUPED_VIDEO_MSG, main
from fleetrl.errors import ConfigError
from fleetrl.run.checkpoint import latest_checkpoint, load_checkpoint
from fleetrl.setup.load import load_config
from fleetrl.setup.verify.env import MULTI_AGENT_MSG
from runs import ROOT, rows

pytest.importorskip("mpe2")

CONFIGS = ROOT / "configs"
#: a few thousand frames: 4 envs x 125 steps a batch, one epoch of two minibatches
TINY = [
    "env.num_envs=4",
    "collector.frames_per_batch=500",
    "trainer.total_frames=1000",
    "trainer.test_every=2",
    "trainer.num_test_episodes=2",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]


def _frames(run) -> list[int]:
    return [int(float(r["train/frames"])) for r in rows(run)]


@pytest.mark.parametrize("config", ["mappo_simple_spread.yaml", "ippo_simple_spread.yaml"])
def test_a_shipped_multi_agent_config_trains_resumes_and_evaluates(config, tmp_path, capsys):
    algo = config.split("_")[0]
    run = tmp_path / "run"
    args = [*TINY, f"{algo}.num_epochs=1", f"{algo}.num_mini_batch=2"]
    assert main(["train", str(CONFIGS / config), *args, "--run-dir", str(run)]) == 0
    assert _frames(run) == [500, 1000]
    last = rows(run)[-1]
    # 25-step MPE episodes: each batch ends 4 x 5 team episodes, and the group's with them
    assert int(float(last["train/episodes"])) == 40
    team, group = float(last["train/episode_return"]), float(last["train/group_return/agents"])
    assert math.isfinite(team) and team < 0  # simple_spread's rewards are distances: < 0
    assert group == pytest.approx(team)  # one group: the team's reward is its agents' mean
    assert last["eval/return_mean"] != "" and float(last["loss/critic"]) > 0
    assert latest_checkpoint(run).name == "checkpoint_000000001000.pt"

    assert main(["train", "--resume", str(run), "trainer.total_frames=1500"]) == 0
    assert _frames(run) == [500, 1000, 1500]
    state = load_checkpoint(latest_checkpoint(run))
    assert state["frames"] == 1500 and state["episodes"] == 60
    assert state["algorithm"]["num_updates"] == 3 * 2  # one epoch of two minibatches a batch
    assert len(state["recent_group_returns"]["agents"]) == 40  # trainer.return_window

    for episodes in (1, 2):  # one env (a torchrl env without batch dims) and two
        capsys.readouterr()
        assert main(["eval", str(run), "--episodes", str(episodes)]) == 0
        out = capsys.readouterr().out
        expected = f"{algo} on mpe2:simple_spread_v3, {episodes} episodes, sampled actions: "
        assert re.search(re.escape(expected) + r"mean return -[\d.]+ \+- [\d.]+", out), out


@pytest.mark.parametrize("critic", ["observations", "state"])
def test_a_two_team_game_trains_each_team_resumes_and_evaluates(critic, tmp_path, capsys):
    """simple_tag from the shipped config: both groups' networks train, each group's return
    is a metrics column, the team return is their sum, and a resume continues both."""
    run = tmp_path / "run"
    args = [*TINY, "env.id=mpe2:simple_tag_v3", f"mappo.critic_input={critic}"]
    args += ["mappo.num_epochs=1", "mappo.num_mini_batch=2", "--run-dir", str(run)]
    assert main(["train", str(CONFIGS / "mappo_simple_spread.yaml"), *args]) == 0
    assert _frames(run) == [500, 1000]
    last = rows(run)[-1]
    team = float(last["train/episode_return"])
    adversary = float(last["train/group_return/adversary"])
    prey = float(last["train/group_return/agent"])
    # both teams' 25-step episodes end together: the team's return is their sum
    assert team == pytest.approx(adversary + prey, rel=1e-5, abs=1e-5)
    assert last["eval/return_mean"] != ""
    state = load_checkpoint(latest_checkpoint(run))
    groups = {name.split(".")[1] for name in state["algorithm"]["loss_module"]}
    assert groups == {"adversary", "agent"}  # losses.<group>...: one set of networks each
    assert main(["train", "--resume", str(run), "trainer.total_frames=1500"]) == 0
    assert _frames(run) == [500, 1000, 1500]
    assert load_checkpoint(latest_checkpoint(run))["algorithm"]["num_updates"] == 3 * 2
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "1"]) == 0
    assert "mappo on mpe2:simple_tag_v3, 1 episodes" in capsys.readouterr().out


def test_a_config_run_serves_both_teams_from_an_inference_server(tmp_path):
    """collector.inference=server on a two-team game (collectors on the in-process backend):
    frames exact, every step served, and the run trains both groups."""
    run = tmp_path / "run"
    args = [*TINY, "env.id=mpe2:simple_tag_v3", "mappo.num_epochs=1", "mappo.num_mini_batch=2"]
    args += [
        "collector.num_collectors=2",
        "collector.inference=server",
        "trainer.backend=inprocess",
        "env.num_envs=2",  # 2 collectors x 2 envs x 125 steps: 500 frames a batch
    ]
    assert (
        main(["train", str(CONFIGS / "mappo_simple_spread.yaml"), *args, "--run-dir", str(run)])
        == 0
    )
    assert _frames(run) == [500, 1000]
    last = rows(run)[-1]
    assert last["train/group_return/adversary"] != "" and last["train/group_return/agent"] != ""
    saved = load_config(run / "config.yaml")
    assert (saved.collector.inference, saved.collector.num_collectors) == ("server", 2)


def test_a_team_is_filmed_at_its_evaluations_and_by_eval(tmp_path, capsys):
    """simple_tag's two teams on video: a run films its evaluations (logging.video_every),
    and `fleetrl eval --video` films the episodes it scores, with the same team returns as
    the evaluation without a video (deterministic actions, the same seeds)."""
    run = tmp_path / "run"
    args = [*TINY, "env.id=mpe2:simple_tag_v3", "env.kwargs={max_cycles: 10}"]
    args += ["mappo.num_epochs=1", "logging.video_every=1", "logging.video_episodes=2"]
    assert (
        main(["train", str(CONFIGS / "mappo_simple_spread.yaml"), *args, "--run-dir", str(run)])
        == 0
    )
    films = sorted((run / "videos").glob("*.mp4"))
    assert [f.name for f in films] == ["eval_000000001000.mp4"] and films[0].stat().st_size > 0
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "3"]) == 0
    scored = capsys.readouterr().out
    video = tmp_path / "eval.mp4"
    assert main(["eval", str(run), "--episodes", "3", "--video", str(video)]) == 0
    filmed = capsys.readouterr().out
    mean = re.compile(r"mean return (\S+ \+- \S+)")
    assert mean.search(filmed).group(1) == mean.search(scored).group(1)
    assert "33 frames (700x700, 10 fps), episode lengths [10, 10, 10]" in filmed
    assert video.stat().st_size > 0


def test_a_vmas_run_refuses_videos_by_key():
    pytest.importorskip("vmas")
    overrides = ["env.id=vmas:balance", "env.kwargs={max_steps: 5}", "logging.video_every=1"]
    with pytest.raises(ConfigError) as err:
        load_config(CONFIGS / "mappo_simple_spread.yaml", overrides)
    said = "\n".join(err.value.problems)
    assert "logging.video_every=1 is invalid with env.id='vmas:balance'" in said
    assert "not VMAS scenarios yet" in said
    assert GROUPED_VIDEO_MSG.format(video="v.mp4", env_id="vmas:balance").startswith(
        "--video='v.mp4' is invalid with env.id='vmas:balance'"
    )


def test_algorithm_and_env_must_both_be_multi_agent_or_neither():
    with pytest.raises(ConfigError) as err:
        load_config(CONFIGS / "mappo_simple_spread.yaml", ["algorithm=ppo"])
    text = MULTI_AGENT_MSG.format(
        algorithm="ppo", env_id="mpe2:simple_spread_v3", groups=["agents"]
    )
    assert text in err.value.problems
    with pytest.raises(ConfigError) as err:
        load_config(CONFIGS / "mappo_simple_spread.yaml", ["env.id=CartPole-v1"])
    assert SINGLE_AGENT_MSG.format(algo="mappo", env_id="CartPole-v1") in err.value.problems


def test_keys_a_multi_agent_run_does_not_take_are_refused_by_name_all_at_once():
    overrides = [
        "env.max_episode_steps=50",
        "env.normalize_reward=true",
        "env.normalize_observation=true",
        "collector.overlap=on",
        "collector.num_collectors=2",
        "collector.inference=server",  # taken: central inference serves agent groups
    ]
    with pytest.raises(ConfigError) as err:
        load_config(CONFIGS / "mappo_simple_spread.yaml", overrides)
    keys = {p.key for p in err.value.details}
    assert {
        "env.max_episode_steps",
        "env.normalize_reward",
        "env.normalize_observation",
        "collector.overlap",
    } <= keys
    assert "collector.inference" not in keys
    said = "\n".join(err.value.problems)
    assert "env.max_episode_steps=50 is invalid with env.id='mpe2:simple_spread_v3'" in said


def test_networks_passed_in_code_are_refused_for_a_multi_agent_run(tmp_path):
    from torch import nn

    from fleetrl.run.trainer import Trainer
    from fleetrl.setup.build import GROUPED_MODULES_MSG

    config = load_config(CONFIGS / "mappo_simple_spread.yaml", TINY)
    with pytest.raises(ConfigError) as err:
        Trainer(config, actor=nn.Linear(18, 5), run_dir=tmp_path / "run")
    assert err.value.problems == [GROUPED_MODULES_MSG.format(algo="mappo", names=["actor"])]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("algorithm", ["mappo", "ippo"])
def test_zero_minibatches_are_a_config_error_not_a_division_by_zero(algorithm):
    with pytest.raises(ConfigError) as info:
        load_config(
            str(CONFIGS / "mappo_simple_spread.yaml"),
            [f"algorithm={algorithm}", f"{algorithm}.num_mini_batch=0"],
        )
    assert info.value.problems == [f"{algorithm}.num_mini_batch=0 is invalid: must be > 0"]


@pytest.mark.parametrize(("critic_input", "has_state"), [("observations", False), ("state", True)])
def test_a_config_run_collects_the_global_state_only_for_a_state_critic(
    critic_input, has_state, tmp_path
):
    from fleetrl.setup.build import make_algorithm, make_collector

    overrides = [*TINY, f"mappo.critic_input={critic_input}"]
    config = load_config(str(CONFIGS / "mappo_simple_spread.yaml"), overrides)
    algo = make_algorithm(config, seed=0)
    reads = algo.env_keys_read()
    collector = make_collector(config, algo.policy, total_frames=500, seed=0, reads=reads)
    try:
        batch = collector.next()
    finally:
        collector.shutdown()
    assert ("state" in batch) is has_state
    assert ("state" in batch["next"]) is has_state
    run = tmp_path / "run"
    args = [*overrides, "trainer.total_frames=500", "trainer.test_every=0", "mappo.num_epochs=1"]
    config_path = str(CONFIGS / "mappo_simple_spread.yaml")
    assert main(["train", config_path, *args, "--run-dir", str(run)]) == 0
    assert _frames(run) == [500] and float(rows(run)[-1]["loss/critic"]) > 0

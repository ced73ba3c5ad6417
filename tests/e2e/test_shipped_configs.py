"""Every shipped config, through the CLI as a user runs it: train -> resume -> eval.

One parametrized test over ``configs/*.yaml``: each file as it is, with only a tiny
budget put on top by overrides, trains on the engines and collectors it names
(Ray collectors, gradient workers, first-ready IMPALA/APPO, real ALE Pong and
MuJoCo HalfCheetah), then ``fleetrl train --resume`` raises the budget and the
run goes on from its checkpoint, then ``fleetrl eval`` scores the checkpoint.
Each family of configs adds the checks of what its file promises (the rows of a
first-ready learner, the scheme's versions and dropped gradients, the replay
buffer filling, the Nature CNN, normalization counts, the video of an eval).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import imageio_ffmpeg
import pytest
import yaml
from torchrl.envs.utils import ExplorationType

from fleetrl.cli import main
from fleetrl.run import run_control
from fleetrl.run.checkpoint import latest_checkpoint, load_checkpoint
from fleetrl.run.evaluate import eval_exploration
from fleetrl.setup.load import load_config
from runs import ROOT, conv_shapes, rows

CONFIGS = ROOT / "configs"
QUIET = ["trainer.target_return=null", "logging.progress_bar=false"]


def train(config: str, run: Path, *overrides: str) -> None:
    assert main(["train", str(CONFIGS / config), *overrides, "--run-dir", str(run)]) == 0


def resume(run: Path, total_frames: int) -> None:
    assert main(["train", "--resume", str(run), f"trainer.total_frames={total_frames}"]) == 0


def evaluate(run: Path, capsys, config: str, episodes: int = 1) -> str:
    """``fleetrl eval`` on the run's newest checkpoint; returns what it printed."""
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", str(episodes)]) == 0
    out = capsys.readouterr().out
    shipped = load_config(CONFIGS / config, [])
    # each algorithm evaluates as it trains: PPO, A2C, IMPALA, APPO sample; DQN, SAC do not
    acting = "sampled" if eval_exploration(shipped) is ExplorationType.RANDOM else "deterministic"
    expected = f"{shipped.algorithm} on {shipped.env.id}, {episodes} episodes, {acting} actions"
    assert re.search(re.escape(expected) + r": mean return -?[\d.]+ \+- [\d.]+", out), out
    return out


def frames_of(run: Path) -> list[int]:
    return [int(float(r["train/frames"])) for r in rows(run)]


# ------------------------------------------------- one algorithm, Ray or local collectors

#: config -> (frames per batch, overrides)
ALGO_TINY = {
    "ppo_cartpole.yaml": (512, []),
    "a2c_cartpole.yaml": (256, []),
    "dqn_cartpole.yaml": (128, ["dqn.learning_starts=128", "dqn.updates_per_batch=2"]),
    "sac_pendulum.yaml": (
        128,
        ["sac.learning_starts=128", "sac.updates_per_batch=2", "env.num_envs=2"],
    ),
    "ppo_pendulum.yaml": (512, ["ppo.num_mini_batch=4"]),
    # rows of 128 steps: 16 sequences of 32
    "ppo_lstm_cartpole_novel.yaml": (512, ["ppo.num_epochs=2"]),
}


def algorithm_run(config: str, run: Path, capsys) -> None:
    fpb, extra = ALGO_TINY[config]
    tiny = ["collector.num_collectors=1", "env.num_envs=4", "trainer.num_test_episodes=2"]
    args = [*QUIET, *tiny, *extra, f"collector.frames_per_batch={fpb}"]
    train(config, run, *args, f"trainer.total_frames={2 * fpb}", "trainer.test_every=2")
    metrics = rows(run)
    assert frames_of(run) == [fpb, 2 * fpb]
    assert {"train/episode_return", "time/fps", "train/policy_lag"} <= set(metrics[0])
    assert any(k.startswith("loss/") for k in metrics[1])
    assert metrics[1]["eval/return_mean"] != ""
    assert (run / "config.yaml").is_file() and (run / "learning_curve.png").is_file()
    assert any((run / "tensorboard").iterdir())
    assert latest_checkpoint(run).name == f"checkpoint_{2 * fpb:012d}.pt"
    assert f"frames {2 * fpb:,}" in capsys.readouterr().out
    resume(run, 3 * fpb)
    assert frames_of(run) == [fpb, 2 * fpb, 3 * fpb]
    assert load_checkpoint(latest_checkpoint(run))["frames"] == 3 * fpb
    evaluate(run, capsys, config)


def multi_agent_run(config: str, run: Path, capsys) -> None:
    """MAPPO and IPPO on MPE's simple_spread, from Ray collectors (the file collects in this
    process; the unit tests run that): the team return, the group's column, resume and eval."""
    algo = config.split("_")[0]
    tiny = ["collector.num_collectors=2", "env.num_envs=2", "trainer.num_test_episodes=2"]
    fast = [f"{algo}.num_epochs=1", f"{algo}.num_mini_batch=2", "collector.frames_per_batch=200"]
    train(config, run, *QUIET, *tiny, *fast, "trainer.total_frames=400", "trainer.test_every=2")
    assert frames_of(run) == [200, 400]
    last = rows(run)[-1]
    assert int(float(last["train/episodes"])) == 16  # 2 collectors x 2 envs x 2 x 25-step episodes
    assert float(last["train/group_return/agents"]) == pytest.approx(
        float(last["train/episode_return"])
    )
    assert last["eval/return_mean"] != ""
    resume(run, 600)
    assert frames_of(run) == [200, 400, 600]
    assert load_checkpoint(latest_checkpoint(run))["frames"] == 600
    evaluate(run, capsys, config)


def two_team_run(config: str, run: Path, capsys) -> None:
    """MAPPO on MPE's simple_tag from Ray collectors: both teams' networks train, each
    team's return is a column and the team return their sum; resume and eval."""
    tiny = ["collector.num_collectors=2", "env.num_envs=2", "trainer.num_test_episodes=2"]
    fast = ["mappo.num_epochs=1", "mappo.num_mini_batch=2", "collector.frames_per_batch=200"]
    train(config, run, *QUIET, *tiny, *fast, "trainer.total_frames=400", "trainer.test_every=2")
    assert frames_of(run) == [200, 400]
    last = rows(run)[-1]
    team = float(last["train/episode_return"])
    adversary, prey = (float(last[f"train/group_return/{g}"]) for g in ("adversary", "agent"))
    assert team == pytest.approx(adversary + prey, rel=1e-5, abs=1e-5)
    assert last["eval/return_mean"] != ""
    state = load_checkpoint(latest_checkpoint(run))
    assert {k.split(".")[1] for k in state["algorithm"]["loss_module"]} == {"adversary", "agent"}
    resume(run, 600)
    assert frames_of(run) == [200, 400, 600]
    evaluate(run, capsys, config)


def recurrent_run(config: str, run: Path, capsys) -> None:
    """The POMDP with an LSTM: trained, resumed and evaluated as any algorithm's config
    (Ray collectors carry the recurrent state), then filmed: the policy sees the kept
    entries and carries its state from step to step."""
    algorithm_run(config, run, capsys)
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert (saved["env"]["observation_indices"], saved["ppo"]["model"]) == ([0, 2], "lstm")
    video = run.parent / "novel.mp4"
    assert main(["eval", str(run), "--video", str(video), "--episodes", "1"]) == 0
    assert re.search(r"video .*: \d+ frames", capsys.readouterr().out)


# ------------------------------------------------- gradient workers (scheme)

SCHEME_METRICS = {
    "train/policy_lag",
    "train/grad_asynchrony",
    "train/dropped_gradients",
    "train/policy_version",
    "time/fps",
    "time/updates_per_s",
    "time/collect_s",
    "time/grad_s",
    "time/update_s",
    "time/broadcast_s",
    "time/collect_to_process",
}


def scheme_run(config: str, run: Path, capsys) -> None:
    mode = config.removeprefix("ppo_cartpole_").removesuffix(".yaml")
    tiny = [
        *QUIET,
        "env.num_envs=4",
        "collector.frames_per_batch=128",  # per gradient worker
        "ppo.num_epochs=2",
        "ppo.num_mini_batch=2",
        "trainer.test_every=2",
        "trainer.num_test_episodes=2",
        "trainer.checkpoint_every=1",
        "logging.tensorboard=false",
    ]
    train(config, run, *tiny, "trainer.total_frames=512")
    metrics = rows(run)
    frames = frames_of(run)
    if mode == "async":  # first ready: a fast worker may take a second batch within an iteration
        assert len(frames) == 2 and frames[-1] >= 512
        assert all(f % 128 == 0 for f in frames)
    else:  # one iteration = one batch per gradient worker (2 x 128 frames), 4 steps per batch
        assert frames == [256, 512]
    assert set(metrics[0]) >= SCHEME_METRICS
    assert metrics[1]["eval/return_mean"] != ""
    versions = [int(float(r["train/policy_version"])) for r in metrics]
    if mode == "async":  # applied or dropped, never lost: 8 gradients per iteration
        dropped = sum(float(r["train/dropped_gradients"]) for r in metrics)
        assert versions[-1] + dropped == 16
    else:
        assert versions == [4, 8]
    state = load_checkpoint(latest_checkpoint(run))
    assert state["frames"] == frames[-1] and state["algorithm"]["num_updates"] == versions[-1]
    capsys.readouterr()
    budget = frames[-1] + 256
    resume(run, budget)
    assert f"frames {budget:,}" in capsys.readouterr().out or mode == "async"
    resumed = load_checkpoint(latest_checkpoint(run))
    assert resumed["frames"] >= budget and resumed["frames"] > frames[-1]
    assert resumed["algorithm"]["num_updates"] > versions[-1]
    evaluate(run, capsys, config)


# ------------------------------------------------- IMPALA and APPO, first ready

ASYNC_FPB = 64
#: 2 async Ray collectors x 2 envs, 4 batches of 64 frames, one checkpoint per iteration
ASYNC_TINY = [
    *QUIET,
    "env.num_envs=2",
    "collector.num_cpus_per_collector=0",
    f"collector.frames_per_batch={ASYNC_FPB}",
    f"trainer.total_frames={4 * ASYNC_FPB}",
    "trainer.test_every=2",
    "trainer.num_test_episodes=1",
    "trainer.checkpoint_every=1",
    "logging.tensorboard=false",
    "logging.plot=false",
]


def first_ready_run(config: str, run: Path, capsys) -> None:
    fpb = ASYNC_FPB
    name = config.split("_")[0]
    shipped = load_config(CONFIGS / config, [])
    assert shipped.algorithm == name
    assert shipped.collector.num_collectors == 2 and shipped.collector.sync is False
    section = [f"{name}.hidden_sizes=[16]"]
    if name == "appo":
        section += ["appo.num_epochs=1", "appo.num_mini_batch=2"]
    train(config, run, *ASYNC_TINY, *section)
    metrics = rows(run)
    assert frames_of(run) == [fpb, 2 * fpb, 3 * fpb, 4 * fpb]
    steps = 1 if name == "impala" else 2  # optimizer steps per batch
    assert [int(float(r["train/policy_version"])) for r in metrics] == [
        steps * i for i in (1, 2, 3, 4)
    ]
    for r in metrics:  # the lag of each batch, in optimizer steps, as a distribution
        lag, lag_max = float(r["train/policy_lag"]), float(r["train/policy_lag_max"])
        assert 0 <= lag <= lag_max <= float(r["train/policy_version"])
        assert float(r["train/dropped_batches"]) == 0  # the shipped bound is far above
        assert not math.isnan(float(r["time/learn_s"]))
    state = load_checkpoint(latest_checkpoint(run))
    assert state["frames"] == 4 * fpb and state["algorithm"]["num_updates"] == 4 * steps
    assert "frames 256" in capsys.readouterr().out
    resume(run, 6 * fpb)  # the budget raised: the run goes on from its checkpoint
    assert frames_of(run)[-2:] == [5 * fpb, 6 * fpb]
    evaluate(run, capsys, config)


# ------------------------------------------------- MuJoCo HalfCheetah

MUJOCO_FPB = 64
MUJOCO_EPISODE = 8  # steps
MUJOCO_TINY = [
    *QUIET,
    # each env ends an episode in every batch: 2 collectors x 4 envs x 8 steps (PPO's file)
    f"env.max_episode_steps={MUJOCO_EPISODE}",
    "collector.num_cpus_per_collector=0",
    f"collector.frames_per_batch={MUJOCO_FPB}",
    f"trainer.total_frames={2 * MUJOCO_FPB}",
    "trainer.test_every=1",
    "trainer.num_test_episodes=1",
    "trainer.checkpoint_every=1",
    "logging.tensorboard=false",
    "logging.plot=false",
]
MUJOCO_ALGO = {
    # CleanRL's policy, the shipped file's alternative, trains through the CLI too
    "ppo": ["ppo.num_epochs=1", "ppo.num_mini_batch=2", "ppo.distribution=normal"],
    "sac": [  # envpool's engine
        "env.engine=envpool",
        "sac.buffer_size=1000",
        f"sac.learning_starts={2 * MUJOCO_FPB}",  # random actions until 128 frames are stored
        "sac.updates_per_batch=4",
    ],
}


def mujoco_run(config: str, run: Path, capsys) -> None:
    fpb = MUJOCO_FPB
    algo = config.split("_")[0]
    if algo == "sac":
        pytest.importorskip("envpool")
    train(config, run, *MUJOCO_TINY, *MUJOCO_ALGO[algo])
    metrics = rows(run)
    assert frames_of(run) == [fpb, 2 * fpb]
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["env"]["id"] == "HalfCheetah-v5" and saved["collector"]["num_collectors"] == 2
    assert saved[algo]["hidden_sizes"] == ([64, 64] if algo == "ppo" else [256, 256])
    state = load_checkpoint(latest_checkpoint(run))
    assert (state["frames"], state["iterations"]) == (2 * fpb, 2)
    assert state["collector"] is None  # Ray collected: no local collector state
    # 8-step episodes: every env of each collector ended at least one
    assert float(metrics[-1]["train/episodes"]) >= 2
    if algo == "ppo":
        # the shipped file normalizes: the learner's statistics count every frame delivered
        assert (saved["env"]["normalize_observation"], saved["env"]["normalize_reward"]) == (
            True,
            True,
        )
        counts = [v for k, v in state["algorithm"]["loss_module"].items() if k.endswith("count")]
        assert counts and all(float(c) == 2 * fpb for c in counts), counts
        assert all(r["loss/objective"] != "" for r in metrics)
        assert state["algorithm"]["num_updates"] == 2 * 2  # 1 epoch x 2 minibatches per batch
        assert any("log_std" in k for k in state["algorithm"]["loss_module"])  # the override's
    else:
        assert metrics[0]["loss/qvalue"] == ""  # the first batch only fills the memory
        assert float(metrics[1]["loss/qvalue"]) >= 0 and float(metrics[1]["train/alpha"]) > 0
        assert float(metrics[1]["train/buffer_size"]) == 2 * fpb
    assert all(r["eval/return_mean"] != "" for r in metrics)  # evaluated every iteration
    assert "frames 128" in capsys.readouterr().out
    resume(run, 3 * fpb)  # the budget raised: the run goes on from its checkpoint
    assert frames_of(run) == [fpb, 2 * fpb, 3 * fpb]
    assert load_checkpoint(latest_checkpoint(run))["frames"] == 3 * fpb
    evaluate(run, capsys, config, episodes=2)
    if algo == "ppo":  # and watched: HalfCheetah never falls, so 8 steps + the reset frame
        video = run.parent / "cheetah.mp4"
        assert main(["eval", str(run), "--video", str(video)]) == 0
        reader = imageio_ffmpeg.read_frames(str(video))
        width, height = next(reader)["size"]
        assert (sum(1 for _ in reader), height, width) == (MUJOCO_EPISODE + 1, 480, 480)


# ------------------------------------------------- Atari Pong on ALE's vector env

ATARI_FPB = 64  # per batch
ATARI_TINY = [
    "env.engine=ale_vector",
    "env.num_envs=2",
    f"collector.frames_per_batch={ATARI_FPB}",
    f"trainer.total_frames={2 * ATARI_FPB}",
    "trainer.test_every=0",
    "trainer.checkpoint_every=1",
    # eval after resume plays one episode cut at 50 agent steps: a Pong episode takes thousands
    "env.max_episode_steps=50",
]  # logging as shipped: progress bar, CSV, TensorBoard, learning curve
ATARI_ALGO = {
    "ppo": ["ppo.num_epochs=1", "ppo.num_mini_batch=2"],
    "appo": ["appo.num_epochs=1", "appo.num_mini_batch=2", "collector.num_cpus_per_collector=0"],
    "dqn": [
        "collector.num_collectors=0",  # replay and its learning starts are what is tested here
        "dqn.buffer_size=1000",
        f"dqn.learning_starts={2 * ATARI_FPB}",  # learns on the last batch only
        "dqn.updates_per_batch=4",
    ],
}


def collector_workers() -> int:
    """CollectorWorkers this Ray session has started, live or gone: the actors of their own
    class, and those built in warm workers' host processes, new or kept (tests/conftest.py
    turns warm workers on).

    Ray's public state API needs the dashboard, which the session's Ray does not start.
    """
    from ray._private import state

    from fleetrl.distributed import warm

    created = sum(a["ActorClassName"] == "CollectorWorker" for a in state.actors().values())
    hosted = warm.POOL.started_by.get("CollectorWorker", 0)
    return created + hosted + warm.POOL.reused_by.get("CollectorWorker", 0)


def atari_run(config: str, run: Path, capsys) -> None:
    fpb, total = ATARI_FPB, 2 * ATARI_FPB
    algo = config.split("_")[0]
    before = collector_workers()
    train(config, run, "trainer.target_return=null", *ATARI_TINY, *ATARI_ALGO[algo])
    err = capsys.readouterr().err
    # tqdm's last refresh: the whole budget, with the return and fps the trainer posts
    bar = re.findall(rf"{algo} ALE/Pong-v5: 100%\|.*\| {total}/{total} \[.*fps=", err)
    assert bar, err[-2000:]
    metrics = rows(run)
    assert frames_of(run) == [fpb, 2 * fpb]
    assert [int(float(r["train/iterations"])) for r in metrics] == [1, 2]
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert (saved["env"]["id"], saved["env"]["engine"]) == ("ALE/Pong-v5", "ale_vector")
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert (run / "learning_curve.png").stat().st_size > 0
    assert latest_checkpoint(run).name == f"checkpoint_{total:012d}.pt"
    state = load_checkpoint(latest_checkpoint(run))
    assert (state["frames"], state["iterations"]) == (total, 2)
    # the Nature CNN over the stacked 84x84 frames: 32 filters of 8x8 on one channel per frame
    stack = saved["env"]["atari"]["frame_stack"]
    assert conv_shapes(state)[:3] == [(32, stack, 8, 8), (64, 32, 4, 4), (64, 64, 3, 3)]
    if saved[algo].get("model") == "lstm":  # ppo_atari_lstm: one frame, a 128-unit LSTM on it
        weights = state["algorithm"]["loss_module"]
        lstm = [tuple(v.shape) for k, v in weights.items() if "weight_ih_l0" in k]
        assert stack == 1 and lstm and set(lstm) == {(4 * 128, 512)}
    if algo == "dqn":
        assert [float(r["train/buffer_size"]) for r in metrics] == [fpb, 2 * fpb]
        assert metrics[0]["loss/td"] == ""  # the first batch only fills the memory
        assert float(metrics[1]["loss/td"]) >= 0.0
        assert state["collector"] is not None  # local: its envs and episodes are saved
    else:
        assert all(r["loss/objective"] != "" for r in metrics)  # an update per batch
        assert saved["collector"]["num_collectors"] == 2  # the shipped file's, not overridden
        # the frames came from Ray: the file's 2 collector actors were started for this run,
        # and the checkpoint holds no local collector (a local one's envs would be there)
        assert collector_workers() - before == 2
        assert state["collector"] is None
    resume(run, 3 * fpb)
    assert frames_of(run) == [fpb, 2 * fpb, 3 * fpb]
    evaluate(run, capsys, config)


# ------------------------------------------------- the matrix


def sweep_run(config: str, run: Path, capsys) -> None:
    """The shipped sweep, 2 trials on a tiny budget; its best config trains and evaluates."""
    fpb, total = 1024, 4096
    tiny = [f"collector.frames_per_batch={fpb}", f"trainer.total_frames={total}", *QUIET]
    args = ["tune", str(CONFIGS / config), *tiny, "tune.grace_frames=2048", "--samples", "2"]
    assert main([*args, "--dir", str(run / "sweep")]) == 0
    out = capsys.readouterr().out
    header = [line for line in out.splitlines() if line.startswith("trial ")]
    assert "best config:" in out and header and header[-1].split()[-1] == "status"
    lines = (run / "sweep" / "trials.csv").read_text().splitlines()
    assert len(lines) == 3
    for trial in (run / "sweep" / "trials").iterdir():
        frames = frames_of(trial)
        assert frames == list(range(fpb, frames[-1] + 1, fpb)) and frames[-1] <= total
    best = load_config(run / "sweep" / "best.yaml")
    assert best.tune == load_config(CONFIGS / "ppo_cartpole.yaml").tune  # no sweep left in it
    assert (
        main(["train", str(run / "sweep" / "best.yaml"), *tiny, "--run-dir", str(run / "best")])
        == 0
    )
    assert frames_of(run / "best")[-1] == total
    assert main(["eval", str(run / "best"), "--episodes", "1"]) == 0


FAMILIES: dict[str, Callable[[str, Path, object], None]] = {
    **dict.fromkeys(ALGO_TINY, algorithm_run),
    "ppo_lstm_cartpole_novel.yaml": recurrent_run,
    "mappo_simple_spread.yaml": multi_agent_run,
    "ippo_simple_spread.yaml": multi_agent_run,
    "mappo_simple_tag.yaml": two_team_run,
    **{f"ppo_cartpole_{m}.yaml": scheme_run for m in ("parallel", "async", "decentralized")},
    "impala_cartpole.yaml": first_ready_run,
    "appo_cartpole.yaml": first_ready_run,
    "ppo_mujoco.yaml": mujoco_run,
    "sac_mujoco.yaml": mujoco_run,
    "ppo_atari.yaml": atari_run,
    "ppo_atari_lstm.yaml": atari_run,
    "appo_atari.yaml": atari_run,
    "dqn_atari.yaml": atari_run,
    "tune_ppo_cartpole.yaml": sweep_run,
}
SHIPPED = sorted(p.name for p in CONFIGS.glob("*.yaml"))


def test_the_matrix_holds_every_shipped_config():
    assert sorted(FAMILIES) == SHIPPED


@pytest.fixture
def terminal(monkeypatch):
    """The progress bar draws as on a terminal (it draws only there; pytest captures stderr)."""
    draw = run_control.ProgressBar.__init__

    def on_a_terminal(self, config, initial, *, interactive=None):
        draw(self, config, initial, interactive=True)

    monkeypatch.setattr(run_control.ProgressBar, "__init__", on_a_terminal)


@pytest.mark.usefixtures("ray_session", "terminal")
@pytest.mark.parametrize("config", SHIPPED)
def test_shipped_config_trains_resumes_and_evaluates(config, tmp_path, capsys):
    FAMILIES[config](config, tmp_path / "run", capsys)


# ------------------------------------------------- what each config's header suggests

#: ``fleetrl train configs/NAME.yaml key=value ...`` in a config's header comment
COMMAND = re.compile(r"fleetrl train configs/(\S+\.yaml)((?: +[\w.]+=\S+)*)")
#: a tiny budget on top of any suggestion, in this process: the file's own collectors are the
#: matrix's (above); what a suggestion changes is the env, its engine or the algorithm section
SUGGESTION_TINY = [
    *QUIET,
    "collector.num_collectors=0",
    "env.num_envs=2",
    "env.max_episode_steps=50",
    "collector.frames_per_batch=64",
    "trainer.total_frames=128",
    "trainer.test_every=2",
    "trainer.num_test_episodes=1",
    "logging.tensorboard=false",
    "logging.plot=false",
]
SUGGESTION_ALGO = {
    # a 2-batch run would spend most of its time compiling ppo_mujoco's update step; the
    # shipped file's compiled step trains, resumes and evaluates in mujoco_run
    "ppo": ["ppo.num_epochs=1", "ppo.num_mini_batch=2", "ppo.compile=false"],
    "appo": ["appo.num_epochs=1", "appo.num_mini_batch=2"],
    "dqn": ["dqn.buffer_size=1000", "dqn.learning_starts=64", "dqn.updates_per_batch=2"],
    "sac": ["sac.buffer_size=1000", "sac.learning_starts=64", "sac.updates_per_batch=2"],
    "mappo": ["mappo.num_epochs=1", "mappo.num_mini_batch=2"],
    "ippo": ["ippo.num_epochs=1", "ippo.num_mini_batch=2"],
}
#: a multi-agent env keeps its own episode limit (env.max_episode_steps is refused for it)
MULTI_AGENT = ("mappo", "ippo")


def suggestions() -> list:
    """Every command with overrides in the header comments of ``configs/*.yaml``."""
    found = []
    for name in SHIPPED:
        for line in (CONFIGS / name).read_text().splitlines():
            if not line.startswith("#"):
                break  # the header ends at the first setting
            for config, overrides in COMMAND.findall(line):
                assert config == name, f"{name}'s header suggests a command of {config}"
                if overrides.split():
                    found.append(
                        pytest.param(name, overrides.split(), id=f"{name} {overrides.strip()}")
                    )
    return found


SUGGESTIONS = suggestions()


def test_the_headers_suggest_other_envs_and_engines():
    ids = {p.id for p in SUGGESTIONS}
    assert {
        "appo_atari.yaml env.id=ALE/Breakout-v5",
        "ppo_mujoco.yaml env.engine=envpool",
        "sac_mujoco.yaml env.engine=envpool",
        "dqn_atari.yaml dqn.buffer_size=1000000",
        "mappo_simple_spread.yaml mappo.critic_input=state",
        "mappo_simple_spread.yaml env.id=mpe2:simple_tag_v3",
        "mappo_simple_tag.yaml mappo.critic_input=state",
    } <= ids
    assert len(ids) == len(SUGGESTIONS) == 32


@pytest.mark.parametrize(("config", "overrides"), SUGGESTIONS)
def test_every_command_a_config_header_suggests_trains(config, overrides, tmp_path, capsys):
    """The suggestion's overrides come last, so they win over the tiny budget's; one this
    machine cannot take is refused before the run, by name, with what it needs."""
    algo = config.split("_")[0]
    if any("envpool" in o for o in overrides):
        pytest.importorskip("envpool")
    run = tmp_path / "run"
    tiny = [a for a in SUGGESTION_TINY if algo not in MULTI_AGENT or "max_episode" not in a]
    args = [*tiny, *SUGGESTION_ALGO.get(algo, []), *overrides]
    code = main(["train", str(CONFIGS / config), *args, "--run-dir", str(run)])
    err = capsys.readouterr().err
    if "is invalid on this machine" in err:  # dqn_atari's 1M buffer on a machine under ~64 GB
        assert code == 2 and f"{overrides[0]} is invalid on this machine" in err.replace(",", "")
        assert not run.exists()
        return
    assert code == 0, err[-3000:]
    assert frames_of(run) == [64, 128]
    saved = yaml.safe_load((run / "config.yaml").read_text())
    for override in overrides:
        key, value = override.split("=", 1)
        section, name = key.split(".")
        assert saved[section][name] == yaml.safe_load(value), (key, saved[section][name])
    assert rows(run)[-1]["eval/return_mean"] != ""  # its evaluation env is the same env

"""``fleetrl train configs/{ppo,dqn}_atari.yaml`` end to end through the CLI on real ALE Pong.

The shipped files as they are, with only a tiny budget put on top by overrides
(few envs, small batches, a small replay memory): ale-py's C++ vector env
(present wherever the atari extra is), the Nature CNN the files choose, PPO
through the Ray collectors the file names. Evaluation is off: a Pong episode
takes thousands of agent steps; evaluation on pixels is covered in
test_pixel_training.py with the fake pixel env.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from fleetrl.checkpoint import latest_checkpoint, load_checkpoint
from fleetrl.cli import main
from test_pixel_training import conv_shapes, rows

ROOT = Path(__file__).parent.parent
FRAMES = 64  # per batch
BATCHES = 2
TINY = [
    "env.engine=ale_vector",
    "env.num_envs=2",
    f"collector.frames_per_batch={FRAMES}",
    f"trainer.total_frames={BATCHES * FRAMES}",
    "trainer.test_every=0",
    "trainer.checkpoint_every=1",
]  # logging as shipped: progress bar, CSV, TensorBoard, learning curve
#: what each algorithm needs to learn within the tiny budget
TINY_ALGO = {
    "ppo": ["ppo.num_epochs=1", "ppo.num_mini_batch=2"],
    "dqn": [
        "collector.num_collectors=0",  # replay and its learning starts are what is tested here
        "dqn.buffer_size=1000",
        f"dqn.learning_starts={BATCHES * FRAMES}",  # learns on the last batch only
        "dqn.updates_per_batch=4",
    ],
}


def collector_workers() -> int:
    """CollectorWorker actors this Ray session has created, live or gone.

    Ray's public state API needs the dashboard, which the session's Ray does not start.
    """
    from ray._private import state

    return sum(a["ActorClassName"] == "CollectorWorker" for a in state.actors().values())


def train(tmp_path: Path, algo: str, capsys) -> tuple[Path, str]:
    run = tmp_path / "run"
    config = str(ROOT / "configs" / f"{algo}_atari.yaml")
    rc = main(["train", config, *TINY, *TINY_ALGO[algo], "--run-dir", str(run)])
    assert rc == 0
    return run, capsys.readouterr().err


def check_run(run: Path, err: str, algo: str) -> dict:
    """Progress bar, logs, config and checkpoint of a run of BATCHES x FRAMES."""
    total = BATCHES * FRAMES
    # tqdm's last refresh: the whole budget, with the return and fps the trainer posts
    bar = re.findall(rf"{algo} ALE/Pong-v5: 100%\|.*\| {total}/{total} \[.*fps=", err)
    assert bar, err[-2000:]
    metrics = rows(run)
    assert [int(float(r["train/frames"])) for r in metrics] == [FRAMES * (i + 1) for i in range(2)]
    assert [int(float(r["train/iterations"])) for r in metrics] == [1, 2]
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert (saved["env"]["id"], saved["env"]["engine"]) == ("ALE/Pong-v5", "ale_vector")
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert (run / "learning_curve.png").stat().st_size > 0
    assert latest_checkpoint(run).name == f"checkpoint_{total:012d}.pt"
    state = load_checkpoint(latest_checkpoint(run))
    assert (state["frames"], state["iterations"]) == (total, BATCHES)
    # the Nature CNN over 4 stacked 84x84 frames: 32 filters of 8x8 on 4 channels first
    assert conv_shapes(state)[:3] == [(32, 4, 8, 8), (64, 32, 4, 4), (64, 64, 3, 3)]
    return {"metrics": metrics, "state": state}


@pytest.mark.usefixtures("ray_session")
def test_cli_trains_ppo_atari_on_pong_through_ray_collectors(tmp_path, capsys):
    before = collector_workers()
    run, err = train(tmp_path, "ppo", capsys)
    out = check_run(run, err, "ppo")
    assert all(r["loss/objective"] != "" for r in out["metrics"])  # an update per batch
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["collector"]["num_collectors"] == 2  # the shipped file's, not overridden
    # the frames came from Ray: the file's 2 collector actors were started for this run, and
    # the checkpoint holds no local collector (a local one's envs and episodes would be there)
    assert collector_workers() - before == 2
    assert out["state"]["collector"] is None


def test_cli_trains_dqn_atari_on_pong(tmp_path, capsys):
    run, err = train(tmp_path, "dqn", capsys)
    out = check_run(run, err, "dqn")
    metrics = out["metrics"]
    assert [float(r["train/buffer_size"]) for r in metrics] == [FRAMES, 2 * FRAMES]
    assert metrics[0]["loss/td"] == ""  # the first batch only fills the memory
    assert float(metrics[1]["loss/td"]) >= 0.0
    assert out["state"]["collector"] is not None  # local: its envs and episodes are saved

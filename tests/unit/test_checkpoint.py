"""Checkpoint files: atomic save, verified rotation, the newest that loads, one-line errors.

The run-level tests train a tiny PPO run in this process (``num_collectors=0``:
no Ray), then damage its files the ways a crash or a stranger would.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
from pathlib import Path

import pytest
import torch

from fleetrl.cli import main
from fleetrl.errors import CheckpointError, ConfigError
from fleetrl.run import checkpoint as ck
from fleetrl.run.checkpoint import (
    CUSTOM_MODULES_HINT,
    load_checkpoint,
    newest_checkpoint,
    save_checkpoint,
)
from fleetrl.run.trainer import Trainer
from runs import ROOT, assert_identical

LOCAL = [
    "collector.num_collectors=0",
    "env.num_envs=4",
    "collector.frames_per_batch=128",
    "ppo.num_mini_batch=2",
    "ppo.num_epochs=1",
    "trainer.target_return=null",
    "trainer.test_every=0",
    "trainer.checkpoint_every=1",
    "trainer.keep_checkpoints=3",
    "logging.progress_bar=false",
    "logging.tensorboard=false",
    "logging.plot=false",
]


def state(frames: int, **extra) -> dict:
    return {
        "algorithm": {"w": torch.full((3,), float(frames))},
        "frames": frames,
        "iterations": frames // 64,
        "episodes": 0,
        "config": {},
        **extra,
    }


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


class Evil:
    """Unpickling this would run a shell command: weights_only must refuse it."""

    def __reduce__(self):
        return (os.system, ("touch PWNED",))


def damaged_files(folder: Path) -> dict[str, Path]:
    """One file per way a checkpoint can be unloadable, each named like a real one."""
    folder.mkdir(parents=True, exist_ok=True)
    good = folder / "good.pt"
    torch.save(state(64), good)
    data = good.read_bytes()
    files = {
        "empty": b"",
        "truncated": data[: len(data) // 2],
        "random": bytes(range(256)) * 8,
        "pickle": pickle.dumps(Evil()),
        "pickle2": pickle.dumps(Evil(), protocol=2),
    }
    out = {}
    for i, (kind, payload) in enumerate(files.items()):
        out[kind] = folder / f"checkpoint_{i:012d}.pt"
        out[kind].write_bytes(payload)
    out["evil_torch"] = folder / "checkpoint_000000000010.pt"
    torch.save({**state(64), "hook": Evil()}, out["evil_torch"])
    out["foreign"] = folder / "checkpoint_000000000011.pt"
    torch.save({"model": torch.zeros(2)}, out["foreign"])  # a torch file, not fleetrl's
    good.unlink()
    return out


# ------------------------------------------------------------------ save / rotate
def test_save_is_atomic_verified_and_keeps_the_newest(tmp_path):
    folder = tmp_path / "checkpoints"
    for frames in (64, 128, 192, 256):
        path = save_checkpoint(state(frames), folder, keep=2)
        assert path == folder / f"checkpoint_{frames:012d}.pt"
    assert names(folder) == ["checkpoint_000000000192.pt", "checkpoint_000000000256.pt"]
    loaded = load_checkpoint(folder / "checkpoint_000000000256.pt")
    assert loaded["frames"] == 256 and torch.equal(
        loaded["algorithm"]["w"], torch.full((3,), 256.0)
    )


def test_save_removes_a_temporary_file_left_by_a_crash(tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    (folder / ".checkpoint_000000000128.pt.tmp").write_bytes(b"half a checkpoint")
    save_checkpoint(state(64), folder, keep=3)
    assert names(folder) == ["checkpoint_000000000064.pt"]


def test_a_new_checkpoint_that_does_not_load_back_deletes_no_older_one(tmp_path):
    folder = tmp_path / "checkpoints"
    for frames in (64, 128):
        save_checkpoint(state(frames), folder, keep=2)
    # torch.save writes it, weights_only refuses it: the new file is unverified
    with pytest.raises(CheckpointError, match=r"did not load back after saving") as err:
        save_checkpoint(state(192, hook=Evil()), folder, keep=2)
    assert "checkpoint_000000000192.pt" in str(err.value)
    assert names(folder) == ["checkpoint_000000000064.pt", "checkpoint_000000000128.pt"]
    assert not (tmp_path / "PWNED").exists() and not Path("PWNED").exists()


def test_checkpoints_named_past_a_resumed_one_are_removed(tmp_path, caplog):
    folder = tmp_path / "checkpoints"
    save_checkpoint(state(64), folder, keep=3)
    (folder / "checkpoint_000000000200.pt").write_bytes(b"")  # damaged, from before a resume
    with caplog.at_level(logging.WARNING, logger="fleetrl.run.checkpoint"):
        save_checkpoint(state(128), folder, keep=3)
    assert names(folder) == ["checkpoint_000000000064.pt", "checkpoint_000000000128.pt"]
    assert "checkpoint_000000000200.pt" in caplog.text


# ------------------------------------------------------------------ load
@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("empty", r"the file is empty"),
        ("truncated", r"not a fleetrl checkpoint \(RuntimeError: PytorchStreamReader failed"),
        ("random", r"not a fleetrl checkpoint \(UnpicklingError: Unsupported operand"),
        ("pickle", r"not a fleetrl checkpoint \(UnpicklingError: Unsupported operand"),
        ("pickle2", r"weights_only=True\) refuses: .*unsupported GLOBAL posix.system"),
        ("evil_torch", r"weights_only=True\) refuses: .*unsupported GLOBAL posix.system"),
        ("foreign", r"not a fleetrl checkpoint \(no 'algorithm', 'frames', 'iterations'"),
    ],
)
def test_an_unloadable_file_is_one_line_naming_it(tmp_path, kind, message):
    path = damaged_files(tmp_path / "checkpoints")[kind]
    with pytest.raises(CheckpointError, match=message) as err:
        load_checkpoint(path)
    text = str(err.value)
    assert text.startswith(f"checkpoint {path} is invalid: ") and "\n" not in text
    assert isinstance(err.value, ConfigError)
    assert not Path("PWNED").exists()  # nothing in the file ran


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(CheckpointError, match=re.escape(ck.NOT_A_FILE.format(path=tmp_path / "x"))):
        load_checkpoint(tmp_path / "x")


def test_newest_that_loads_skips_damaged_files_with_a_warning(tmp_path, caplog):
    folder = tmp_path / "checkpoints"
    for frames in (64, 128):
        save_checkpoint(state(frames), folder, keep=5)
    (folder / "checkpoint_000000000192.pt").write_bytes(b"")
    data = (folder / "checkpoint_000000000128.pt").read_bytes()
    (folder / "checkpoint_000000000256.pt").write_bytes(data[:100])
    with caplog.at_level(logging.WARNING, logger="fleetrl.run.checkpoint"):
        path, loaded = newest_checkpoint(folder)
    assert path.name == "checkpoint_000000000128.pt" and loaded["frames"] == 128
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert "checkpoint_000000000256.pt is invalid" in warnings[0]
    assert "checkpoint_000000000192.pt is invalid: the file is empty" in warnings[1]


def test_a_folder_where_none_loads_is_named(tmp_path, caplog):
    folder = tmp_path / "checkpoints"
    damaged_files(folder)
    with pytest.raises(CheckpointError, match=rf"^no checkpoint in {re.escape(str(folder))} loads"):
        newest_checkpoint(folder)
    with pytest.raises(CheckpointError, match=rf"^no checkpoint in {re.escape(str(tmp_path))}$"):
        newest_checkpoint(tmp_path)
    assert not Path("PWNED").exists()


# ------------------------------------------------------------------ resume and eval
@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """A 3-iteration local PPO run with a checkpoint after each (128, 256, 384 frames)."""
    run = tmp_path_factory.mktemp("ck") / "run"
    config = str(ROOT / "configs" / "ppo_cartpole.yaml")
    assert main(["train", config, *LOCAL, "trainer.total_frames=384", "--run-dir", str(run)]) == 0
    return run


def copy_run(src: Path, dst: Path) -> Path:
    for path in src.rglob("*"):
        if path.is_file():
            (dst / path.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            (dst / path.relative_to(src)).write_bytes(path.read_bytes())
    return dst


def test_resume_skips_a_truncated_latest_checkpoint(local_run, tmp_path, caplog):
    run = copy_run(local_run, tmp_path / "run")
    latest = run / "checkpoints" / "checkpoint_000000000384.pt"
    latest.write_bytes(latest.read_bytes()[:500])
    with caplog.at_level(logging.WARNING):
        trainer = Trainer.from_run_dir(run, ["trainer.total_frames=512"])
    assert (trainer.frames, trainer.iterations) == (256, 2)
    assert f"skipping damaged checkpoint: checkpoint {latest} is invalid" in caplog.text
    assert "dropping 1 rows logged past the checkpoint's 256 frames" in caplog.text
    trainer.train()
    rows = trainer.metrics.read_rows()
    assert [int(r["train/frames"]) for r in rows] == [128, 256, 384, 512]
    assert [p.name for p in sorted((run / "checkpoints").iterdir())] == [
        "checkpoint_000000000256.pt",
        "checkpoint_000000000384.pt",
        "checkpoint_000000000512.pt",
    ]
    assert load_checkpoint(latest)["frames"] == 384  # rewritten by the resumed run, whole


def test_resume_where_no_checkpoint_loads_names_the_folder(local_run, tmp_path, capsys):
    run = copy_run(local_run, tmp_path / "run")
    for path in (run / "checkpoints").iterdir():
        path.write_bytes(b"")
    assert main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    folder = run / "checkpoints"
    assert err.startswith(
        f"fleetrl train: resume={str(run)!r} is invalid: no checkpoint in {folder} loads"
    )
    assert err.count("\n") == 1 and "Traceback" not in err


def test_eval_uses_the_newest_checkpoint_that_loads(local_run, tmp_path, capsys, caplog):
    run = copy_run(local_run, tmp_path / "run")
    latest = run / "checkpoints" / "checkpoint_000000000384.pt"
    latest.write_bytes(b"")
    with caplog.at_level(logging.WARNING):
        assert main(["eval", str(run), "--episodes", "2"]) == 0
    assert f"checkpoint {latest} is invalid: the file is empty" in caplog.text
    out = capsys.readouterr().out
    assert out.startswith(
        f"{run / 'checkpoints' / 'checkpoint_000000000256.pt'}: ppo on CartPole-v1"
    )


@pytest.mark.parametrize(
    "kind", ["empty", "truncated", "random", "pickle", "pickle2", "evil_torch", "foreign"]
)
def test_eval_of_a_file_that_is_not_a_checkpoint_is_one_line(tmp_path, kind, capsys):
    path = damaged_files(tmp_path / "checkpoints")[kind]
    assert main(["eval", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fleetrl eval: checkpoint {path} is invalid: ")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not Path("PWNED").exists()


def test_eval_of_a_run_where_none_loads_names_the_folder(tmp_path, capsys):
    folder = tmp_path / "checkpoints"
    damaged_files(folder)
    assert main(["eval", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fleetrl eval: no checkpoint in {folder} loads: all 7 are damaged")
    assert err.count("\n") == 1


def test_eval_of_a_checkpoint_whose_state_does_not_fit_its_config_is_one_line(
    local_run, tmp_path, capsys
):
    path = tmp_path / "checkpoint_000000000384.pt"
    state = load_checkpoint(local_run / "checkpoints" / path.name)
    state["config"]["ppo"]["hidden_sizes"] = [8]  # the saved weights are 64 wide
    torch.save(state, path)
    assert main(["eval", str(path)]) == 2
    err = capsys.readouterr().err
    # one hidden layer of 8 against the saved two of 64: other parameters, named
    assert err.startswith(
        f"fleetrl eval: checkpoint {path} is invalid: its algorithm state does not fit a ppo "
        "built from its own config (the checkpoint has parameters they lack: "
    )
    assert err.endswith(f"{CUSTOM_MODULES_HINT}\n")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_resume_discards_a_half_written_last_metrics_row(local_run, tmp_path, caplog):
    run = copy_run(local_run, tmp_path / "run")
    with (run / "metrics.csv").open("a") as f:
        f.write("0.5,12")  # a row cut short by a kill: once a raw TypeError on resume
    with caplog.at_level(logging.WARNING):
        trainer = Trainer.from_run_dir(run, ["trainer.total_frames=512"])
    assert f"{run / 'metrics.csv'} line 5 is damaged (cut short); discarding it" in caplog.text
    trainer.train()
    assert [int(r["train/frames"]) for r in trainer.metrics.read_rows()] == [128, 256, 384, 512]


# ------------------------------------------------ a replay buffer: only its filled rows


def _buffer(capacity: int):
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    return TensorDictReplayBuffer(storage=LazyTensorStorage(capacity))


def _transitions(start: int, n: int):
    from tensordict import TensorDict

    frames = torch.arange(start, start + n, dtype=torch.uint8).view(n, 1, 1, 1).expand(n, 4, 8, 8)
    return TensorDict(
        {"observation": frames.clone(), "next": {"observation": (frames + 1).clone()}}, [n]
    )


@pytest.mark.parametrize("written", [0, 37, 100, 150], ids=["empty", "part", "full", "wrapped"])
def test_a_buffer_saves_its_filled_rows_and_resumes_bit_for_bit(written):
    """A buffer of 100 after ``written`` writes: the state holds min(written, 100) rows; the
    restored buffer then takes the same writes and gives the same samples as the original."""
    from fleetrl.collectors.remote.replay import buffer_state, load_buffer_state

    original = _buffer(100)
    if written:
        original.extend(_transitions(0, written))
    state = buffer_state(original)
    rows = state["_storage"]["_storage"]
    held = min(written, 100)
    assert all(v.shape[0] == held for v in rows.values()), {k: v.shape for k, v in rows.items()}
    restored = _buffer(100)
    load_buffer_state(restored, state)
    assert len(restored) == len(original) == held
    assert restored.storage.max_size == 100
    for buffer in (original, restored):  # the same writes after the checkpoint: 70 wrap around
        buffer.extend(_transitions(written, 70))
    assert_identical(buffer_state(restored), buffer_state(original), "buffer")
    torch.manual_seed(0)
    a = original.sample(32)
    torch.manual_seed(0)
    b = restored.sample(32)
    assert_identical(b.to_dict(), a.to_dict(), "sample")


def test_a_dqn_atari_checkpoint_holds_the_frames_it_has_seen_not_its_capacity(
    tmp_path, capsys, caplog
):
    """configs/dqn_atari.yaml, 2 x 128 frames into a buffer of 10,000: each checkpoint's
    buffer holds the frames collected so far, and its file is their bytes plus the networks,
    not the 10,000 preallocated rows (565 MB); the log and the CLI say each file's size."""
    run = tmp_path / "run"
    args = [
        "train",
        str(ROOT / "configs" / "dqn_atari.yaml"),
        *LOCAL[:1],
        "env.num_envs=2",
        "collector.frames_per_batch=128",
        "trainer.total_frames=256",
        "trainer.test_every=0",
        "trainer.checkpoint_every=1",
        "dqn.buffer_size=10000",
        *LOCAL[-3:],
        "--run-dir",
        str(run),
    ]
    with caplog.at_level(logging.INFO, logger="fleetrl"):
        assert main(args) == 0
    paths = ck.checkpoint_paths(run / "checkpoints")
    assert [p.name for p in paths] == [ck.checkpoint_name(128), ck.checkpoint_name(256)]
    row = 2 * 4 * 84 * 84  # a transition: its frame stack and the next one, uint8
    sizes = []
    for path, frames in zip(paths, (128, 256)):
        state = load_checkpoint(path)
        storage = state["algorithm"]["buffer"]["_storage"]
        assert storage["_len"] == frames
        obs = storage["_storage"]["observation"]
        assert (obs.shape, obs.dtype) == ((frames, 4, 84, 84), torch.uint8)
        rows = sum(v.nbytes for v in storage["_storage"].values())
        assert frames * row <= rows < frames * (row + 64)  # + reward, action, flags, index
        others = sum(_tensor_bytes(v) for k, v in state.items() if k != "algorithm")
        others += sum(_tensor_bytes(v) for k, v in state["algorithm"].items() if k != "buffer")
        size = path.stat().st_size
        assert rows + others <= size < rows + others + 1_000_000, (size, rows, others)
        sizes.append(size)
    assert sizes[1] - sizes[0] < 128 * (row + 64) + 100_000  # 128 more frames, nothing else
    saved = [r.getMessage() for r in caplog.records if r.name == "fleetrl.run.checkpoint"]
    assert saved == [
        f"checkpoint {p} written: {ck.file_size(p)}" for p in paths
    ]  # once each: the last iteration's checkpoint is the run's last
    assert f"checkpoint {paths[-1].name}: {ck.file_size(paths[-1])}" in capsys.readouterr().out


def _tensor_bytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.nbytes
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    return 0


def test_eval_of_a_checkpoint_with_a_renamed_key_says_it_is_the_checkpoints_config(
    local_run, tmp_path, capsys
):
    path = tmp_path / "checkpoint_000000000384.pt"
    state = load_checkpoint(local_run / "checkpoints" / path.name)
    state["config"]["scheme"]["grad_communication"] = "sync"  # a key of before the renames
    torch.save(state, path)
    assert main(["eval", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"fleetrl eval: the config in checkpoint {path}: scheme.grad_communication is not a "
        "config key: it was renamed; write scheme.update: sync or async (see the changelog)\n"
    )

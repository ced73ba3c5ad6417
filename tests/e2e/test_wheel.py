"""fleetrl as a user gets it from a wheel: built, checked, installed into a fresh virtual
environment, and run from an empty directory, away from any checkout.

The fresh environment takes fleetrl from the wheel alone; its dependencies (torch, Ray,
...) come from the project's environment through a ``.pth`` line, which adds that
environment's packages after the new one's own (its editable fleetrl is not among them:
an editable install is found through its own ``.pth`` file, which Python reads only in a
site directory).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from fleetrl import __version__
from fleetrl.setup.shipped import CONFIG_DIR
from runs import ROOT

pytestmark = pytest.mark.standalone  # fleetrl train starts its own Ray


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A fresh virtual environment with fleetrl installed from a freshly built wheel."""
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    _run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        cwd=tmp,
    )
    built = sorted(p.name for p in dist.iterdir())
    assert built == [f"fleetrl-{__version__}-py3-none-any.whl", f"fleetrl-{__version__}.tar.gz"]
    checked = _run([sys.executable, "-m", "twine", "check", *map(str, dist.iterdir())], cwd=tmp)
    assert checked.count("PASSED") == 2, checked
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = dist / f"fleetrl-{__version__}-py3-none-any.whl"
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", str(wheel)],
        cwd=tmp,
    )
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    return venv, env


def test_the_wheel_holds_the_package_and_its_configs(wheel_env, tmp_path):
    venv, env = wheel_env
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import fleetrl; print(fleetrl.__file__)"],
        cwd=tmp_path,
        env=env,
    )
    assert where.strip().startswith(str(venv)), where  # not the checkout's
    shipped = _run([str(venv / "bin" / "python"), "-m", "fleetrl.cli", "--version"], tmp_path, env)
    assert shipped.strip() == f"fleetrl {__version__}"
    listed = _run(["fleetrl", "configs"], cwd=tmp_path, env=env)
    names = {line.split()[0] for line in listed.splitlines()[1:] if line.strip()}
    assert {p.stem for p in CONFIG_DIR.glob("*.yaml")} <= names
    assert f"configs in {venv}" in listed
    assert (
        _run(["fleetrl", "configs", "show", "ppo_cartpole"], tmp_path, env)
        == (CONFIG_DIR / "ppo_cartpole.yaml").read_text()
    )


def test_a_user_with_only_the_wheel_trains_a_shipped_config_by_name_and_evaluates_it(
    wheel_env, tmp_path
):
    _, env = wheel_env
    empty = tmp_path / "empty"
    empty.mkdir()
    trained = _run(
        [
            "fleetrl",
            "train",
            "ppo_cartpole",
            "trainer.total_frames=4096",
            "trainer.target_return=null",
            "trainer.test_every=0",
            "logging.progress_bar=false",
            "logging.tensorboard=false",
        ],
        cwd=empty,
        env=env,
    )
    assert "frames 4,096" in trained, trained
    runs = list((empty / "runs").iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("ppo_cartpole_"), runs
    assert sorted(p.name for p in (runs[0] / "checkpoints").iterdir())
    evaluated = _run(["fleetrl", "eval", str(runs[0]), "--episodes", "2"], cwd=empty, env=env)
    assert "ppo on CartPole-v1, 2 episodes" in evaluated, evaluated

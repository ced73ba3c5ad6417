"""The shipped configs as package data: ``fleetrl configs``, ``fleetrl train NAME``, the
version, and refusals that come before torch is imported."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
import tomllib

import fleetrl
from fleetrl.cli import UNKNOWN_CONFIG_MSG, main
from fleetrl.setup.shipped import CONFIG_DIR, RESULTS_FILE, config_path, shipped_configs
from runs import ROOT


def _config_results():
    spec = importlib.util.spec_from_file_location(
        "config_results", ROOT / "benchmarks" / "config_results.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checkout_configs_folder_is_the_packaged_one():
    assert (ROOT / "configs").resolve() == CONFIG_DIR
    assert CONFIG_DIR == ROOT / "src" / "fleetrl" / "configs"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["setuptools"]["package-data"]["fleetrl.configs"] == [
        "*.yaml",
        "results.json",
    ]


def test_fleetrl_configs_lists_every_file_once_with_its_algorithm_env_and_result(capsys):
    assert main(["configs"]) == 0
    out = capsys.readouterr().out.splitlines()
    files = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    rows = [line.split()[0] for line in out[1 : 1 + len(files)]]
    assert rows == files
    assert len(files) >= 21
    assert out[1 + len(files) + 1].startswith(f"{len(files)} configs in {CONFIG_DIR}")
    by_name = {line.split()[0]: line for line in out[1 : 1 + len(files)]}
    assert by_name["ppo_cartpole"].split()[1:3] == ["ppo", "CartPole-v1"]
    assert by_name["mappo_simple_spread"].split()[1:3] == ["mappo", "mpe2:simple_spread_v3"]
    results = json.loads(RESULTS_FILE.read_text())["configs"]
    assert by_name["ppo_cartpole"].endswith(results["ppo_cartpole"]["reaches"])
    assert by_name["a2c_cartpole"].endswith("not measured yet")


def test_the_results_file_is_what_the_benchmark_results_give():
    module = _config_results()
    assert json.loads(RESULTS_FILE.read_text()) == module.gathered()
    assert set(module.GATHER) <= {c.name for c in shipped_configs()}


def test_fleetrl_configs_show_prints_the_file_and_names_close_ones_for_a_typo(capsys):
    assert main(["configs", "show", "sac_pendulum"]) == 0
    assert capsys.readouterr().out == (CONFIG_DIR / "sac_pendulum.yaml").read_text()
    assert main(["configs", "show", "ppo_cartpol"]) == 2
    err = capsys.readouterr().err
    assert UNKNOWN_CONFIG_MSG.split(":")[0].format(name="ppo_cartpol") in err
    assert "did you mean ppo_cartpole" in err
    with pytest.raises(SystemExit) as info:
        main(["configs", "show"])
    assert info.value.code == 2


def test_version_is_set_once_and_printed(capsys):
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"]
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "fleetrl.__version__"}
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"fleetrl {fleetrl.__version__}\n"


def test_a_bare_name_is_a_shipped_config_unless_a_file_of_that_name_is_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert config_path("ppo_cartpole") == CONFIG_DIR / "ppo_cartpole.yaml"
    assert config_path("ppo_cartpole.yaml") == CONFIG_DIR / "ppo_cartpole.yaml"
    (tmp_path / "ppo_cartpole.yaml").write_text("algorithm: ppo\n")
    assert config_path("ppo_cartpole.yaml").resolve() == tmp_path / "ppo_cartpole.yaml"
    # a copy here wins over the shipped one, named with or without its suffix
    assert config_path("ppo_cartpole").resolve() == tmp_path / "ppo_cartpole.yaml"
    assert config_path("sac_pendulum") == CONFIG_DIR / "sac_pendulum.yaml"  # none here
    assert config_path("sub/ppo_cartpole.yaml").as_posix() == "sub/ppo_cartpole.yaml"  # a path


#: bad inputs of each kind the screen refuses: (argv after "train", the message's words)
REFUSED = [
    (["ppo_cartpole", "collector.num_colectors=4"], "did you mean 'collector.num_collectors'?"),
    (["ppo_cartpole", "ppo.lr=-1"], "ppo.lr=-1.0 is invalid: must be > 0"),
    (["no_such_config.yaml"], "config='no_such_config.yaml' is invalid: no such file"),
    (["ppo_cartpole", "ppo.lr"], "override 'ppo.lr' is invalid: write key=value"),
    (["ppo_cartpole", "=3"], "override '=3' is invalid: the key before '='"),
    (["ppo_cartpole", "ppo.hidden_sizes=[64"], "its value is not YAML"),
    (["ppo_cartpole", "env.num_envs=two"], "env.num_envs='two' is invalid"),
    (["ppo_cartpole", "collector.sync=maybe"], "collector.sync='maybe' is invalid"),
    (["ppo_cartpole", "algorithm=ppo2"], "algorithm='ppo2' is invalid"),
]


def test_refusals_that_need_no_env_come_before_torch_tensordict_torchrl_or_ray(tmp_path):
    """Each bad input is refused with exit 2 and its message while torch, tensordict, torchrl,
    Ray and gymnasium are still unimported (one process runs them all in turn)."""
    script = f"""
import contextlib, io, json, sys
from fleetrl.cli import main
out = []
for argv in {[argv for argv, _ in REFUSED]!r}:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["train", *argv])
    heavy = [m for m in ("torch", "tensordict", "torchrl", "ray", "gymnasium") if m in sys.modules]
    out.append((code, err.getvalue(), heavy))
print(json.dumps(out))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    results = json.loads(done.stdout)
    for (argv, words), (code, err, heavy) in zip(REFUSED, results, strict=True):
        assert code == 2, (argv, err)
        assert err.startswith("fleetrl train: ") and words in err, (argv, err)
        assert heavy == [], (argv, heavy)


def test_fleetrl_tune_takes_a_shipped_configs_name_too(tmp_path, monkeypatch):
    from fleetrl.cli import build_parser, sweep_config

    monkeypatch.chdir(tmp_path)
    parser, _ = build_parser()
    config = sweep_config(parser.parse_args(["tune", "tune_ppo_cartpole", "--samples", "2"]))
    assert (config.algorithm, config.tune.samples) == ("ppo", 2)


def test_fleetrl_train_runs_the_rules_that_need_no_env_once(tmp_path, monkeypatch):
    import fleetrl.setup.screen as screen
    import fleetrl.setup.verify.checked as checked

    calls = []
    real = screen.config_rules

    def counted(config, check):
        calls.append(config.algorithm)
        real(config, check)

    monkeypatch.setattr(screen, "config_rules", counted)
    monkeypatch.setattr(checked, "config_rules", counted)
    args = [
        "collector.num_collectors=0",
        "collector.frames_per_batch=256",
        "trainer.total_frames=256",
        "trainer.test_every=0",
        "logging.progress_bar=false",
        "logging.tensorboard=false",
        "logging.plot=false",
    ]
    assert main(["train", "ppo_cartpole", *args, "--run-dir", str(tmp_path / "run")]) == 0
    assert calls == ["ppo"]  # the screen's, before torch; the env's checks do not repeat them

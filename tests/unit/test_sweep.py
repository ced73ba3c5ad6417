"""Sweeps: the search space, its checks, a trial's config and resources, and the CLI's refusals.

Everything here is refused or computed before Ray starts (unit tests cannot start it);
the sweeps themselves run in tests/e2e/test_sweeps.py.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from fleetrl import load_config
from fleetrl.cli import main
from fleetrl.config import TuneScheduler
from fleetrl.errors import ConfigError
from fleetrl.run.evaluate import EVAL_METRICS
from fleetrl.run.metrics import read_metrics
from fleetrl.run.sweep import (
    EMPTY_SEARCH_MSG,
    MISSING_METRIC_MSG,
    NOT_A_SWEEP_MSG,
    TUNE_EXTRA_MSG,
    _pbt_scheduler,
    _SearchedRange,
    run_trial,
    trial_bundles,
    trial_config,
    tune,
)
from fleetrl.setup.parse import config_to_dict
from fleetrl.setup.search import DISTRIBUTIONS_HELP, Distribution, parse_dimension
from runs import ROOT

CARTPOLE = str(ROOT / "configs" / "ppo_cartpole.yaml")
TUNE_CONFIG = str(ROOT / "configs" / "tune_ppo_cartpole.yaml")
#: a trial of the shipped sweep, tiny: 4 iterations of 256 frames, local, no target
TRIAL = [
    "env.num_envs=4",
    "collector.frames_per_batch=256",
    "ppo.num_mini_batch=2",
    "ppo.num_epochs=1",
    "trainer.total_frames=1024",
    "trainer.target_return=null",
    "trainer.num_test_episodes=2",
    "env.max_episode_steps=50",
    "tune.grace_frames=512",
    "logging.plot=false",
]


def problems(*overrides: str, config: str = CARTPOLE) -> list[str]:
    with pytest.raises(ConfigError) as err:
        load_config(config, list(overrides))
    return [str(p) for p in err.value.details]


def search(spec: dict[str, str]) -> str:
    return f"tune.search={yaml.safe_dump(spec, default_flow_style=True).strip()}"


@pytest.mark.parametrize(
    ("spec", "kind", "values"),
    [
        ("uniform(0.9, 0.99)", Distribution.UNIFORM, (0.9, 0.99)),
        ("loguniform(1e-4, 1e-2)", Distribution.LOGUNIFORM, (1e-4, 1e-2)),
        ("randint(4, 16)", Distribution.RANDINT, (4, 16)),
        ("uniform(1, 2)", Distribution.UNIFORM, (1.0, 2.0)),
        ("choice(0.1, 0.2)", Distribution.CHOICE, (0.1, 0.2)),
        ("choice(tanh_normal, normal)", Distribution.CHOICE, ("tanh_normal", "normal")),
        ("grid([64, 64], [256])", Distribution.GRID, ([64, 64], [256])),
    ],
)
def test_distributions_read_as_written(spec, kind, values):
    dim = parse_dimension("ppo.x", spec)
    assert (dim.kind, dim.values) == (kind, values)
    assert type(dim.values[0]) is type(values[0])


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("lognormal(0, 1)", "unknown distribution 'lognormal'; " + DISTRIBUTIONS_HELP),
        ("0.1", DISTRIBUTIONS_HELP),
        ("uniform(1)", "uniform takes two numbers, low and high"),
        ("uniform(a, b)", "uniform takes two numbers, low and high"),
        ("uniform(2, 1)", "uniform needs low < high"),
        ("loguniform(0, 1)", "loguniform needs 0 < low"),
        ("randint(1.5, 4)", "randint takes two ints"),
        ("choice()", "choice needs at least one value"),
        ("choice([1, 2)", "its arguments are not YAML values; " + DISTRIBUTIONS_HELP),
    ],
)
def test_bad_distributions_are_refused_naming_the_search_key(spec, said):
    with pytest.raises(ConfigError) as err:
        parse_dimension("ppo.lr", spec)
    assert str(err.value) == f"tune.search.ppo.lr={spec!r} is invalid: {said}"


def test_every_problem_of_a_search_is_said_at_once_in_config_keys():
    found = problems(
        search(
            {
                "ppo.lr": "uniform(-1, 1)",  # below what ppo.lr allows
                "ppo.num_epochs": "uniform(1, 4)",  # floats for an int key
                "ppo.nope": "choice(1)",  # not a key
                "sac.tau": "uniform(0.1, 0.2)",  # another algorithm's key
                "algorithm": "choice(ppo, a2c)",
                "ppo.gamma": "grid(0.9, 0.99)",  # fine
            }
        ),
        "tune.metric=episode_return",
        "tune.samples=0",
    )
    assert "tune.samples=0 is invalid: must be > 0" in found
    assert (
        "tune.metric='episode_return' is invalid: must be a metrics.csv column (starting "
        "train/, eval/, loss/, time/), e.g. train/episode_return or eval/return_mean" in found
    )
    assert (
        "tune.search.ppo.lr='uniform(-1, 1)' is invalid: at ppo.lr=-1.0: "
        "ppo.lr=-1.0 is invalid: must be > 0" in found
    )
    assert (
        "tune.search.ppo.num_epochs='uniform(1, 4)' is invalid: at ppo.num_epochs=1.0: "
        "ppo.num_epochs=1.0 is invalid: must be int (uniform draws floats: use randint or choice)"
        in found
    )
    assert any(
        p.startswith(
            "tune.search.ppo.nope='choice(1)' is invalid: at ppo.nope=1: "
            "ppo.nope is not a config key"
        )
        for p in found
    )
    assert any(
        p.startswith(
            "tune.search.sac.tau='uniform(0.1, 0.2)' is invalid: at sac.tau=0.1:"
            " sac.tau is invalid here: the sac section belongs to"
        )
        for p in found
    )
    assert (
        "tune.search.algorithm='choice(ppo, a2c)' is invalid: the algorithm and the tune section "
        "cannot be searched" in found
    )
    assert not any("ppo.gamma" in p for p in found)
    assert len(found) == 7


def test_a_range_that_breaks_another_key_is_refused_with_that_key():
    # 4096 frames in 8 envs is fine; 3 envs do not divide 2048 frames per batch
    found = problems(search({"env.num_envs": "choice(8, 3)"}))
    assert len(found) == 1 and found[0].startswith(
        "tune.search.env.num_envs='choice(8, 3)' is invalid: at env.num_envs=3: "
    )


def test_pbt_searches_what_a_loaded_algorithm_can_change():
    found = problems(
        search({"ppo.lr": "loguniform(1e-4, 1e-2)", "ppo.num_epochs": "randint(1, 4)"}),
        "tune.scheduler=pbt",
        "tune.searcher=optuna",
    )
    assert found == [
        "tune.searcher='optuna' is invalid: tune.scheduler=pbt explores by perturbing the "
        "trials it copies: use searcher random",
        "tune.search.ppo.num_epochs='randint(1, 4)' is invalid: tune.scheduler=pbt copies a "
        "trial's checkpoint into trials with other values, and a loaded algorithm can change "
        "only its learning rate and tunable coefficients: search one of ['ppo.lr', "
        "'ppo.clip_epsilon', 'ppo.entropy_coef', 'ppo.critic_coef'] with pbt, or "
        "ppo.num_epochs with asha or fifo",
    ]


def test_an_eval_metric_needs_evaluations():
    found = problems(
        search({"ppo.lr": "choice(1e-3)"}),
        "tune.metric=eval/return_mean",
        "trainer.test_every=0",
    )
    assert found == [
        "tune.metric='eval/return_mean' is invalid: is logged by evaluations: needs "
        "trainer.test_every > 0 (here trainer.test_every=0)"
    ]


def test_an_eval_metric_is_one_an_evaluation_logs():
    found = problems(search({"ppo.lr": "choice(1e-3)"}), "tune.metric=eval/episode_return")
    assert found == [
        "tune.metric='eval/episode_return' is invalid: evaluations log eval/return_mean and "
        "eval/return_std: use one of them"
    ]
    assert EVAL_METRICS == ("eval/return_mean", "eval/return_std")


class _FakeTune:
    """Ray Tune's calls in a trial, outside Ray: each report's metrics and checkpoint files."""

    def __init__(self, monkeypatch, checkpoint=None):
        import ray.tune

        import fleetrl.distributed.runtime

        self.reports: list[tuple[dict, list[str] | None]] = []
        context = type("Context", (), {"get_trial_id": lambda self: "t0"})()
        monkeypatch.setattr(ray.tune, "get_context", lambda: context)
        monkeypatch.setattr(ray.tune, "get_checkpoint", lambda: checkpoint)
        monkeypatch.setattr(ray.tune, "report", self.report)
        monkeypatch.setattr(
            fleetrl.distributed.runtime, "pin_threads", lambda n: None
        )  # not this process

    def report(self, metrics, checkpoint=None):
        files = sorted(os.listdir(checkpoint.path)) if checkpoint is not None else None
        self.reports.append((metrics, files))


def test_a_sweep_on_an_evaluation_metric_reports_its_latest_value(tmp_path, monkeypatch):
    # rows 1 and 3 have no eval/ columns: each trial failed at its first row
    base = config_to_dict(
        load_config(
            TUNE_CONFIG,
            [
                *TRIAL,
                "tune.metric=eval/return_mean",
                "trainer.test_every=2",
                "trainer.checkpoint_every=1",
            ],
        )
    )
    tune_ = _FakeTune(monkeypatch)
    run_trial({"ppo.lr": 1e-3}, base=base, directory=str(tmp_path))
    rows = read_metrics(tmp_path / "trials" / "t0" / "metrics.csv")
    assert [int(r["train/frames"]) for r in rows] == [256, 512, 768, 1024]
    evaluated = [r["eval/return_mean"] for r in rows if "eval/return_mean" in r]
    assert len(evaluated) == 2
    # nothing to rank on before the first evaluation: the first row is not reported
    reported = [(m["train/frames"], m["eval/return_mean"]) for m, _ in tune_.reports]
    assert reported == [(512, evaluated[0]), (768, evaluated[0]), (1024, evaluated[1])]
    for (metrics, files), row in zip(tune_.reports, rows[1:]):
        checkpoint = f"checkpoint_{int(row['train/frames']):012d}.pt"
        assert files == [checkpoint, "metrics.csv", "origin.json"]
        assert set(metrics) == {*row, "eval/return_mean"}  # the row's columns, all of them


def test_a_metric_that_is_nan_until_an_episode_ends_is_not_reported_as_nan(tmp_path, monkeypatch):
    """train/episode_return is NaN on the rows before the first episode ends (Atari's first
    iterations): those rows are not reported, and a later NaN keeps the last known value."""
    from fleetrl.run.sweep import _Reporter

    tune_ = _FakeTune(monkeypatch)
    report = _Reporter("train/episode_return", tmp_path, "t0")
    for frames, value in [(256, math.nan), (512, 12.0), (768, math.nan), (1024, 15.0)]:
        report({"train/frames": frames, "train/episode_return": value}, None)
    reported = [(m["train/frames"], m["train/episode_return"]) for m, _ in tune_.reports]
    assert reported == [(512, 12.0), (768, 12.0), (1024, 15.0)]


def test_a_restored_trial_reports_its_last_evaluation_at_once(tmp_path, monkeypatch):
    import ray.tune

    base = config_to_dict(load_config(TUNE_CONFIG, [*TRIAL, "tune.metric=eval/return_mean",
                                                    "trainer.test_every=2"]))  # fmt: skip
    tune_ = _FakeTune(monkeypatch)
    run_trial({"ppo.lr": 1e-3}, base=base, directory=str(tmp_path / "a"))
    last = [m for m, files in tune_.reports if files is not None][-1]
    assert last["train/frames"] == 1024
    # Tune's checkpoint of that trial at 1024 frames, restored into a trial with more budget
    with tempfile.TemporaryDirectory() as saved:
        trial = tmp_path / "a" / "trials" / "t0"
        shutil.copy2(trial / "checkpoints" / "checkpoint_000000001024.pt", saved)
        shutil.copy2(trial / "metrics.csv", saved)
        (Path(saved) / "origin.json").write_text(json.dumps({"trial": "t0", "frames": 1024}))
        tune_ = _FakeTune(monkeypatch, ray.tune.Checkpoint.from_directory(saved))
        base["trainer"]["total_frames"] = 1280
        run_trial({"ppo.lr": 1e-3}, base=base, directory=str(tmp_path / "b"))
    (resumed,) = [m for m, _ in tune_.reports]
    assert resumed["train/frames"] == 1280 and "eval/return_mean" in resumed
    assert resumed["eval/return_mean"] == last["eval/return_mean"]  # 1280: no evaluation


def test_a_metric_no_row_will_have_fails_the_trial_naming_the_columns(tmp_path, monkeypatch):
    base = config_to_dict(load_config(TUNE_CONFIG, [*TRIAL, "tune.metric=loss/nothing",
                                                    "trainer.test_every=2"]))  # fmt: skip
    _FakeTune(monkeypatch)
    with pytest.raises(ConfigError) as err:
        run_trial({"ppo.lr": 1e-3}, base=base, directory=str(tmp_path))
    said = str(err.value)
    assert said.startswith(MISSING_METRIC_MSG.split("{columns}")[0].format(metric="loss/nothing"))
    assert "eval/return_mean" in said and "train/episode_return" in said


def test_pbt_keeps_perturbed_values_in_their_searched_range():
    from ray.tune.schedulers.pbt import _explore  # Ray's perturbation, as PBT runs it

    config = load_config(
        CARTPOLE,
        [
            search(
                {
                    "ppo.lr": "loguniform(1e-4, 1e-2)",
                    "ppo.clip_epsilon": "uniform(0.1, 0.3)",
                    "ppo.entropy_coef": "choice(0.0, 0.01, 0.02)",
                }
            ),
            "tune.scheduler=pbt",
        ],
    )
    pbt = _pbt_scheduler(config)
    mutations, clamp = pbt._hyperparam_mutations, pbt._custom_explore_fn
    at_ends = {"ppo.lr": 1e-2, "ppo.clip_epsilon": 0.1, "ppo.entropy_coef": 0.02}
    up, _ = _explore(at_ends, mutations, 0.0, (1.2,), clamp)
    down, _ = _explore(at_ends, mutations, 0.0, (0.8,), clamp)
    assert up["ppo.lr"] == 1e-2 and down["ppo.lr"] == pytest.approx(8e-3)
    assert up["ppo.clip_epsilon"] == pytest.approx(0.12) and down["ppo.clip_epsilon"] == 0.1
    # a choice moves to a neighbouring value, or is drawn again: never multiplied
    for factor in (0.8, 1.2):
        for _ in range(20):
            moved, _ = _explore(at_ends, mutations, 0.25, (factor,), clamp)
            assert moved["ppo.entropy_coef"] in (0.0, 0.01, 0.02)
    # and a new draw stays in the range, as it always did
    drawn, _ = _explore(at_ends, mutations, 1.0, (1.2,), clamp)
    assert 1e-4 <= drawn["ppo.lr"] <= 1e-2 and 0.1 <= drawn["ppo.clip_epsilon"] <= 0.3


def test_a_clamped_randint_stays_an_int_within_its_range():
    clamp = _SearchedRange([parse_dimension("ppo.num_epochs", "randint(4, 16)")])
    assert clamp({"ppo.num_epochs": 18}) == {"ppo.num_epochs": 15}
    assert clamp({"ppo.num_epochs": 3}) == {"ppo.num_epochs": 4}
    assert clamp({"ppo.lr": 1.0}) == {"ppo.lr": 1.0}  # not a searched range: left as it is


def test_the_shipped_sweep_loads_and_its_tune_section_is_written_only_where_set():
    config = load_config(TUNE_CONFIG)
    assert config.tune.scheduler == TuneScheduler.ASHA and len(config.tune.search) == 5
    assert "tune" in config_to_dict(config)
    assert "tune" not in config_to_dict(load_config(CARTPOLE))


def test_a_trial_config_sets_the_drawn_values_its_run_dir_and_pbt_checkpoints(tmp_path):
    base = config_to_dict(
        load_config(
            CARTPOLE,
            [
                search({"ppo.lr": "loguniform(1e-4, 1e-2)"}),
                "tune.scheduler=pbt",
                "tune.perturbation_frames=8192",
                "trainer.checkpoint_every=20",
            ],
        )
    )
    config = trial_config(base, {"ppo.lr": 0.003}, tmp_path / "t0")
    assert config.algo.lr == 0.003
    assert config.logging.run_dir == str(tmp_path / "t0")
    assert config.logging.progress_bar is False
    assert config.trainer.checkpoint_every == 4  # 8192 frames / 2048 per batch
    assert "tune" not in config_to_dict(config)


def test_a_trial_asks_for_its_learner_and_workers_cpus():
    two = load_config(CARTPOLE)  # 2 Ray collectors
    assert trial_bundles(two) == [{"CPU": 1.0}] * 3
    local = load_config(CARTPOLE, ["collector.num_collectors=0"])
    assert trial_bundles(local) == [{"CPU": 1.0}]
    half = load_config(CARTPOLE, ["collector.num_cpus_per_collector=0.5"])
    assert trial_bundles(half) == [{"CPU": 1.0}, {"CPU": 0.5}, {"CPU": 0.5}]
    workers = load_config(CARTPOLE, ["scheme.num_grad_workers=2", "collector.num_collectors=1"])
    assert trial_bundles(workers) == [{"CPU": 1.0}] * 5
    served = load_config(CARTPOLE, ["collector.inference=server"])
    assert trial_bundles(served) == [{"CPU": 1.0}] * 4  # and its inference server's
    shared = ["collector.inference=server", "collector.num_cpus_per_inference_server=0"]
    assert trial_bundles(load_config(CARTPOLE, shared)) == [{"CPU": 1.0}] * 3


def test_tune_without_a_search_or_a_sweep_directory_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"tune\.search=\{\} is invalid: a sweep needs"):
        tune(load_config(CARTPOLE))
    assert str(EMPTY_SEARCH_MSG.format(value={})).startswith("tune.search={} is invalid")
    with pytest.raises(ConfigError) as err:
        tune(resume=tmp_path)
    assert str(err.value) == NOT_A_SWEEP_MSG.format(path=str(tmp_path), file="sweep.yaml")


def test_the_cli_refuses_bad_sweeps_before_ray_starts(capsys, tmp_path):
    code = main(
        [
            "tune",
            CARTPOLE,
            "--search",
            "ppo.lr=lognormal(1, 2)",
            "--samples",
            "0",
            "--dir",
            str(tmp_path / "s"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "tune.samples=0 is invalid: must be > 0" in err
    assert "tune.search.ppo.lr='lognormal(1, 2)' is invalid: unknown distribution" in err
    assert not (tmp_path / "s").exists()
    with pytest.raises(SystemExit) as exit_:
        main(["tune", CARTPOLE, "--search", "ppo.lr"])
    assert exit_.value.code == 2
    assert "--search 'ppo.lr' is invalid: write KEY=DIST" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tune", "--resume", str(tmp_path), "--samples", "4"])
    assert "continues a sweep as it was started: drop --samples" in capsys.readouterr().err
    assert main(["tune", "--resume", str(tmp_path)]) == 2
    assert "no sweep.yaml there" in capsys.readouterr().err


def test_train_runs_a_config_with_a_tune_section_as_its_base(tmp_path):
    from fleetrl import Trainer

    config = load_config(
        TUNE_CONFIG,
        [
            "trainer.total_frames=2048",
            "tune.grace_frames=1024",  # the sweep's own rule: before the budget's end
            "logging.plot=false",
            "logging.progress_bar=false",
        ],
    )
    trainer = Trainer(config, run_dir=tmp_path / "run")
    assert trainer.train()["train/frames"] == 2048
    assert load_config(Path(tmp_path / "run" / "config.yaml")).tune == config.tune


def test_a_sweep_without_the_tune_extra_is_refused_naming_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    config = load_config(
        CARTPOLE, [search({"ppo.lr": "loguniform(1e-4, 1e-2)"}), "tune.searcher=optuna"]
    )
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "optuna" else real(name, *a)
    )
    with pytest.raises(ConfigError) as err:
        tune(config)
    assert str(err.value) == TUNE_EXTRA_MSG.format(what="tune.searcher='optuna'", module="optuna")
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a)
    )
    with pytest.raises(ConfigError) as err:
        tune(config)
    assert str(err.value) == (
        "fleetrl tune needs the tune extra: pip install 'ray[tune]>=2.40' 'optuna>=4' "
        "(No module named 'pyarrow')"
    )


def test_a_scheduler_decision_past_the_budget_is_refused():
    found = problems(
        search({"ppo.lr": "loguniform(1e-4, 1e-2)"}),
        "tune.scheduler=asha",
        "tune.grace_frames=300000",
    )
    assert found == [
        "tune.grace_frames=300000 is invalid: must be < trainer.total_frames (300000): a trial "
        "would end before its first asha decision"
    ]
    found = problems(
        search({"ppo.lr": "loguniform(1e-4, 1e-2)"}),
        "tune.scheduler=pbt",
        "tune.perturbation_frames=400000",
    )
    assert found[0].startswith("tune.perturbation_frames=400000 is invalid: must be < ")


def test_synchronous_is_pbts_only():
    assert problems(search({"ppo.lr": "loguniform(1e-4, 1e-2)"}), "tune.synchronous=true") == [
        "tune.synchronous=True is invalid: is PBT's: needs tune.scheduler=pbt (here 'fifo')"
    ]


def test_pbt_offers_only_tunables_that_are_config_keys():
    # DQN's tunable epsilon is set by its schedule, from dqn.eps_init and dqn.eps_final
    found = problems(
        search({"dqn.eps_init": "uniform(0.5, 1.0)"}),
        "tune.scheduler=pbt",
        config=str(ROOT / "configs" / "dqn_cartpole.yaml"),
    )
    assert found == [
        "tune.search.dqn.eps_init='uniform(0.5, 1.0)' is invalid: tune.scheduler=pbt copies a "
        "trial's checkpoint into trials with other values, and a loaded algorithm can change "
        "only its learning rate and tunable coefficients: search one of ['dqn.lr'] with pbt, "
        "or dqn.eps_init with asha or fifo"
    ]

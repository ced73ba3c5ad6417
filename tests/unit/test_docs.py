"""The docs site's generated pages and what they are generated from: complete, and true.

The site itself is built strictly by ``make docs`` (CI runs it); its runnable examples
run in ``tests/e2e/test_docs_examples.py`` and the README's in
``tests/integration/test_readme.py``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import sys

import pytest

from docblocks import DOCS, ROOT, blocks, pages

sys.path.insert(0, str(DOCS))
import reference_pages

from fleetrl import cli
from fleetrl.algorithms import ALGORITHMS
from fleetrl.config import Config, EnvConfig, TuneConfig
from fleetrl.setup.load import load_config
from fleetrl.setup.parse import config_to_dict, parse_config
from fleetrl.setup.reference import config_keys

HELPER_SCRIPTS = {"common", "plain_learners", "rllib_atari_sampler", "rllib_peer"}


# --- the config reference ----------------------------------------------------------------


def test_every_config_key_has_a_description_type_and_default():
    undocumented = [k.key for k in config_keys() if not k.doc.strip()]
    assert not undocumented, f"config keys without a doc line under their field: {undocumented}"
    assert all(k.type and k.default for k in config_keys())


def _leaf_keys(data: dict, prefix: str = "") -> set[str]:
    keys = set()
    for name, value in data.items():
        if isinstance(value, dict) and value:  # a nested section (env.atari); {} is a value
            keys |= _leaf_keys(value, f"{prefix}{name}.")
        else:
            keys.add(f"{prefix}{name}")
    return keys


def test_the_config_reference_names_every_key_and_no_other():
    documented = reference_pages.documented_keys(reference_pages.config_page())
    assert len(documented) == len(set(documented)), "a key is documented twice"
    # every key a run's config.yaml holds, for every algorithm, from the serializer
    written = set()
    for name, cls in ALGORITHMS.items():
        written |= _leaf_keys(config_to_dict(Config(algorithm=name, algo=cls.config_class())))
    # a sweep's config also holds its tune section (a run's config.yaml, only where it is set)
    sweep = Config(algo=ALGORITHMS["ppo"].config_class(), tune=TuneConfig(samples=4))
    written |= _leaf_keys(config_to_dict(sweep))
    assert set(documented) == written
    # and each documented key is one the loader accepts, with its documented default
    by_key = {k.key: k for k in config_keys()}
    for key in documented:
        algorithm = key.split(".")[0] if key.split(".")[0] in ALGORITHMS else "ppo"
        default = by_key[key].default
        _, problems = parse_config({"algorithm": algorithm}, [f"{key}={default}"])
        assert not problems, f"{key}={default}: {[str(p) for p in problems]}"


def test_allowed_values_come_from_the_checks():
    keys = {k.key: k for k in config_keys()}
    assert keys["collector.fraction_samples"].allowed == "must be in (0, 1]"
    assert keys["ppo.gamma"].allowed == "must be in (0, 1]"  # probed through verify
    assert keys["env.engine"].allowed == "one of 'gymnasium', 'ale_vector', 'envpool'"
    assert keys["scheme.update"].allowed.startswith("one of 'central', 'sync'")
    assert "'central': must be 'sync', 'async' or 'decentralized'" in keys["scheme.update"].allowed
    assert keys["logging.tensorboard"].allowed == "true or false"
    # a rule that depends on other keys is said as the rule, not in the probe config's numbers
    assert keys["impala.max_learn_lag"].allowed.startswith(
        "null (no bound) or >= (trainer.weight_update_interval - 1) x"
    )
    assert keys["sac.cudagraphs"].allowed.startswith("false only: SAC's update samples")


# --- the CLI and API references ----------------------------------------------------------


def test_the_cli_reference_shows_every_command_and_argument():
    page = reference_pages.cli_page()
    _, commands = cli.build_parser()
    for name, parser in commands.items():
        assert f"## fleetrl {name}" in page
        for action in parser._actions:
            for option in action.option_strings:
                if option in ("-h", "--help"):
                    continue
                assert f"`{option}" in page, f"fleetrl {name} {option} is not in the reference"


def test_the_api_reference_covers_fleetrl_all():
    import fleetrl

    page = reference_pages.api_page()
    for name in fleetrl.__all__:
        assert f"::: {fleetrl._EXPORTS[name]}.{name}\n" in page


# --- fleetrl bench --------------------------------------------------------------------------


def test_bench_names_every_benchmark_script():
    scripts = {p.stem for p in (ROOT / "benchmarks").glob("*.py")} - HELPER_SCRIPTS
    assert set(cli.BENCHMARKS) == scripts


def test_bench_finds_the_checkout_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.benchmark_script("startup") == ROOT / "benchmarks" / "startup.py"


def test_bench_without_a_checkout_says_how_to_get_one(tmp_path, monkeypatch, capsys):
    # an installed package away from any checkout: no ./benchmarks, no source tree around it
    monkeypatch.chdir(tmp_path)
    fake = tmp_path / "site-packages" / "fleetrl" / "cli.py"
    monkeypatch.setattr(cli, "__file__", str(fake))
    assert cli.main(["bench", "startup"]) == 2
    err = capsys.readouterr().err
    assert "fleetrl bench startup: the benchmark scripts are not part of the installed" in err
    assert "benchmarks/startup.py" in err and "Clone the repository" in err


# --- the benchmark results and pages -------------------------------------------------------


@pytest.mark.parametrize("path", reference_pages.result_files(), ids=lambda p: p.stem)
def test_every_result_file_records_its_machine(path):
    data = json.loads(path.read_text())
    machine = data["machine"]
    missing = [k for k in reference_pages.MACHINE_KEYS if k not in machine]
    assert not missing, f"{path.name}: machine lacks {missing}"
    unknown = [k for k in reference_pages.MACHINE_KEYS if machine[k] is None]
    if unknown:  # an older run: the note must own up to each field it could not record
        assert all(k in machine.get("note", "") for k in unknown), (path.name, unknown)


def test_every_result_and_plot_is_on_a_benchmark_page():
    bench_pages = [p for p in (DOCS / "benchmarks").glob("*.md") if p.name != "index.md"]
    text = "\n".join(p.read_text() for p in bench_pages)
    shown = set(reference_pages.RESULTS_MARK.findall(text))
    assert shown == {p.stem for p in reference_pages.result_files()}
    prefixes = reference_pages.PLOTS_MARK.findall(text)
    for png in (ROOT / "benchmarks" / "results").glob("*.png"):
        assert any(png.name.startswith(p) for p in prefixes), f"{png.name} is on no page"
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in bench_pages:
        assert f"benchmarks/{page.name}" in nav, f"{page.name} is not in the nav"
        filled = reference_pages.fill_markers(page.read_text(), page.name)
        assert "<!-- results" not in filled and "**Machine:**" in filled


def test_the_readme_headline_ratios_are_the_committed_results():
    readme = (ROOT / "README.md").read_text()
    after = readme.split(reference_pages.HEADLINE_MARK + "\n", 1)[1]
    shown = after.split("\n\n", 1)[0].strip()
    assert shown == reference_pages.headline_table(), (
        "README's headline table differs from benchmarks/results: paste "
        "`python docs/reference_pages.py headline` under the marker"
    )


def test_a_marker_naming_no_result_fails():
    with pytest.raises(reference_pages.MarkerError, match=r"no_such_bench\.json does not exist"):
        reference_pages.fill_markers("<!-- results: no_such_bench -->\n", "x.md")


# --- the commands the docs show --------------------------------------------------------------


def _commands(verb: str) -> list[tuple[str, list[str]]]:
    """Every ``fleetrl VERB configs/NAME.yaml ...`` line in the docs' shell blocks: (where,
    the arguments after the verb)."""
    found = []
    for page in pages():
        for block in blocks(page):
            if block.lang not in ("bash", "sh", "console", ""):
                continue
            for line in block.code.replace("\\\n", " ").splitlines():
                line = line.split("#")[0].strip().removeprefix("$ ")
                m = re.search(rf"fleetrl {verb} (configs/\w+\.yaml.*)", line)
                if m:
                    found.append((block.where(), shlex.split(m.group(1))))
    return found


TRAIN_COMMANDS = _commands("train")


def test_the_docs_show_train_commands():
    assert len(TRAIN_COMMANDS) >= 10


@pytest.mark.parametrize("where,args", TRAIN_COMMANDS, ids=[w for w, _ in TRAIN_COMMANDS])
def test_every_train_command_in_the_docs_loads(where, args):
    path, *rest = args
    overrides = [a for a in rest if "=" in a and not a.startswith("-")]
    config = load_config(str(ROOT / path), overrides)  # raises ConfigError naming the key
    assert isinstance(config.env, EnvConfig)
    assert dataclasses.is_dataclass(config.algo)


TUNE_COMMANDS = _commands("tune")


def test_the_docs_show_tune_commands():
    assert len(TUNE_COMMANDS) >= 4


@pytest.mark.parametrize("where,args", TUNE_COMMANDS, ids=[w for w, _ in TUNE_COMMANDS])
def test_every_tune_command_in_the_docs_loads(where, args, monkeypatch):
    from fleetrl.cli import build_parser, sweep_config

    monkeypatch.chdir(ROOT)
    parser, _ = build_parser()
    parsed, extra = parser.parse_known_args(["tune", *args])
    parsed.overrides = [*parsed.overrides, *extra]
    config = sweep_config(parsed)  # raises ConfigError naming the key
    assert config.tune.search and config.tune.samples >= 1

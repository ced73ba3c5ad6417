"""The docs site's generated pages and what they are generated from: complete, and true.

The site itself is built strictly by ``make docs`` (CI runs it); its runnable examples
run in ``tests/e2e/test_docs_examples.py`` and the README's in
``tests/integration/test_readme.py``.
"""

from __future__ import annotations

import argparse
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

HELPER_SCRIPTS = {
    "common",
    "config_results",  # gathers results for fleetrl configs; measures nothing
    "plain_atari",  # the Atari learning benchmark's plain PPO floor (atari_learning.py runs it)
    "plain_learners",
    "plain_multiagent",
    "rllib_atari_sampler",
    "rllib_peer",
    "sf_atari_runner",  # runs in Sample Factory's venv, started by atari_peer.py
}


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


def _argument_rows(page: str, command: str) -> dict[str, tuple[str, str]]:
    """The rows of ``fleetrl COMMAND``'s argument table: argument -> (default, meaning)."""
    section = page.split(f"## fleetrl {command}\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| (.*?) \| (.*) \|$", section, re.M)
    return {name: (default, meaning) for name, default, meaning in rows}


def test_the_cli_reference_says_each_default_as_the_help_does():
    page = reference_pages.cli_page()
    assert "| `` |" not in page and "| `[]` |" not in page
    ev = _argument_rows(page, "eval")
    assert ev["--episodes EPISODES"] == (
        "20; with --video 1",
        "episodes, episode i seeded seed + i",
    )
    assert ev["--actions {auto,sample,deterministic}"][0] == "the run's trainer.eval\\_actions"
    assert ev["--seed SEED"][0] == "`12345`"
    assert ev["target"][0] == "required"
    report = _argument_rows(page, "report")
    assert report["--plot OUT.png"] == ("RUN\\_DIR/time.png", "where to write the plot")
    assert report["--no-plot"][0] == "off"
    train = _argument_rows(page, "train")
    assert train["--run-dir RUN_DIR"][0] == "runs/&lt;config name&gt;\\_&lt;time&gt;"
    assert train["[config]"][0] == train["[overrides ...]"][0] == "-"
    assert _argument_rows(page, "tune")["--search KEY=DIST"][0] == "-"
    # the script's arguments are the usage line's "...", not argparse's dest "rest"
    assert list(_argument_rows(page, "bench")) == ["NAME", "..."]


def test_the_arguments_table_hides_internal_arguments_and_says_every_default():
    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("target", help="what")
    parser.add_argument("extra", nargs="?", help="more")
    parser.add_argument("--n", type=int, default=None, help="count (default: 5), each once")
    parser.add_argument("--out", metavar="OUT.png", default="", help="where (default: a/b.png)")
    parser.add_argument("--k", type=int, default=3, help="k of %(prog)s, default %(default)s")
    parser.add_argument("--tag", action="append", default=[], help="a tag")
    parser.add_argument("--mode", choices=["a", "b"], help="a or b")
    parser.add_argument("--fast", action="store_true", help="go fast")
    parser.add_argument("--hidden", help=argparse.SUPPRESS)
    parser.add_argument("--debug", dest="_debug", action="store_true", help="internal")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="passed on")
    assert reference_pages.arguments_table(parser) == [
        "| argument | default | meaning |",
        "|---|---|---|",
        "| `target` | required | what |",
        "| `[extra]` | - | more |",
        "| `--n N` | 5 | count, each once |",
        "| `--out OUT.png` | a/b.png | where |",
        "| `--k K` | `3` | k of x, default 3 |",
        "| `--tag TAG` | - | a tag |",
        "| `--mode {a,b}` | - | a or b |",
        "| `--fast` | off | go fast |",
        "| `...` | - | passed on |",
    ]


def test_the_api_reference_covers_fleetrl_all():
    import fleetrl

    page = reference_pages.api_page()
    for name in fleetrl.__all__:
        assert f"::: {fleetrl._EXPORTS[name]}.{name}\n" in page


def test_the_api_reference_has_a_page_per_group_in_the_nav_and_an_index_linking_each_name():
    import fleetrl

    pages = reference_pages.api_pages()
    nav = (ROOT / "mkdocs.yml").read_text()
    index = pages["reference/api.md"]
    for group, names in reference_pages.API_GROUPS.items():
        uri = f"reference/api/{reference_pages.api_slug(group)}.md"
        assert f"{group}: {uri}" in nav
        for name in names:
            where = f"{fleetrl._EXPORTS[name]}.{name}"
            assert f"::: {where}\n" in pages[uri]  # rendered on its group's page
            assert f"[`{name}`](api/{reference_pages.api_slug(group)}.md#{where})" in index
    assert index.startswith("# Python API\n")


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


#: a figure in prose: a number with a unit of time, speed or ratio
PROSE_FIGURE = re.compile(
    r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(x|%|\s?(?:s|seconds|ms|us|frames/s))(?![\w/])"
)
#: what a page cites: a results marker, a result file, a benchmark script or page
CITED = re.compile(
    r"<!--\s*results:\s*([\w-]+)|results/([\w/.-]+)\.(?:json|txt|log)|benchmarks/(\w+)\.(?:py|md)|"
    r"\]\((?:\.\./)?(?:benchmarks/)?(\w+)\.md\)"
)
#: figures in prose that are settings or limits, not measurements: (page, figure) -> why
SETTINGS = {
    ("docs/guides/cluster.md", "300 s"): "a timeout a user sets",
    ("docs/guides/cluster.md", "120 s"): "a timeout a user sets",
    ("docs/guides/learner-modes.md", "300 s"): "a timeout a user sets",
    ("docs/benchmarks/gpu.md", "45 s"): "the GPU program's limit for one test",
    ("docs/benchmarks/gpu.md", "90 s"): "the GPU program's budget for its tests",
    ("docs/benchmarks/gpu.md", "80 s"): "the GPU program's budget for the learner",
    ("docs/benchmarks/gpu.md", "120 s"): "the GPU program's cap on one inference run",
    ("docs/benchmarks/gpu.md", "240 s"): "the GPU program's budget for inference",
    ("docs/benchmarks/gpu.md", "30 s"): "how long the lent machine stays warm",
    ("docs/benchmarks/learner_throughput.md", "0.25 s"): "the benchmark's --min-round-s",
}


def _unquoted(text: str) -> str:
    """``text`` with filled result markers, code, and comments blanked (lines kept)."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    for pattern in (
        r"<!--\s*results:.*?<!--\s*/results\s*-->",
        # the README's headline table: generated from the result files, held to them above
        re.escape(reference_pages.HEADLINE_MARK) + r"\n.*?\n\n",
        r"```.*?```",
        r"<!--.*?-->",
        r"`[^`\n]*`",
    ):
        text = re.sub(pattern, blank, text, flags=re.S)
    return text


def _numbers(data, out: set[float]) -> set[float]:
    """Every number a result file holds, in values and inside strings (its tables)."""
    if isinstance(data, dict):
        for value in data.values():
            _numbers(value, out)
    elif isinstance(data, list):
        for value in data:
            _numbers(value, out)
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        out.add(float(data))
    elif isinstance(data, str):
        out.update(float(m.replace(",", "")) for m in re.findall(r"\d[\d,]*(?:\.\d+)?", data))
    return out


def _held(figure: float, decimals: int, unit: str, numbers: set[float]) -> bool:
    """Whether a result number rounds to ``figure`` (a percent may be stored as a fraction,
    milliseconds as seconds)."""
    scales = {"%": (1, 100), "ms": (1, 1e3, 1e-3), "us": (1, 1e6, 1e3)}.get(unit, (1,))
    tolerance = 0.5 * 10.0**-decimals + 1e-9
    return any(abs(n * k - figure) <= tolerance for n in numbers for k in scales)


def prose_figures_not_held(where: str, raw: str) -> list[str]:
    """The figures the prose of page ``where`` (its text ``raw``) quotes that no result file
    it cites holds (every result file where it cites none), nor the README's headline table
    (computed from the result files), as ``page:line: figure``."""
    results = ROOT / "benchmarks" / "results"
    files = {
        p.relative_to(results).with_suffix("").as_posix(): p
        for p in sorted(results.rglob("*"))
        if p.suffix in (".json", ".txt", ".log")
    }
    cited = {name for m in CITED.finditer(raw) for name in m.groups() if name in files}
    numbers = _numbers(reference_pages.headline_table(), set())
    for name in sorted(cited or files):
        text = files[name].read_text()
        _numbers(json.loads(text) if files[name].suffix == ".json" else text, numbers)
    text = _unquoted(raw)
    missing = []
    for m in PROSE_FIGURE.finditer(text):
        whole, fraction, unit = m.groups()
        unit = unit.strip()
        figure = f"{whole}{fraction or ''}{'' if unit in ('x', '%') else ' '}{unit}"
        value = float(whole.replace(",", "") + (fraction or ""))
        decimals = len(fraction) - 1 if fraction else 0
        if (where, figure) in SETTINGS or _held(value, decimals, unit, numbers):
            continue
        missing.append(f"{where}:{text[: m.start()].count(chr(10)) + 1}: {figure}")
    return missing


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_prose_quotes_only_figures_its_result_files_hold(page):
    missing = prose_figures_not_held(page.relative_to(ROOT).as_posix(), page.read_text())
    assert not missing, (
        "figures no cited result file holds (quote the file's figure, cite the file, or "
        "list a setting in SETTINGS):\n" + "\n".join(missing)
    )


def test_a_figure_no_result_file_holds_fails():
    video = json.loads((ROOT / "benchmarks" / "results" / "video_cost.json").read_text())
    held = next(iter(sorted(_numbers(video, set()) - {0.0})))
    raw = (
        "See [the benchmark](../benchmarks/video_cost.md).\n"
        f"It took {held} s, then 987.65 s; 84 x 84 frames;\n"
        "`123.4 s` in code is not prose, nor 55.5 s in a comment <!-- 55.5 s -->.\n"
    )
    assert prose_figures_not_held("docs/probe.md", raw) == [
        "docs/probe.md:2: 987.65 s",
        "docs/probe.md:3: 55.5 s",
    ]


@pytest.mark.parametrize("path", reference_pages.result_files(), ids=lambda p: p.stem)
def test_no_result_shows_a_table_twice(path):
    shown = reference_pages.results_markdown(path.stem)
    tables = [b for b in shown.split("\n\n") if b.startswith("|")]
    assert len(tables) == len(set(tables)), f"{path.name}: a table is shown twice"


def test_merged_mujoco_rows_each_say_when_and_where_they_ran(monkeypatch):
    """mujoco_learning.json merges runs of several sittings: it keeps no run's printed table
    (write_json(..., tables=False)), and its page's table is built from every merged row,
    each with its date and processor."""
    assert "tables" not in reference_pages.load_result("mujoco_learning")
    data = {
        "results": {
            "fleetrl ppo Hopper-v5": {"frames": 10, "score": 1.0, "wall_s": 2.0},
            "rllib ppo HalfCheetah-v5": {
                "frames": 10,
                "score": 3.0,
                "wall_s": 4.0,
                "date": "2026-11-27 22:54 UTC",
                "cpu_model": "AMD EPYC",
            },
        },
        "machine": {"cpu_model": "AMD EPYC", "cores": 2},
    }
    monkeypatch.setattr(reference_pages, "load_result", lambda name: data)
    shown = reference_pages.results_markdown("mujoco_learning")
    rows = [
        line
        for line in shown.splitlines()
        if line.startswith("| fleetrl") or line.startswith("| rllib")
    ]
    assert rows[0].endswith("| earlier, not recorded |")
    assert rows[1].endswith("| 2026-11-27 22:54 UTC, AMD EPYC |")


def test_the_sweep_page_shows_its_ratios_once():
    shown = reference_pages.results_markdown("sweep_best")
    assert shown.count("| best / the sweep's base, median wall | 0.95x |") == 1


def test_plots_are_figures_with_their_alt_text_in_words():
    import markdown

    shown = reference_pages.plots_markdown("mujoco_learning")
    rendered = markdown.markdown(shown, extensions=["md_in_html"])
    images = re.findall(r'<img alt="([^"]*)" src="img/([^"]+)" />', rendered)
    assert [png for _, png in images] == [
        "mujoco_learning_ppo_HalfCheetah-v5.png",
        "mujoco_learning_ppo_Hopper-v5.png",
        "mujoco_learning_sac_HalfCheetah-v5.png",
    ]
    assert images[0][0] == (
        "Learning curves of PPO on HalfCheetah-v5: the mean training return of the last 20 "
        "episodes against env steps, fleetrl and RLlib, with the target score 1,442 as a "
        "dashed line"
    )
    # each a block of its own, captioned, not an image inside a paragraph
    assert rendered.count("<figure>") == 3 and "<p><img" not in rendered
    assert "<figcaption>SAC on HalfCheetah-v5</figcaption>" in rendered


def test_plots_without_a_description_fail():
    with pytest.raises(reference_pages.MarkerError, match="add 'mujoco' to PLOT_TEXT"):
        reference_pages.plots_markdown("mujoco")


@pytest.mark.parametrize("page", reference_pages.benchmark_pages())
def test_each_page_holds_its_current_results_under_its_markers(page):
    # the figures are committed under each marker, so that a code host shows them too;
    # the site is built from the result files, whatever the page holds
    text = (DOCS / page).read_text()
    opened = reference_pages.RESULTS_MARK.findall(text) + reference_pages.PLOTS_MARK.findall(text)
    assert len(reference_pages.END_MARK.findall(text)) == len(opened), (
        f"docs/{page}: a marker without its end marker (<!-- /results -->)"
    )
    assert text == reference_pages.committed_markers(text, page), (
        f"docs/{page} differs from benchmarks/results: run `python docs/reference_pages.py pages`"
    )
    for image in re.findall(r"!\[[^]]*\]\(([^)]+)\)", text):
        assert (DOCS / page).parent.joinpath(image).resolve().is_file(), image


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


# --- the install page and the site's files ----------------------------------------------------


def test_the_install_page_lists_every_extra():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    install = (DOCS / "getting-started" / "install.md").read_text()
    listed = re.findall(r"^\| `([\w-]+)` \|", install, re.M)
    assert sorted(listed) == sorted(extras), "the extras table of install.md and pyproject.toml"
    # and the extras `make venv` installs, as the page says
    said = re.search(r"with its extras \(([^)]*)\)", install.replace("\n", " "))[1]
    assert sorted(re.findall(r"`([\w-]+)`", said)) == sorted(extras)


def test_the_site_copies_no_python_file():
    import pathspec
    from mkdocs.utils.yaml import yaml_load  # reads the !ENV tags of site_url and repo_url

    config = yaml_load((ROOT / "mkdocs.yml").read_text())
    spec = pathspec.GitIgnoreSpec.from_lines(config["exclude_docs"].splitlines())
    for path in [*DOCS.rglob("*.py"), *DOCS.rglob("*.sh")]:
        uri = path.relative_to(DOCS).as_posix()
        assert spec.match_file(uri), f"mkdocs.yml's exclude_docs lets docs/{uri} into the site"


def test_the_readme_links_to_files_of_the_repository():
    # a code host shows the README as it is: a link to a page the build generates is broken
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if "://" not in link and not link.startswith("mailto:")]
    assert local
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_every_public_class_and_function_has_a_runnable_example():
    """Each class and function of ``fleetrl.__all__`` shows a doctest example (run by the
    doctest modules of the unit tier), as its reference page shows it."""
    import inspect

    import fleetrl

    missing = [
        name
        for name in fleetrl.__all__
        if (inspect.isclass(obj := getattr(fleetrl, name)) or inspect.isfunction(obj))
        and ">>>" not in (inspect.getdoc(obj) or "")
    ]
    assert missing == []


# --- where make docs-deploy publishes ------------------------------------------------------


def _deploy_address():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "deploy_address", ROOT / "docs" / "deploy_address.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "remote",
    [
        "git@github.com:fleet-rl/fleetrl.git",
        "https://github.com/fleet-rl/fleetrl",
        "https://github.com/fleet-rl/fleetrl.git\n",
        "ssh://git@github.com/fleet-rl/fleetrl.git",
    ],
)
def test_docs_deploy_publishes_to_the_github_pages_of_origin(remote):
    deploy = _deploy_address()
    assert deploy.addresses(remote) == (
        "https://fleet-rl.github.io/fleetrl/",
        "https://github.com/fleet-rl/fleetrl",
    )


def test_docs_deploy_without_a_github_origin_says_what_to_set(tmp_path, monkeypatch, capsys):
    import subprocess

    deploy = _deploy_address()
    with pytest.raises(ValueError, match="set FLEETRL_SITE_URL"):
        deploy.addresses("https://gitlab.com/a/b.git")
    monkeypatch.delenv("FLEETRL_SITE_URL", raising=False)
    monkeypatch.delenv("FLEETRL_REPO_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    subprocess.run(["git", "init", "-q"], check=True)
    assert deploy.main() == 2
    assert deploy.NO_REMOTE_MSG in capsys.readouterr().err
    subprocess.run(["git", "remote", "add", "origin", "git@github.com:o/r.git"], check=True)
    assert deploy.main() == 0
    assert capsys.readouterr().out.splitlines() == [
        "FLEETRL_SITE_URL=https://o.github.io/r/",
        "FLEETRL_REPO_URL=https://github.com/o/r",
    ]


def test_the_site_and_repository_addresses_reach_mkdocs(monkeypatch):
    from mkdocs.config import load_config as load_mkdocs

    monkeypatch.setenv("FLEETRL_SITE_URL", "https://o.github.io/r/")
    monkeypatch.setenv("FLEETRL_REPO_URL", "https://github.com/o/r")
    config = load_mkdocs(str(ROOT / "mkdocs.yml"))
    assert (config["site_url"], config["repo_url"]) == (
        "https://o.github.io/r/",
        "https://github.com/o/r",
    )
    monkeypatch.delenv("FLEETRL_SITE_URL")
    monkeypatch.delenv("FLEETRL_REPO_URL")
    config = load_mkdocs(str(ROOT / "mkdocs.yml"))
    assert config["site_url"] is None and config["repo_url"] is None


# the install page's clone line and the repository's address: tests/unit/test_docs_install.py


def test_docstring_examples_use_the_section_the_reference_renders_as_code():
    """mkdocstrings renders a Google ``Examples:`` section's doctest as highlighted code, but a
    singular ``Example:`` as an admonition of plain text (its lines run together)."""
    import re

    singular = re.compile(r"^\s*Example:\s*$", re.M)
    found = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "src" / "fleetrl").rglob("*.py")
        if singular.search(path.read_text())
    ]
    assert found == []

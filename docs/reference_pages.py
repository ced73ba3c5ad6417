"""The docs pages generated from the code and the benchmark results (see ``hooks.py``).

Kept apart from the mkdocs hook so that the tests import the same generators the site is
built with: the config reference a test checks is the one the site shows.
"""

from __future__ import annotations

import argparse
import html
import json
import posixpath
import re
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RESULTS = ROOT / "benchmarks" / "results"

#: the keys of a result file's machine record (benchmarks/common.py's MACHINE_KEYS)
MACHINE_KEYS = ("cpu_model", "cores", "python", "torch", "torchrl", "ray")

RESULTS_MARK = re.compile(r"^<!--\s*results:\s*(?P<name>[\w-]+)\s*-->\s*$", re.M)
PLOTS_MARK = re.compile(r"^<!--\s*plots:\s*(?P<prefix>[\w.-]+)\s*-->\s*$", re.M)
#: the end of the figures committed under a marker
END_MARK = re.compile(r"^<!--\s*/(?P<kind>results|plots)\s*-->\s*$", re.M)

# the groups of the Python API page: every name of fleetrl.__all__ is in exactly one
API_GROUPS = {
    "Collectors": [
        "Collector",
        "SyncDataCollector",
        "RayCollector",
        "RemoteReplayBuffer",
        "DataCollectorBase",
        "episode_stats",
        "EpisodeStats",
    ],
    "Training": ["Trainer", "Config", "load_config"],
    "Sweeps": ["tune", "SweepResult"],
    "Algorithms": [
        "Algorithm",
        "PPO",
        "PPOConfig",
        "A2C",
        "A2CConfig",
        "DQN",
        "DQNConfig",
        "SAC",
        "SACConfig",
        "IMPALA",
        "IMPALAConfig",
        "APPO",
        "APPOConfig",
    ],
    "Envs": ["make_env", "BatchedEnv", "AtariEnv", "MujocoEnv", "EnvEngine"],
    "Policies": ["as_policy", "RandomPolicy"],
    "Errors": [
        "FleetError",
        "ConfigError",
        "EnvError",
        "PolicyError",
        "WorkerError",
        "WorkerLostError",
        "CheckpointError",
        "CollectorClosedError",
    ],
}


class MarkerError(ValueError):
    """A page's results or plots marker names nothing that exists."""


def generated_pages() -> dict[str, str]:
    """Every generated page, by its path under docs/."""
    return {
        "reference/cli.md": cli_page(),
        "reference/config.md": config_page(),
        **api_pages(),
    }


# --- the command line -------------------------------------------------------------------


def cli_page() -> str:
    from fleetrl.cli import build_parser

    parser, commands = build_parser()
    out = [
        "# Command line",
        "",
        "Generated from fleetrl's argument parser: what `fleetrl COMMAND --help` prints.",
        "",
        f"{parser.description}",
        "",
        "Exit codes: 0 when the command succeeds; 2 for bad input and any other fleetrl error "
        "(an invalid config or argument, a checkpoint that does not load, a run stopped by a "
        "worker's error), with one line per problem on stderr; "
        "128 + the signal number when `fleetrl train` is stopped by SIGINT (130) or SIGTERM "
        "(143) after writing its final checkpoint, and `fleetrl tune` stopped by Ctrl-C (130); 1 "
        "for anything else (an unexpected error, with Python's traceback, a second signal that "
        "stops a run without a final checkpoint, or a `fleetrl tune` trial that failed). See "
        "[Errors and exit codes](../concepts/errors.md).",
        "",
    ]
    for name, sub in commands.items():
        out += [f"## fleetrl {name}", "", sub.description or "", ""]
        out += ["```text", sub.format_usage().strip(), "```", ""]
        out += [*arguments_table(sub), ""]
    return "\n".join(out)


#: a "(default: X)" or "(default X)" clause of a help line: X is the default it names
HELP_DEFAULT = re.compile(r"\s*\(default:?\s+(?P<value>[^()]*(?:\([^()]*\)[^()]*)*)\)")


def arguments_table(parser: argparse.ArgumentParser) -> list[str]:
    """A parser's arguments as a Markdown table: each as its usage line writes it, its
    default and its help line.

    An argument whose help is ``argparse.SUPPRESS`` or whose dest starts with ``_`` is
    internal and left out. A help line's ``(default: ...)`` clause, which says the
    default a command computes where argparse's is ``None``, moves to the default
    column; an argument with no default shows ``-``, a flag ``off``.
    """
    formatter = parser._get_formatter()  # argparse has no public API for any of this
    rows = ["| argument | default | meaning |", "|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or is_internal(action):
            continue
        meaning = formatter._expand_help(action) if action.help else ""
        clause = HELP_DEFAULT.search(meaning)
        if clause:
            meaning = meaning[: clause.start()] + meaning[clause.end() :]
        default = _default_cell(action, clause["value"] if clause else None)
        name = _cell(_invocation(formatter, action))
        rows.append(f"| `{name}` | {default} | {_text(meaning)} |")
    return rows


def is_internal(action: argparse.Action) -> bool:
    """An argument the reference leaves out: hidden from ``--help``, or named ``_...``."""
    return action.help == argparse.SUPPRESS or action.dest.startswith("_")


def _invocation(formatter: argparse.HelpFormatter, action: argparse.Action) -> str:
    """The argument as the usage line writes it: ``--seed SEED``, ``[config]``, ``...``."""
    if not action.option_strings:
        return formatter._format_args(action, action.dest)
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return names
    return f"{names} {formatter._format_args(action, action.dest.upper())}"


def _default_cell(action: argparse.Action, from_help: str | None) -> str:
    if from_help:
        return _text(from_help)
    if isinstance(action, argparse._StoreTrueAction):
        return "off"
    if isinstance(action, argparse._StoreFalseAction):
        return "on"
    if action.required and action.nargs not in ("?", "*", argparse.REMAINDER):
        return "required"  # argparse also marks `nargs="*"` positionals required
    value = action.default
    if value is None or value is argparse.SUPPRESS or value == "":
        return "-"
    if isinstance(value, (list, tuple, dict, set)) and not value:
        return "-"
    return f"`{_cell(value)}`"


# --- the config keys --------------------------------------------------------------------


def key_anchor(key: str) -> str:
    """The id of a key's row in the config reference: dots become hyphens."""
    return key.replace(".", "-")


def config_page() -> str:
    from fleetrl.setup.reference import config_keys, section_of

    keys = config_keys()
    out = [
        "# Config keys",
        "",
        "Every key a config file (or a `key=value` override) can set, generated from the "
        "config's dataclasses when the site is built: the type, the default, what the checks "
        "allow, and the field's doc line. A config holds the sections below and the section "
        "of the one algorithm it trains (`algorithm: ppo` reads the `ppo` section). YAML "
        "writes no limit as `null`. See [Training from configs](../guides/configs.md) for "
        "how configs load and are checked.",
        "",
    ]
    section = None
    for k in keys:
        if section_of(k.key) != section:
            section = section_of(k.key)
            title = f"`{section}`" if section else "Top level"
            anchor = key_anchor(section) if section else "top-level"
            out += ["", f"## {title} {{#{anchor}}}", ""]
            out += ["| key | type | default | allowed | description |", "|---|---|---|---|---|"]
        out.append(
            f'| <span id="{key_anchor(k.key)}"></span>`{k.key}` | {_text(k.type)} '
            f"| `{_cell(k.default)}` | {_text(k.allowed)} | {_text(k.doc)} |"
        )
    return "\n".join(out) + "\n"


def documented_keys(markdown: str) -> list[str]:
    """The keys a generated config reference names, one per row, in order."""
    return re.findall(r'^\| <span id="[^"]+"></span>`([^`]+)`', markdown, re.M)


# --- the Python API ---------------------------------------------------------------------


def api_slug(group: str) -> str:
    """The file name of a group's API page (``Collectors`` -> ``collectors``)."""
    return re.sub(r"[^a-z0-9]+", "-", group.lower()).strip("-")


def _check_api_groups() -> None:
    import fleetrl

    grouped = [name for names in API_GROUPS.values() for name in names]
    missing = sorted(set(fleetrl.__all__) - set(grouped))
    extra = sorted(set(grouped) - set(fleetrl.__all__))
    if missing or extra:
        raise MarkerError(
            f"docs/reference_pages.py API_GROUPS is out of date: not grouped {missing}, "
            f"not exported {extra}"
        )


def _summary(obj: object) -> str:
    """The first sentence of ``obj``'s docstring, on one line, roles shown as code."""
    import inspect

    doc = (inspect.getdoc(obj) or "").split("\n\n")[0].replace("\n", " ")
    doc = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", doc).replace("``", "`")
    return doc.split(". ")[0].rstrip(".")


def api_pages() -> dict[str, str]:
    """The Python API: an index (``reference/api.md``: each group and each name with its
    first sentence) and one page per group (``reference/api/<group>.md``), each name
    rendered from its docstring by mkdocstrings, with its example."""
    import fleetrl

    _check_api_groups()
    index = [
        "# Python API",
        "",
        "Everything `fleetrl` exports (`fleetrl.__all__`), from the docstrings, one page "
        "per group. Import each name from `fleetrl` itself "
        "(`from fleetrl import RayCollector`). Every example on these pages runs in the "
        "tests (`make test` runs the docstrings' examples).",
        "",
    ]
    pages: dict[str, str] = {}
    for group, names in API_GROUPS.items():
        slug = api_slug(group)
        index += [f"## [{group}](api/{slug}.md)", "", "| name | what it is |", "|---|---|"]
        page = [f"# {group}", "", "Part of the [Python API](../api.md).", ""]
        for name in names:
            module = fleetrl._EXPORTS[name]
            anchor = f"{module}.{name}"
            summary = _summary(getattr(fleetrl, name)).replace("|", "\\|")
            index.append(f"| [`{name}`](api/{slug}.md#{anchor}) | {summary} |")
            page += [f"::: {module}.{name}", "    options:", "      heading_level: 2"]
            page += [*_mixed_in_fields(getattr(fleetrl, name)), ""]
        index.append("")
        pages[f"reference/api/{slug}.md"] = "\n".join(page)
    return {"reference/api.md": "\n".join(index), **pages}


def _mixed_in_fields(obj: object) -> list[str]:
    """The options that show a config class's fields from :class:`PPOFields` on its own
    page, in the class's field order, as if it declared them (mkdocstrings leaves inherited
    members out, and would list them after the class's own)."""
    from fleetrl.algorithms.actor_critic import PPOFields

    if not (isinstance(obj, type) and issubclass(obj, PPOFields)):
        return []
    mixed_in = list(PPOFields.__dataclass_fields__)
    documented = [  # its own methods and properties with a docstring, as mkdocstrings shows
        n
        for n, v in vars(obj).items()
        if not n.startswith("_") and isinstance(v, (property, types.FunctionType)) and v.__doc__
    ]
    own = [*vars(obj).get("__annotations__", {}), *documented]
    own = [n for n in dict.fromkeys(own) if n not in mixed_in]
    return [f"      inherited_members: {mixed_in}", f"      members: {[*mixed_in, *own]}"]


def api_page() -> str:
    """Every API page, one after the other (what the tests search for a name)."""
    return "\n".join(api_pages().values())


# --- the repository's address ----------------------------------------------------------

#: what a page shows for the repository's address where the site does not know it
REPO_PLACEHOLDER = "<your fleetrl repository URL>"
#: a region that says what the placeholder is, down to ``<!-- /repository -->``: committed
#: as :func:`repository_note` says it without an address, filled at build time
REPO_MARK = re.compile(r"^<!--\s*repository\s*-->\n(?:.*\n)*?<!--\s*/repository\s*-->$", re.M)


def repository_note(repo_url: str | None) -> str:
    """What a page says about the repository's address: a link to it where the site knows
    it (``repo_url``), else, in words, that :data:`REPO_PLACEHOLDER` is a placeholder.

    Examples:
        >>> repository_note("https://github.com/o/r/")
        'The fleetrl repository: [https://github.com/o/r](https://github.com/o/r).'
        >>> repository_note(None).startswith("`<your fleetrl repository URL>` is a placeholder")
        True
    """
    if repo_url:
        web = repo_url.rstrip("/")
        return f"The fleetrl repository: [{web}]({web})."
    return (
        f"`{REPO_PLACEHOLDER}` is a placeholder, not an address: this copy of the docs "
        "was built without the repository's address. Put in its place the address of the "
        "fleetrl repository you got fleetrl from (the one you cloned, or whose page you are "
        "reading); a site built with the address (`make docs-deploy`) shows it here."
    )


def repository_address(markdown: str, repo_url: str | None) -> str:
    """The page as the site shows it. Where the site knows the repository's address
    (``repo_url``: ``FLEETRL_REPO_URL``, which ``make docs-deploy`` sets), its clone address
    stands in place of :data:`REPO_PLACEHOLDER`, and each ``<!-- repository -->`` region
    links it; where it does not (a local build, a code host's view), the placeholder stays
    and each region says that it is one (:func:`repository_note`).

    Examples:
        >>> clone = "git clone <your fleetrl repository URL> fleetrl"
        >>> repository_address(clone, "https://github.com/o/r/")
        'git clone https://github.com/o/r.git fleetrl'
        >>> repository_address(clone, None) == clone
        True
    """
    region = f"<!-- repository -->\n{repository_note(repo_url)}\n<!-- /repository -->"
    markdown = REPO_MARK.sub(lambda _: region, markdown)
    if repo_url:
        markdown = markdown.replace(REPO_PLACEHOLDER, repo_url.rstrip("/") + ".git")
    return markdown


# --- the benchmark pages ----------------------------------------------------------------


def fill_markers(markdown: str, page: str) -> str:
    """Replace the results and plots markers of a page, with the tables committed under
    each, by what the result files hold: the page as the site shows it."""
    return _fill(markdown, page, site=True)


def committed_markers(markdown: str, page: str) -> str:
    """The page as committed: under each marker, down to its end marker
    (``<!-- /results -->``, ``<!-- /plots -->``), what the result files hold, so that the
    page shows its figures where the Markdown is read as it is (a code host). ``page`` is
    its path under docs/. Written by ``python docs/reference_pages.py pages``; a unit test
    holds the pages to it."""
    return _fill(markdown, page, site=False)


def benchmark_pages() -> list[str]:
    """The docs pages that hold a results or plots marker, by their path under docs/."""
    return [
        p.relative_to(DOCS).as_posix()
        for p in sorted(DOCS.rglob("*.md"))
        if RESULTS_MARK.search(text := p.read_text()) or PLOTS_MARK.search(text)
    ]


def _fill(markdown: str, page: str, *, site: bool) -> str:
    # the site copies the plots to benchmarks/img/ (hooks.py); a page of the repository
    # finds them in benchmarks/results/ (a bare page name is a benchmark page's)
    here = posixpath.dirname(page) or "benchmarks"
    images = posixpath.relpath("benchmarks/img" if site else "../benchmarks/results", here)
    lines, out, i = markdown.split("\n"), [], 0
    while i < len(lines):
        mark = RESULTS_MARK.match(lines[i]) or PLOTS_MARK.match(lines[i])
        if not mark:
            out.append(lines[i])
            i += 1
            continue
        if "name" in mark.groupdict():
            kind, body = "results", results_markdown(mark["name"])
        else:
            kind, body = "plots", plots_markdown(mark["prefix"], base=images)
        end = _region_end(lines, i, kind)
        out += [body] if site else [lines[i], "", body, "", f"<!-- /{kind} -->"]
        i = (end if end is not None else i) + 1
    return "\n".join(out)


def _region_end(lines: list[str], start: int, kind: str) -> int | None:
    """The line of the end marker of the region a marker opens, or None (a bare marker)."""
    for j in range(start + 1, len(lines)):
        if END_MARK.match(lines[j]):
            return j if END_MARK.match(lines[j])["kind"] == kind else None
        if RESULTS_MARK.match(lines[j]) or PLOTS_MARK.match(lines[j]):
            return None
    return None


def result_files() -> list[Path]:
    return sorted(RESULTS.glob("*.json"))


def load_result(name: str) -> dict:
    path = RESULTS / f"{name}.json"
    if not path.is_file():
        raise MarkerError(f"{path.relative_to(ROOT)} does not exist (named by a results marker)")
    return json.loads(path.read_text())


def machine_line(data: dict) -> str:
    m = data.get("machine") or {}

    def get(key: str) -> str:
        value = m.get(key, m.get("cpus") if key == "cores" else None)
        return "not recorded" if value is None else str(value)

    parts = [
        f"{get('cpu_model')}, {get('cores')} cores",
        f"Python {get('python')}",
        f"torch {get('torch')}",
        f"torchrl {get('torchrl')}",
        f"ray {get('ray')}",
    ]
    if m.get("gpu"):
        parts.insert(1, f"GPU {m['gpu']}")
    line = "**Machine:** " + "; ".join(parts) + "."
    if data.get("date"):
        line += f" **Run:** {data['date']}"
        if data.get("command"):
            line += f", `{data['command']}`"
        line += "."
    if m.get("note"):
        line += f" *{m['note']}*"
    return line


#: the result files whose tables the page builds from the stored results with the
#: benchmark's own report code (``benchmarks/NAME.py``'s ``page_tables``), not the tables
#: the run printed: a page whose figures are checked against each other, by one code
BUILT_TABLES = ("atari_learning", "marl")


def benchmark_module(name: str) -> types.ModuleType:
    """``benchmarks/NAME.py`` as a module (its import sets no warning filter of this
    process: a benchmark script may silence warnings for its own runs)."""
    import importlib.util
    import warnings

    path = ROOT / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"fleetrl_benchmark_{name}", path)
    module = importlib.util.module_from_spec(spec)
    # its sibling modules (common.py, ...) import as they do when it runs as a script
    sys.path.insert(0, str(path.parent))
    try:
        with warnings.catch_warnings():
            spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def results_markdown(name: str, page: str = "") -> str:
    data = load_result(name)
    if name in BUILT_TABLES:
        body = [_table(t) for t in benchmark_module(name).page_tables(data)]
    elif data.get("tables"):
        body = [_table(t) for t in data["tables"]]
        ratios = data.get("ratios")
        if isinstance(ratios, dict) and all(isinstance(v, (int, float)) for v in ratios.values()):
            rows = [[k, f"{v:.2f}x"] for k, v in ratios.items()]
            # a script that printed its ratios (sweep_best) has them in its tables already
            if rows and not any(t["rows"] == rows for t in data["tables"]):
                body.append(_table({"title": None, "header": ["ratio", "value"], "rows": rows}))
    elif name.startswith("learner_throughput"):
        body = [_learner_table(data)]
    elif name == "mujoco_learning":  # merged runs: no one run's printed table
        body = [_mujoco_table(data)]
    elif name == "time_to_solve":
        body = _time_to_solve_tables(data)
    elif name == "startup":
        body = _startup_tables(data)
    else:
        raise MarkerError(f"benchmarks/results/{name}.json has no tables to show")
    note = [f"*{data['note']}*"] if data.get("note") else []
    return "\n\n".join(
        [*body, *note, machine_line(data), f"*From `benchmarks/results/{name}.json`.*"]
    )


def plots_markdown(prefix: str, page: str = "", *, base: str = "img") -> str:
    """Each PNG ``benchmarks/results/PREFIX*.png`` as a figure with its caption, and its
    alt text said in words (PLOT_TEXT); ``base`` is the folder the page finds them in."""
    pngs = sorted(RESULTS.glob(f"{prefix}*.png"))
    if not pngs:
        raise MarkerError(f"no benchmarks/results/{prefix}*.png (named by a plots marker)")
    describe = PLOT_TEXT.get(prefix)
    if describe is None:
        raise MarkerError(
            f"the plots of {prefix} have no alt text and caption: add {prefix!r} to "
            "PLOT_TEXT in docs/reference_pages.py"
        )
    figures = []
    for png in pngs:
        alt, caption = describe(png)
        # blank lines: the image is Markdown both for md_in_html and for a code host
        figures.append(
            f'<figure markdown="span">\n\n![{_alt(alt)}]({base}/{png.name})\n\n'
            f"<figcaption>{html.escape(caption)}</figcaption>\n</figure>"
        )
    return "\n\n".join(figures)


def _alt(text: str) -> str:
    return text.replace("[", "(").replace("]", ")").replace("\n", " ")


def _mujoco_learning_plot(png: Path) -> tuple[str, str]:
    """mujoco_learning_ALGO_ENV.png: the learning curves of one algorithm on one env, from
    the runs of ``mujoco_learning.json`` (keyed "WHO ALGO ENV")."""
    runs = load_result("mujoco_learning")["results"]
    key = next((k for k, r in runs.items() if Path(r.get("png") or "").name == png.name), None)
    if key is None:
        raise MarkerError(f"benchmarks/results/mujoco_learning.json names no run of {png.name}")
    _, algo, env, *tags = key.split(maxsplit=3)  # tags: a run's overrides or seed, "[...]"
    names = {"fleetrl": "fleetrl", "rllib": "RLlib"}
    who = [
        names.get(k.split()[0], k.split()[0])
        for k in runs
        if k.split(maxsplit=3)[1:] == [algo, env, *tags]
    ]
    caption = " ".join([f"{algo.upper()} on {env}", *tags])
    alt = (
        f"Learning curves of {caption}: the mean training return of the last 20 episodes "
        f"against env steps, {' and '.join(who)}, with the target score "
        f"{runs[key]['target']:,.0f} as a dashed line"
    )
    return alt, caption


def _atari_learning_plot(png: Path) -> tuple[str, str]:
    """atari_learning_ALGO_GAME.png: one run's learning curve, from ``atari_learning.json``."""
    runs = load_result("atari_learning")["results"]
    key = next((k for k, r in runs.items() if Path(r.get("png") or "").name == png.name), None)
    if key is None:
        raise MarkerError(f"benchmarks/results/atari_learning.json names no run of {png.name}")
    run = runs[key]
    who = "the plain PPO loop" if run["algo"] == "plain" else run["algo"].upper()
    caption = f"{who} on {run['game']}{run.get('suffix', '')}"
    alt = (
        f"Learning curve of {caption}: the mean training return of the last 20 episodes "
        f"against agent steps, from {run['curve'][0][1]:.1f} to {run['score']:.1f} at "
        f"{run['frames']:,} steps, with a random policy's score as a dashed line"
    )
    return alt, caption


def _atari_peer_plot(png: Path) -> tuple[str, str]:
    """atari_peer.png: both sides' learning curves, each seed, from ``atari_peer.json``."""
    data = load_result("atari_peer")
    ends = [
        f"{who} seed {seed} ends at {run['score']:.1f}"
        for who, side in (("fleetrl", "fleetrl"), ("Sample Factory", "sample_factory"))
        for seed, run in data[side].items()
    ]
    alt = (
        f"Learning curves of APPO on {data['game']}, fleetrl and Sample Factory 2.1.1, one "
        f"line per seed: the mean training return of the last 20 episodes against agent "
        f"steps, up to {data['steps']:,}; " + "; ".join(ends)
    )
    return alt, f"APPO on {data['game']}: fleetrl and Sample Factory, two seeds each"


def _collector_throughput_plot(png: Path) -> tuple[str, str]:
    """collector_throughput.png: frames/s against envs, from ``collector_throughput.json``."""
    rows = load_result("collector_throughput")["results"]
    envs = ", ".join(str(r["num_envs"]) for r in rows)
    first, last = rows[0], rows[-1]
    alt = (
        f"Frames per second against the number of envs ({envs}, log scales) for the raw loop, "
        "the lean raw loop, fleetrl's SyncDataCollector, fleetrl with a compiled policy and "
        f"torchrl's Collector: fleetrl goes from {first['fleetrl_vs_lean']:.2f}x the lean raw "
        f"loop (the limit) at {first['num_envs']} env to {last['fleetrl_vs_lean']:.2f}x at "
        f"{last['num_envs']}, stays {min(r['fleetrl_vs_raw'] for r in rows):.2f}x to "
        f"{max(r['fleetrl_vs_raw'] for r in rows):.2f}x the raw loop, and "
        f"{min(r['fleetrl_vs_torchrl'] for r in rows):.1f}x to "
        f"{max(r['fleetrl_vs_torchrl'] for r in rows):.1f}x above torchrl"
    )
    return alt, "Collector throughput against envs (CartPole-v1)"


def _ray_throughput_plot(png: Path) -> tuple[str, str]:
    """ray_throughput.png: first-ready frames/s against collectors, from
    ``ray_throughput.json``'s ``results.scaling``."""
    rows = load_result("ray_throughput")["results"].get("scaling")
    if not rows:
        raise MarkerError("benchmarks/results/ray_throughput.json has no scaling series")
    counts = ", ".join(str(r["collectors"]) for r in rows)
    parts = [
        f"{r['collectors']} collector{'s' if r['collectors'] > 1 else ''}: fleetrl at "
        + (f"{r['fleetrl_vs_limit']:.2f}x" if r.get("fleetrl_vs_limit") else "no figure")
        + " the raw loops"
        + (f", {r['fleetrl_vs_torchrl']:.1f}x torchrl's" if r.get("fleetrl_vs_torchrl") else "")
        for r in rows
    ]
    alt = (
        f"Frames per second against the number of Ray collectors ({counts}) for as many raw "
        "loops in as many processes, fleetrl's RayCollector and torchrl's, both first "
        "ready; " + "; ".join(parts)
    )
    return alt, "Ray throughput against collectors (CartPole-v1, 64 envs each, first ready)"


def _learner_plot(png: Path) -> tuple[str, str]:
    """learner_throughput*.png: fleetrl's step against plain PyTorch's, per case."""
    name = png.stem
    cases = load_result(name)["cases"]
    mode = "compiled" if name.endswith("compiled") else "eager"
    ratios = {c: v.get(f"ratio_{mode}") for c, v in cases.items() if v.get(f"ratio_{mode}")}
    below = [c for c, r in ratios.items() if r < 0.9]
    alt = (
        f"Horizontal bars, one per case, of plain PyTorch's milliseconds per {mode} optimizer "
        f"step divided by fleetrl's, from {min(ratios.values()):.2f}x to "
        f"{max(ratios.values()):.2f}x, with the 0.9x target as a dashed line"
        + (f"; below it: {', '.join(below)}" if below else "; every case at or above it")
    )
    return alt, f"Learner throughput against plain PyTorch, {mode} ({name}.json)"


def _memory_plot(png: Path) -> tuple[str, str]:
    """memory.png: each contestant's mean return against env steps and against seconds."""
    data = load_result("memory")
    parts = []
    for who, s in data["contestants"].items():
        if s["solved"]:
            parts.append(
                f"{who} reaches 475 in {s['solved']} of {s['seeds']} seeds, at a median of "
                f"{s['frames_to_target']:,.0f} steps and {s['wall_to_target_s']:.0f} s"
            )
        else:
            parts.append(f"{who} stays below 475, best median return {s['best_return']:.0f}")
    alt = (
        "Two panels of learning curves on CartPole without velocities, one line per seed: "
        "the mean return of the last 20 episodes against env steps (left) and against "
        "seconds from launch (right), with 475 as a dashed line; " + "; ".join(parts)
    )
    return alt, "Recurrent PPO on CartPole without velocities: fleetrl, SB3-contrib, the floor"


def _marl_plot(png: Path) -> tuple[str, str]:
    """marl.png: each learner's smoothed team return against frames and against seconds."""
    learn = load_result("marl")["learning"]
    parts = []
    for name, c in learn["contestants"].items():
        reached = c.get("time_to_shared_s")
        when = (
            f"reaches its seed's shared return at {reached:.0f} s"
            if reached is not None
            else "reaches no seed's shared return"
        )
        parts.append(f"{name} ends at {c['return']:.2f} and {when}")
    shared = learn["per_seed"][0]["shared_return"]  # what the plot draws (marl.shared_of)
    alt = (
        "Two panels of MAPPO learning curves on MPE simple_spread, one line per learner and "
        "seed: the team return against env steps (left) and against seconds from launch "
        f"(right), with seed 0's shared return, {shared:.2f}, as a dashed line; the medians "
        f"over the {len(learn['per_seed'])} seeds: " + "; ".join(parts)
    )
    return alt, "MAPPO on simple_spread: fleetrl, torchrl's own loop, RLlib"


#: the alt text and caption of each plot, by its results prefix: a plot is said in words
PLOT_TEXT = {
    "atari_learning": _atari_learning_plot,
    "atari_peer": _atari_peer_plot,
    "marl": _marl_plot,
    "memory": _memory_plot,
    "mujoco_learning": _mujoco_learning_plot,
    "collector_throughput": _collector_throughput_plot,
    "ray_throughput": _ray_throughput_plot,
    "learner_throughput": _learner_plot,
}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


CODE_SPAN = re.compile(r"(`+).+?\1")


def _text(text: str) -> str:
    """Plain text (a help or doc line) for a table cell: outside its code spans, ``<``
    and ``>`` are shown, not read as HTML tags, and ``_`` never starts emphasis
    (``runs/<algo>_<env>_<time>``)."""
    out, end = [], 0
    for span in CODE_SPAN.finditer(text):
        out += [_escape(text[end : span.start()]), span.group()]
        end = span.end()
    return _cell("".join([*out, _escape(text[end:])]))


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("_", "\\_")


def _table(t: dict) -> str:
    lines = [f"**{t['title']}**", ""] if t.get("title") else []
    lines += ["| " + " | ".join(_cell(h) for h in t["header"]) + " |"]
    lines += ["|" + "---|" * len(t["header"])]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t["rows"]]
    return "\n".join(lines)


def _learner_table(data: dict) -> str:
    cases = data["cases"]
    kinds = [
        k
        for k in ("eager", "compiled", "cudagraphs")
        if any(f"fleetrl {k}" in c["ms_per_step"] for c in cases.values())
    ]
    header = ["case"]
    for k in kinds:
        header += [f"fleetrl {k} ms/step"] + ([f"plain {k} ms/step"] if k != "cudagraphs" else [])
    header += [f"fleetrl {k} / plain eager" for k in kinds]
    rows = []
    for case, c in cases.items():
        ms, row = c["ms_per_step"], [case]
        for k in kinds:
            row.append(_num(ms.get(f"fleetrl {k}")))
            if k != "cudagraphs":
                row.append(_num(ms.get(f"plain {k}")))
        for k in kinds:
            # the benchmark's own ratio: the median over the paired rounds of plain's time
            # over fleetrl's in the same round (files made before it was kept: the medians')
            paired = c.get(f"ratio_{k}_vs_plain_eager")
            fast, plain = ms.get(f"fleetrl {k}"), ms.get("plain eager")
            if paired is not None:
                row.append(f"{paired:.2f}x")
            else:
                row.append(f"{plain / fast:.2f}x" if fast and plain else "-")
        rows.append(row)
    device = data.get("device", "cpu")
    return _table(
        {
            "title": f"ms per optimizer step (medians over rounds), device {device}; speed "
            "ratio: the median over paired rounds of plain eager's time over fleetrl's",
            "header": header,
            "rows": rows,
        }
    )


def _mujoco_table(data: dict) -> str:
    rows = []
    for run, r in data["results"].items():
        rows.append(
            [
                run,
                f"{r.get('frames', 0):,}",
                _num(r.get("target")),
                _num(r.get("score")),
                _num(r.get("eval_return")),
                _num(r.get("wall_s"), "s"),
                _num(r.get("frames_per_s")),
                _num(r.get("updates_per_s")),
                f"{r['date']}, {r['cpu_model']}" if r.get("date") else "earlier, not recorded",
            ]
        )
    return _table(
        {
            "title": "score: mean training return of the last 20 episodes at the end "
            "of the budget; eval: 10 episodes of `fleetrl eval` on the final checkpoint, "
            "acting as the algorithm evaluates (PPO samples, SAC is deterministic; the "
            "earlier rows' PPO evaluation was deterministic: see the changelog); each row is "
            "a run of its own, merged into the file",
            "header": [
                "run",
                "env steps",
                "target",
                "score",
                "eval return",
                "wall time",
                "frames/s",
                "updates/s",
                "when, where",
            ],
            "rows": rows,
        }
    )


def _time_to_solve_tables(data: dict) -> list[str]:
    res = {k: v for k, v in data["results"].items() if k not in ("ratios", "failed")}
    rows = [
        [
            name,
            f"{r['solved']}/{len(r.get('runs', []))}",
            _num(r.get("median_wall_s"), "s"),
            _num(r.get("median_startup_s"), "s"),
            f"{r.get('median_frames', 0):,}",
        ]
        for name, r in res.items()
    ]
    ratios = [
        [
            name,
            f"{r['value']:.2f}x",
            f"{r['target']:.2f}x",
            "met" if r["value"] <= r["target"] else "not met",
        ]
        for name, r in data["results"].get("ratios", {}).items()
    ]
    return [
        _table(
            {
                "title": "wall time from process start until the mean return of the last 20 "
                "training episodes reaches 475",
                "header": ["contestant", "solved", "median wall time", "start-up", "median frames"],
                "rows": rows,
            }
        ),
        _table(
            {
                "title": "ratios of median wall times (lower is faster)",
                "header": ["ratio", "value", "target", ""],
                "rows": ratios,
            }
        ),
    ]


def _startup_tables(data: dict) -> list[str]:
    rows = [[k, _num(v, "s")] for k, v in data["medians"].items()]
    ratios = [[k, f"{v:.2f}x"] for k, v in data.get("ratios", {}).items()]
    return [
        _table({"title": None, "header": ["measure", "median"], "rows": rows}),
        _table({"title": None, "header": ["ratio", "value"], "rows": ratios}),
    ]


def _num(value, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        text = (
            f"{value:,.0f}"
            if abs(value) >= 100
            else f"{value:.3g}"
            if abs(value) < 1
            else f"{value:.2f}"
        )
    else:
        text = f"{value:,}"
    return f"{text} {unit}".strip()


# --- the README's headline ratios -------------------------------------------------------

HEADLINE_MARK = "<!-- headline-ratios -->"


def _cell_in(data: dict, row_start: str, column: str, table: int = 0) -> str:
    t = data["tables"][table]
    col = t["header"].index(column)
    return next(r[col] for r in t["rows"] if r[0].startswith(row_start))


def _served_pong(data: dict) -> dict:
    """Central inference on Pong in the committed result: its ratios to local inference and
    to torchrl's AsyncBatchedCollector (medians of per-round ratios)."""
    res = next(r for r in data["results"] if r["workload"] == "pong")
    server = res["rows"]["server-cpu"]
    return {
        "setting": f"{res['workers']} workers x {res['envs']} envs",
        "x_local": server["x_local"],
        "x_torchrl": server["x_torchrl"],
    }


def _best_in(data: dict, row_start: str, column: str, table: int = 0) -> tuple[str, str]:
    """The row (label, value) with the highest ratio among rows starting with ``row_start``."""
    t = data["tables"][table]
    col = t["header"].index(column)
    rows = [r for r in t["rows"] if r[0].startswith(row_start)]
    best = max(rows, key=lambda r: float(r[col].rstrip("x")))
    return best[0], best[col]


def headline_rows() -> list[list[str]]:
    """The README's headline ratios, each computed from its committed result file."""
    col = load_result("collector_throughput")
    ray = load_result("ray_throughput")
    atari = load_result("atari_throughput")
    learner = load_result("learner_throughput")["cases"]["ppo_mujoco_tanh"]
    solve = load_result("time_to_solve")["results"]["ratios"]
    sweep = load_result("sweep_best")["ratios"]
    served = _served_pong(load_result("inference_server"))
    best_label, best_vs_raw = _best_in(atari, "fleetrl SyncDataCollector", "vs limit")
    engine = best_label.split(":", 1)[1].strip()
    return [
        [
            "`SyncDataCollector`, CartPole, 64 envs",
            "a lean raw loop, the limit (frames/s)",
            _cell_in(col, "64", "fleetrl/lean raw"),
        ],
        ["", "a raw loop on gymnasium and torch (frames/s)", _cell_in(col, "64", "fleetrl/raw")],
        ["", "torchrl `Collector` (frames/s)", _cell_in(col, "64", "fleetrl/torchrl")],
        [
            "`RayCollector` first-ready, 2 workers x 64 envs",
            "two raw loops (frames/s)",
            _cell_in(ray, "fleetrl RayCollector async", "vs limit"),
        ],
        [
            "",
            "torchrl `RayCollector` (frames/s)",
            _cell_in(ray, "torchrl RayCollector async", "fleetrl/torchrl"),
        ],
        [
            f"`SyncDataCollector`, Pong with the Nature CNN, 8 envs ({engine})",
            "a raw step-then-infer loop (steps/s)",
            best_vs_raw,
        ],
        ["", "torchrl `Collector` (steps/s)", _cell_in(atari, best_label, "vs torchrl")],
        [
            f'`RayCollector(inference="server")`, Pong CNN, {served["setting"]}, CPU server',
            "local inference (frames/s)",
            f"{served['x_local']:.2f}x",
        ],
        [
            "",
            "torchrl `AsyncBatchedCollector` (frames/s)",
            f"{served['x_torchrl']:.2f}x",
        ],
        [
            "PPO optimizer step, MuJoCo shapes, eager",
            "plain PyTorch (steps/s)",
            f"{learner['ratio_eager_vs_plain_eager']:.2f}x",  # the page's: paired rounds
        ],
        [
            "PPO to a return of 475 on CartPole, local",
            "RLlib PPO, local (wall time: lower wins)",
            f"{solve['fleetrl PPO / RLlib PPO, local']['value']:.2f}x",
        ],
        [
            "PPO to 475 on CartPole with the best config of `fleetrl tune` (12 trials, ASHA)",
            "the shipped config (wall time: lower wins)",
            f"{sweep['best / shipped ppo_cartpole.yaml, median wall']:.2f}x",
        ],
        [
            "",
            "the sweep's base: same envs, shipped hyperparameters",
            "{:.2f}x".format(sweep["best / the sweep's base, median wall"]),
        ],
    ]


def headline_table() -> str:
    rows = headline_rows()
    lines = ["| what | against | ratio |", "|---|---|---:|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["headline"]:  # the README's table, from the committed results
        print(headline_table())
    elif sys.argv[1:] == ["pages"]:  # the figures committed in the benchmark pages
        for page in benchmark_pages():
            path = DOCS / page
            path.write_text(committed_markers(path.read_text(), page))
    else:
        sys.exit("usage: python docs/reference_pages.py headline|pages")

"""Figures the docs quote, held to what they are quoted from.

- the multi-agent benchmark page (docs/benchmarks/marl.md): every difference, ratio and
  median it quotes is recomputed from the tables on the same page;
- the README's count of shipped configs is the number of shipped config files;
- the configs guide names every algorithm of the registry, and every shipped config;
- the ``Collector`` reference shows its table of backends (the site does not show the
  module docstring).
"""

from __future__ import annotations

import re
import statistics
import sys

import pytest

from docblocks import DOCS, ROOT

sys.path.insert(0, str(DOCS))
import reference_pages

from fleetrl.algorithms import ALGORITHMS

MARL_PAGE = DOCS / "benchmarks" / "marl.md"


# --- the multi-agent benchmark page --------------------------------------------------------


def page_tables(markdown: str) -> dict[str, tuple[list[str], list[list[str]]]]:
    """Every titled table of a page (``**title**``, a blank line, ``| ... |`` rows): title ->
    (header, rows)."""
    found = {}
    pattern = r"^\*\*(?P<title>[^\n]+)\*\*\n\n(?P<table>(?:\|[^\n]*\|\n?)+)"
    for m in re.finditer(pattern, markdown, re.M):
        lines = m["table"].strip().splitlines()
        cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
        found[m["title"]] = (cells[0], cells[2:])
    return found


def _table(tables: dict, starts: str) -> list[dict[str, str]]:
    """The rows of the table whose title starts with ``starts``, as column -> cell."""
    title = next(t for t in tables if t.startswith(starts))
    header, rows = tables[title]
    return [dict(zip(header, row)) for row in rows]


def _num(cell: str) -> float | None:
    """A cell's number (``-20.63``, ``+0.81``, ``97.2 s``, ``0.62x``, ``1,192``); None: ``-``."""
    cell = cell.strip().removesuffix(" s").removesuffix("x").replace(",", "")
    return None if cell in ("-", "") else float(cell)


def _decimals(cell: str) -> int:
    text = cell.strip().removesuffix(" s").removesuffix("x")
    return len(text.split(".")[1]) if "." in text else 0


def _half(cell: str) -> float:
    """Half the last shown digit of a cell: how far its rounding may be from the value."""
    return 0.5 * 10.0 ** -_decimals(cell) + 1e-9


def _ratio_bounds(a: str, b: str) -> tuple[float, float]:
    """The ratio a / b of two rounded cells may lie anywhere in these bounds."""
    x, y, dx, dy = _num(a), _num(b), _half(a), _half(b)
    return (x - dx) / (y + dy), (x + dx) / (y - dy)


def marl_figures_disagreeing(markdown: str) -> list[str]:
    """What the MARL page quotes that its own tables do not give: each per-seed difference
    and ratio from that seed's figures, each median of the learning table from the seeds',
    each target from the per-seed columns (the median of the seeds' differences and ratios)
    and the collection table, each collection ratio from its rounds. Empty: they agree."""
    tables = page_tables(markdown)
    bad: list[str] = []

    def check(what: str, shown: str, low: float, high: float) -> None:
        value, slack = _num(shown), _half(shown)
        if value is None or not (low - slack <= value <= high + slack):
            bad.append(f"{what}: the page says {shown}, its tables give {low:.4f} to {high:.4f}")

    def median_of(what: str, shown: str, cells: list[str]) -> None:
        # each cell's rounding moves the median by at most its half digit
        values = [_num(c) for c in cells if _num(c) is not None]
        if values:
            mid, slack = statistics.median(values), max(_half(c) for c in cells)
            check(what, shown, mid - slack, mid + slack)
        else:
            bad.append(f"{what}: no per-seed figure for {shown}")

    learning = _table(tables, "learning:")
    returns = _table(tables, "return at equal frames")
    times = _table(tables, "seconds from launch")
    collection = _table(tables, "collection:")
    targets = {row["target"]: row["measured"] for row in _table(tables, "targets")}
    title = next(t for t in tables if t.startswith("learning:"))
    if re.search(r"shared return -?\d", title):
        bad.append(f"the learning table's title quotes one shared return for every seed: {title}")

    for row in returns:
        seed, f, t = row["seed"], row["fleetrl"], row["torchrl"]
        low = min(_num(f) - _half(f), _num(t) - _half(t))
        high = min(_num(f) + _half(f), _num(t) + _half(t))
        what = f"seed {seed}: shared return, the lower of fleetrl's and torchrl's"
        check(what, row["shared return"], low, high)
        diff, slack = _num(f) - _num(t), _half(f) + _half(t)
        check(
            f"seed {seed}: fleetrl - torchrl", row["fleetrl - torchrl"], diff - slack, diff + slack
        )
    for row in times:
        seed = row["seed"]
        pairs = {
            "fleetrl / torchrl": ("fleetrl to shared", "torchrl to shared"),
            "fleetrl / torchrl (wall)": ("fleetrl wall", "torchrl wall"),
        }
        for ratio, (a, b) in pairs.items():
            if _num(row[a]) is None or _num(row[b]) is None:
                if row[ratio] != "-":
                    bad.append(f"seed {seed}: {ratio} is {row[ratio]} of an unreached time")
                continue
            check(f"seed {seed}: {ratio}", row[ratio], *_ratio_bounds(row[a], row[b]))

    labels = {"fleetrl MAPPO": "fleetrl", "torchrl MAPPO": "torchrl", "RLlib": "rllib"}
    for row in learning:
        name = next(n for label, n in labels.items() if row["contestant"].startswith(label))
        median_of(
            f"{name}'s median return", row["return at equal frames"], [r[name] for r in returns]
        )
        reached = [r[f"{name} to shared"] for r in times if r[f"{name} to shared"] != "-"]
        if reached:
            median_of(f"{name}'s median time to shared", row["time to shared return"], reached)
        elif row["time to shared return"] != "-":
            shown = row["time to shared return"]
            bad.append(f"{name} reached no shared return, the page says {shown}")
        median_of(
            f"{name}'s median wall time", row["wall time"], [r[f"{name} wall"] for r in times]
        )

    median_of(
        "target: return at equal frames, fleetrl - torchrl",
        targets["return at equal frames, fleetrl - torchrl"],
        [r["fleetrl - torchrl"] for r in returns],
    )
    median_of(
        "target: wall time to the shared return",
        targets["wall time to the shared return, fleetrl / torchrl"],
        [r["fleetrl / torchrl"] for r in times],
    )
    median_of(
        "wall time for the whole run",
        targets["wall time for the whole run, fleetrl / torchrl (not a target)"],
        [r["fleetrl / torchrl (wall)"] for r in times],
    )

    by_name = {row["contestant"]: row for row in collection}
    for row in collection:
        if row["limit"] == "-":
            continue
        mine, limit = row["rounds"].split("; "), by_name[row["limit"]]["rounds"].split("; ")
        bounds = [_ratio_bounds(a, b) for a, b in zip(mine, limit, strict=True)]
        low = statistics.median(b[0] for b in bounds)
        high = statistics.median(b[1] for b in bounds)
        check(f"collection, {row['contestant']} / {row['limit']}", row["vs limit"], low, high)
        median_of(f"collection, {row['contestant']}'s median frames/s", row["frames/s"], mine)
        target = targets.get(f"collection, {row['contestant']} / {row['limit']}")
        if target is not None and target != row["vs limit"]:
            bad.append(f"target {row['contestant']}: {target}, the table: {row['vs limit']}")
    return bad


@pytest.mark.parametrize("shown", ["committed", "site"])
def test_the_marl_page_figures_are_its_tables(shown):
    text = MARL_PAGE.read_text()
    if shown == "site":  # as the build fills the markers from benchmarks/results/marl.json
        text = reference_pages.fill_markers(text, "benchmarks/marl.md")
    assert marl_figures_disagreeing(text) == []


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        # the page before: the ratio of the medians against the median of the seeds' ratios
        ("| 0.62x | <= 0.50x |", "| 0.64x | <= 0.50x |", "target: wall time to the shared"),
        ("| -0.09 | >= +0.00 |", "| -0.01 | >= +0.00 |", "target: return at equal frames"),
        ("| 0.40x | - | - |", "| 0.42x | - | - |", "wall time for the whole run"),
        ("| 0 | 97.2 s | 243.3 s | - | 0.40x |", "| 0 | 97.2 s | 243.3 s | - | 0.42x |", "seed 0"),
        ("| raw loop x1 | 0.91x |", "| raw loop x1 | 0.95x |", "RayCollector x1 / raw loop x1"),
        ("learning: 3 seed(s),", "learning: 3 seed(s), shared return -20.72,", "one shared return"),
    ],
)
def test_a_marl_figure_its_tables_do_not_give_is_found(old, new, said):
    text = MARL_PAGE.read_text()
    assert old in text
    bad = marl_figures_disagreeing(text.replace(old, new, 1))
    assert any(said in problem for problem in bad), bad


def test_the_marl_page_tables_are_built_by_the_benchmarks_report_code():
    # the tables the page shows come from marl.json's results through benchmarks/marl.py's
    # report_tables, the code that prints them at the end of a run, not from stored text
    data = reference_pages.load_result("marl")
    marl = reference_pages.benchmark_module("marl")
    built = marl.page_tables(data)
    shown = reference_pages.results_markdown("marl")
    for table in built:
        assert reference_pages._table(table) in shown
    titles = [t["title"] for t in built]
    assert titles[-1].startswith("targets") and any(t.startswith("seconds from") for t in titles)


# --- the README's count of configs, the configs guide ------------------------------------------


def shipped_config_files() -> list[str]:
    """The shipped configs' file names: the package's (a checkout's ``configs/`` links to it)."""
    folder = ROOT / "src" / "fleetrl" / "configs"
    if not folder.is_dir():
        folder = ROOT / "configs"
    return sorted(p.name for p in folder.glob("*.yaml"))


def test_the_readme_counts_the_shipped_configs():
    readme = (ROOT / "README.md").read_text()
    said = re.findall(r"\b(\d+) configs ship\b", readme)
    assert said, "the README says how many configs ship, in digits: 'N configs ship'"
    assert [int(n) for n in said] == [len(shipped_config_files())] * len(said)


def _guide_section(title: str) -> str:
    guide = (DOCS / "guides" / "configs.md").read_text()
    return guide.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_configs_guide_lists_every_algorithm():
    table = _guide_section("Algorithms").split("|---", 1)[1]  # the rows, under the header
    rows = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert sorted(rows) == sorted(ALGORITHMS), "the Algorithms table of docs/guides/configs.md"
    said = re.search(
        r"^\| `algorithm` \| (.*?) \|", (DOCS / "guides" / "configs.md").read_text(), re.M
    )
    assert set(re.findall(r"`(\w+)`", said[1])) == set(ALGORITHMS), "the sections table's row"


def test_the_configs_guide_lists_every_shipped_config():
    rows = re.findall(r"^\| `([\w.]+\.yaml)` \|", _guide_section("The shipped configs"), re.M)
    assert sorted(rows) == shipped_config_files()


# --- the Collector reference ------------------------------------------------------------------


def test_the_collector_reference_shows_the_backend_table():
    """The API page renders ``Collector``'s docstring, not its module's: the table of backends
    is in the docstring's text, a Markdown table with a row for every backend."""
    griffe = pytest.importorskip("griffe")
    markdown = pytest.importorskip("markdown")
    from fleetrl.collectors.front import BACKEND_ALTERNATIVES, BACKENDS

    assert "::: fleetrl.collectors.front.Collector\n" in reference_pages.api_page()
    module = griffe.load("fleetrl.collectors.front", search_paths=[str(ROOT / "src")])
    docstring = module["Collector"].docstring
    assert "module docstring" not in docstring.value
    text = docstring.parse("google")[0]
    assert text.kind.value == "text"
    html = markdown.markdown(text.value, extensions=["tables"])
    rows = re.findall(r"<tr>\s*<td>(.*?)</td>", html, re.S)
    named = [set(re.findall(r'<code>(?:"|&quot;)(\w+)(?:"|&quot;)</code>', row)) for row in rows]
    assert set().union(*named) == {*BACKENDS, *BACKEND_ALTERNATIVES}
    assert len(rows) == 5

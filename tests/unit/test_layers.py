"""The import graph of ``src/fleetrl``: one-way layers, no cycles.

Each module belongs to one layer; a module may import modules of its own layer
and of the layers below it, never of a layer above. No two modules import each
other, directly or through others (imports under ``if TYPE_CHECKING:`` and
inside functions count: they are still dependencies). The package's
``__init__`` files are facades that import their names when first used (PEP
562): they are not in a layer.

The layers, top to bottom (:data:`LAYERS`), each a package but the base (modules):

============  ==============================================================
entry         the command line
run           the Trainer and what a run writes and reads: evaluation,
              checkpoints, metrics, run control, the run report, trackers,
              sweeps (the ``fleetrl.run`` package)
learners      the central, decoupled and gradient-worker learners
setup         parse, verify and build a config's parts
algorithms    the loss modules and networks
collectors    the collectors: ``local`` (SyncDataCollector and its rollout),
              ``remote`` (RayCollector, its workers, pool, rounds, replay
              actor) and ``inference`` (central inference servers); what both
              share; evaluation videos
networks      network code: the default models and heads, policies, acting on
              tensors, normalization statistics (the ``fleetrl.networks``
              package)
envs          every engine behind one batched-env interface, and EnvSpec
distributed   the runtime (Ray start), the backends, the worker group, warm
              workers, the wire format, shared memory
base          config data, batch keys, errors, batch sizes, fleet sizes
============  ==============================================================
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

#: (layer, modules or packages in it), top to bottom
LAYERS: list[tuple[str, list[str]]] = [
    ("entry", ["fleetrl.cli"]),
    ("run", ["fleetrl.run"]),
    ("learners", ["fleetrl.learners"]),
    ("setup", ["fleetrl.setup"]),
    ("algorithms", ["fleetrl.algorithms"]),
    ("collectors", ["fleetrl.collectors"]),
    ("networks", ["fleetrl.networks"]),
    ("envs", ["fleetrl.envs"]),
    ("distributed", ["fleetrl.distributed"]),
    (
        "base",
        [
            "fleetrl.config",
            "fleetrl.keys",
            "fleetrl.errors",
            "fleetrl.batch_sizes",
            "fleetrl.fleet_size",
            "fleetrl._perf",
            "fleetrl._lazy",
            "fleetrl.extras",
        ],
    ),
]


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def import_graph(root: Path, package: str) -> tuple[dict[str, set[str]], set[str]]:
    """Module -> the package's modules it imports, and the set of packages (``__init__``)."""
    files = {module_name(root, p): p for p in (root / package).rglob("*.py")}
    packages = {module_name(root, p) for p in (root / package).rglob("__init__.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    targets.add(full if full in files else node.module)
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
        graph[module] = {t for t in targets if t in files and t != module}
    return graph, packages


def layer_of(module: str, layers: list[tuple[str, list[str]]]) -> int | None:
    for index, (_, members) in enumerate(layers):
        if any(module == m or module.startswith(m + ".") for m in members):
            return index
    return None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layering_problems(root: Path, package: str, layers: list[tuple[str, list[str]]]) -> list[str]:
    """Every cycle, every module in no layer, every import from a lower layer up."""
    graph, packages = import_graph(root, package)
    problems = [f"import cycle: {' <-> '.join(c)}" for c in cycles(graph)]
    for module in sorted(graph):
        if module in packages:
            continue  # facades: their names are imported when first used
        mine = layer_of(module, layers)
        if mine is None:
            problems.append(f"{module} is in no layer: add it to LAYERS")
            continue
        for target in sorted(graph[module]):
            if target in packages and layer_of(target, layers) is None:
                continue
            theirs = layer_of(target, layers)
            if theirs is not None and theirs < mine:
                problems.append(
                    f"{module} ({layers[mine][0]}) imports {target} ({layers[theirs][0]}), "
                    "a layer above it"
                )
    return problems


def test_fleetrl_imports_only_down_its_layers_and_has_no_cycle():
    assert layering_problems(SRC, "fleetrl", LAYERS) == []


@pytest.fixture
def planted(tmp_path):
    """A tiny package with one upward import and one cycle."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "top.py").write_text("from pkg import low\n")
    (pkg / "low.py").write_text("import pkg.top\n")  # up, and a cycle with top
    (pkg / "a.py").write_text("def f():\n    from pkg.b import g\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n"
    )
    (pkg / "loose.py").write_text("")
    return tmp_path


def test_the_check_finds_cycles_upward_imports_and_modules_in_no_layer(planted):
    layers = [("top", ["pkg.top", "pkg.a", "pkg.b"]), ("low", ["pkg.low"])]
    assert layering_problems(planted, "pkg", layers) == [
        "import cycle: pkg.a <-> pkg.b",
        "import cycle: pkg.low <-> pkg.top",
        "pkg.loose is in no layer: add it to LAYERS",
        "pkg.low (low) imports pkg.top (top), a layer above it",
    ]

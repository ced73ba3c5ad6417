"""``make test``'s runner (tests/layers.py): its two unit-layer processes run every unit
test file, and the docstring examples, exactly once between them."""

from __future__ import annotations

from pathlib import Path

import layers

ROOT = Path(__file__).resolve().parents[2]


def selected(cmd: list[str], path: str) -> bool:
    """Whether pytest run with ``cmd`` collects the file or folder ``path``."""
    args = cmd[cmd.index("pytest") + 1 :]
    ignored = [a.split("=", 1)[1] for a in args if a.startswith("--ignore=")]
    given = [a for a in args if not a.startswith("-") and (ROOT / a).exists()]

    def under(folder: str) -> bool:
        return path == folder or path.startswith(folder.rstrip("/") + "/")

    return any(under(g) for g in given) and not any(under(i) for i in ignored)


def test_the_unit_halves_run_every_unit_test_file_and_the_doctests_once():
    for everything in (False, True):
        unit, ray, _ = layers.commands(everything)
        assert len(unit) == 2
        files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests/unit").rglob("test_*.py"))
        assert len(files) > 40
        for path in [*files, "src/fleetrl"]:
            assert [selected(cmd, path) for cmd in unit].count(True) == 1, path
            assert not selected(ray, path), path
        assert all("-n" not in cmd for cmd in unit)  # no xdist: see the runner's docstring

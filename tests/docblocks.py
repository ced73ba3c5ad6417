"""The runnable examples of the docs and the README: collected from fenced blocks and run.

Every ```python block of a page is an example a user may paste: the blocks of one page
run in order in one namespace (a later block may use what an earlier one built), in a
scratch directory that holds a link to the repository's ``configs/``, so that paths
such as ``configs/ppo_cartpole.yaml`` work as from a checkout and runs are written
out of the tree. A block that cannot run in a test (a cluster, a GPU) is marked on the
line before it with ``<!-- docs: skip REASON -->``; the marks are counted and listed
(``python tests/docblocks.py --skipped``). Other fences (bash, yaml, text) are not run.

Run one page by hand::

    .venv/bin/python tests/docblocks.py docs/guides/ray-collector.md
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SKIP = re.compile(r"<!--\s*docs:\s*skip\s+(?P<reason>.+?)\s*-->")
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n]*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it starts (1-based line of its fence), its language,
    its code, and why it is not run (None: it runs)."""

    path: Path
    line: int
    lang: str
    code: str
    skip: str | None

    @property
    def runs(self) -> bool:
        return self.lang == "python" and self.skip is None

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, in order."""
    lines = Path(path).read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang, start = m["indent"], m["lang"], i
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        before = next((s for s in reversed(lines[:start]) if s.strip()), "")
        mark = SKIP.search(before)
        found.append(
            Block(
                Path(path),
                start + 1,
                lang,
                "\n".join(body) + "\n",
                mark["reason"] if mark else None,
            )
        )
        i += 1
    return found


def pages() -> list[Path]:
    """The README and every page of the docs site, in a stable order."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def runnable_pages() -> list[Path]:
    return [p for p in pages() if any(b.runs for b in blocks(p))]


def skipped() -> list[Block]:
    return [b for p in pages() for b in blocks(p) if b.lang == "python" and b.skip]


@contextlib.contextmanager
def scratch_dir():
    """A temporary working directory with ``configs/`` linked in; the old one restored."""
    old = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="fleetrl-docs-") as tmp:
        os.symlink(ROOT / "configs", Path(tmp) / "configs")
        os.chdir(tmp)
        try:
            yield Path(tmp)
        finally:
            os.chdir(old)


def run_page(path: Path) -> dict:
    """Run every runnable block of ``path`` in order in one namespace; return the namespace.

    A failing block raises with the page and line of its fence in the traceback.
    """
    scope: dict = {"__name__": "__docs__"}
    with scratch_dir():
        for block in blocks(path):
            if block.runs:
                # blank lines up to the fence keep the traceback's line numbers the page's
                code = "\n" * block.line + block.code
                exec(compile(code, str(block.path), "exec"), scope)
    return scope


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--skipped":
        marks = skipped()
        for b in marks:
            print(f"{b.where()}: {b.skip}")
        print(f"{len(marks)} python blocks marked not to run")
        return 0
    for name in argv or [str(p) for p in runnable_pages()]:
        path = Path(name).resolve()
        n = sum(b.runs for b in blocks(path))
        print(f"{path.relative_to(ROOT)}: running {n} blocks", flush=True)
        run_page(path)
        print(f"{path.relative_to(ROOT)}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    sys.exit(main(sys.argv[1:]))

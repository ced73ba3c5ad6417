"""The install commands of the README and the docs pages: each one works today.

A page shows fleetrl installed from a checkout, from a built wheel or straight from the
repository (``pip install "fleetrl[...] @ git+URL"``), always after ``torch==2.13.0``
(an unpinned torch pulls a CUDA build). The package index's ``pip install fleetrl``
appears only beside the words that say it works once the package is published. The
repository's address is the site's ``repo_url`` where the build knows it (docs/hooks.py
fills it in), and elsewhere a placeholder that a sentence names as one.
"""

from __future__ import annotations

import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from docblocks import DOCS, FENCE, ROOT, pages

sys.path.insert(0, str(DOCS))
import reference_pages

#: the words beside an install from the package index, which does not hold fleetrl yet
ONCE_PUBLISHED = "once the package is published"
#: an install of fleetrl from the package index: ``pip install fleetrl``,
#: ``pip install "fleetrl[atari]"``; not ``fleetrl @ git+URL``, a wheel or a checkout
INDEX_INSTALL = re.compile(
    r"""pip install\s+(?:-\S+\s+)*(?P<q>["']?)fleetrl(?:\[[^\]]*\])?(?P=q)"""
    r"""(?=[\s`);,.]|$)(?!\s*@)"""
)
#: a command that installs fleetrl, whichever way
FLEETRL_INSTALL = re.compile(r"""pip install\s.*(?:\bfleetrl\b|-e\s+["']?\.|dist/fleetrl|git\+)""")
TORCH_FIRST = re.compile(r"pip install\s+(?:-\S+\s+)*torch==2\.13\.0(?:\s|$)")
#: blocks that hold program output, quoted as it is printed (an error message that names
#: an extra is the code's, held by the code's tests), not commands to run
OUTPUT_LANGS = ("text",)
SHELL_LANGS = ("bash", "sh", "shell", "console", "")


@dataclass(frozen=True)
class Part:
    """A paragraph of prose, or a fenced block with the paragraph before it."""

    where: str
    text: str
    lang: str | None  # None: prose
    before: str = ""


def parts(path: Path) -> list[Part]:
    """The prose paragraphs and fenced blocks of a Markdown file, in order."""
    lines = path.read_text().splitlines()
    found: list[Part] = []
    paragraph: list[str] = []
    start = 0

    def close() -> None:
        if any(s.strip() for s in paragraph):
            found.append(Part(f"{path.relative_to(ROOT)}:{start + 1}", "\n".join(paragraph), None))
        paragraph.clear()

    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence:
            close()
            begin, body = i, []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            before = next((p.text for p in reversed(found) if p.lang is None), "")
            found.append(
                Part(
                    f"{path.relative_to(ROOT)}:{begin + 1}", "\n".join(body), fence["lang"], before
                )
            )
        elif not lines[i].strip():
            close()
        else:
            if not paragraph:
                start = i
            paragraph.append(lines[i])
        i += 1
    close()
    return found


ALL_PARTS = [part for page in pages() for part in parts(page)]
SHELL_BLOCKS = [p for p in ALL_PARTS if p.lang in SHELL_LANGS]
INSTALL_BLOCKS = [p for p in SHELL_BLOCKS if FLEETRL_INSTALL.search(p.text)]


def index_installs_not_said_to_wait(found: list[Part]) -> list[str]:
    """Where a part shows an install from the package index without saying, in the part or
    in the paragraph before its block, that it works once the package is published."""
    bad = []
    for part in found:
        if part.lang in OUTPUT_LANGS:
            continue
        for m in INDEX_INSTALL.finditer(part.text):
            said = ONCE_PUBLISHED in " ".join(f"{part.text}\n{part.before}".split())
            if not said:
                bad.append(f"{part.where}: {m.group(0)}")
    return bad


def test_no_page_shows_a_package_index_install_as_if_it_worked_today():
    bad = index_installs_not_said_to_wait(ALL_PARTS)
    assert not bad, (
        "fleetrl is not on the package index: install it from a checkout, a wheel or "
        f"git+URL, or say the command works {ONCE_PUBLISHED!r}:\n" + "\n".join(bad)
    )


def test_the_check_finds_a_bare_index_install():
    probe = [
        Part("a.md:1", 'pip install torch==2.13.0\npip install "fleetrl[atari]"', "bash"),
        Part("b.md:1", "Install it: `pip install fleetrl`.", None),
        Part("c.md:1", "pip install fleetrl", "bash", before=f"This works {ONCE_PUBLISHED}."),
        Part("d.md:1", 'pip install "fleetrl[atari] @ git+https://x/y.git"', "bash"),
        Part("e.md:1", "pip install -e '.[atari]'  # and dist/fleetrl-0.1.0.whl", "bash"),
        Part("f.md:1", "error: pip install 'fleetrl[mlflow]'", "text"),
    ]
    assert index_installs_not_said_to_wait(probe) == [
        'a.md:1: pip install "fleetrl[atari]"',
        "b.md:1: pip install fleetrl",
    ]


def test_the_docs_show_install_blocks():
    where = {p.where.split(":")[0] for p in INSTALL_BLOCKS}
    assert {"README.md", "docs/index.md", "docs/getting-started/install.md"} <= where


@pytest.mark.parametrize("block", INSTALL_BLOCKS, ids=[p.where for p in INSTALL_BLOCKS])
def test_every_install_block_installs_torch_first(block):
    lines = [line.split("#")[0] for line in block.text.splitlines()]
    first = next(i for i, line in enumerate(lines) if FLEETRL_INSTALL.search(line))
    assert any(TORCH_FIRST.search(line) for line in lines[:first]), (
        f"{block.where}: install torch==2.13.0 before fleetrl (an unpinned torch pulls a "
        "CUDA build)"
    )


def test_the_install_page_shows_each_way_that_works_today():
    text = (DOCS / "getting-started" / "install.md").read_text()
    for command in (
        f"git clone {reference_pages.REPO_PLACEHOLDER} fleetrl && cd fleetrl",
        'pip install -e ".[atari,mujoco,video]"',
        f'pip install "fleetrl[atari,mujoco,video] @ git+{reference_pages.REPO_PLACEHOLDER}"',
        "python -m build",
        'pip install "dist/fleetrl-0.1.0-py3-none-any.whl[atari,mujoco,video]"',
    ):
        assert command in text, command
    assert ONCE_PUBLISHED in " ".join(text.split())


# --- the repository's address -----------------------------------------------------------


def _site_markdown(page: Path, repo_url: str | None, monkeypatch) -> str:
    """``page`` as the site's build shows it, with ``repo_url`` as mkdocs.yml reads it."""
    import hooks
    from mkdocs.config import load_config as load_mkdocs

    if repo_url:
        monkeypatch.setenv("FLEETRL_REPO_URL", repo_url)
    else:
        monkeypatch.delenv("FLEETRL_REPO_URL", raising=False)
    config = load_mkdocs(str(ROOT / "mkdocs.yml"))
    src_uri = page.relative_to(DOCS).as_posix()
    shown = types.SimpleNamespace(file=types.SimpleNamespace(src_uri=src_uri))
    return hooks.on_page_markdown(page.read_text(), shown, config, None)


DOC_PAGES = [p for p in pages() if p.is_relative_to(DOCS)]
PLACEHOLDER_PAGES = [p for p in DOC_PAGES if reference_pages.REPO_PLACEHOLDER in p.read_text()]


def test_the_pages_that_clone_or_install_from_the_repository_use_the_placeholder():
    shown = {p.relative_to(DOCS).as_posix() for p in PLACEHOLDER_PAGES}
    assert {"index.md", "getting-started/install.md", "tutorials/ppo-ray-collector.md"} <= shown


@pytest.mark.parametrize("page", PLACEHOLDER_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_page_with_the_placeholder_says_it_is_one(page):
    # the note committed under <!-- repository -->, which the build fills where it knows
    # the address: a code host and a local build show the words
    text = page.read_text()
    assert reference_pages.REPO_MARK.search(text), (
        f"{page.name} shows {reference_pages.REPO_PLACEHOLDER} without the note that says it "
        "is a placeholder (<!-- repository --> ... <!-- /repository -->)"
    )
    assert text == reference_pages.repository_address(text, None), (
        f"{page.name}: the note under <!-- repository --> is not repository_note(None)"
    )


def test_the_readme_says_its_placeholder_is_one():
    readme = (ROOT / "README.md").read_text()
    said = next(p for p in parts(ROOT / "README.md") if p.lang is None and "placeholder" in p.text)
    assert reference_pages.REPO_PLACEHOLDER in said.text and "not an address" in said.text
    assert readme.index(said.text) < readme.index(f"git clone {reference_pages.REPO_PLACEHOLDER}")


@pytest.mark.parametrize("page", DOC_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_where_the_site_knows_the_repository_every_page_uses_its_address(page, monkeypatch):
    shown = _site_markdown(page, "https://github.com/o/r", monkeypatch)
    assert reference_pages.REPO_PLACEHOLDER not in shown
    assert "is a placeholder" not in shown
    if page in PLACEHOLDER_PAGES:
        assert "[https://github.com/o/r](https://github.com/o/r)" in shown
    unknown = _site_markdown(page, None, monkeypatch)
    assert reference_pages.REPO_PLACEHOLDER not in unknown or "is a placeholder" in unknown


@pytest.mark.parametrize(
    ("repo_url", "clone"),
    [
        ("https://github.com/o/r", "git clone https://github.com/o/r.git fleetrl"),
        (None, "git clone <your fleetrl repository URL> fleetrl"),
    ],
)
def test_the_install_page_clones_the_repository_the_site_names(repo_url, clone, monkeypatch):
    shown = _site_markdown(DOCS / "getting-started" / "install.md", repo_url, monkeypatch)
    assert f"{clone} && cd fleetrl" in shown
    git = (
        "git+https://github.com/o/r.git" if repo_url else f"git+{reference_pages.REPO_PLACEHOLDER}"
    )
    assert f'pip install "fleetrl[atari,mujoco,video] @ {git}"' in shown


def test_the_home_page_shows_how_to_install_and_links_the_repository(monkeypatch):
    home = DOCS / "index.md"
    blocks = [p for p in SHELL_BLOCKS if p.where.startswith("docs/index.md:")]
    assert any("git clone" in b.text and "make venv" in b.text for b in blocks)
    assert any(TORCH_FIRST.search(b.text) and "git+" in b.text for b in blocks)
    assert "](getting-started/install.md)" in home.read_text()
    shown = _site_markdown(home, "https://github.com/o/r/", monkeypatch)
    assert "The fleetrl repository: [https://github.com/o/r](https://github.com/o/r)." in shown


def test_the_repository_note_is_filled_only_inside_its_region():
    page = (
        "<!-- repository -->\nanything\n<!-- /repository -->\n\n"
        f"`{reference_pages.REPO_PLACEHOLDER}` in code; <!-- repository --> in prose\n"
    )
    known = reference_pages.repository_address(page, "https://h.example/o/r/")
    assert known == (
        "<!-- repository -->\nThe fleetrl repository: "
        "[https://h.example/o/r](https://h.example/o/r).\n<!-- /repository -->\n\n"
        "`https://h.example/o/r.git` in code; <!-- repository --> in prose\n"
    )
    unknown = reference_pages.repository_address(page, None)
    assert unknown.split("\n")[1] == reference_pages.repository_note(None)

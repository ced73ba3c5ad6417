"""Every runnable example of the docs site: each page's python blocks, in order, as a user
would paste them (tests/docblocks.py). The README's run in tests/integration/test_readme.py."""

from __future__ import annotations

import pytest

from docblocks import DOCS, ROOT, blocks, run_page, runnable_pages, skipped

PAGES = [p for p in runnable_pages() if DOCS in p.parents]


def test_the_docs_have_runnable_examples():
    assert len(PAGES) >= 15
    # a block that cannot run in a test says why; the reasons are listed by
    # `python tests/docblocks.py --skipped`
    assert all(b.skip.strip() for b in skipped())


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_docs_page_examples_run(page, ray_session):
    assert any(b.runs for b in blocks(page))
    run_page(page)


def test_runnable_examples_are_python_blocks_only():
    # a ```py or ```python3 fence would silently not run
    for page in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        odd = [b.where() for b in blocks(page) if b.lang in ("py", "python3", "pycon")]
        assert not odd, f"use ```python for runnable examples: {odd}"

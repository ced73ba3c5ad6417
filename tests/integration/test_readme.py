"""The README's runnable examples: every python block, as the docs' collector runs them."""

from __future__ import annotations

import pytest

from docblocks import ROOT, blocks, run_page

pytestmark = pytest.mark.usefixtures("ray_session")

README = ROOT / "README.md"


def test_readme_quickstarts_run(ray_session):
    runnable = [b for b in blocks(README) if b.runs]
    assert len(runnable) == 2, "the README has a local and a Ray quickstart in python"
    assert "<!-- quickstart-ppo -->" in README.read_text(), "README lost its PPO quickstart"
    scope = run_page(README)
    # the PPO loop over Ray collectors ran its whole budget
    assert scope["collector"].frames == 40_960

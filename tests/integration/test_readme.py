"""The README's runnable example: the PPO loop by hand over Ray collectors."""

from __future__ import annotations

import re

import pytest

from runs import ROOT

pytestmark = pytest.mark.usefixtures("ray_session")


def test_readme_quickstart_runs(ray_session):
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- quickstart-ppo -->\s*```python\n(.*?)```", text, re.S)
    assert block, "README lost its PPO quickstart block"
    scope: dict = {}
    exec(compile(block.group(1), "README.md quickstart", "exec"), scope)
    assert scope["collector"].frames == 40_960

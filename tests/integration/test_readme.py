"""Trainer and CLI, end to end on the session's Ray instance."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("ray_session")
ROOT = Path(__file__).resolve().parents[2]


def test_readme_quickstart_runs(ray_session):
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- quickstart-ppo -->\s*```python\n(.*?)```", text, re.S)
    assert block, "README lost its PPO quickstart block"
    scope: dict = {}
    exec(compile(block.group(1), "README.md quickstart", "exec"), scope)
    assert scope["collector"].frames == 40_960

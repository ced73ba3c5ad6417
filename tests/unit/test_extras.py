"""The install command a missing extra's message gives: the extra's own packages."""

from __future__ import annotations

import pytest
import tomllib
from packaging.requirements import Requirement

from fleetrl.extras import extra_requirements, pip_install
from runs import ROOT

EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_an_extras_command_installs_its_packages_as_pyproject_lists_them(extra):
    listed = [Requirement(r.split(";")[0]) for r in EXTRAS[extra]]
    found = [Requirement(r) for r in extra_requirements(extra)]
    # envpool's marker holds on this machine (Linux x86_64, Python >= 3.11): all are there
    assert [(r.name, r.extras, r.specifier) for r in found] == [
        (r.name, r.extras, r.specifier) for r in listed
    ]
    assert pip_install(extra) == "pip install " + " ".join(f"'{r}'" for r in found)
    assert "fleetrl[" not in pip_install(extra)  # no package index has fleetrl yet


def test_an_unknown_extra_says_the_checkout_command():
    assert pip_install("nope") == "pip install -e '.[nope]' (in a fleetrl checkout)"

"""The packages' lazy exports (fleetrl._lazy): every name listed once, and each resolves."""

from __future__ import annotations

import importlib
import importlib.util

import pytest

PACKAGES = ["fleetrl", "fleetrl.collectors", "fleetrl.envs", "fleetrl.setup"]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_lists_the_exports_and_each_resolves_to_its_defining_module(name):
    package = importlib.import_module(name)
    assert sorted(package.__all__) == sorted(package._EXPORTS)
    for export, module in package._EXPORTS.items():
        # a name that is also a submodule would be the module once anything imports it
        assert importlib.util.find_spec(f"{name}.{export}") is None, export
        assert getattr(package, export) is getattr(importlib.import_module(module), export)
        assert export in dir(package)
    with pytest.raises(AttributeError, match=f"module '{name}' has no attribute 'nope'"):
        package.nope  # noqa: B018

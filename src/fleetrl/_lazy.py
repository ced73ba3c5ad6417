"""A package's exported names, imported when first used (PEP 562).

``fleetrl``, ``fleetrl.collectors``, ``fleetrl.envs`` and ``fleetrl.setup`` list
their names in one ``{name: defining module}`` dict; :func:`lazy_exports` turns
it into the package's ``__getattr__`` and ``__dir__``, so ``import fleetrl``
loads neither torch nor Ray, and ``from fleetrl import PPO`` loads what PPO
needs, and only that.

Examples:
    >>> import sys, types
    >>> pkg = types.ModuleType("demo_pkg")
    >>> sys.modules["demo_pkg"] = pkg
    >>> pkg.__getattr__, pkg.__dir__ = lazy_exports("demo_pkg", {"sqrt": "math"})
    >>> pkg.sqrt(9.0), "sqrt" in vars(pkg)  # imported on first use, then a plain attribute
    (3.0, True)
    >>> "sqrt" in dir(pkg)
    True
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, exports: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, which exports ``exports``."""
    namespace = vars(sys.modules[package])

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # the next lookup is a plain one
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__

"""Process-wide tweaks that make the collector hot loop cheaper. Semantics-free.

Each function is idempotent, called by a collector's constructor (never at
import), and says what it saves.
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["skip_absent_pandas_probe"]


def skip_absent_pandas_probe() -> None:
    """Mark pandas as absent in ``sys.modules`` when it is not installed.

    tensordict 0.14's ``TensorDict.from_any`` calls
    ``importlib.util.find_spec("pandas")`` on every tensor a ``TensorDictModule``
    writes. Without pandas installed that walks every ``sys.path`` entry: about
    45 us per output key, over half the cost of a small policy's call. A ``None``
    entry in ``sys.modules`` is Python's documented marker for "this module
    cannot be imported": ``find_spec`` then answers ``None`` at once and
    ``import pandas`` raises ``ModuleNotFoundError`` as it would anyway.
    """
    if "pandas" in sys.modules:
        return
    if importlib.util.find_spec("pandas") is None:
        sys.modules["pandas"] = None  # type: ignore[assignment]

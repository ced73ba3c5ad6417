"""What installs an optional extra, said as a command that works however fleetrl was installed.

``pip install 'fleetrl[video]'`` works only once fleetrl is on a package index; a user who
installed it from a checkout, a wheel or a git URL needs the extra's own packages. The
messages that name a missing extra say :func:`pip_install`'s command: the extra's
requirements, read from fleetrl's installed metadata (the one list, ``pyproject.toml``'s),
with those whose markers exclude this machine left out.

Examples:
    >>> pip_install("video")
    "pip install 'imageio>=2.14' 'imageio-ffmpeg>=0.4'"
    >>> pip_install("no_such_extra")
    "pip install -e '.[no_such_extra]' (in a fleetrl checkout)"
"""

from __future__ import annotations

import functools
import importlib.metadata

__all__ = ["extra_requirements", "pip_install"]


@functools.cache
def extra_requirements(extra: str) -> tuple[str, ...]:
    """The requirements of fleetrl's ``extra`` that apply on this machine (empty when fleetrl's
    metadata is not installed or has no such extra)."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pragma: no cover - packaging comes with pip, Ray and setuptools
        return ()
    try:
        requires = importlib.metadata.requires("fleetrl") or []
    except importlib.metadata.PackageNotFoundError:
        return ()
    found = []
    for text in requires:
        req = Requirement(text)
        if req.marker is None or not req.marker.evaluate({"extra": extra}):
            continue
        if req.marker.evaluate({"extra": ""}):  # applies without the extra: a core dependency
            continue
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        found.append(f"{req.name}{extras}{req.specifier}")
    return tuple(found)


def pip_install(extra: str) -> str:
    """The command that installs ``extra``'s packages (``pip install 'imageio>=2.14' ...``); in
    a checkout without installed metadata, the editable install of the extra."""
    found = extra_requirements(extra)
    if not found:
        return f"pip install -e '.[{extra}]' (in a fleetrl checkout)"
    return "pip install " + " ".join(f"'{r}'" for r in found)

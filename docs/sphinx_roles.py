"""Sphinx cross-reference roles in fleetrl's docstrings, as links on the docs site.

The docstrings name other objects the Sphinx way (``:class:`~fleetrl.RayCollector```,
``:meth:`collect```, ``:mod:`fleetrl.distributed.wire```); mkdocstrings reads Markdown, which would show
the roles as they are written. :class:`SphinxRoles`, a griffe extension (mkdocs.yml), rewrites
every role of every docstring before mkdocstrings renders it: into an optional autorefs
reference to the object the role names, resolved the way Python would from the docstring's
scope, which is a link where the site documents that object and the name as code where it
does not (autorefs leaves an unresolved optional reference as its title). A ``:doc:`` or
``:ref:`` role names a page, not an object: its text is kept.

Kept beside ``hooks.py``, which checks that no role is left on any built page.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterator

#: a Sphinx role of the Python domain (or a page role), with ``~``, ``!`` and ``title <target>``
ROLE = re.compile(
    r":(?:py:)?(?P<role>class|func|meth|attr|data|const|obj|mod|exc|type|doc|ref|any):"
    r"`(?P<body>[^`]+)`"
)
#: a double-backtick code span: a role written inside one is an example, left alone
_CODE_OR_ROLE = re.compile(r"(?P<code>``.+?``)|" + ROLE.pattern, re.S)
#: a role as the built HTML shows it, Markdown having made its backticks a code span
ROLE_IN_HTML = re.compile(
    r":(?:py:)?(?:class|func|meth|attr|data|const|obj|mod|exc|type|doc|ref|any):(?:`|<code>)"
)
_CALLABLE_ROLES = ("func", "meth")
_PAGE_ROLES = ("doc", "ref")


def rewrite_roles(text: str, resolve: Callable[[str], str | None]) -> str:
    """``text`` with each role replaced by an optional autorefs reference to what
    ``resolve(target)`` returns (a dotted path), or by the name as code where it returns
    None or the role says ``!`` (no link).

    >>> rewrite_roles(":class:`~a.B` and :func:`c`", {"a.B": "a.b.B"}.get)
    '<autoref identifier="a.b.B" optional><code>B</code></autoref> and <code>c()</code>'
    """

    def replace(m: re.Match) -> str:
        if m["code"]:
            return m["code"]
        role, body = m["role"], m["body"].strip()
        explicit = re.fullmatch(r"(?P<title>.*?)\s*<(?P<target>[^<>]+)>", body, re.S)
        if role in _PAGE_ROLES:
            return html.escape(explicit["title"] if explicit else body, quote=False)
        target = explicit["target"] if explicit else body
        link = not target.startswith("!")
        target = target.lstrip("!")
        short = target.startswith("~")
        target = target.lstrip("~").removesuffix("()")
        if explicit:
            title = explicit["title"]
        else:
            title = target.rsplit(".", 1)[-1] if short else target
            if role in _CALLABLE_ROLES:
                title += "()"
        code = f"<code>{html.escape(title, quote=False)}</code>"
        path = resolve(target.lstrip(".")) if link else None
        if path is None:
            return code
        return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'

    return _CODE_OR_ROLE.sub(replace, text)


# --- the griffe extension -------------------------------------------------------------------

try:  # griffe comes with mkdocstrings (the docs extra); the rewrite above needs nothing
    import griffe
except ImportError:  # pragma: no cover
    griffe = None


def _objects(obj) -> Iterator:
    """``obj`` and every object defined under it (not the names it imports)."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)


def resolver(obj, exports: dict[str, str]) -> Callable[[str], str | None]:
    """How a role in ``obj``'s docstring finds its target: the dotted path as written
    (``fleetrl.distributed.wire``), else its first name looked up from ``obj``'s scope outwards (a
    method's class, its module, the module's imports), else a name of fleetrl's lazy
    exports (``fleetrl.RayCollector``, by ``exports``: name -> defining module). The
    result is the object's canonical path, the one its documentation is registered
    under; None where no object is found."""
    collection = obj.modules_collection

    def find(path: str):
        try:
            found = collection.get_member(path)
        except Exception:  # (griffe raises KeyError or alias errors)
            return None
        try:
            return found.final_target if found.is_alias else found
        except Exception:  # (an import of something not loaded: torch)
            return None

    def resolve(target: str) -> str | None:
        first, _, rest = target.partition(".")
        candidates = [target]
        try:
            base = obj.resolve(first)
        except Exception:  # (griffe.NameResolutionError)
            base = None
        if base:
            candidates.append(f"{base}.{rest}" if rest else base)
        head, _, tail = rest.partition(".")
        if first == "fleetrl" and head in exports:
            candidates.append(f"{exports[head]}.{head}" + (f".{tail}" if tail else ""))
        for path in candidates:
            found = find(path)
            if found is not None:
                return found.canonical_path
        return None

    return resolve


if griffe is not None:

    class SphinxRoles(griffe.Extension):
        """Rewrite the Sphinx roles of every docstring of a loaded package (see the module
        docstring); mkdocs.yml loads it as ``docs/sphinx_roles.py:SphinxRoles``."""

        def on_package(self, *, pkg, **kwargs) -> None:
            exports = _exports(pkg)
            for obj in _objects(pkg):
                if obj.docstring is not None and ROLE.search(obj.docstring.value):
                    obj.docstring.value = rewrite_roles(obj.docstring.value, resolver(obj, exports))


def _exports(pkg) -> dict[str, str]:
    """The package's lazy exports (``_EXPORTS`` in its ``__init__``: name -> module)."""
    if pkg.name != "fleetrl":
        return {}
    import fleetrl  # cheap: its names are imported when first used

    return dict(fleetrl._EXPORTS)

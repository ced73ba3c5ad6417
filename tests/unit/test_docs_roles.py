"""The docstrings' Sphinx roles on the docs site (docs/sphinx_roles.py): each rewritten into
a link to what it names, or its name as code; none left as text on a page."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from docblocks import DOCS, ROOT

sys.path.insert(0, str(DOCS))
import sphinx_roles

TARGETS = {
    "fleetrl.RayCollector": "fleetrl.collectors.remote.collector.RayCollector",
    "take": "fleetrl.collectors.remote.replay.RemoteReplayBuffer.take",
}


@pytest.mark.parametrize(
    "role,shown",
    [
        (
            ":class:`~fleetrl.RayCollector`",
            '<autoref identifier="fleetrl.collectors.remote.collector.RayCollector" optional>'
            "<code>RayCollector</code></autoref>",
        ),
        (
            ":py:class:`fleetrl.RayCollector`",
            '<autoref identifier="fleetrl.collectors.remote.collector.RayCollector" optional>'
            "<code>fleetrl.RayCollector</code></autoref>",
        ),
        (
            ":meth:`take`",
            '<autoref identifier="fleetrl.collectors.remote.replay.RemoteReplayBuffer.take" optional>'
            "<code>take()</code></autoref>",
        ),
        (
            ":meth:`the buffer's take <take>`",
            '<autoref identifier="fleetrl.collectors.remote.replay.RemoteReplayBuffer.take" optional>'
            "<code>the buffer's take</code></autoref>",
        ),
        (":func:`~fleetrl.nowhere.make()`", "<code>make()</code>"),  # not found: code
        (":class:`!fleetrl.RayCollector`", "<code>fleetrl.RayCollector</code>"),  # no link
        (":mod:`fleetrl.distributed.wire`", "<code>fleetrl.distributed.wire</code>"),
        (":attr:`codec`", "<code>codec</code>"),
        (":data:`A<B`", "<code>A&lt;B</code>"),
        (":exc:`~fleetrl.errors.ConfigError`", "<code>ConfigError</code>"),
        (":doc:`the resume concepts page`", "the resume concepts page"),  # a page: its words
    ],
)
def test_a_role_becomes_a_reference_or_code(role, shown):
    text = f"A {role}, said."
    assert sphinx_roles.rewrite_roles(text, TARGETS.get) == f"A {shown}, said."


def test_a_role_inside_a_code_span_is_left_as_written():
    text = "Write ``:class:`X``` in Sphinx; :class:`X` here."
    assert sphinx_roles.rewrite_roles(text, lambda t: None) == (
        "Write ``:class:`X``` in Sphinx; <code>X</code> here."
    )


@pytest.fixture(scope="module")
def fleetrl_docs():
    """fleetrl as mkdocstrings loads it for the site, with the extension of mkdocs.yml."""
    griffe = pytest.importorskip("griffe")
    extension = griffe.load_extensions(f"{DOCS / 'sphinx_roles.py'}:SphinxRoles")
    return griffe.load("fleetrl", search_paths=[str(ROOT / "src")], extensions=extension)


def test_no_docstring_keeps_a_role(fleetrl_docs):
    left = [
        obj.path
        for obj in sphinx_roles._objects(fleetrl_docs)
        if obj.docstring is not None and sphinx_roles.ROLE.search(obj.docstring.value)
    ]
    assert not left, f"docstrings that still hold a Sphinx role: {left}"


def test_roles_resolve_to_where_the_site_documents_the_object(fleetrl_docs):
    # the API page renders each export from its defining module (reference_pages.api_page),
    # so a link names that path, whatever import path the role used
    exports = sphinx_roles._exports(fleetrl_docs)
    inside = fleetrl_docs["collectors.local.sync.SyncDataCollector"]
    resolve = sphinx_roles.resolver(inside, exports)
    assert resolve("fleetrl.SyncDataCollector") == "fleetrl.collectors.local.sync.SyncDataCollector"
    assert (
        resolve("fleetrl.collectors.RayCollector")
        == "fleetrl.collectors.remote.collector.RayCollector"
    )
    assert resolve("collect") == "fleetrl.collectors.local.sync.SyncDataCollector.collect"
    assert resolve("fleetrl.envs.make_env") == "fleetrl.envs.make.make_env"
    assert resolve("no_such_name") is None


def test_the_build_fails_on_a_page_that_shows_a_role():
    pytest.importorskip("mkdocs")
    import hooks
    from mkdocs.exceptions import PluginError

    page = SimpleNamespace(file=SimpleNamespace(src_uri="reference/api.md"))
    assert hooks.on_page_content("<p><code>X</code></p>", page, None, None)
    with pytest.raises(PluginError, match=r"reference/api.md shows 1 Sphinx role"):
        hooks.on_page_content("<p>A :class:<code>~fleetrl.X</code>.</p>", page, None, None)

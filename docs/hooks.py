"""mkdocs hooks: the pages generated from the code and from the benchmark results.

At every build:

- ``reference/cli.md`` is written from ``fleetrl.cli.build_parser()``;
- ``reference/config.md`` from ``fleetrl.setup.reference.config_keys()`` (every key, its
  type, default, allowed values and doc line);
- ``reference/api.md`` indexes every name in ``fleetrl.__all__``, and
  ``reference/api/<group>.md`` renders each group's names with mkdocstrings;
- in the benchmark pages, each ``<!-- results: NAME -->`` line becomes the tables of
  ``benchmarks/results/NAME.json`` with the machine it ran on, and each
  ``<!-- plots: PREFIX -->`` line the PNGs ``benchmarks/results/PREFIX*.png`` as figures;
  what the page holds under the marker, down to ``<!-- /results -->`` (the same figures,
  committed for a code host: ``python docs/reference_pages.py pages``), is replaced;
- where the site has a repository address (``repo_url``: ``FLEETRL_REPO_URL``), every
  page's ``<your fleetrl repository URL>`` (a clone or a ``pip install ... @ git+`` line)
  becomes it, and each ``<!-- repository -->`` region links it; where it has none, the
  placeholder stays and the region says, in words, that it is one.

A result file that is missing, or a page marker that names none, fails the build, and so
does a page that still shows a Sphinx role (``:class:`...```) where a docstring's role
was not rewritten into a link (``sphinx_roles.py``, a griffe extension in mkdocs.yml).
"""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "docs"))

import reference_pages  # noqa: E402  (docs/reference_pages.py, beside this file)
import sphinx_roles  # noqa: E402


def on_files(files: Files, config) -> Files:
    for uri, text in reference_pages.generated_pages().items():
        files.append(File.generated(config, uri, content=text))
    for png in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"benchmarks/img/{png.name}", abs_src_path=str(png)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    markdown = reference_pages.repository_address(markdown, config.get("repo_url"))
    try:
        return reference_pages.fill_markers(markdown, page.file.src_uri)
    except reference_pages.MarkerError as err:
        raise PluginError(str(err)) from err


def on_page_content(html: str, page, config, files) -> str:
    left = sphinx_roles.ROLE_IN_HTML.findall(html)
    if left:
        raise PluginError(
            f"{page.file.src_uri} shows {len(left)} Sphinx role(s) as text ({left[0]!r}...): "
            "docs/sphinx_roles.py did not rewrite them"
        )
    return html

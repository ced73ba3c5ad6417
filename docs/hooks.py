"""mkdocs hooks: the pages generated from the code and from the benchmark results.

At every build:

- ``reference/cli.md`` is written from ``fleetrl.cli.build_parser()``;
- ``reference/config.md`` from ``fleetrl.setup.reference.config_keys()`` (every key, its
  type, default, allowed values and doc line);
- ``reference/api.md`` lists every name in ``fleetrl.__all__`` for mkdocstrings;
- in the benchmark pages, each ``<!-- results: NAME -->`` line becomes the tables of
  ``benchmarks/results/NAME.json`` with the machine it ran on, and each
  ``<!-- plots: PREFIX -->`` line the PNGs ``benchmarks/results/PREFIX*.png``.

A result file that is missing, or a page marker that names none, fails the build.
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


def on_files(files: Files, config) -> Files:
    for uri, text in reference_pages.generated_pages().items():
        files.append(File.generated(config, uri, content=text))
    for png in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"benchmarks/img/{png.name}", abs_src_path=str(png)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    try:
        return reference_pages.fill_markers(markdown, page.file.src_uri)
    except reference_pages.MarkerError as err:
        raise PluginError(str(err)) from err

"""MkDocs hooks of the docs site (``mkdocs.yml``'s ``hooks:``; ``make docs``).

* The front page is ``README.md`` itself, not a copy: :func:`on_files` adds it to the site as
  ``index.md``, its links rewritten for a page that lives in ``docs/`` (:func:`front_page`). The
  strict build then checks its links and anchors like any other page's.
* The API reference reads the docstrings by static analysis (griffe, no import). An operator's
  docstring documents, with ``:param x:``, keyword arguments its ``__init__`` passes on to the base
  class through ``**kwargs``; griffe's Sphinx parser warns that it finds no annotation for them, and
  under ``--strict`` every warning fails the build. :class:`_InheritedParams` drops that one
  message (it names no defect); every other docstring warning still fails the build.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

README = Path(__file__).resolve().parent.parent / "README.md"

#: ``](docs/x.md#a)`` in the README: the page is a sibling of the front page on the site.
_DOCS_LINK = re.compile(r"\]\(docs/")
#: ``](example_dags/name.py)``: the example's section of the examples page, which includes the file.
_EXAMPLE_LINK = re.compile(r"\]\(example_dags/([a-z0-9_]+)\.py\)")


def front_page(text: str) -> str:
    """The README as ``docs/index.md``: links into ``docs/`` lose the prefix, links to an example DAG
    go to its section of ``examples.md``. Any other relative link is left as it is, for the strict
    build to refuse (a file outside ``docs/`` is not on the site)."""
    text = _DOCS_LINK.sub("](", text)
    return _EXAMPLE_LINK.sub(r"](examples.md#\1)", text)


class _InheritedParams(logging.Filter):
    """Drop griffe's "No matching parameter for 'x'": a parameter documented on a class whose
    ``__init__`` takes it through ``**kwargs`` (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "No matching parameter for '" not in record.getMessage()


def on_config(config: Any) -> Any:
    griffe = logging.getLogger("mkdocs.plugins.griffe")
    if not any(isinstance(f, _InheritedParams) for f in griffe.filters):
        griffe.addFilter(_InheritedParams())
    return config


def on_files(files: Files, config: Any) -> Files:
    if files.get_file_from_path("index.md") is not None:
        raise ValueError("docs/index.md exists: the front page is README.md (scripts/mkdocs_hooks.py)")
    files.append(File.generated(config, "index.md", content=front_page(README.read_text(encoding="utf-8"))))
    return files

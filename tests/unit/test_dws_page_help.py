"""The DWS page's price-table help ships in the package, so a wheel install serves it too.

The page links to it when no price table is set (``render.summary_section``); the app serves it
(``views.price_help``, route ``render.PRICE_HELP_ROUTE``) from the installed package, never from a
source checkout's ``docs/``. ``docs/savings.md`` includes the same file rather than a copy.
"""

from __future__ import annotations

import fnmatch
from importlib import resources
from pathlib import Path

import pytest

from airflow_provider_dws.plugins.web import render, views

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "airflow_provider_dws"
#: The help, relative to the package directory (how setuptools' package-data globs are written).
HELP = f"plugins/web/{views.PRICE_HELP}"


def test_the_help_is_package_data() -> None:
    """Fails when ``pyproject.toml`` stops shipping the help: a wheel would serve a 404."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        package_data = tomllib.load(f)["tool"]["setuptools"]["package-data"]
    globs = package_data.get(PACKAGE, [])
    assert any(fnmatch.fnmatch(HELP, pattern) for pattern in globs), (
        f"{HELP} is not package data of {PACKAGE} (pyproject.toml [tool.setuptools.package-data]: {globs})"
    )
    assert (ROOT / PACKAGE / HELP).is_file()


def test_the_app_reads_the_help_from_the_package() -> None:
    text = views.price_help()
    assert text == resources.files(f"{PACKAGE}.plugins.web").joinpath(views.PRICE_HELP).read_text("utf-8")
    # The format and its example are in it, not only a pointer elsewhere.
    assert "[dws_prices]" in text and "AIRFLOW_VAR_DWS_PRICES" in text
    assert '"NVIDIA_H100_80GB": {"flex_start": 2.50' in text


def test_the_page_links_to_the_help_when_no_table_is_set() -> None:
    summary = {
        "prices": {"source": "no price table set", "error": None, "entries": 0},
        "by_dag": [],
        "by_day": [],
        "total": None,
    }
    html = render.summary_section(summary, "/dws/")
    assert f'href="/dws/{render.PRICE_HELP_ROUTE}"' in html
    assert "docs/" not in html


def test_the_docs_include_the_help_instead_of_copying_it() -> None:
    savings = (ROOT / "docs" / "savings.md").read_text(encoding="utf-8")
    assert f'--8<-- "{PACKAGE}/{HELP}"' in savings
    opening = views.price_help().split("\n\n")[1].splitlines()[0]  # the first line of its first paragraph
    copies = [p.name for p in (ROOT / "docs").rglob("*.md") if opening in p.read_text(encoding="utf-8")]
    assert copies == [], f"the price table's help is copied into {copies}; include it instead"

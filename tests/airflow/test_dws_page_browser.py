"""The DWS page in a real browser: Debian's Chromium (``/usr/bin/chromium``) driven by Playwright.

Never a browser download: Playwright is told the executable's path. Skipped, saying why, when
Playwright or Chromium is missing (``apt-get install -y chromium``; ``.ci/run`` installs it).
Against the same seeded api-server as ``test_dws_page.py``, logged in with the UI's ``_token``
cookie as a browser would be. Screenshots (1280 px wide, light and dark) go to ``docs/images/``
with ``DWS_SCREENSHOTS=docs`` (so a test run leaves the work tree alone), else to a temp dir.
"""

from __future__ import annotations

import importlib.util
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import ROOT
from tests.airflow.dws_page_server import DAG_B, Server

CHROMIUM = Path("/usr/bin/chromium")
#: ``DWS_SCREENSHOTS=docs`` writes the README's screenshots (docs/images/); otherwise a temp dir.
IMAGES = (
    ROOT / "docs" / "images"
    if os.environ.get("DWS_SCREENSHOTS") == "docs"
    else Path(tempfile.gettempdir()) / "dws-page-screenshots"
)

#: Under CI (``.ci/run`` installs Chromium) a missing browser fails these tests instead of skipping them.
_MISSING = (
    "playwright is not installed"
    if importlib.util.find_spec("playwright") is None
    else f"no Chromium at {CHROMIUM} (apt-get install -y chromium)"
    if not CHROMIUM.exists()
    else None
)
if _MISSING and os.environ.get("CI"):
    raise RuntimeError(f"the browser tests cannot run under CI: {_MISSING}")
pytestmark = [pytest.mark.airflow, pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")]
WAIT_MS = 60_000  # a busy 2-core machine renders the React UI slowly


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    # Assertions wait as long as actions do (their own default is 5 s: too short on a loaded machine).
    expect.set_options(timeout=WAIT_MS)
    IMAGES.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        # --no-sandbox: the tests may run as root in a container, where Chromium's sandbox cannot start.
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield chromium
        chromium.close()


def _page(browser: Any, server: Server, user: str = "admin", scheme: str = "light") -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
    context.set_default_timeout(WAIT_MS)
    context.add_cookies([{"name": "_token", "value": server.tokens[user], "url": server.base}])
    return context.new_page()


def test_the_dws_entry_of_the_ui_shows_the_page(browser: Any, dws_page_server: Server) -> None:
    from playwright.sync_api import expect

    page = _page(browser, dws_page_server)
    page.goto(dws_page_server.base + "/plugin/dws")
    frame = page.frame_locator("iframe")
    expect(frame.get_by_role("heading", name="Waiting now (1)")).to_be_visible()
    expect(frame.get_by_text("jobs/a1")).to_be_visible()
    expect(frame.get_by_role("heading", name="Ended (4)")).to_be_visible()
    page.screenshot(path=str(IMAGES / "dws-page.png"))
    page.context.close()


def test_the_page_fits_1280_px_and_has_a_dark_theme(browser: Any, dws_page_server: Server) -> None:
    page = _page(browser, dws_page_server, scheme="dark")
    page.goto(dws_page_server.base + "/dws/")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(18, 20, 23)", background
    page.screenshot(path=str(IMAGES / "dws-page-dark.png"), full_page=True)
    page.context.close()


def test_a_filter_works_from_the_keyboard(browser: Any, dws_page_server: Server) -> None:
    from playwright.sync_api import expect

    page = _page(browser, dws_page_server)
    page.goto(dws_page_server.base + "/dws/")
    page.get_by_label("Phase").focus()
    page.get_by_label("Phase").select_option("not_obtained")
    page.get_by_role("button", name="Apply").focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**phase=not_obtained**")
    expect(page.get_by_text("batch/a3")).to_be_visible()
    expect(page.get_by_text("jobs/a2")).to_have_count(0)
    page.context.close()


def test_the_task_instance_tab_shows_its_request(browser: Any, dws_page_server: Server) -> None:
    from playwright.sync_api import expect

    page = _page(browser, dws_page_server)
    page.goto(f"{dws_page_server.base}/dags/{DAG_B}/runs/run_b/tasks/train/mapped/1")
    # The tab, not the navigation's DWS entry (also a link named "DWS", and which of the two comes
    # last depends on how the UI rendered): the tab's route is the plugin view's url_route.
    page.locator('a[href*="dws_ti"]').first.click()
    expect(page.locator("iframe")).to_have_attribute("src", re.compile(r"dws/ti/"))
    frame = page.frame_locator("iframe")
    expect(frame.get_by_text("jobs/b2")).to_be_visible()
    expect(frame.get_by_text("cancelled").first).to_be_visible()
    page.screenshot(path=str(IMAGES / "dws-ti-tab.png"))
    page.context.close()


def test_a_user_who_may_read_only_dag_a_sees_no_dag_b_in_the_browser(
    browser: Any, dws_page_server: Server
) -> None:
    from playwright.sync_api import expect

    page = _page(browser, dws_page_server, user="alice")
    page.goto(dws_page_server.base + "/dws/")
    expect(page.get_by_text("jobs/a1")).to_be_visible()
    assert DAG_B not in page.content()
    page.context.close()

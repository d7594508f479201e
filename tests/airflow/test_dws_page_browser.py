"""The DWS page in a real browser (``tests/airflow/browser.py``): Debian's Chromium, Playwright.

Against the same seeded api-server as ``test_dws_page.py``, logged in with the UI's ``_token``
cookie as a browser would be. Screenshots (1280 px wide, light and dark) go to ``docs/images/``
with ``DWS_SCREENSHOTS=docs``. ``test_dws_page_after_demo.py`` reads the page after the demo DAGs
really ran against the emulator.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.airflow.browser import CONTRAST_SCRIPT, IMAGES, NEEDS_BROWSER, open_page
from tests.airflow.dws_page_server import DAG_B, PRICE_DATE, PRICE_NOTE, Server

pytestmark = [pytest.mark.airflow, NEEDS_BROWSER]


def _page(browser: Any, server: Server, user: str = "admin", scheme: str = "light") -> Any:
    return open_page(browser, server.base, server.tokens[user], scheme)


def test_the_dws_entry_of_the_ui_shows_the_page(browser: Any, dws_page_server: Server) -> None:
    from playwright.sync_api import expect

    page = _page(browser, dws_page_server)
    page.goto(dws_page_server.base + "/plugin/dws")
    frame = page.frame_locator("iframe")
    expect(frame.get_by_role("heading", name="Waiting now (2)")).to_be_visible()
    expect(frame.get_by_text("jobs/a1")).to_be_visible()
    expect(frame.get_by_role("heading", name="Ended (10)")).to_be_visible()
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


def test_at_1024_px_the_links_are_not_clipped_and_the_max_wait_does_not_wrap(
    browser: Any, dws_page_server: Server
) -> None:
    """Seen on the page: the Links column cut off at 1024 px, "1h 00m max wait" broken over lines."""
    page = _page(browser, dws_page_server)
    page.set_viewport_size({"width": 1024, "height": 800})
    page.goto(dws_page_server.base + "/dws/")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1024
    for box in page.locator("td.links").evaluate_all(
        "cells => cells.map(c => c.getBoundingClientRect().right)"
    ):
        assert box <= 1024
    limit = page.locator("span.nw", has_text="max wait").first
    assert limit.evaluate("e => e.getClientRects().length") == 1  # one line box: not wrapped
    # The expected wait and the most a request can cost: compact cells, each figure on one line.
    for text in ("p50 1h 00m", "p90 2h 00m", "advice 0.72", "on demand $512.00", "$2,304.00 in all"):
        figure = page.locator("span.nw", has_text=text).first
        assert figure.evaluate("e => e.getClientRects().length") == 1, text
        assert figure.evaluate("e => e.getBoundingClientRect().right") <= 1024, text
    page.context.close()


def test_the_page_shows_the_expected_wait_the_cost_and_the_emissions(
    browser: Any, dws_page_server: Server
) -> None:
    """Issue 34 where the user looks: the waiting row's expected wait and obtainability, how often
    the p90 was exceeded, the emissions with their formula and source, the prices' source and date."""
    from playwright.sync_api import expect

    page = _page(browser, dws_page_server)
    page.goto(dws_page_server.base + "/dws/")
    waiting = page.locator("table", has=page.locator("caption", has_text="Requests queued for capacity"))
    row = waiting.locator("tr", has_text="jobs/d1")
    cell = row.locator("td").nth(5)  # Task, API / location, Request, Submitted, Waited, Expected wait
    expect(cell).to_contain_text("p50 1h 00m · p90 2h 00m (6 requests)")
    expect(cell).to_contain_text("advice 0.72")
    expect(cell).to_contain_text("given at submit: p50 1h 00m · p90 2h 00m")
    expect(row.locator("td").nth(6)).to_contain_text("$256.00")
    expect(waiting.locator("tr", has_text="jobs/a1")).to_contain_text("too little history")
    expect(page.locator("#forecast-accuracy")).to_contain_text("p90 exceeded by 2 of 4 requests (50%)")
    expect(page.locator("#emissions-total")).to_contain_text("kg CO2e")
    expect(page.locator("#emissions-formula")).to_contain_text("kg CO2e = accelerator-hours x board power")
    expect(page.locator("#emissions-source")).to_contain_text("Google Cloud region carbon data, 2024")
    expect(page.locator("#emissions-source")).to_contain_text("(year 2024)")
    expect(page.locator("#cost-prices")).to_contain_text(f"{PRICE_NOTE})")
    expect(page.locator("#cost-prices")).to_contain_text(f"as of {PRICE_DATE}")
    for part in ("#forecast-accuracy", "#emissions-formula", "#emissions-source", "#cost-prices"):
        expect(page.locator(part)).to_be_visible()
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


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_text_has_enough_contrast(browser: Any, dws_page_server: Server, scheme: str) -> None:
    """WCAG AA (4.5:1; 3:1 for large text) for every visible text of the page, light and dark."""
    page = _page(browser, dws_page_server, scheme=scheme)
    page.goto(dws_page_server.base + "/dws/")
    page.get_by_role("heading", name="Ended (10)").wait_for()
    result = page.evaluate(CONTRAST_SCRIPT)
    assert result["checked"] > 50 and result["bad"] == [], result
    page.context.close()


def test_the_page_can_be_used_from_the_keyboard_alone(browser: Any, dws_page_server: Server) -> None:
    """Tab reaches every filter, the Apply button and the row links, each with a visible focus ring."""
    page = _page(browser, dws_page_server)
    page.goto(dws_page_server.base + "/dws/")
    seen: list[tuple[str, str]] = []
    for _ in range(40):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            "() => { const e = document.activeElement; const s = getComputedStyle(e);"
            " return [e.tagName + ':' + (e.id || e.textContent.trim().slice(0, 20)), s.outlineStyle]; }"
        )
        seen.append((focused[0], focused[1]))
    names = [name for name, _ in seen]
    for control in ("SELECT:f-dag_id", "SELECT:f-api", "SELECT:f-location", "SELECT:f-phase", "BUTTON:Apply"):
        assert control in names, names
    assert any(name.startswith("A:") for name in names), names
    unringed = sorted({name for name, outline in seen if outline == "none" and not name.startswith("BODY")})
    assert unringed == [], unringed
    page.context.close()

"""What the DWS page shows of a run the fault matrix ended: read over HTTP and in Chromium.

A user who marks a waiting task failed must find its request under "Ended" on the task's DWS tab,
with why, its end written by the provider (the trigger that cancelled it: ``triggers/final_record``),
and the time it counts the request as waiting frozen: nothing is counted past the task's end. The deployment's
api-server runs SimpleAuthManager with every user an admin, so the page needs no login.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import httpx

from tests.faults.context import RunRef, ScenarioContext
from tests.faults.harness import HarnessError, wait_for

#: The outcome a record ended outside the attempt loop carries (``records.TASK_ENDED``).
TASK_ENDED = "task_ended"
#: How long the trigger may take to write the end after its cancel (seen: 0.1 s; a loaded triggerer).
WRITE_WAIT = 120.0
#: Between the two reads of the summary: any growth of a wait counted to "now" shows in seconds.
FROZEN_GAP = 3.0


def _base(ctx: ScenarioContext) -> str:
    return str(ctx.api.client.base_url).rstrip("/").removesuffix("/api/v2")


def _ti_path(ref: RunRef) -> str:
    return "/".join(quote(part, safe="") for part in (ref.dag_id, ref.run_id, ref.request_task)) + "/-1"


def _get(ctx: ScenarioContext, path: str, **params: Any) -> Any:
    response = httpx.get(_base(ctx) + path, params=params, timeout=60, headers=ctx.api.client.headers)
    response.raise_for_status()
    return response.json()


def check_page_shows_ended(
    ctx: ScenarioContext, ref: RunRef, *, outcome: str = TASK_ENDED, browser: bool = False
) -> None:
    """The task's requests are ended on the page with ``outcome``, their end written by the provider
    (the trigger's kill path: :data:`TASK_ENDED`; the task's own timeout: ``timed_out``); the time
    the page counts them as waiting does not grow; with ``browser``, Chromium shows the same on the task's DWS tab."""

    def written_by_the_provider() -> list[dict[str, Any]] | None:
        rows: list[dict[str, Any]] = _get(ctx, f"/dws/api/ti/{_ti_path(ref)}")["requests"]
        done = rows and all(r["record"]["outcome"] == outcome and not r.get("ended_reason") for r in rows)
        return rows if done else None

    # The trigger writes the end right after its cancel, which may be the moment the matrix saw the
    # request stop: give it time on a loaded machine (the page shows the row ended meanwhile).
    try:
        rows = wait_for(written_by_the_provider, WRITE_WAIT, "the trigger to write the request's end", 1.0)
    except HarnessError:
        rows = _get(ctx, f"/dws/api/ti/{_ti_path(ref)}")["requests"]
    seen = [
        f"{r['section']}/{r['record']['phase']}/{r['record']['outcome']}"
        + (f" (settled by the page: {r['ended_reason']})" if r.get("ended_reason") else "")
        for r in rows
    ]
    written = bool(rows) and all(
        r["section"] == "ended" and r["record"]["outcome"] == outcome and not r.get("ended_reason")
        for r in rows
    )
    ctx.check(f"page: ended {outcome}, written by the provider", ", ".join(seen) or "no request", written)
    first = _waited_seconds(ctx, ref)
    time.sleep(FROZEN_GAP)
    second = _waited_seconds(ctx, ref)
    ctx.check("page: waited time frozen", f"{first} then {second}", first is not None and first == second)
    if browser:
        ctx.check("page in Chromium: Ended (1), why", *_in_chromium(ctx, ref))


def check_page_shows_succeeded(ctx: ScenarioContext, ref: RunRef) -> None:
    """The task's requests are ended and succeeded on the page, each end written by the provider
    (not settled by the page from the task's state), and none is left waiting."""
    rows: list[dict[str, Any]] = _get(ctx, f"/dws/api/ti/{_ti_path(ref)}")["requests"]
    seen = [
        f"{r['section']}/{r['record']['phase']}/{r['record']['outcome']}"
        + (f" (settled by the page: {r['ended_reason']})" if r.get("ended_reason") else "")
        for r in rows
    ]
    ok = bool(rows) and all(
        r["section"] == "ended"
        and (r["record"]["phase"], r["record"]["outcome"]) == ("succeeded", "succeeded")
        and not r.get("ended_reason")
        for r in rows
    )
    ctx.check("page: succeeded, written by the provider", ", ".join(seen) or "no request", ok)


def _waited_seconds(ctx: ScenarioContext, ref: RunRef) -> float | None:
    """The seconds waited the page counts for the task's requests (``None``: no request listed).

    Read per task instance, not from the DAG's summary: other rows of the matrix run the same DAG
    at the same time (``user_clears_task`` leaves a request waiting in ``dws_fault_user_action``),
    and their waits would make the DAG's total grow whatever this row's request does."""
    rows = _get(ctx, f"/dws/api/ti/{_ti_path(ref)}")["requests"]
    return round(sum(float(r["waited_seconds"] or 0) for r in rows), 3) if rows else None


def _in_chromium(ctx: ScenarioContext, ref: RunRef) -> tuple[str, bool]:
    """What Debian's Chromium shows on the task's DWS tab (the page the tab's iframe loads)."""
    from tests.airflow.browser import MISSING

    if MISSING:
        return f"not checked: {MISSING}", False
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            page = chromium.new_page(viewport={"width": 1024, "height": 800})
            page.set_default_timeout(60_000)
            if ctx.api.needs_token:  # Airflow 3.1, 3.2: the simple auth manager's cookie first
                page.goto(f"{_base(ctx)}/auth/token/login")
            page.goto(f"{_base(ctx)}/dws/ti/{_ti_path(ref)}")
            expect(page.get_by_role("heading", name="Waiting now (0)")).to_be_visible()
            expect(page.get_by_role("heading", name="Ended (1)")).to_be_visible()
            why = page.get_by_text("killed while waiting")
            expect(why).to_be_visible()
            links = page.locator("td.links").first.bounding_box()
            fits = links is not None and links["x"] + links["width"] <= 1024
            return f"Ended (1): {why.inner_text()}; links within 1024 px: {fits}", fits
        except AssertionError as err:
            return f"not shown: {str(err).splitlines()[0]}", False
        finally:
            chromium.close()

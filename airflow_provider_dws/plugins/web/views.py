"""What each route of the ``/dws`` app answers, from plain values.

The routes (:mod:`.app`) take the HTTP request apart (the user, the filters, the path) and hand the
pieces to these; nothing here names a FastAPI type, so each answer reads, and can be tested, alone.
:class:`Listing` reads the rows a user may see; the functions below turn rows into JSON or HTML.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from typing import Any

from . import data, outlook, render
from .data import Filters, Row
from .outlook import Outlook

#: Where the app is mounted on the api-server.
URL_PREFIX = "/dws"
#: The price table's help: package data of this package (``pyproject.toml``'s
#: ``[tool.setuptools.package-data]``), so a wheel has it; docs/savings.md includes the same file.
PRICE_HELP = "price_table.md"
#: Above this many readable DAGs the page's DAG choice lists only those with requests.
DAG_CHOICE_LIMIT = 500


def http_error(status_code: int, detail: str) -> Exception:
    """FastAPI's ``HTTPException`` (imported here: the app's modules load FastAPI only when built)."""
    from fastapi import HTTPException

    return HTTPException(status_code=status_code, detail=detail)


def parse_time(value: str | None, name: str) -> datetime | None:
    """A filter time: ISO-8601 or the form's ``YYYY-MM-DDTHH:MM``; naive means UTC."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise http_error(400, f"{name}: not an ISO-8601 time: {value!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def bases(root_path: str) -> tuple[str, str]:
    """(The Airflow UI's base path, this app's base path), both ending in ``/``, from the app's
    ``root_path`` (where the api-server mounted it)."""
    root = root_path.rstrip("/")
    ui = root[: -len(URL_PREFIX)] if root.endswith(URL_PREFIX) else ""
    return ui + "/", root + "/"


def ti_map_index(map_index: str) -> int:
    """The tab's map index: the UI substitutes ``{MAP_INDEX}`` only on a mapped task's route and
    leaves the placeholder as it is on an unmapped one's, which is map index -1."""
    if map_index == "{MAP_INDEX}":
        return -1
    try:
        return int(map_index)
    except ValueError:
        raise http_error(422, f"map index must be an integer, not {map_index!r}") from None


@dataclass(frozen=True)
class Listing:
    """The request rows a user may read.

    :param readable: the DAG ids a user may read (the auth manager's answer).
    :param session: opens a metadata database session.
    """

    readable: Callable[[Any], set[str]]
    session: Callable[[], AbstractContextManager[Any]]

    def rows(self, user: Any, wanted: Filters, now: datetime) -> tuple[list[Row], list[Row], set[str]]:
        """(Rows under every filter, rows under the DAG and time filters only, readable DAG ids)."""
        dag_ids = self.readable(user)
        if wanted.dag_id and wanted.dag_id not in dag_ids:
            return [], [], dag_ids
        unfiltered = Filters(dag_id=wanted.dag_id, since=wanted.since, until=wanted.until, limit=wanted.limit)
        with self.session() as session:
            rows = data.query_rows(session, dag_ids, unfiltered, now)
        return [r for r in rows if data.matches(r.record, wanted)], rows, dag_ids

    def read(self, user: Any, now: datetime) -> list[Row]:
        """The rows the page reads unfiltered (the default range): the history of the forecasts
        shown beside one task instance's requests."""
        return self.rows(user, Filters(), now)[1]

    def ti_rows(self, dag_id: str, run_id: str, task_id: str, map_index: int, now: datetime) -> list[Row]:
        """The rows of one task instance (its access is checked by the route)."""
        with self.session() as session:
            return data.query_rows(session, [dag_id], Filters(), now, ti=(dag_id, run_id, task_id, map_index))


def summary_or_error(
    rows: list[Row], now: datetime, ahead: Outlook | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """The summary of ``rows`` (:func:`.summary.summaries`, with the forecasts' accuracy, the
    emissions and the cost's formula and prices of ``ahead``: :func:`.outlook.summary_json`), or
    why there is none."""
    from .summary import summaries

    try:
        found = summaries(rows, now, ahead.prices if ahead else None)
    except ImportError as err:  # the savings module of an older provider build
        return None, f"the savings module is not available ({err})"
    if ahead is not None:
        found.update(outlook.summary_json(rows, ahead))
    return found, None


def _rows_json(rows: list[Row], now: datetime, ui_base: str, ahead: Outlook) -> list[dict[str, Any]]:
    return [{**data.row_json(r, now, ui_base), **outlook.row_json(r, ahead)} for r in rows]


def requests_json(
    rows: list[Row], wanted: Filters, now: datetime, ui_base: str, read: list[Row] | None = None
) -> dict[str, Any]:
    """``/api/requests``: the rows, newest first, with the window they were read in; the expected
    wait of each is forecast from ``read`` (every row read, whatever the API, location and phase
    filters; default ``rows``)."""
    ahead = outlook.build(rows if read is None else read, now)
    return {
        "now": now.isoformat(),
        "newest_write": max((r.written for r in rows), default=now).isoformat() if rows else None,
        "since": wanted.window(now)[0].isoformat(),
        "until": wanted.until.isoformat() if wanted.until else None,
        "total_entries": len(rows),
        "requests": _rows_json(rows, now, ui_base, ahead),
    }


def summary_json(rows: list[Row], now: datetime) -> dict[str, Any]:
    """``/api/summary``: per DAG, per day and total, the forecasts' accuracy, the emissions and the
    cost's formula and prices; 503 without the savings module."""
    summary, error = summary_or_error(rows, now, outlook.build(rows, now))
    if summary is None:
        raise http_error(503, error or "no summary")
    return {"now": now.isoformat(), **summary}


def ti_json(rows: list[Row], now: datetime, ui_base: str, read: list[Row] | None = None) -> dict[str, Any]:
    """``/api/ti/...``: the requests one task instance made or released (forecasts from ``read``)."""
    ahead = outlook.build(rows if read is None else read, now)
    return {"now": now.isoformat(), "requests": _rows_json(rows, now, ui_base, ahead)}


def page_html(
    listed: tuple[list[Row], list[Row], set[str]], wanted: Filters, now: datetime, ui_base: str, app_base: str
) -> str:
    """The DWS page: waiting now, running or held, ended, the summary; filters as a GET form."""
    rows, window_rows, dag_ids = listed
    seen_dags = sorted({r.ti.dag_id for r in window_rows} | ({wanted.dag_id} if wanted.dag_id else set()))
    choices = {
        "dag_id": sorted(dag_ids) if len(dag_ids) <= DAG_CHOICE_LIMIT else seen_dags,
        "api": sorted({r.record.api for r in window_rows}),
        "location": sorted({r.record.location for r in window_rows}),
    }
    since = wanted.window(now)[0]
    body = [
        "<h1>DWS requests</h1>",
        f"<p class='muted'>Dynamic Workload Scheduler requests of the DAGs you may read, written since "
        f"{render.when(since)}{' until ' + render.when(wanted.until) if wanted.until else ''} "
        f"(live ones whatever their age).</p>",
        render.freshness(window_rows, now),
        render.filters_form(wanted, choices, app_base),
    ]
    if not window_rows:
        body.append(render.empty_state())
    else:
        if len(window_rows) >= wanted.limit:
            body.append(
                f"<p class='warn'>Showing the newest {wanted.limit} task instances only: narrow the filters.</p>"
            )
        ahead = outlook.build(window_rows, now)
        body.append(render.request_sections(rows, now, ui_base, ahead))
        summary, error = summary_or_error(rows, now, ahead)
        body.append(render.summary_section(summary, app_base, error))
    return render.page("DWS requests", "".join(body))


def ti_tab_html(
    task_id: str,
    map_index: int,
    rows: list[Row],
    now: datetime,
    ui_base: str,
    app_base: str,
    read: list[Row] | None = None,
) -> str:
    """The task-instance tab: that task instance's requests (their forecasts from ``read``)."""
    mapped = f" [{map_index}]" if map_index >= 0 else ""
    body = [f"<h1>DWS requests of {render.h(task_id)}{render.h(mapped)}</h1>"]
    if rows:
        ahead = outlook.build(rows if read is None else read, now)
        body.append(render.freshness(rows, now))
        body.append(render.request_sections(rows, now, ui_base, ahead))
    else:
        body.append("<div class='empty' role='status'><p>This task instance made no DWS request.</p></div>")
    body.append(f"<p><a href='{render.h(app_base)}' target='_top'>All DWS requests</a></p>")
    return render.page(f"DWS · {task_id}", "".join(body))


def price_help() -> str:
    """How to set a price table (:data:`PRICE_HELP`, read from the installed package)."""
    return resources.files(__name__.rpartition(".")[0]).joinpath(PRICE_HELP).read_text(encoding="utf-8")

"""The DWS FastAPI app the api-server mounts at ``/dws`` (built by :func:`create_app`, only there).

Nothing is automatic in a mounted plugin app: every route here depends on Airflow's ``get_user``
(bearer token or the UI's ``_token`` cookie; none -> 401) and lists only the DAGs the global auth
manager's ``get_authorized_dag_ids(method="GET")`` returns. The per-task-instance routes use
``requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE)``, which reads ``dag_id`` from the
path and asks the global auth manager (``get_auth_manager()``), so it works in a sub-app;
``AuthManagerDep`` (``request.app.state``) would not and is not used. Every route is GET: the app
changes nothing, so cookie auth needs no CSRF token. FastAPI's own ``/docs`` and ``/openapi.json``
are switched off (they would be anonymous).

FastAPI is imported inside :func:`create_app` (the import rule: no provider module imports it at
module level), so this module has no module-level ``from __future__ import annotations``: the
route signatures must resolve against :func:`create_app`'s locals.
"""

import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: Where the app is mounted on the api-server.
URL_PREFIX = "/dws"
#: docs/ of the source tree (an editable or source install has it; a wheel does not).
DOCS_DIR = Path(__file__).resolve().parents[3] / "docs"


def _parse_time(value: str | None, name: str) -> datetime | None:
    """A filter time: ISO-8601 or the form's ``YYYY-MM-DDTHH:MM``; naive means UTC."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        from fastapi import HTTPException

        raise HTTPException(status_code=400, detail=f"{name}: not an ISO-8601 time: {value!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def create_app() -> Any:
    """The ``/dws`` app: the page, the task-instance tab and their JSON endpoints (all GET, all authenticated)."""
    from typing import Annotated

    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
    from airflow.utils.session import create_session
    from fastapi import Depends, FastAPI, HTTPException, Query, Request
    from fastapi.responses import HTMLResponse, PlainTextResponse

    from . import data, render
    from .data import Filters

    app = FastAPI(
        title="DWS requests",
        description="Dynamic Workload Scheduler requests of the DAGs you may read (airflow-provider-dws).",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    ti_access = [Depends(requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE))]

    def filters(
        dag_id: Annotated[str | None, Query()] = None,
        api: Annotated[str | None, Query()] = None,
        location: Annotated[str | None, Query()] = None,
        phase: Annotated[str | None, Query()] = None,
        since: Annotated[str | None, Query()] = None,
        until: Annotated[str | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=data.MAX_LIMIT)] = data.DEFAULT_LIMIT,
    ) -> Filters:
        return Filters(
            dag_id=dag_id or None,
            api=api or None,
            location=location or None,
            phase=phase or None,
            since=_parse_time(since, "since"),
            until=_parse_time(until, "until"),
            limit=limit,
        )

    FiltersDep = Annotated[Filters, Depends(filters)]

    def bases(request: Request) -> tuple[str, str]:
        """(The Airflow UI's base path, this app's base path), both ending in ``/``."""
        root = request.scope.get("root_path", "").rstrip("/")
        ui = root[: -len(URL_PREFIX)] if root.endswith(URL_PREFIX) else ""
        return ui + "/", root + "/"

    def readable(user: Any) -> set[str]:
        return set(get_auth_manager().get_authorized_dag_ids(user=user, method="GET"))

    def listing(user: Any, wanted: Filters, now: datetime) -> tuple[list[data.Row], list[data.Row], set[str]]:
        """(Rows under every filter, rows under the DAG and time filters only, readable DAG ids)."""
        dag_ids = readable(user)
        if wanted.dag_id and wanted.dag_id not in dag_ids:
            return [], [], dag_ids
        unfiltered = Filters(dag_id=wanted.dag_id, since=wanted.since, until=wanted.until, limit=wanted.limit)
        with create_session() as session:
            rows = data.query_rows(session, dag_ids, unfiltered, now)
        return [r for r in rows if data.matches(r.record, wanted)], rows, dag_ids

    def one_ti(dag_id: str, run_id: str, task_id: str, map_index: int, now: datetime) -> list[data.Row]:
        with create_session() as session:
            return data.query_rows(session, [dag_id], Filters(), now, ti=(dag_id, run_id, task_id, map_index))

    def ti_map_index(map_index: str) -> int:
        """The tab's map index: the UI substitutes ``{MAP_INDEX}`` only on a mapped task's route and
        leaves the placeholder as it is on an unmapped one's, which is map index -1."""
        if map_index == "{MAP_INDEX}":
            return -1
        try:
            return int(map_index)
        except ValueError:
            raise HTTPException(
                status_code=422, detail=f"map index must be an integer, not {map_index!r}"
            ) from None

    def summary_or_error(rows: list[data.Row], now: datetime) -> tuple[dict[str, Any] | None, str | None]:
        from .summary import summaries

        try:
            return summaries(rows, now), None
        except ImportError as err:  # the savings module of an older provider build
            return None, f"the savings module is not available ({err})"

    @app.get("/api/requests")
    def api_requests(request: Request, user: GetUserDep, wanted: FiltersDep) -> dict[str, Any]:
        """Requests of the readable DAGs under the filters, newest first."""
        now = datetime.now(timezone.utc)
        rows, _, _ = listing(user, wanted, now)
        ui_base, _ = bases(request)
        return {
            "now": now.isoformat(),
            "newest_write": max((r.written for r in rows), default=now).isoformat() if rows else None,
            "since": wanted.window(now)[0].isoformat(),
            "until": wanted.until.isoformat() if wanted.until else None,
            "total_entries": len(rows),
            "requests": [data.row_json(r, now, ui_base) for r in rows],
        }

    @app.get("/api/summary")
    def api_summary(user: GetUserDep, wanted: FiltersDep) -> dict[str, Any]:
        """Per DAG, per day and total (``savings.summarize``), and the price table's source and error."""
        now = datetime.now(timezone.utc)
        rows, _, _ = listing(user, wanted, now)
        summary, error = summary_or_error(rows, now)
        if summary is None:
            raise HTTPException(status_code=503, detail=error)
        return {"now": now.isoformat(), **summary}

    @app.get("/api/ti/{dag_id}/{run_id}/{task_id}/{map_index}", dependencies=ti_access)
    def api_ti(request: Request, dag_id: str, run_id: str, task_id: str, map_index: str) -> dict[str, Any]:
        """The requests one task instance made or released."""
        now = datetime.now(timezone.utc)
        ui_base, _ = bases(request)
        rows = one_ti(dag_id, run_id, task_id, ti_map_index(map_index), now)
        return {"now": now.isoformat(), "requests": [data.row_json(r, now, ui_base) for r in rows]}

    @app.get("/", response_class=HTMLResponse)
    def dws_page(request: Request, user: GetUserDep, wanted: FiltersDep) -> HTMLResponse:
        """The DWS page: waiting now, running or held, ended, the summary; filters as a GET form."""
        now = datetime.now(timezone.utc)
        rows, window_rows, dag_ids = listing(user, wanted, now)
        ui_base, app_base = bases(request)
        seen_dags = sorted({r.ti.dag_id for r in window_rows} | ({wanted.dag_id} if wanted.dag_id else set()))
        choices = {
            "dag_id": sorted(dag_ids) if len(dag_ids) <= 500 else seen_dags,
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
            body.append(render.request_sections(rows, now, ui_base))
            summary, error = summary_or_error(rows, now)
            body.append(render.summary_section(summary, app_base, error))
        return HTMLResponse(render.page("DWS requests", "".join(body)))

    @app.get(
        "/ti/{dag_id}/{run_id}/{task_id}/{map_index}", response_class=HTMLResponse, dependencies=ti_access
    )
    def dws_ti_tab(request: Request, dag_id: str, run_id: str, task_id: str, map_index: str) -> HTMLResponse:
        """The task-instance tab: that task instance's requests."""
        now = datetime.now(timezone.utc)
        ui_base, app_base = bases(request)
        index = ti_map_index(map_index)
        rows = one_ti(dag_id, run_id, task_id, index, now)
        mapped = f" [{index}]" if index >= 0 else ""
        body = [f"<h1>DWS requests of {render.h(task_id)}{render.h(mapped)}</h1>"]
        if rows:
            body.append(render.freshness(rows, now))
            body.append(render.request_sections(rows, now, ui_base))
        else:
            body.append(
                "<div class='empty' role='status'><p>This task instance made no DWS request.</p></div>"
            )
        body.append(f"<p><a href='{render.h(app_base)}' target='_top'>All DWS requests</a></p>")
        return HTMLResponse(render.page(f"DWS · {task_id}", "".join(body)))

    @app.get("/docs/savings.md", response_class=PlainTextResponse)
    def savings_doc(user: GetUserDep) -> PlainTextResponse:
        """docs/savings.md of the source tree (how to set a price table)."""
        path = DOCS_DIR / "savings.md"
        if not path.is_file():
            raise HTTPException(
                status_code=404, detail="docs/savings.md is not installed; see the provider's README"
            )
        return PlainTextResponse(path.read_text(encoding="utf-8"))

    return app

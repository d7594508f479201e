"""The DWS FastAPI app the api-server mounts at ``/dws`` (built by :func:`create_app`, only there).

Nothing is automatic in a mounted plugin app: every route here depends on Airflow's ``get_user``
(bearer token or the UI's ``_token`` cookie; none -> 401) and lists only the DAGs the global auth
manager's ``get_authorized_dag_ids(method="GET")`` returns. The per-task-instance routes use
``requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE)``, which reads ``dag_id`` from the
path and asks the global auth manager (``get_auth_manager()``), so it works in a sub-app;
``AuthManagerDep`` (``request.app.state``) would not and is not used. Every route is GET: the app
changes nothing, so cookie auth needs no CSRF token. FastAPI's own ``/docs`` and ``/openapi.json``
are switched off (they would be anonymous).

FastAPI is imported when the app is built (the import rule: no provider module imports it at
module level), so this module has no module-level ``from __future__ import annotations``: the
route signatures resolve against the locals of the function that declares them. The routes only
take the request apart; what they answer is :mod:`.views`'.
"""

from datetime import datetime, timezone
from typing import Any

from .views import URL_PREFIX

__all__ = ["URL_PREFIX", "create_app"]


def create_app() -> Any:
    """The ``/dws`` app: the page, the task-instance tab and their JSON endpoints (all GET, all authenticated)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.utils.session import create_session
    from fastapi import FastAPI

    from .views import Listing

    app = FastAPI(
        title="DWS requests",
        description="Dynamic Workload Scheduler requests of the DAGs you may read (airflow-provider-dws).",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    listing = Listing(
        readable=lambda user: set(get_auth_manager().get_authorized_dag_ids(user=user, method="GET")),
        session=create_session,
    )
    _add_api_routes(app, listing)
    _add_page_routes(app, listing)
    return app


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _query_filters() -> Any:
    """The dependency that reads the filters from the query string (FastAPI checks the limit)."""
    from typing import Annotated

    from fastapi import Query

    from . import data
    from .views import parse_time

    def filters(
        dag_id: Annotated[str | None, Query()] = None,
        api: Annotated[str | None, Query()] = None,
        location: Annotated[str | None, Query()] = None,
        phase: Annotated[str | None, Query()] = None,
        since: Annotated[str | None, Query()] = None,
        until: Annotated[str | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=data.MAX_LIMIT)] = data.DEFAULT_LIMIT,
    ) -> data.Filters:
        return data.Filters(
            dag_id=dag_id or None,
            api=api or None,
            location=location or None,
            phase=phase or None,
            since=parse_time(since, "since"),
            until=parse_time(until, "until"),
            limit=limit,
        )

    return filters


def _ti_access() -> list[Any]:
    """The per-task-instance routes' check: the global auth manager, for the path's ``dag_id``."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag
    from fastapi import Depends

    return [Depends(requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE))]


def _add_api_routes(app: Any, listing: Any) -> None:
    """The JSON endpoints: ``/api/requests``, ``/api/summary``, ``/api/ti/...``."""
    from typing import Annotated

    from airflow.api_fastapi.core_api.security import GetUserDep
    from fastapi import Depends, Request

    from . import views
    from .data import Filters

    FiltersDep = Annotated[Filters, Depends(_query_filters())]

    @app.get("/api/requests")
    def api_requests(request: Request, user: GetUserDep, wanted: FiltersDep) -> dict[str, Any]:
        """Requests of the readable DAGs under the filters, newest first."""
        now = _now()
        rows, read, _ = listing.rows(user, wanted, now)
        base = views.bases(request.scope.get("root_path", ""))[0]
        return views.requests_json(rows, wanted, now, base, read)

    @app.get("/api/summary")
    def api_summary(user: GetUserDep, wanted: FiltersDep) -> dict[str, Any]:
        """Per DAG, per day and total (``savings.summarize``), and the price table's source and error."""
        now = _now()
        return views.summary_json(listing.rows(user, wanted, now)[0], now)

    @app.get("/api/ti/{dag_id}/{run_id}/{task_id}/{map_index}", dependencies=_ti_access())
    def api_ti(
        request: Request, user: GetUserDep, dag_id: str, run_id: str, task_id: str, map_index: str
    ) -> dict[str, Any]:
        """The requests one task instance made or released (forecasts from the user's listing)."""
        now = _now()
        rows = listing.ti_rows(dag_id, run_id, task_id, views.ti_map_index(map_index), now)
        base = views.bases(request.scope.get("root_path", ""))[0]
        return views.ti_json(rows, now, base, listing.read(user, now) if rows else [])


def _add_page_routes(app: Any, listing: Any) -> None:
    """The HTML: the DWS page, the task-instance tab, and the price table's help the page links to."""
    from typing import Annotated

    from airflow.api_fastapi.core_api.security import GetUserDep
    from fastapi import Depends, Request
    from fastapi.responses import HTMLResponse, PlainTextResponse

    from . import render, views
    from .data import Filters

    FiltersDep = Annotated[Filters, Depends(_query_filters())]

    @app.get("/", response_class=HTMLResponse)
    def dws_page(request: Request, user: GetUserDep, wanted: FiltersDep) -> HTMLResponse:
        """The DWS page: waiting now, running or held, ended, the summary; filters as a GET form."""
        now = _now()
        ui_base, app_base = views.bases(request.scope.get("root_path", ""))
        return HTMLResponse(views.page_html(listing.rows(user, wanted, now), wanted, now, ui_base, app_base))

    @app.get(
        "/ti/{dag_id}/{run_id}/{task_id}/{map_index}", response_class=HTMLResponse, dependencies=_ti_access()
    )
    def dws_ti_tab(
        request: Request, user: GetUserDep, dag_id: str, run_id: str, task_id: str, map_index: str
    ) -> HTMLResponse:
        """The task-instance tab: that task instance's requests (forecasts from the user's listing)."""
        now = _now()
        ui_base, app_base = views.bases(request.scope.get("root_path", ""))
        index = views.ti_map_index(map_index)
        rows = listing.ti_rows(dag_id, run_id, task_id, index, now)
        read = listing.read(user, now) if rows else []
        return HTMLResponse(views.ti_tab_html(task_id, index, rows, now, ui_base, app_base, read))

    @app.get(f"/{render.PRICE_HELP_ROUTE}", response_class=PlainTextResponse)
    def price_help(user: GetUserDep) -> PlainTextResponse:
        """How to set a price table: the help the package ships (``views.PRICE_HELP``)."""
        return PlainTextResponse(views.price_help())

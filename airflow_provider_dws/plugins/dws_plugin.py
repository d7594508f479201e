"""The ``dws`` Airflow plugin.

Airflow only deserializes a custom timetable whose class a plugin lists in ``timetables``; without it
the scheduler and API server fail to load any DAG scheduled with ``OffPeakTimetable``. The plugin is
found through the ``airflow.plugins`` entry point declared in ``pyproject.toml`` (the provider info
has no ``plugins`` key).

It also adds the DWS page to the Airflow UI: a FastAPI app mounted at ``/dws`` and two external
views (a "DWS" navigation entry, a tab on the task-instance page). Every Airflow process imports
this module, so the app is built only when ``fastapi_apps`` is read, which the api-server alone does
(``api_fastapi/app.py`` ``init_plugins`` through ``plugins_manager.get_fastapi_plugins``; also the
``/api/v2/plugins`` listing and ``airflow plugins``, both in processes that serve or inspect plugins).
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_dws.timetables.offpeak import OffPeakTimetable

#: The UI's iframe sources: relative to the UI's base URL, so they reach the app at ``/dws``.
NAV_HREF = "dws/"
TI_HREF = "dws/ti/{DAG_ID}/{RUN_ID}/{TASK_ID}/{MAP_INDEX}"

_apps: list[dict[str, Any]] | None = None


class _LazyFastAPIApps:
    """``fastapi_apps`` that imports FastAPI and the web code on first read, then keeps the list."""

    def __get__(self, instance: object, owner: type | None = None) -> list[dict[str, Any]]:
        global _apps
        if _apps is None:
            from airflow_provider_dws.plugins.web.app import URL_PREFIX, create_app

            _apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "DWS requests"}]
        return _apps


class DwsPlugin(AirflowPlugin):
    """Registers :class:`~airflow_provider_dws.timetables.offpeak.OffPeakTimetable` and the DWS page."""

    name = "dws"
    timetables = [OffPeakTimetable]
    fastapi_apps = _LazyFastAPIApps()  # type: ignore[assignment]
    external_views = [
        {
            "name": "DWS",
            "href": NAV_HREF,
            "destination": "nav",
            "url_route": "dws",
        },
        {
            "name": "DWS",
            "href": TI_HREF,
            "destination": "task_instance",
            "url_route": "dws_ti",
        },
    ]

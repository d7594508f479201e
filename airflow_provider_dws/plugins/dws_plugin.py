"""The ``dws`` Airflow plugin.

Airflow only deserializes a custom timetable whose class a plugin lists in ``timetables``; without it
the scheduler and API server fail to load any DAG scheduled with ``OffPeakTimetable``. The plugin is
found through the ``airflow.plugins`` entry point declared in ``pyproject.toml`` (the provider info
has no ``plugins`` key).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_dws.timetables.offpeak import OffPeakTimetable


class DwsPlugin(AirflowPlugin):
    """Registers :class:`~airflow_provider_dws.timetables.offpeak.OffPeakTimetable`."""

    name = "dws"
    timetables = [OffPeakTimetable]

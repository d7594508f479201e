"""Timetables for off-peak DWS pipelines: ``schedule=OffPeakTimetable("Mon-Fri 22:00-06:00 Asia/Seoul")``."""

from __future__ import annotations

from airflow_provider_dws.timetables.offpeak import OffPeakTimetable

__all__ = ["OffPeakTimetable"]

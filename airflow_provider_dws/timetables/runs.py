"""When the off-peak timetable's runs are: its answers to Airflow's scheduling protocol.

:class:`~airflow_provider_dws.timetables.offpeak.OffPeakTimetable` is built and serialized at every
parse of a DAG file on it; the scheduler (and the API server, for a manual run) asks it when runs
are. Those answers are here, loaded on the first question, with the window arithmetic they use
(:mod:`airflow_provider_dws.scheduling.window_times`). A timetable is read by its attributes
(``window``, ``catchup_limit``), never by importing its class.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

import pendulum
from airflow.timetables.base import DagRunInfo, DataInterval

from airflow_provider_dws.compat import dag_run_info
from airflow_provider_dws.scheduling._time import aware_utc

if TYPE_CHECKING:
    from airflow.timetables.base import TimeRestriction
    from pendulum import DateTime

Occurrence = tuple[datetime.datetime, datetime.datetime]

# How far back the backward searches (manual runs, catchup_limit) look before giving up: the
# sparsest window (a cron expression plus a duration) could fire once a year.
_INITIAL_LOOKBACK = datetime.timedelta(days=8)
_MAX_LOOKBACK = datetime.timedelta(days=3 * 366)


class NoMoreOpenings(Exception):
    """The window never opens again (e.g. a cron window on a date that does not come)."""


def _to_pendulum(moment: datetime.datetime) -> DateTime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"the off-peak window returned a naive datetime {moment!r}; expected UTC-aware")
    return pendulum.instance(moment.astimezone(datetime.timezone.utc)).in_timezone("UTC")


def _next_open(timetable: Any, moment: datetime.datetime) -> Occurrence:
    try:
        found: Occurrence = timetable.window.next_open(moment)
    except ValueError as exc:  # the window does not open again within the policies' search limit
        raise NoMoreOpenings(str(exc)) from exc
    return found


def _first_opening_at_or_after(timetable: Any, moment: datetime.datetime) -> Occurrence:
    """The first occurrence that opens at or after ``moment``."""
    occurrence = _next_open(timetable, moment)
    if occurrence[0] < moment:  # ``moment`` is inside it: take the one after
        occurrence = _next_open(timetable, occurrence[1])
    return occurrence


def _opened_before(timetable: Any, moment: datetime.datetime, count: int) -> list[Occurrence]:
    """Up to ``count`` of the latest occurrences that opened at or before ``moment``, oldest first."""
    lookback = _INITIAL_LOOKBACK
    while True:
        found = [
            occ
            for occ in timetable.window.occurrences(moment - lookback, moment + datetime.timedelta(seconds=1))
            if occ[0] <= moment
        ]
        if len(found) >= count or lookback >= _MAX_LOOKBACK:
            return found[-count:]
        lookback = min(lookback * 4, _MAX_LOOKBACK)


def _last_closed_before(timetable: Any, moment: datetime.datetime) -> Occurrence | None:
    """The latest occurrence that closed at or before ``moment``."""
    lookback = _INITIAL_LOOKBACK
    while True:
        found = [occ for occ in timetable.window.occurrences(moment - lookback, moment) if occ[1] <= moment]
        if found:
            return found[-1]
        if lookback >= _MAX_LOOKBACK:
            return None
        lookback = min(lookback * 4, _MAX_LOOKBACK)


def next_dagrun_info(
    timetable: Any,
    last_automated_data_interval: DataInterval | None,
    restriction: TimeRestriction,
    now: datetime.datetime,
) -> DagRunInfo | None:
    """The next run after the last automated one (``None``: the window never opens again)."""
    try:
        return _next_run(timetable, last_automated_data_interval, restriction, now)
    except NoMoreOpenings:
        return None


def _next_run(
    timetable: Any,
    last_automated_data_interval: DataInterval | None,
    restriction: TimeRestriction,
    now: datetime.datetime,
) -> DagRunInfo | None:
    floors: list[datetime.datetime] = []
    if last_automated_data_interval is not None:
        floors.append(aware_utc(last_automated_data_interval.end, "last data interval end"))
    if restriction.earliest is not None:
        floors.append(aware_utc(restriction.earliest, "restriction.earliest"))
    if not restriction.catchup or not floors:
        # No catchup (or nothing to catch up from): the occurrence open now, else the next one.
        floors.append(_next_open(timetable, aware_utc(now, "now"))[0])
    elif timetable.catchup_limit is not None:
        recent = _opened_before(timetable, aware_utc(now, "now"), timetable.catchup_limit)
        if len(recent) == timetable.catchup_limit:
            floors.append(recent[0][0])

    opening, closing = _first_opening_at_or_after(timetable, max(floors))
    if restriction.latest is not None and opening > aware_utc(restriction.latest, "restriction.latest"):
        return None
    start, end = _to_pendulum(opening), _to_pendulum(closing)
    return dag_run_info(start, DataInterval(start, end))


def infer_manual_data_interval(timetable: Any, run_after: DateTime) -> DataInterval:
    """A manual run's data interval: the occurrence it falls in, else the last one that closed."""
    moment = aware_utc(run_after, "run_after")
    occurrence = timetable.window.current(moment) or _last_closed_before(timetable, moment)
    if occurrence is None:  # a window so sparse none closed in years: the run covers its own instant
        return DataInterval.exact(_to_pendulum(moment))
    return DataInterval(_to_pendulum(occurrence[0]), _to_pendulum(occurrence[1]))

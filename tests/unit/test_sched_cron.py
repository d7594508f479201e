"""Cron windows mean what croniter (and so Airflow's cron schedules) means; the DST rules stay ours."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest
from croniter import croniter

from airflow_provider_dws.scheduling.policies import OffPeakWindow
from tests.probe import Probe

UTC = timezone.utc


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def openings(cron: str, start: datetime, end: datetime, zone: str = "UTC") -> list[datetime]:
    window = OffPeakWindow.from_cron(cron, timedelta(minutes=1), zone)
    return [o for o, _ in window.occurrences(start, end) if o >= start]


def croniter_times(cron: str, start: datetime, end: datetime) -> list[datetime]:
    it = croniter(cron, start.replace(tzinfo=None) - timedelta(seconds=1))
    out = []
    while (found := it.get_next(datetime)) < end.replace(tzinfo=None):
        out.append(found.replace(tzinfo=UTC))
    return out


def test_nth_weekday_is_accepted_as_airflow_accepts_it() -> None:
    third_friday = OffPeakWindow.parse("cron 0 22 * * 5#3 for 8h Asia/Seoul")
    assert str(third_friday) == "cron 0 22 * * 5#3 for 8h Asia/Seoul"
    assert third_friday.days == frozenset({4})
    opened, closed = third_friday.next_open(utc(2026, 12, 1))
    assert opened == utc(2026, 12, 18, 13)  # Friday 18 December, 22:00 KST
    assert closed - opened == timedelta(hours=8)


@pytest.mark.parametrize(
    "cron",
    [
        "0 22 * * 5#3",
        "30 1 L * *",
        "0 9 15W * *",
        "0 0 * * L5",
        "0 0 ? * MON",
        "*/20 3-4 * JAN,jul sun",
        "0 1 1 * MON",
        "0 0 */2 * 1",
        "15 2 1-7 * *",
        "0 12 * * */2",
        "@weekly",
    ],
)
def test_matches_are_croniters(cron: str) -> None:
    """In UTC (no DST), the openings are exactly croniter's matches, over a leap year."""
    start, end = utc(2028, 1, 1), utc(2029, 1, 1)
    assert openings(cron, start, end) == croniter_times(cron, start, end)


def test_both_day_fields_restricted_means_either_as_in_airflow() -> None:
    # "*/2" restricts the day of month, so odd days OR Mondays (croniter's and Airflow's reading)
    days = [o.day for o in openings("0 0 */2 * MON", utc(2026, 6, 1), utc(2026, 6, 11))]
    assert days == [1, 3, 5, 7, 8, 9]


def test_an_equal_range_is_one_value_not_the_whole_cycle() -> None:
    # croniter alone reads "1-1" as every month; in a window it is January
    months = {o.month for o in openings("0 0 1 1-1 *", utc(2026, 1, 1), utc(2028, 1, 1))}
    assert months == {1}


def test_dst_is_resolved_by_the_window_rules_not_croniter() -> None:
    # 02:30 does not exist in New York on 8 March 2026: the window opens at the change (03:00 EDT)
    window = OffPeakWindow.from_cron("30 2 8 3 *", timedelta(hours=1), "America/New_York")
    assert window.next_open(utc(2026, 3, 1)) == (utc(2026, 3, 8, 7), utc(2026, 3, 8, 8))


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("R 0 * * *", "OffPeakWindow.cron: the minute field 'R' has 'R', which is not a number"),
        ("H 0 * * *", "OffPeakWindow.cron: the minute field 'H' has 'H', which is not a number"),
        (
            "0 22-5 * * *",
            "OffPeakWindow.cron: the hour field '22-5' has the range '22-5', which runs backwards",
        ),
        ("0 0 * * 1#6", "OffPeakWindow.cron '0 0 * * 1#6' is not accepted: "),
        ("0 0 30 2 *", "OffPeakWindow.cron '0 0 30 2 *' never matches: no such day in those months"),
    ],
)
def test_refused(cron: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        OffPeakWindow.from_cron(cron, timedelta(hours=1), "UTC")


def test_croniter_is_imported_only_for_a_cron_window(probe: Probe) -> None:
    code = (
        "import sys\n"
        "from airflow_provider_dws.scheduling.policies import OffPeakWindow\n"
        "from airflow_provider_dws.timetables import OffPeakTimetable\n"
        "OffPeakTimetable('Mon-Fri 22:00-06:00 Asia/Seoul')\n"
        "assert 'croniter' not in sys.modules, 'plain window imported croniter'\n"
        "OffPeakWindow.parse('cron 0 22 * * 1-5 for 8h Asia/Seoul')\n"
        "assert 'croniter' in sys.modules\n"
    )
    probe.run(code).check()

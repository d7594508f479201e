"""Scheduling policies: construction, parsing, precise errors, and window arithmetic (incl. DST)."""

from __future__ import annotations

import random
import re
from datetime import datetime, time, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from airflow_provider_dws.scheduling.phases import FailureKind
from airflow_provider_dws.scheduling.policies import (
    CapacityRetry,
    Deadline,
    Failover,
    OffPeakWindow,
    Placement,
    WindowSet,
    coerce_window,
    format_duration,
    parse_window,
)

UTC = timezone.utc
SEOUL = ZoneInfo("Asia/Seoul")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def local(
    zone: str, year: int, month: int, day: int, hour: int = 0, minute: int = 0, fold: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(zone), fold=fold)


def raises(exc: type[Exception], message: str) -> Any:
    return pytest.raises(exc, match=re.escape(message))


# -- OffPeakWindow: construction, parse and str ------------------------------------------------------


def test_window_constructor_accepts_strings_and_normalises() -> None:
    w = OffPeakWindow(days="Mon-Fri", start="22:00", end="06:00", timezone="Asia/Seoul")
    assert w.days == frozenset({0, 1, 2, 3, 4})
    assert w.start == time(22, 0)
    assert w.end == time(6, 0)
    assert w.timezone == "Asia/Seoul"
    assert str(w) == "Mon-Fri 22:00-06:00 Asia/Seoul"
    assert OffPeakWindow([0, 1, 2, 3, 4], time(22), time(6), "Asia/Seoul") == w
    assert OffPeakWindow(["mon", "Tuesday", 2, "Thu-Fri"], "22:00", "6:00", "Asia/Seoul") == w


@pytest.mark.parametrize(
    ("spec", "days", "text"),
    [
        ("Mon-Fri 22:00-06:00 Asia/Seoul", {0, 1, 2, 3, 4}, "Mon-Fri 22:00-06:00 Asia/Seoul"),
        ("Sat,Sun 00:00-23:59 UTC", {5, 6}, "Sat,Sun 00:00-23:59 UTC"),
        ("daily 01:00-05:00 Europe/Berlin", set(range(7)), "daily 01:00-05:00 Europe/Berlin"),
        ("weekends 10:00-12:00 UTC", {5, 6}, "Sat,Sun 10:00-12:00 UTC"),
        ("Fri-Mon 20:00-08:00 America/New_York", {4, 5, 6, 0}, "Mon,Fri-Sun 20:00-08:00 America/New_York"),
        ("Mon,Wed,Fri 12:00:05-12:00:35 UTC", {0, 2, 4}, "Mon,Wed,Fri 12:00:05-12:00:35 UTC"),
        ("  tue   1:30 - 2:45   Australia/Sydney ", {1}, "Tue 01:30-02:45 Australia/Sydney"),
    ],
)
def test_window_parse_and_str_round_trip(spec: str, days: set[int], text: str) -> None:
    w = OffPeakWindow.parse(spec)
    assert w.days == frozenset(days)
    assert str(w) == text
    assert OffPeakWindow.parse(str(w)) == w


def test_cron_window_parse_and_str_round_trip() -> None:
    w = OffPeakWindow.from_cron("0 22 * * 1-5", timedelta(hours=8), "Asia/Seoul")
    assert str(w) == "cron 0 22 * * 1-5 for 8h Asia/Seoul"
    assert OffPeakWindow.parse(str(w)) == w
    # the summary fields describe the cron
    assert w.days == frozenset(range(5))
    assert (w.start, w.end) == (time(22), time(6))
    odd = OffPeakWindow.from_cron("*/30 1-2 * JAN,jul sun", timedelta(minutes=90, seconds=5), "UTC")
    assert OffPeakWindow.parse(str(odd)) == odd
    assert str(odd) == "cron */30 1-2 * JAN,jul sun for 1h30m5s UTC"


def test_window_set_union_str_and_parse() -> None:
    a = OffPeakWindow.parse("Mon-Fri 22:00-06:00 Asia/Seoul")
    b = OffPeakWindow.parse("Sat,Sun 00:00-23:59 UTC")
    c = OffPeakWindow.parse("daily 01:00-05:00 Europe/Berlin")
    both = a | b
    assert isinstance(both, WindowSet)
    assert both.windows == (a, b)
    assert (both | c).windows == (a, b, c)
    assert (a | (b | c)).windows == (a, b, c)
    assert str(both) == "Mon-Fri 22:00-06:00 Asia/Seoul | Sat,Sun 00:00-23:59 UTC"
    assert WindowSet.parse(str(both)) == both
    assert parse_window(str(both)) == both
    assert parse_window(str(a)) == a


def test_format_duration() -> None:
    assert format_duration(timedelta(hours=3, minutes=12, seconds=59)) == "3h12m"
    assert format_duration(timedelta(hours=16, seconds=30)) == "16h0m"
    assert format_duration(timedelta(minutes=12, seconds=30)) == "12m30s"
    assert format_duration(timedelta(minutes=45)) == "45m"
    assert format_duration(timedelta(days=2, hours=3)) == "2d3h"
    assert format_duration(timedelta(0)) == "0s"


# -- OffPeakWindow: precise errors ---------------------------------------------------------------------


def test_window_errors() -> None:
    with raises(ValueError, "OffPeakWindow.days must name at least one day of the week, got none"):
        OffPeakWindow([], "22:00", "06:00", "UTC")
    with raises(ValueError, "OffPeakWindow.days must name at least one day of the week, got none"):
        OffPeakWindow("", "22:00", "06:00", "UTC")
    with raises(ValueError, "OffPeakWindow.start and end are both 22:00: an empty window"):
        OffPeakWindow("Mon", "22:00", "22:00", "UTC")
    with raises(ValueError, "OffPeakWindow.timezone: unknown IANA time zone 'Mars/Olympus_Mons'"):
        OffPeakWindow("Mon", "22:00", "06:00", "Mars/Olympus_Mons")
    with raises(ValueError, "OffPeakWindow.days: unknown day name 'Funday'"):
        OffPeakWindow("Mon,Funday", "22:00", "06:00", "UTC")
    with raises(ValueError, "OffPeakWindow.days: day 7 is out of range 0 (Mon)..6 (Sun)"):
        OffPeakWindow([7], "22:00", "06:00", "UTC")
    with raises(
        ValueError, "OffPeakWindow.start must be a time 'HH:MM' or 'HH:MM:SS' (00:00-23:59:59), got '25:00'"
    ):
        OffPeakWindow("Mon", "25:00", "06:00", "UTC")
    with raises(
        ValueError, "OffPeakWindow.end must be a time 'HH:MM' or 'HH:MM:SS' (00:00-23:59:59), got 'six'"
    ):
        OffPeakWindow("Mon", "22:00", "six", "UTC")
    with raises(TypeError, "OffPeakWindow.timezone must be an IANA time zone name (str), got NoneType"):
        OffPeakWindow("Mon", "22:00", "06:00")
    with raises(
        ValueError,
        "OffPeakWindow spec 'Mon-Fri 22:00 Asia/Seoul' is not '<days> <HH:MM>-<HH:MM> <time zone>'",
    ):
        OffPeakWindow.parse("Mon-Fri 22:00 Asia/Seoul")
    with raises(ValueError, "OffPeakWindow.parse reads one window"):
        OffPeakWindow.parse("Mon 01:00-02:00 UTC | Tue 01:00-02:00 UTC")
    with raises(ValueError, "WindowSet.windows must hold at least one window, got none"):
        WindowSet(())


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("61 * * * *", "OffPeakWindow.cron: the minute field '61' has 61, out of range 0-59"),
        ("0 24 * * *", "OffPeakWindow.cron: the hour field '24' has 24, out of range 0-23"),
        ("0 0 0 * *", "OffPeakWindow.cron: the day-of-month field '0' has 0, out of range 1-31"),
        (
            "0 0 * FOO *",
            "OffPeakWindow.cron: the month field 'FOO' has 'FOO', which is not a number or a name",
        ),
        ("0 0 * * 8", "OffPeakWindow.cron: the day-of-week field '8' has 8, out of range 0-7"),
        (
            "*/0 * * * *",
            "OffPeakWindow.cron: the minute field '*/0' has step '0'; a step must be a whole number >= 1",
        ),
        ("0 5-1 * * *", "OffPeakWindow.cron: the hour field '5-1' has the range '5-1', which runs backwards"),
        ("0 0 1,,2 * *", "OffPeakWindow.cron: the day-of-month field '1,,2' has an empty list item"),
        (
            "0 0 * *",
            "OffPeakWindow.cron must have 5 fields (minute hour day-of-month month day-of-week), got 4",
        ),
        (
            "0 0 0 * * *",
            "OffPeakWindow.cron must have 5 fields (minute hour day-of-month month day-of-week), got 6",
        ),
        ("0 0 31 2 *", "OffPeakWindow.cron '0 0 31 2 *' never matches: no such day in those months"),
    ],
)
def test_cron_errors(cron: str, message: str) -> None:
    with raises(ValueError, message):
        OffPeakWindow.from_cron(cron, timedelta(hours=1), "UTC")


def test_cron_duration_errors() -> None:
    with raises(
        ValueError, "OffPeakWindow.duration must be greater than 0 and at most 7 days, 0:00:00, got 0:00:00"
    ):
        OffPeakWindow.from_cron("0 0 * * *", timedelta(0), "UTC")
    with raises(TypeError, "OffPeakWindow.duration must be a datetime.timedelta for a cron window, got 3600"):
        OffPeakWindow.from_cron("0 0 * * *", 3600, "UTC")  # type: ignore[arg-type]
    with raises(ValueError, "OffPeakWindow spec 'cron 0 0 * * * for 8x UTC': bad duration '8x'"):
        OffPeakWindow.parse("cron 0 0 * * * for 8x UTC")


# -- window arithmetic ---------------------------------------------------------------------------------


def test_midnight_crossing_window() -> None:
    w = OffPeakWindow.parse("Mon-Fri 22:00-06:00 Asia/Seoul")
    fri_2300 = local("Asia/Seoul", 2026, 12, 4, 23, 0)  # a Friday
    sat_0500 = local("Asia/Seoul", 2026, 12, 5, 5, 0)
    sat_2300 = local("Asia/Seoul", 2026, 12, 5, 23, 0)
    sun_2300 = local("Asia/Seoul", 2026, 12, 6, 23, 0)
    mon_0500 = local("Asia/Seoul", 2026, 12, 7, 5, 0)
    assert w.contains(fri_2300)
    assert w.contains(sat_0500), "opened on Friday, closes Saturday 06:00"
    assert not w.contains(sat_2300)
    assert not w.contains(sun_2300)
    assert not w.contains(mon_0500), "Sunday does not open"
    friday = (local("Asia/Seoul", 2026, 12, 4, 22, 0), local("Asia/Seoul", 2026, 12, 5, 6, 0))
    assert w.current(sat_0500) == friday
    assert w.current(sat_2300) is None
    monday = (local("Asia/Seoul", 2026, 12, 7, 22, 0), local("Asia/Seoul", 2026, 12, 8, 6, 0))
    assert w.next_open(sat_2300) == monday
    assert w.next_open(fri_2300) == friday, "inside: the current occurrence"
    # half-open: the closing instant is outside, the opening instant inside
    assert not w.contains(friday[1])
    assert w.contains(friday[0])
    assert w.next_open(friday[1]) == monday
    # results are UTC
    opened, closed = w.next_open(sat_2300)
    assert opened.tzinfo is UTC and closed.tzinfo is UTC
    assert opened == utc(2026, 12, 7, 13, 0)


def test_occurrences_in_order() -> None:
    w = OffPeakWindow.parse("Mon-Fri 22:00-06:00 Asia/Seoul")
    occ = list(w.occurrences(local("Asia/Seoul", 2026, 12, 5, 0, 0), local("Asia/Seoul", 2026, 12, 9, 0, 0)))
    assert [o.astimezone(SEOUL).day for o, _ in occ] == [4, 7, 8]  # Friday's is still open on Saturday
    assert all(c - o == timedelta(hours=8) for o, c in occ)


def test_window_set_union_arithmetic() -> None:
    nights = OffPeakWindow.parse("Mon-Fri 22:00-06:00 UTC")
    weekend = OffPeakWindow.parse("Sat,Sun 00:00-23:59 UTC")
    both = nights | weekend
    assert both.contains(utc(2026, 12, 5, 12, 0))  # Saturday noon: the weekend window
    assert not nights.contains(utc(2026, 12, 5, 12, 0))
    assert not both.contains(utc(2026, 12, 7, 12, 0))  # Monday noon
    # Friday 22:00 to Saturday 06:00 overlaps Saturday 00:00-23:59: merged into one occurrence
    assert both.current(utc(2026, 12, 5, 3, 0)) == (utc(2026, 12, 4, 22, 0), utc(2026, 12, 5, 23, 59))
    assert both.next_open(utc(2026, 12, 5, 23, 59, 30)) == (utc(2026, 12, 6, 0, 0), utc(2026, 12, 6, 23, 59))
    assert [o for o, _ in both.occurrences(utc(2026, 12, 4, 0, 0), utc(2026, 12, 7, 0, 0))] == [
        utc(2026, 12, 3, 22, 0),
        utc(2026, 12, 4, 22, 0),
        utc(2026, 12, 6, 0, 0),
    ]


def test_touching_occurrences_merge() -> None:
    early = OffPeakWindow.parse("daily 00:00-06:00 UTC")
    late = OffPeakWindow.parse("daily 06:00-08:00 UTC")
    assert (early | late).current(utc(2026, 1, 1, 5, 0)) == (utc(2026, 1, 1, 0, 0), utc(2026, 1, 1, 8, 0))


def test_cron_window_occurrences_and_dst() -> None:
    every_six = OffPeakWindow.from_cron("0 */6 * * *", timedelta(hours=2), "UTC")
    occ = list(every_six.occurrences(utc(2026, 1, 1), utc(2026, 1, 2)))
    assert [(o.hour, c.hour) for o, c in occ] == [(0, 2), (6, 8), (12, 14), (18, 20)]
    # day-of-month OR day-of-week when both are restricted (Vixie cron)
    firsts_or_mondays = OffPeakWindow.from_cron("0 1 1 * MON", timedelta(hours=1), "UTC")
    days = [o.day for o, _ in firsts_or_mondays.occurrences(utc(2026, 6, 1), utc(2026, 7, 2))]
    assert days == [1, 8, 15, 22, 29, 1]
    # a cron time skipped by DST opens at the change; the duration is real elapsed time
    ny = OffPeakWindow.from_cron("30 2 * * *", timedelta(hours=1), "America/New_York")
    assert ny.next_open(utc(2026, 3, 8, 0, 0)) == (utc(2026, 3, 8, 7, 0), utc(2026, 3, 8, 8, 0))
    # every hour for an hour: always open
    always = OffPeakWindow.from_cron("@hourly", timedelta(hours=1), "UTC")
    assert always.contains(utc(2027, 5, 5, 5, 5))
    opened, closed = always.next_open(utc(2027, 5, 5, 5, 5))
    assert opened <= utc(2027, 5, 4) and closed >= utc(2027, 5, 10)
    leap = OffPeakWindow.from_cron("0 0 29 2 *", timedelta(hours=1), "UTC")
    assert leap.next_open(utc(2026, 3, 1)) == (utc(2028, 2, 29), utc(2028, 2, 29, 1))


# -- DST ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "spring_day", "spring_open_utc", "spring_close_utc"),
    [
        # 2026-03-08 02:00 EST -> 03:00 EDT: 02:30 does not exist, the window opens at 03:00 EDT
        ("America/New_York", (2026, 3, 8), utc(2026, 3, 8, 7, 0), utc(2026, 3, 8, 8, 0)),
        # 2026-03-29 02:00 CET -> 03:00 CEST
        ("Europe/Berlin", (2026, 3, 29), utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 2, 0)),
        # 2026-10-04 02:00 AEST -> 03:00 AEDT
        ("Australia/Sydney", (2026, 10, 4), utc(2026, 10, 3, 16, 0), utc(2026, 10, 3, 17, 0)),
    ],
)
def test_spring_forward_start_in_the_gap(
    zone: str, spring_day: tuple[int, int, int], spring_open_utc: datetime, spring_close_utc: datetime
) -> None:
    w = OffPeakWindow("daily", "02:30", "04:00", zone)
    day_before = local(zone, *spring_day, 0, 0) - timedelta(hours=12)
    assert w.next_open(day_before + timedelta(hours=12)) == (spring_open_utc, spring_close_utc)
    assert spring_close_utc - spring_open_utc == timedelta(hours=1)  # 03:00 to 04:00 local
    # the day before and after: the usual 1.5 h
    o, c = w.next_open(day_before - timedelta(hours=24))
    assert c - o == timedelta(hours=1, minutes=30)
    o, c = w.next_open(spring_close_utc)
    assert c - o == timedelta(hours=1, minutes=30)
    assert o - spring_open_utc == timedelta(hours=23, minutes=30)


@pytest.mark.parametrize(
    ("zone", "start", "fall_day", "open_utc", "close_utc"),
    [
        # 2026-11-01 02:00 EDT -> 01:00 EST: 01:30 happens twice; the first (EDT) is used,
        # and the window lasts until 04:00 EST: 3.5 h of real time for a 2.5 h wall-clock window
        ("America/New_York", "01:30", (2026, 11, 1), utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 9, 0)),
        # 2026-10-25 03:00 CEST -> 02:00 CET: 02:30 is the repeated time there
        ("Europe/Berlin", "02:30", (2026, 10, 25), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 3, 0)),
        # 2026-04-05 03:00 AEDT -> 02:00 AEST
        ("Australia/Sydney", "02:30", (2026, 4, 5), utc(2026, 4, 4, 15, 30), utc(2026, 4, 4, 18, 0)),
    ],
)
def test_fall_back_start_is_ambiguous(
    zone: str, start: str, fall_day: tuple[int, int, int], open_utc: datetime, close_utc: datetime
) -> None:
    w = OffPeakWindow("daily", start, "04:00", zone)
    assert w.next_open(local(zone, *fall_day, 0, 0)) == (open_utc, close_utc)
    assert open_utc.astimezone(ZoneInfo(zone)).fold == 0
    # the second occurrence of the wall time is inside the same (single) occurrence
    h, m = map(int, start.split(":"))
    second = local(zone, *fall_day, h, m, fold=1)
    assert second.astimezone(UTC) == open_utc + timedelta(hours=1)
    assert w.current(second) == (open_utc, close_utc)


def test_overnight_window_across_dst_nights() -> None:
    w = OffPeakWindow.parse("daily 22:00-06:00 America/New_York")
    spring = w.next_open(local("America/New_York", 2026, 3, 7, 12, 0))
    fall = w.next_open(local("America/New_York", 2026, 10, 31, 12, 0))
    assert spring[1] - spring[0] == timedelta(hours=7)
    assert fall[1] - fall[0] == timedelta(hours=9)


def test_window_entirely_in_the_gap_skips_that_day() -> None:
    w = OffPeakWindow("Sun", "02:10", "02:50", "America/New_York")
    opened, _ = w.next_open(local("America/New_York", 2026, 3, 7, 12, 0))
    assert opened == local("America/New_York", 2026, 3, 15, 2, 10)


def test_seoul_has_no_dst() -> None:
    w = OffPeakWindow.parse("daily 02:30-04:00 Asia/Seoul")
    for month in range(1, 13):
        o, c = w.next_open(utc(2026, month, 10))
        assert (o.hour, o.minute, c - o) == (17, 30, timedelta(hours=1, minutes=30))


def test_naive_moment_rejected() -> None:
    w = OffPeakWindow.parse("daily 02:30-04:00 Asia/Seoul")
    with raises(ValueError, "moment must be timezone-aware, got naive 2026-01-01T00:00:00"):
        w.contains(datetime(2026, 1, 1))


# -- Deadline ------------------------------------------------------------------------------------------------


def test_deadline() -> None:
    absolute = Deadline(at=local("Asia/Seoul", 2026, 12, 2, 6, 0))
    assert absolute.resolve(None) == utc(2026, 12, 1, 21, 0)
    assert str(absolute) == "by 2026-12-02T06:00:00+09:00"
    relative = Deadline(after_data_interval_end=timedelta(hours=6))
    assert relative.resolve(utc(2026, 12, 1)) == utc(2026, 12, 1, 6)
    assert str(relative) == "6:00:00 after the data interval end"
    assert Deadline.coerce(timedelta(hours=6)) == relative
    assert Deadline.coerce(absolute.at) == absolute  # type: ignore[arg-type]


def test_deadline_errors() -> None:
    with raises(ValueError, "Deadline.at must be timezone-aware, got naive 2026-12-01T00:00:00"):
        Deadline(at=datetime(2026, 12, 1))
    with raises(ValueError, "Deadline needs exactly one of at= or after_data_interval_end=, got both"):
        Deadline(at=utc(2026, 12, 1), after_data_interval_end=timedelta(hours=1))
    with raises(ValueError, "Deadline needs exactly one of at= or after_data_interval_end=, got neither"):
        Deadline()
    with raises(ValueError, "Deadline.after_data_interval_end must not be negative, got -1 day, 23:00:00"):
        Deadline(after_data_interval_end=timedelta(hours=-1))
    with raises(
        ValueError, "Deadline 6:00:00 after the data interval end is relative to the data interval end"
    ):
        Deadline(after_data_interval_end=timedelta(hours=6)).resolve(None)
    with raises(
        ValueError, "the deadline 2026-12-01T00:00:00+00:00 (by 2026-12-01T00:00:00+00:00) has already passed"
    ):
        Deadline(at=utc(2026, 12, 1)).resolve(None, now=utc(2026, 12, 2))


# -- CapacityRetry ---------------------------------------------------------------------------------------------


def test_capacity_retry_defaults_and_str() -> None:
    retry = CapacityRetry()
    assert retry.attempts == 3 and retry.retries == 2
    assert (
        str(retry)
        == "up to 3 attempts, backoff 0:01:00..0:30:00 with jitter, on capacity_not_obtained, preempted"
    )
    kinds: Any = frozenset({"capacity_not_obtained"})  # strings are accepted too
    quiet = CapacityRetry(attempts=1, jitter=False, on=kinds, wait_for_next_window=False)
    assert quiet.on == frozenset({FailureKind.CAPACITY_NOT_OBTAINED})
    assert str(quiet) == (
        "up to 1 attempt, backoff 0:01:00..0:30:00 without jitter, on capacity_not_obtained, "
        "giving up when the window closes"
    )


def test_capacity_retry_delay() -> None:
    plain = CapacityRetry(backoff=timedelta(minutes=1), max_backoff=timedelta(minutes=5), jitter=False)
    rng = random.Random(1)
    assert [plain.delay(n, rng).total_seconds() for n in range(1, 6)] == [60, 120, 240, 300, 300]
    assert plain.delay(10_000, rng) == timedelta(minutes=5)
    jittered = CapacityRetry(backoff=timedelta(minutes=1), max_backoff=timedelta(minutes=5))
    delays = [jittered.delay(3, random.Random(seed)) for seed in range(50)]
    assert all(timedelta(0) <= d <= timedelta(minutes=4) for d in delays)
    assert len(set(delays)) > 10
    assert jittered.delay(3, random.Random(7)) == jittered.delay(3, random.Random(7))
    with raises(ValueError, "retry_number must be an int >= 1, got 0"):
        plain.delay(0, rng)


def test_capacity_retry_errors() -> None:
    with raises(ValueError, "CapacityRetry.attempts must be at least 1 (the first submission counts), got 0"):
        CapacityRetry(attempts=0)
    with raises(ValueError, "CapacityRetry.backoff must not be negative, got -1 day, 23:59:00"):
        CapacityRetry(backoff=timedelta(minutes=-1))
    with raises(ValueError, "CapacityRetry.max_backoff (0:00:30) must be at least backoff (0:01:00)"):
        CapacityRetry(max_backoff=timedelta(seconds=30))
    with raises(
        ValueError, "CapacityRetry.on must not include workload_failed: retrying a workload failure re-runs"
    ):
        CapacityRetry(on=frozenset({FailureKind.CAPACITY_NOT_OBTAINED, FailureKind.WORKLOAD_FAILED}))
    with raises(ValueError, "CapacityRetry.on must not include bad_request: retrying a bad request repeats"):
        CapacityRetry(on=frozenset({FailureKind.BAD_REQUEST}))
    with raises(ValueError, "CapacityRetry.on must name at least one failure kind to retry on"):
        CapacityRetry(on=frozenset())
    with raises(TypeError, "CapacityRetry.attempts must be an int, got bool"):
        CapacityRetry(attempts=True)


# -- Placement and Failover ------------------------------------------------------------------------------------


def test_placement() -> None:
    assert str(Placement("us-east4")) == "us-east4"
    full = Placement("us-east4", "a3-highgpu-8g", "NVIDIA_H100_80GB")
    assert str(full) == "us-east4 (a3-highgpu-8g, NVIDIA_H100_80GB)"
    assert Placement.from_dict(full.to_dict()) == full
    zone = Placement("us-west4-a", tier="spot")
    assert zone.tier == "spot"
    assert str(zone) == "us-west4-a (spot)"
    assert Placement("us-east4").over(full) == full
    with raises(ValueError, "Placement.tier must be one of spot, guaranteed, on-demand or None, got 'cheap'"):
        Placement("us-east4", tier="cheap")
    with raises(ValueError, "Placement.location must be a region or zone such as 'us-central1'"):
        Placement("")


def test_failover() -> None:
    f = Failover(placements=("us-east4", Placement("europe-west4", accelerator_type="NVIDIA_H100_80GB")))
    assert f.placements == (Placement("us-east4"), Placement("europe-west4", None, "NVIDIA_H100_80GB"))
    assert Failover("us-east4", "us-west1").placements == (Placement("us-east4"), Placement("us-west1"))
    assert Failover("us-east4").placements == (Placement("us-east4"),)
    assert str(f) == "fail over to us-east4, then europe-west4 (NVIDIA_H100_80GB)"
    with raises(ValueError, "Failover.placements must name at least one placement, got none"):
        Failover(placements=())
    with raises(ValueError, "Failover.placements lists us-east4 twice"):
        Failover(placements=["us-east4", Placement("us-east4")])
    with raises(TypeError, "Failover.placements must hold Placement values or location strings, got int"):
        Failover(placements=[3])  # type: ignore[list-item]


def test_pendulum_datetimes_from_airflow_are_accepted() -> None:
    """Airflow passes pendulum datetimes; they must behave like any aware datetime."""
    import pendulum

    window = OffPeakWindow.parse("Mon-Fri 22:00-06:00 Asia/Seoul")
    opens, closes = window.next_open(pendulum.datetime(2026, 12, 1, tz="UTC"))
    assert (opens.isoformat(), closes.isoformat()) == (
        "2026-12-01T13:00:00+00:00",
        "2026-12-01T21:00:00+00:00",
    )
    assert window.contains(pendulum.datetime(2026, 12, 1, 14, tz="UTC"))


# -- coerce: the short forms the operators accept -----------------------------------------------------------


def test_coerce_entry_points() -> None:
    nights = OffPeakWindow.parse("Mon-Fri 22:00-06:00 UTC")
    assert coerce_window(None) is None and coerce_window(nights) is nights
    assert coerce_window("Mon-Fri 22:00-06:00 UTC") == nights
    assert coerce_window("Mon 01:00-02:00 UTC | Tue 01:00-02:00 UTC") == parse_window(
        "Mon 01:00-02:00 UTC | Tue 01:00-02:00 UTC"
    )
    with raises(TypeError, "window must be an OffPeakWindow or WindowSet (or None), got int"):
        coerce_window(3)
    assert Deadline.coerce(None) is None
    assert Deadline.coerce(utc(2026, 12, 1)) == Deadline(at=utc(2026, 12, 1))
    with raises(
        TypeError, "deadline must be a Deadline, a timezone-aware datetime or a timedelta (or None), got str"
    ):
        Deadline.coerce("2h")  # type: ignore[arg-type]
    assert CapacityRetry.coerce(None) is None
    assert CapacityRetry.coerce(2) == CapacityRetry(attempts=3)
    assert CapacityRetry.coerce(0) == CapacityRetry(attempts=1)
    with raises(ValueError, "capacity_retry must be a number of retries >= 0, got -1"):
        CapacityRetry.coerce(-1)
    with raises(
        TypeError, "capacity_retry must be a CapacityRetry or a number of retries (or None), got bool"
    ):
        CapacityRetry.coerce(True)
    assert Failover.coerce(None) is None
    assert Failover.coerce("us-east4") == Failover("us-east4")
    assert Failover.coerce(Placement("us-east4")) == Failover("us-east4")
    assert Failover.coerce(["us-east4", "us-west1"]) == Failover("us-east4", "us-west1")
    with raises(TypeError, "failover must be a Failover, a Placement, a location string or a list of them"):
        Failover.coerce(3)  # type: ignore[arg-type]

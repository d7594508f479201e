"""OffPeakTimetable: serialization, summary, run sequence, restrictions, DST data intervals."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pendulum
import pytest
from airflow.timetables.base import DagRunInfo, DataInterval, TimeRestriction, Timetable

from airflow_provider_dws.scheduling.policies import OffPeakWindow, WindowSet
from airflow_provider_dws.timetables import OffPeakTimetable
from airflow_provider_dws.timetables import offpeak as offpeak_module

SEOUL_SPEC = "Mon-Fri 22:00-06:00 Asia/Seoul"
UTC = timezone.utc


def utc(*args: int) -> pendulum.DateTime:
    return pendulum.datetime(*args, tz="UTC")


def interval(start: pendulum.DateTime, hours: float) -> DataInterval:
    return DataInterval(start, start + timedelta(hours=hours))


# Mon-Fri 22:00-06:00 KST (UTC+9, no DST) is 13:00-21:00 UTC on the opening day.
# 2026-12-01 is a Tuesday; Fri 2026-12-04's window closes Sat 06:00 KST; next opens Mon 2026-12-07.
TUE = interval(utc(2026, 12, 1, 13), 8)
WED = interval(utc(2026, 12, 2, 13), 8)
FRI = interval(utc(2026, 12, 4, 13), 8)
MON = interval(utc(2026, 12, 7, 13), 8)


@pytest.fixture
def seoul() -> OffPeakTimetable:
    return OffPeakTimetable(SEOUL_SPEC)


@pytest.fixture
def now(monkeypatch: pytest.MonkeyPatch):
    """Set the timetable's clock: ``now(datetime)``."""

    def set_now(moment: datetime) -> None:
        monkeypatch.setattr(offpeak_module, "_utcnow", lambda: moment)

    return set_now


def next_info(
    tt: OffPeakTimetable,
    last: DataInterval | None,
    *,
    earliest: datetime | None = None,
    latest: datetime | None = None,
    catchup: bool = True,
) -> DagRunInfo | None:
    return tt.next_dagrun_info(
        last_automated_data_interval=last,
        restriction=TimeRestriction(earliest=earliest, latest=latest, catchup=catchup),
    )


def assert_run(info: DagRunInfo | None, expected: DataInterval) -> None:
    assert info is not None
    assert info.data_interval == expected
    assert info.run_after == expected.start
    assert info.logical_date == expected.start


# -- construction, summary, serialization ------------------------------------------------------------


def test_is_a_core_timetable_with_readable_summary_and_description(seoul: OffPeakTimetable) -> None:
    assert isinstance(seoul, Timetable)
    assert seoul.summary == "off-peak Mon-Fri 22:00-06:00 Asia/Seoul"
    assert seoul.description.startswith("One run per off-peak window (Mon-Fri 22:00-06:00 Asia/Seoul)")
    assert seoul.description.endswith(".")
    assert seoul.periodic and seoul.can_be_scheduled
    # The name the serialized DAG stores (``Timetable.type_name`` from Airflow 3.1; the class path before).
    name = getattr(seoul, "type_name", f"{type(seoul).__module__}.{type(seoul).__qualname__}")
    assert name == "airflow_provider_dws.timetables.offpeak.OffPeakTimetable"
    assert repr(seoul) == "OffPeakTimetable('Mon-Fri 22:00-06:00 Asia/Seoul')"


def test_accepts_a_window_object_and_a_spec_string_alike() -> None:
    window = OffPeakWindow(days="Mon-Fri", start="22:00", end="06:00", timezone="Asia/Seoul")
    assert OffPeakTimetable(window) == OffPeakTimetable(SEOUL_SPEC)
    assert OffPeakTimetable(window).window == window


def test_serialize_round_trip_single_window(seoul: OffPeakTimetable) -> None:
    data = seoul.serialize()
    assert json.loads(json.dumps(data)) == data
    assert data["windows"] == [SEOUL_SPEC]
    restored = OffPeakTimetable.deserialize(json.loads(json.dumps(data)))
    assert restored == seoul
    assert restored.summary == seoul.summary
    assert restored.description == seoul.description
    assert restored.serialize() == data


def test_serialize_round_trip_window_set_with_options() -> None:
    weekdays = OffPeakWindow.parse(SEOUL_SPEC)
    weekend = OffPeakWindow.parse("Sat-Sun 00:00-12:00 Asia/Seoul")
    tt = OffPeakTimetable(weekdays | weekend, catchup_limit=3, description="Nights and weekends in Seoul")
    data = json.loads(json.dumps(tt.serialize()))
    assert data["windows"] == [str(weekdays), str(weekend)]
    assert data["catchup_limit"] == 3
    restored = OffPeakTimetable.deserialize(data)
    assert isinstance(restored.window, WindowSet)
    assert restored == tt
    assert restored.summary == f"off-peak {weekdays} | {weekend}"
    assert restored.description == "Nights and weekends in Seoul"
    assert restored.catchup_limit == 3
    # Same schedule after the round trip.
    earliest = utc(2026, 12, 4, 0)
    assert next_info(restored, None, earliest=earliest) == next_info(tt, None, earliest=earliest)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"windows": []}, "non-empty list of spec strings"),
        ({}, "non-empty list of spec strings"),
        ({"windows": [SEOUL_SPEC], "version": 99}, "serialization version 99"),
    ],
)
def test_deserialize_rejects_bad_data(data: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OffPeakTimetable.deserialize(data)


def test_invalid_arguments_give_precise_errors() -> None:
    with pytest.raises(TypeError, match=r"must be an OffPeakWindow, a WindowSet or a spec string.*got int"):
        OffPeakTimetable(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window spec is empty"):
        OffPeakTimetable("  ")
    with pytest.raises(ValueError, match="invalid window spec 'Mon-Fri 22:00-06:00 Mars/Olympus'"):
        OffPeakTimetable("Mon-Fri 22:00-06:00 Mars/Olympus")
    with pytest.raises(ValueError, match="catchup_limit must be at least 1"):
        OffPeakTimetable(SEOUL_SPEC, catchup_limit=0)
    with pytest.raises(TypeError, match="catchup_limit must be a positive int or None, got True"):
        OffPeakTimetable(SEOUL_SPEC, catchup_limit=True)
    with pytest.raises(ValueError, match="description must be a non-empty string"):
        OffPeakTimetable(SEOUL_SPEC, description="")


# -- next_dagrun_info --------------------------------------------------------------------------------


def test_first_run_after_a_date_and_the_one_after_it(seoul: OffPeakTimetable) -> None:
    first = next_info(seoul, None, earliest=utc(2026, 12, 1))  # Tue 09:00 KST
    assert_run(first, TUE)
    assert first is not None and first.data_interval is not None
    assert first.run_after.in_timezone("Asia/Seoul").format("ddd HH:mm") == "Tue 22:00"
    assert first.data_interval.end.in_timezone("Asia/Seoul").format("ddd HH:mm") == "Wed 06:00"
    assert_run(next_info(seoul, first.data_interval, earliest=utc(2026, 12, 1)), WED)


def test_earliest_is_inclusive_and_a_window_already_open_at_start_date_is_skipped(
    seoul: OffPeakTimetable,
) -> None:
    assert_run(next_info(seoul, None, earliest=TUE.start), TUE)
    assert_run(next_info(seoul, None, earliest=TUE.start + timedelta(minutes=1)), WED)


def test_weekend_is_skipped(seoul: OffPeakTimetable) -> None:
    assert_run(next_info(seoul, FRI, earliest=utc(2026, 12, 1)), MON)
    # Asked on Saturday morning with nothing run yet: Monday night.
    assert_run(next_info(seoul, None, earliest=utc(2026, 12, 5, 3)), MON)


def test_catchup_true_backfills_from_start_date(seoul: OffPeakTimetable, now) -> None:
    now(utc(2026, 12, 10, 15))  # Thu 2026-12-10, 00:00 KST Fri, inside Thursday's window
    assert_run(next_info(seoul, None, earliest=utc(2026, 12, 1)), TUE)
    assert_run(next_info(seoul, TUE, earliest=utc(2026, 12, 1)), WED)


def test_catchup_false_runs_the_current_occurrence_only(seoul: OffPeakTimetable, now) -> None:
    thursday = interval(utc(2026, 12, 10, 13), 8)
    now(utc(2026, 12, 10, 15))  # inside Thursday's window
    assert_run(next_info(seoul, None, earliest=utc(2026, 12, 1), catchup=False), thursday)
    assert_run(next_info(seoul, TUE, earliest=utc(2026, 12, 1), catchup=False), thursday)
    # Once the current occurrence has run, the next one.
    friday = interval(utc(2026, 12, 11, 13), 8)
    assert_run(next_info(seoul, thursday, earliest=utc(2026, 12, 1), catchup=False), friday)


def test_catchup_false_between_windows_waits_for_the_next(seoul: OffPeakTimetable, now) -> None:
    now(utc(2026, 12, 10, 22))  # Fri 07:00 KST: Thursday's window closed an hour ago
    assert_run(next_info(seoul, TUE, catchup=False), interval(utc(2026, 12, 11, 13), 8))
    now(utc(2026, 12, 12, 3))  # Saturday noon KST
    monday = interval(utc(2026, 12, 14, 13), 8)
    assert_run(next_info(seoul, None, earliest=utc(2026, 12, 1), catchup=False), monday)
    assert_run(next_info(seoul, None, catchup=False), monday)


def test_no_start_date_starts_from_the_current_or_next_occurrence(seoul: OffPeakTimetable, now) -> None:
    now(utc(2026, 12, 10, 15))
    assert_run(next_info(seoul, None, catchup=True), interval(utc(2026, 12, 10, 13), 8))
    now(utc(2026, 12, 10, 12, 59))
    assert_run(next_info(seoul, None, catchup=False), interval(utc(2026, 12, 10, 13), 8))


def test_latest_restriction_is_inclusive(seoul: OffPeakTimetable) -> None:
    thursday = interval(utc(2026, 12, 3, 13), 8)
    assert (
        next_info(seoul, thursday, earliest=utc(2026, 12, 1), latest=FRI.start - timedelta(seconds=1)) is None
    )
    assert_run(next_info(seoul, thursday, earliest=utc(2026, 12, 1), latest=FRI.start), FRI)
    assert next_info(seoul, FRI, earliest=utc(2026, 12, 1), latest=utc(2026, 12, 6)) is None


def test_catchup_limit_skips_older_missed_occurrences(now) -> None:
    tt = OffPeakTimetable(SEOUL_SPEC, catchup_limit=2)
    now(utc(2026, 12, 10, 15))  # inside Thursday's window: Wed and Thu are the two latest opened
    wednesday = interval(utc(2026, 12, 9, 13), 8)
    thursday = interval(utc(2026, 12, 10, 13), 8)
    assert_run(next_info(tt, None, earliest=utc(2026, 12, 1)), wednesday)
    assert_run(next_info(tt, TUE, earliest=utc(2026, 12, 1)), wednesday)
    assert_run(next_info(tt, wednesday, earliest=utc(2026, 12, 1)), thursday)
    # Fewer missed occurrences than the limit: nothing is skipped.
    now(utc(2026, 12, 1, 15))
    assert_run(next_info(tt, None, earliest=utc(2026, 11, 30)), interval(utc(2026, 11, 30, 13), 8))


def test_window_set_runs_follow_merged_occurrences() -> None:
    """Fri 22:00-Sat 06:00 overlaps Sat 00:00-12:00: one run, Fri 22:00 to Sat 12:00 KST."""
    tt = OffPeakTimetable("Mon-Fri 22:00-06:00 Asia/Seoul | Sat-Sun 00:00-12:00 Asia/Seoul")
    assert isinstance(tt.window, WindowSet)
    assert tt.summary == "off-peak Mon-Fri 22:00-06:00 Asia/Seoul | Sat,Sun 00:00-12:00 Asia/Seoul"
    friday_to_saturday = DataInterval(utc(2026, 12, 4, 13), utc(2026, 12, 5, 3))
    sunday = DataInterval(utc(2026, 12, 5, 15), utc(2026, 12, 6, 3))
    assert_run(next_info(tt, None, earliest=utc(2026, 12, 4)), friday_to_saturday)
    assert_run(next_info(tt, friday_to_saturday, earliest=utc(2026, 12, 4)), sunday)
    assert_run(next_info(tt, sunday, earliest=utc(2026, 12, 4)), MON)


def test_sparse_cron_window() -> None:
    """A window opening on 29 February only: the next run and a manual run look years away."""
    tt = OffPeakTimetable("cron 0 1 29 2 * for 1h UTC")
    assert_run(next_info(tt, None, earliest=utc(2026, 1, 1)), interval(utc(2028, 2, 29, 1), 1))
    assert tt.infer_manual_data_interval(run_after=utc(2026, 1, 1)) == interval(utc(2024, 2, 29, 1), 1)


def test_data_intervals_are_pendulum_utc(seoul: OffPeakTimetable) -> None:
    info = next_info(seoul, None, earliest=utc(2026, 12, 1))
    assert info is not None and info.data_interval is not None
    for moment in (info.run_after, *info.data_interval):
        assert isinstance(moment, pendulum.DateTime)
        assert moment.utcoffset() == timedelta(0)


# -- DST --------------------------------------------------------------------------------------------

# (zone, transition date, expected UTC open and close on that local date, duration in hours)
DST_CASES = [
    # America/New_York springs forward 02:00 EST -> 03:00 EDT: 01:00 EST .. 05:00 EDT.
    ("America/New_York", (2026, 3, 8), utc(2026, 3, 8, 6), utc(2026, 3, 8, 9), 3),
    # ...falls back 02:00 EDT -> 01:00 EST: from the first 01:00 (EDT) to 05:00 EST.
    ("America/New_York", (2026, 11, 1), utc(2026, 11, 1, 5), utc(2026, 11, 1, 10), 5),
    # Europe/Berlin: 02:00 CET -> 03:00 CEST, then 03:00 CEST -> 02:00 CET.
    ("Europe/Berlin", (2026, 3, 29), utc(2026, 3, 29, 0), utc(2026, 3, 29, 3), 3),
    ("Europe/Berlin", (2026, 10, 25), utc(2026, 10, 24, 23), utc(2026, 10, 25, 4), 5),
    # Australia/Sydney: DST ends 03:00 AEDT -> 02:00 AEST, starts 02:00 AEST -> 03:00 AEDT.
    ("Australia/Sydney", (2026, 4, 5), utc(2026, 4, 4, 14), utc(2026, 4, 4, 19), 5),
    ("Australia/Sydney", (2026, 10, 4), utc(2026, 10, 3, 15), utc(2026, 10, 3, 18), 3),
]


@pytest.mark.parametrize(("zone", "day", "open_utc", "close_utc", "hours"), DST_CASES)
def test_nightly_window_across_dst(
    zone: str,
    day: tuple[int, int, int],
    open_utc: pendulum.DateTime,
    close_utc: pendulum.DateTime,
    hours: int,
) -> None:
    tt = OffPeakTimetable(OffPeakWindow(days="Mon-Sun", start="01:00", end="05:00", timezone=zone))
    tz = ZoneInfo(zone)
    transition = datetime(*day).date()
    earliest = datetime(*day, tzinfo=tz) - timedelta(days=3)
    runs: list[DataInterval] = []
    last: DataInterval | None = None
    for _ in range(7):  # three nights before the transition, the transition night, three after
        info = next_info(tt, last, earliest=earliest, latest=earliest + timedelta(days=10))
        assert info is not None and info.data_interval is not None
        assert info.run_after == info.data_interval.start
        runs.append(last := info.data_interval)

    for offset, run in enumerate(runs, start=-3):
        local_day = transition + timedelta(days=offset)
        start_local, end_local = run.start.astimezone(tz), run.end.astimezone(tz)
        assert (start_local.date(), start_local.strftime("%H:%M")) == (local_day, "01:00"), run
        assert (end_local.date(), end_local.strftime("%H:%M")) == (local_day, "05:00"), run
        expected_hours = hours if offset == 0 else 4
        assert run.end - run.start == timedelta(hours=expected_hours), (zone, local_day, run)
    assert (runs[3].start, runs[3].end) == (open_utc, close_utc)
    # The UTC offset of the opening and closing instants differ only on the transition night.
    for offset, run in enumerate(runs, start=-3):
        changes = run.start.astimezone(tz).utcoffset() != run.end.astimezone(tz).utcoffset()
        assert changes == (offset == 0)


# -- manual runs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run_after", "expected"),
    [
        (utc(2026, 12, 1, 13), TUE),  # exactly at opening
        (utc(2026, 12, 1, 15), TUE),  # inside
        (utc(2026, 12, 1, 21), TUE),  # at closing: the last one before
        (utc(2026, 12, 2, 12), TUE),  # between windows
        (utc(2026, 12, 5, 12), FRI),  # Saturday
        (utc(2026, 12, 7, 12, 59), FRI),  # Monday just before opening
        (utc(2026, 12, 7, 13), MON),
    ],
)
def test_infer_manual_data_interval(
    seoul: OffPeakTimetable, run_after: pendulum.DateTime, expected: DataInterval
) -> None:
    got = seoul.infer_manual_data_interval(run_after=run_after)
    assert got == expected
    assert isinstance(got.start, pendulum.DateTime) and isinstance(got.end, pendulum.DateTime)


def test_infer_manual_data_interval_rejects_naive(seoul: OffPeakTimetable) -> None:
    with pytest.raises(ValueError, match="run_after must be timezone-aware"):
        seoul.infer_manual_data_interval(run_after=datetime(2026, 12, 1))  # type: ignore[arg-type]


def test_accepts_stdlib_aware_datetimes(seoul: OffPeakTimetable) -> None:
    earliest = datetime(2026, 12, 1, 9, tzinfo=ZoneInfo("Asia/Seoul"))
    assert_run(next_info(seoul, None, earliest=earliest), TUE)
    assert_run(next_info(seoul, None, earliest=earliest.astimezone(UTC)), TUE)

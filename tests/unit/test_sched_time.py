"""One aware-UTC helper and one duration validator (scheduling/_time.py), used by every caller."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pendulum
import pytest

from airflow_provider_dws.scheduling._time import (
    aware_utc,
    check_duration,
    exact_duration,
    parse_duration,
    parse_instant,
)
from airflow_provider_dws.scheduling.decisions import Attempt, next_step, next_submit
from airflow_provider_dws.scheduling.phases import Phase
from airflow_provider_dws.scheduling.policies import CapacityRetry, Deadline, OffPeakWindow, Placement

UTC = timezone.utc
HOME = Placement("us-central1")


def raises(exc: type[Exception], message: str) -> Any:
    return pytest.raises(exc, match=f"^{re.escape(message)}$")


def test_aware_utc_returns_a_plain_utc_datetime() -> None:
    moment = pendulum.datetime(2026, 12, 1, 22, tz="Asia/Seoul")
    result = aware_utc(moment)
    assert type(result) is datetime and result.tzinfo is UTC
    assert result == datetime(2026, 12, 1, 13, tzinfo=UTC)
    with raises(ValueError, "now must be timezone-aware, got naive 2026-01-01T00:00:00"):
        aware_utc(datetime(2026, 1, 1), "now")
    with raises(TypeError, "now must be a datetime.datetime, got str"):
        aware_utc("2026-01-01", "now")


def test_parse_instant() -> None:
    assert parse_instant("2026-12-01T22:00:00+09:00", "wait_deadline") == datetime(
        2026, 12, 1, 13, tzinfo=UTC
    )
    with raises(ValueError, "wait_deadline must carry a time zone, got '2026-01-01T00:00:00'"):
        parse_instant("2026-01-01T00:00:00", "wait_deadline")


def test_decisions_accept_pendulum_datetimes() -> None:
    """Airflow hands tasks pendulum datetimes; the decisions used to fail comparing them."""
    start = pendulum.datetime(2026, 12, 1, 14, tz="UTC")
    attempt = Attempt(
        1, HOME, start, start.add(minutes=45), timedelta(minutes=45), Phase.NOT_OBTAINED, None, "job-1"
    )
    step = next_step(
        [attempt],
        start.add(minutes=46),
        home=HOME,
        max_wait=timedelta(minutes=45),
        retry=CapacityRetry(jitter=False),
        deadline=pendulum.datetime(2026, 12, 2, tz="UTC"),
    )
    assert step.action == "submit" and step.attempt == 2
    assert step.at == datetime(2026, 12, 1, 14, 46, tzinfo=UTC)
    window = OffPeakWindow.parse("Mon-Fri 22:00-06:00 Asia/Seoul")
    decision = next_submit(
        start, timedelta(hours=1), window, pendulum.datetime(2026, 12, 1, 15, 30, tz="UTC")
    )
    assert decision.max_wait == timedelta(hours=1)
    assert Deadline(at=pendulum.datetime(2026, 12, 2, tz="Asia/Seoul")).resolve(None) == datetime(
        2026, 12, 1, 15, tzinfo=UTC
    )


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        ({"value": 0}, ValueError, "d must be greater than 0, got 0:00:00"),
        ({"value": timedelta(0), "zero": True}, None, ""),
        (
            {"value": timedelta(seconds=-1), "zero": True},
            ValueError,
            "d must not be negative, got -1 day, 23:59:59",
        ),
        (
            {"value": 8, "limit": timedelta(seconds=5)},
            ValueError,
            "d must be greater than 0 and at most 0:00:05, got 8 seconds",
        ),
        ({"value": float("nan")}, ValueError, "d must be greater than 0, got nan seconds"),
        ({"value": 1.5}, ValueError, "d must be a whole number of seconds, got 0:00:01.500000"),
        ({"value": 1.5, "whole": False}, None, ""),
        ({"value": 3, "seconds": False}, TypeError, "d must be a datetime.timedelta, got int"),
        ({"value": True}, TypeError, "d must be a datetime.timedelta (or seconds), got bool"),
    ],
)
def test_check_duration(kwargs: dict[str, Any], exc: type[Exception] | None, message: str) -> None:
    if exc is None:
        assert isinstance(check_duration("d", **kwargs), timedelta)
    else:
        with raises(exc, message):
            check_duration("d", **kwargs)


def test_duration_text_round_trips() -> None:
    for delta in (timedelta(hours=8), timedelta(minutes=90, seconds=5), timedelta(days=1, seconds=5)):
        assert parse_duration(exact_duration(delta)) == delta
    assert parse_duration("8x") is None
    assert parse_duration("") is None

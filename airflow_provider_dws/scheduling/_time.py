"""Instants and durations: the one place that checks, converts and prints them.

Pure and stdlib-only (imported at every DAG parse). Every policy, decision, timetable and trigger
that takes an instant or a duration from a user, Airflow or a serialized payload goes through here,
so the rules and the messages are the same everywhere.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

from airflow_provider_dws.patterns import LazyPattern

__all__ = [
    "UTC",
    "aware_utc",
    "check_duration",
    "exact_duration",
    "format_duration",
    "parse_duration",
    "parse_instant",
]

UTC = timezone.utc
_ZERO = timedelta(0)
_DURATION_RE = LazyPattern(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


# -- instants ---------------------------------------------------------------------------------------


def aware_utc(moment: object, name: str = "moment") -> datetime:
    """``moment`` as a plain stdlib ``datetime`` in UTC; a naive or non-datetime value is refused.

    The result is rebuilt as a ``datetime.datetime`` even when ``moment`` is a subclass: pendulum's
    ``DateTime`` (what Airflow passes to timetables and tasks) drops a stdlib ``tzinfo`` in
    arithmetic and then fails to compare with aware datetimes. Rebuilding needs no pendulum import.
    """
    if not isinstance(moment, datetime):
        raise TypeError(f"{name} must be a datetime.datetime, got {type(moment).__name__}")
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got naive {moment.isoformat()}")
    u = moment.astimezone(UTC)
    return datetime(u.year, u.month, u.day, u.hour, u.minute, u.second, u.microsecond, tzinfo=UTC)


def parse_instant(text: str, name: str) -> datetime:
    """An ISO 8601 string with an offset (as serialized in trigger kwargs) as an aware UTC datetime."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be an ISO 8601 string, got {type(text).__name__}")
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ValueError(f"{name} must carry a time zone, got {text!r}")
    return parsed.astimezone(UTC)


# -- durations --------------------------------------------------------------------------------------


def check_duration(
    name: str,
    value: object,
    limit: timedelta | None = None,
    *,
    seconds: bool = True,
    zero: bool = False,
    whole: bool = True,
) -> timedelta:
    """``value`` checked as a duration and returned as a ``timedelta``.

    :param name: how the value is named in messages (``"max_wait"``, ``"CapacityRetry.backoff"``).
    :param limit: the longest accepted duration, or None for no upper bound.
    :param seconds: also accept a number of seconds (``int`` or ``float``, never ``bool``).
    :param zero: accept a zero duration ("must not be negative"); else it must be greater than 0.
    :param whole: refuse fractions of a second.
    """
    numeric = seconds and isinstance(value, (int, float)) and not isinstance(value, bool)
    if not numeric and (isinstance(value, bool) or not isinstance(value, timedelta)):
        kinds = "a datetime.timedelta (or seconds)" if seconds else "a datetime.timedelta"
        raise TypeError(f"{name} must be {kinds}, got {type(value).__name__}")
    if limit is not None:
        bounds = f"{'at least 0' if zero else 'greater than 0'} and at most {limit}"
    else:
        bounds = "not negative" if zero else "greater than 0"
    verb = "must not be negative" if zero and limit is None else f"must be {bounds}"
    if numeric:
        assert isinstance(value, (int, float))
        largest = (limit or timedelta.max).total_seconds()
        if not math.isfinite(value) or abs(value) > largest:
            raise ValueError(f"{name} {verb}, got {value!r} seconds")
        delta = timedelta(seconds=value)
    else:
        assert isinstance(value, timedelta)
        delta = value
    if delta < _ZERO or (delta == _ZERO and not zero) or (limit is not None and delta > limit):
        raise ValueError(f"{name} {verb}, got {delta}")
    if whole and delta.microseconds:
        raise ValueError(f"{name} must be a whole number of seconds, got {delta}")
    return delta


def parse_duration(text: str) -> timedelta | None:
    """A short duration such as ``8h``, ``90m``, ``1h30m``, ``1d`` or ``45s``; None if it is not one."""
    match = _DURATION_RE.fullmatch(text.strip().lower())
    if not match or not any(match.groups()):
        return None
    d, h, m, s = (int(g) if g else 0 for g in match.groups())
    return timedelta(days=d, hours=h, minutes=m, seconds=s)


def _units(delta: timedelta) -> tuple[int, int, int, int]:
    total = max(0, math.floor(delta.total_seconds()))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return days, hours, minutes, secs


def format_duration(delta: timedelta) -> str:
    """A rough duration for people: ``2d3h``, ``3h12m``, ``12m30s``, ``45m`` or ``30s`` (floored)."""
    days, hours, minutes, secs = _units(delta)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"


def exact_duration(delta: timedelta) -> str:
    """An exact whole-second duration such as ``8h``, ``1h30m`` or ``1d5s`` (read back by :func:`parse_duration`)."""
    parts = zip(_units(delta), "dhms", strict=True)
    return "".join(f"{n}{unit}" for n, unit in parts if n) or "0s"

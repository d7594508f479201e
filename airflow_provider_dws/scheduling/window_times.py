"""The occurrence arithmetic of off-peak windows: which instants their local wall times are, and
their merged occurrences around a moment.

:mod:`airflow_provider_dws.scheduling.windows` holds the windows themselves (what a DAG file gives,
parsed and checked); their methods that answer "when" (``current``, ``next_open``,
``occurrences``) call the functions here, so a DAG file's parse, which only builds and serializes
a window, does not load this module: the scheduler and a running task do. A window is read by its
attributes (``days``, ``start``, ``end``, ``tz``, ``duration``, its parsed cron; a set's
``windows``), never by importing its class. The DST rules are the ``windows`` module's docstring.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from airflow_provider_dws.scheduling._time import UTC, aware_utc

Occurrence = tuple[datetime, datetime]

_DAY = timedelta(days=1)
_SECOND = timedelta(seconds=1)
#: A merged stretch of touching occurrences is followed at most this far from the instants asked
#: about; a window that never closes for longer than this is reported as closing (or having opened)
#: at that distance. No decision looks this far ahead (max waits are at most 7 days).
MERGE_HORIZON = timedelta(days=31)
_CHAIN_STEP = timedelta(days=8)
#: How far :meth:`OffPeakWindow.next_open` searches (a cron window on 29 February opens every 4 to
#: 8 years).
SEARCH_LIMIT = timedelta(days=366 * 9)


def resolve_local(local: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant of the naive wall time ``local`` in ``tz``, with the windows' DST rules.

    A skipped wall time resolves to the first valid instant after it (the moment of the change); a
    repeated one to its first occurrence (``fold=0``).
    """
    first = local.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if first.astimezone(tz).replace(tzinfo=None) == local:
        return first
    # In a gap: fold=0 applies the offset from before the change (a later instant), fold=1 the offset
    # from after it (an earlier one). The change lies between; find it to the second.
    other = local.replace(tzinfo=tz, fold=1).astimezone(UTC)
    lo, hi = min(first, other), max(first, other)  # wall(lo) < local <= wall(hi)
    while hi - lo > _SECOND:
        mid = lo + timedelta(seconds=(hi - lo).total_seconds() // 2)
        if mid.astimezone(tz).replace(tzinfo=None) >= local:
            hi = mid
        else:
            lo = mid
    return hi


def _merge(intervals: Any) -> list[Occurrence]:
    out: list[Occurrence] = []
    for opened, closed in sorted(intervals):
        if opened >= closed:
            continue
        if out and opened <= out[-1][1]:
            if closed > out[-1][1]:
                out[-1] = (out[-1][0], closed)
        else:
            out.append((opened, closed))
    return out


def raw(window: Any, lo: datetime, hi: datetime) -> list[Occurrence]:
    """Unmerged, non-empty occurrences of ``window`` (a window or a set) with ``close >= lo`` and
    ``open <= hi``, sorted."""
    members = getattr(window, "windows", None)
    if members is not None:
        return sorted(occ for member in members for occ in raw(member, lo, hi))
    tz = window.tz
    lookback = 2 if window.duration is None else window.duration.days + 2
    first = lo.astimezone(tz).date() - timedelta(days=lookback)
    last = hi.astimezone(tz).date() + timedelta(days=1)
    out: list[Occurrence] = []
    day = first
    while day <= last:
        out.extend(_on(window, day, tz))
        day += _DAY
    return [(o, c) for o, c in out if c >= lo and o <= hi]


def _on(window: Any, day: date, tz: ZoneInfo) -> list[Occurrence]:
    """The occurrences of one window opening on local date ``day``."""
    cron = window._cron
    if cron is not None and window.duration is not None:
        if not cron.matches(day):
            return []
        out = []
        for at in cron.times():
            opened = resolve_local(datetime.combine(day, at), tz)
            out.append((opened, opened + window.duration))
        return out
    if day.weekday() not in window.days:
        return []
    opened = resolve_local(datetime.combine(day, window.start), tz)
    close_day = day + _DAY if window.end < window.start else day
    closed = resolve_local(datetime.combine(close_day, window.end), tz)
    return [(opened, closed)] if opened < closed else []


def merged(window: Any, lo: datetime, hi: datetime) -> list[Occurrence]:
    """Merged occurrences touching ``[lo, hi]``, the first and last followed to their true ends."""
    found = _merge(raw(window, lo, hi))
    if not found:
        return found
    opened, closed = found[0]
    while opened < lo and opened > lo - MERGE_HORIZON:
        earlier = _merge([*raw(window, opened - _CHAIN_STEP, opened), (opened, closed)])
        new_open = next(o for o, c in earlier if o <= opened < c)
        if new_open == opened:
            break
        opened = new_open
    found[0] = (opened, found[0][1])
    opened, closed = found[-1]
    while closed > hi and closed < hi + MERGE_HORIZON:
        later = _merge([(opened, closed), *raw(window, closed, closed + _CHAIN_STEP)])
        new_close = next(c for o, c in later if o <= opened < c)
        if new_close == closed:
            break
        closed = new_close
    found[-1] = (found[-1][0], closed)
    return found


def current(window: Any, moment: datetime) -> Occurrence | None:
    """``(open, close)`` of the occurrence containing ``moment``, or None outside the window."""
    at = aware_utc(moment)
    for opened, closed in merged(window, at, at):
        if opened <= at < closed:
            return opened, closed
    return None


def next_open(window: Any, moment: datetime) -> Occurrence:
    """The earliest occurrence with ``close > moment``: the current one if inside, else the next."""
    at = aware_utc(moment)
    found = current(window, at)
    if found is not None:
        return found
    lo, step = at, timedelta(days=8)
    while lo - at < SEARCH_LIMIT:
        for opened, closed in merged(window, lo, lo + step):
            if closed > at:
                return opened, closed
        lo, step = lo + step, min(step * 2, timedelta(days=120))
    raise ValueError(f"{window} does not open within {SEARCH_LIMIT.days} days after {at.isoformat()}")


def occurrences(window: Any, start: datetime, end: datetime) -> Iterator[Occurrence]:
    """Merged occurrences overlapping ``[start, end)``, in order (not clipped to the range)."""
    lo, hi = aware_utc(start, "start"), aware_utc(end, "end")
    if hi <= lo:
        return iter(())
    return iter([(o, c) for o, c in merged(window, lo, hi) if c > lo and o < hi])

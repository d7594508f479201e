"""Scheduling policies: small, frozen, validated values you can read, combine, print and test.

In the spirit of tenacity's ``stop_after_attempt | stop_after_delay``:

- :class:`OffPeakWindow` - a recurring local-time window ("Mon-Fri 22:00-06:00 Asia/Seoul"), or a
  cron expression plus a duration; ``window_a | window_b`` is a :class:`WindowSet`.
- :class:`Deadline` - an absolute time, or a duration after the run's data interval end.
- :class:`CapacityRetry` - how often, how soon and on which outcomes to resubmit a request.
- :class:`Placement` / :class:`Failover` - where to ask for capacity, in order.

Time zones and daylight saving time
-----------------------------------
Window times are local wall-clock times in the window's IANA time zone. Each occurrence's opening
and closing wall times are turned into instants with these rules:

- A wall time that does not exist (skipped by a spring-forward change) resolves to the first valid
  instant after it, i.e. the moment of the change: a window opening at 02:30 on a day when clocks
  jump from 02:00 to 03:00 opens at 03:00.
- A wall time that happens twice (repeated by a fall-back change) resolves to its first (``fold=0``,
  still summer time) occurrence.
- An occurrence lasts the real time elapsed between its resolved opening and closing instants:
  "22:00-06:00" lasts 7 h on a spring-forward night and 9 h on a fall-back night. An occurrence
  whose opening and closing both fall in the same skipped hour is empty, and does not happen.
- A cron window (:meth:`OffPeakWindow.from_cron`) opens at each cron match (resolved as above) and
  stays open for ``duration`` of real elapsed time.

Occurrences are half-open ``[open, close)``; overlapping or touching occurrences (of one window or of
a :class:`WindowSet`) are merged into one. All instants returned are UTC.
"""

from __future__ import annotations

import calendar
import enum
import math
import random
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from typing import Any, TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from airflow_provider_dws.scheduling.phases import FailureKind

__all__ = [
    "CapacityRetry",
    "Deadline",
    "Failover",
    "OffPeakWindow",
    "Placement",
    "Window",
    "WindowSet",
    "format_duration",
    "parse_window",
]

UTC = timezone.utc
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
#: The longest duration of a cron window.
MAX_CRON_DURATION = timedelta(days=7)

_DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_DAY_LOOKUP: dict[str, int] = {}
for _i, _name in enumerate(_DAY_NAMES):
    _DAY_LOOKUP[_name.lower()] = _i
    _DAY_LOOKUP[calendar.day_name[_i].lower()] = _i
_DAY_GROUPS: dict[str, frozenset[int]] = {
    "daily": frozenset(range(7)),
    "everyday": frozenset(range(7)),
    "weekdays": frozenset(range(5)),
    "weekends": frozenset({5, 6}),
}
_TIME_RE = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")
_SPEC_RE = re.compile(
    r"^(?P<days>.+?)\s+(?P<start>\d{1,2}:\d{2}(?::\d{2})?)\s*-\s*(?P<end>\d{1,2}:\d{2}(?::\d{2})?)"
    r"\s+(?P<tz>\S+)$"
)
_CRON_SPEC_RE = re.compile(r"^cron\s+(?P<cron>.+?)\s+for\s+(?P<duration>\S+)\s+(?P<tz>\S+)$", re.IGNORECASE)
_DURATION_RE = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


# -- small helpers ----------------------------------------------------------------------------------


def _units(delta: timedelta) -> tuple[int, int, int, int]:
    total = max(0, math.floor(delta.total_seconds()))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    return days, hours, minutes, seconds


def format_duration(delta: timedelta) -> str:
    """A rough duration for people: ``2d3h``, ``3h12m``, ``12m30s``, ``45m`` or ``30s`` (floored)."""
    days, hours, minutes, seconds = _units(delta)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    if minutes:
        return f"{minutes}m{seconds}s" if seconds else f"{minutes}m"
    return f"{seconds}s"


def _exact_duration(delta: timedelta) -> str:
    """An exact whole-second duration such as ``8h``, ``1h30m`` or ``1d0h0m5s`` (parsed back by ``parse``)."""
    parts = zip(_units(delta), "dhms", strict=True)
    return "".join(f"{n}{unit}" for n, unit in parts if n) or "0s"


def _parse_short_duration(text: str) -> timedelta | None:
    match = _DURATION_RE.fullmatch(text.strip().lower())
    if not match or not any(match.groups()):
        return None
    d, h, m, s = (int(g) if g else 0 for g in match.groups())
    return timedelta(days=d, hours=h, minutes=m, seconds=s)


def _aware_utc(moment: datetime, name: str = "moment") -> datetime:
    if not isinstance(moment, datetime):
        raise TypeError(f"{name} must be a datetime.datetime, got {type(moment).__name__}")
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got naive {moment.isoformat()}")
    utc = moment.astimezone(UTC)
    # Rebuild a plain datetime: subclasses such as pendulum's (what Airflow passes) drop a stdlib
    # tzinfo in arithmetic and then fail to compare with aware datetimes.
    return datetime(
        utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second, utc.microsecond, tzinfo=UTC
    )


def _zone(name: object, owner: str) -> ZoneInfo:
    if not isinstance(name, str):
        raise TypeError(f"{owner}.timezone must be an IANA time zone name (str), got {type(name).__name__}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"{owner}.timezone: unknown IANA time zone {name!r}") from None


def resolve_local(local: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant of the naive wall time ``local`` in ``tz``, with the module's DST rules.

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


def _merge(intervals: Iterable[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    out: list[tuple[datetime, datetime]] = []
    for opened, closed in sorted(intervals):
        if opened >= closed:
            continue
        if out and opened <= out[-1][1]:
            if closed > out[-1][1]:
                out[-1] = (out[-1][0], closed)
        else:
            out.append((opened, closed))
    return out


def _fmt_time(value: time) -> str:
    return value.strftime("%H:%M:%S" if value.second else "%H:%M")


def _parse_time(value: object, name: str) -> time:
    if isinstance(value, time):
        if value.tzinfo is not None:
            raise ValueError(f"OffPeakWindow.{name} must be a local wall time without tzinfo, got {value}")
        if value.microsecond:
            raise ValueError(f"OffPeakWindow.{name} must be whole seconds, got {value}")
        return value.replace(fold=0)
    if isinstance(value, str):
        match = _TIME_RE.fullmatch(value.strip())
        if match:
            hour, minute, second = int(match[1]), int(match[2]), int(match[3] or 0)
            if hour < 24 and minute < 60 and second < 60:
                return time(hour, minute, second)
        raise ValueError(
            f"OffPeakWindow.{name} must be a time 'HH:MM' or 'HH:MM:SS' (00:00-23:59:59), got {value!r}"
        )
    raise TypeError(
        f"OffPeakWindow.{name} must be a datetime.time or a string 'HH:MM', got {type(value).__name__}"
    )


def _day_index(token: str) -> int:
    key = token.strip().lower()
    if key in _DAY_LOOKUP:
        return _DAY_LOOKUP[key]
    raise ValueError(
        f"OffPeakWindow.days: unknown day name {token.strip()!r} "
        "(use Mon, Tue, Wed, Thu, Fri, Sat, Sun, ranges like Mon-Fri, 'daily', 'weekdays' or 'weekends')"
    )


def _parse_days(value: object) -> frozenset[int]:
    days: set[int] = set()
    if isinstance(value, str):
        for token in value.split(","):
            token = token.strip()
            if not token:
                continue
            group = _DAY_GROUPS.get(token.lower())
            if group is not None:
                days |= group
            elif "-" in token:
                first, _, last = token.partition("-")
                a, b = _day_index(first), _day_index(last)
                days |= {(a + k) % 7 for k in range((b - a) % 7 + 1)}
            else:
                days.add(_day_index(token))
    elif isinstance(value, Iterable):
        for item in value:
            if isinstance(item, bool) or not isinstance(item, (int, str)):
                raise TypeError(
                    f"OffPeakWindow.days must hold day numbers (0=Mon..6=Sun) or names, got {item!r}"
                )
            if isinstance(item, str):
                days |= _parse_days(item)
            elif not 0 <= item <= 6:
                raise ValueError(f"OffPeakWindow.days: day {item} is out of range 0 (Mon)..6 (Sun)")
            else:
                days.add(item)
    else:
        raise TypeError(
            f"OffPeakWindow.days must be a string such as 'Mon-Fri' or an iterable of days, got {type(value).__name__}"
        )
    if not days:
        raise ValueError("OffPeakWindow.days must name at least one day of the week, got none")
    return frozenset(days)


def _format_days(days: frozenset[int]) -> str:
    if days == frozenset(range(7)):
        return "daily"
    ordered = sorted(days)
    runs: list[list[int]] = []
    for day in ordered:
        if runs and day == runs[-1][-1] + 1:
            runs[-1].append(day)
        else:
            runs.append([day])
    parts: list[str] = []
    for run in runs:
        if len(run) >= 3:
            parts.append(f"{_DAY_NAMES[run[0]]}-{_DAY_NAMES[run[-1]]}")
        else:
            parts.extend(_DAY_NAMES[d] for d in run)
    return ",".join(parts)


# -- cron -------------------------------------------------------------------------------------------

_CRON_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTH_NAMES = {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
_CRON_DOW_NAMES = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
_CRON_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, _MONTH_NAMES),
    ("day-of-week", 0, 7, _CRON_DOW_NAMES),
)


@dataclass(frozen=True)
class _Cron:
    """A parsed 5-field cron expression (Vixie semantics: day-of-month OR day-of-week when both set)."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    doms: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # Python numbering, 0=Mon
    dom_star: bool
    dow_star: bool

    def matches(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        dom_ok = day.day in self.doms
        dow_ok = day.weekday() in self.weekdays
        if self.dom_star or self.dow_star:
            return dom_ok and dow_ok
        return dom_ok or dow_ok

    def times(self) -> list[time]:
        return [time(h, m) for h in self.hours for m in self.minutes]


def _cron_field(text: str, name: str, low: int, high: int, names: dict[str, int]) -> set[int]:
    def bad(why: str) -> ValueError:
        return ValueError(f"OffPeakWindow.cron: the {name} field {text!r} {why}")

    def number(token: str) -> int:
        key = token.lower()
        if key in names:
            return names[key]
        if not token.isdigit():
            raise bad(f"has {token!r}, which is not a number{' or a name' if names else ''}")
        value = int(token)
        if not low <= value <= high:
            raise bad(f"has {value}, out of range {low}-{high}")
        return value

    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise bad("has an empty list item")
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) < 1:
                raise bad(f"has step {step_text!r}; a step must be a whole number >= 1")
            step = int(step_text)
        if base == "*":
            first, last = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            first, last = number(a), number(b)
            if first > last:
                raise bad(f"has the range {base!r}, which runs backwards")
        else:
            first = number(base)
            last = high if slash else first
        values.update(range(first, last + 1, step))
    return values


def _parse_cron(expression: object) -> tuple[str, _Cron]:
    if not isinstance(expression, str):
        raise TypeError(f"OffPeakWindow.cron must be a string, got {type(expression).__name__}")
    text = " ".join(expression.split())
    expanded = _CRON_MACROS.get(text.lower(), text)
    fields = expanded.split(" ")
    if len(fields) != 5:
        raise ValueError(
            "OffPeakWindow.cron must have 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(fields)} in {expression!r}"
        )
    parsed = [
        _cron_field(f, name, lo, hi, names)
        for f, (name, lo, hi, names) in zip(fields, _CRON_FIELDS, strict=True)
    ]
    minutes, hours, doms, months, dows = parsed
    weekdays = frozenset((d - 1) % 7 for d in dows)
    cron = _Cron(
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        doms=frozenset(doms),
        months=frozenset(months),
        weekdays=weekdays,
        dom_star=fields[2].startswith("*"),
        dow_star=fields[4].startswith("*"),
    )
    if cron.dow_star and not any(
        d <= (29 if m == 2 else calendar.monthrange(2001, m)[1]) for m in cron.months for d in cron.doms
    ):
        raise ValueError(f"OffPeakWindow.cron {expression!r} never matches: no such day in those months")
    return text, cron


# -- windows ----------------------------------------------------------------------------------------


class _WindowOps:
    """Occurrence arithmetic shared by :class:`OffPeakWindow` and :class:`WindowSet`."""

    def _raw(self, lo: datetime, hi: datetime) -> list[tuple[datetime, datetime]]:
        """Unmerged, non-empty occurrences with ``close >= lo`` and ``open <= hi``, sorted."""
        raise NotImplementedError

    def _merged(self, lo: datetime, hi: datetime) -> list[tuple[datetime, datetime]]:
        """Merged occurrences touching ``[lo, hi]``, the first and last followed to their true ends."""
        merged = _merge(self._raw(lo, hi))
        if not merged:
            return merged
        opened, closed = merged[0]
        while opened < lo and opened > lo - MERGE_HORIZON:
            earlier = _merge([*self._raw(opened - _CHAIN_STEP, opened), (opened, closed)])
            new_open = next(o for o, c in earlier if o <= opened < c)
            if new_open == opened:
                break
            opened = new_open
        merged[0] = (opened, merged[0][1])
        opened, closed = merged[-1]
        while closed > hi and closed < hi + MERGE_HORIZON:
            later = _merge([(opened, closed), *self._raw(closed, closed + _CHAIN_STEP)])
            new_close = next(c for o, c in later if o <= opened < c)
            if new_close == closed:
                break
            closed = new_close
        merged[-1] = (merged[-1][0], closed)
        return merged

    def current(self, moment: datetime) -> tuple[datetime, datetime] | None:
        """``(open, close)`` of the occurrence containing ``moment``, or None outside the window."""
        at = _aware_utc(moment)
        for opened, closed in self._merged(at, at):
            if opened <= at < closed:
                return opened, closed
        return None

    def contains(self, moment: datetime) -> bool:
        """True if ``moment`` is inside an occurrence (``open <= moment < close``)."""
        return self.current(moment) is not None

    def next_open(self, moment: datetime) -> tuple[datetime, datetime]:
        """The earliest occurrence with ``close > moment``: the current one if inside, else the next."""
        at = _aware_utc(moment)
        found = self.current(at)
        if found is not None:
            return found
        lo, step = at, timedelta(days=8)
        while lo - at < SEARCH_LIMIT:
            for opened, closed in self._merged(lo, lo + step):
                if closed > at:
                    return opened, closed
            lo, step = lo + step, min(step * 2, timedelta(days=120))
        raise ValueError(f"{self} does not open within {SEARCH_LIMIT.days} days after {at.isoformat()}")

    def occurrences(self, start: datetime, end: datetime) -> Iterator[tuple[datetime, datetime]]:
        """Merged occurrences overlapping ``[start, end)``, in order (not clipped to the range)."""
        lo, hi = _aware_utc(start, "start"), _aware_utc(end, "end")
        if hi <= lo:
            return iter(())
        return iter([(o, c) for o, c in self._merged(lo, hi) if c > lo and o < hi])


def _window_members(value: object) -> tuple[OffPeakWindow, ...]:
    if isinstance(value, OffPeakWindow):
        return (value,)
    if isinstance(value, WindowSet):
        return value.windows
    raise TypeError(f"only windows can be combined with |, got {type(value).__name__}")


@dataclass(frozen=True, init=False)
class OffPeakWindow(_WindowOps):
    """A recurring local-time window: the days it opens on, a start and an end time, a time zone.

    ``OffPeakWindow("Mon-Fri", "22:00", "06:00", "Asia/Seoul")`` opens Monday to Friday at 22:00
    Seoul time and closes at 06:00 the next morning (an ``end`` before ``start`` crosses midnight;
    the days are the days the window *opens*). ``days`` accepts ``"Mon-Fri"``, ``"Sat,Sun"``,
    ``"daily"``, ``"weekdays"``, ``"weekends"`` or an iterable of numbers (0=Mon..6=Sun) or names.

    :meth:`from_cron` builds the other form, a cron expression plus a duration; its ``days``,
    ``start`` and ``end`` then summarise the cron (the weekdays it can open on, its first opening
    time of the day and the wall time one duration later) and the arithmetic uses ``cron`` and
    ``duration``. See the module docstring for the DST rules.
    """

    days: frozenset[int]
    start: time
    end: time
    timezone: str
    cron: str | None = None
    duration: timedelta | None = None
    _cron: _Cron | None = field(default=None, init=False, repr=False, compare=False, hash=False)

    def __init__(
        self,
        days: str | Iterable[int | str] | None = None,
        start: str | time | None = None,
        end: str | time | None = None,
        timezone: str | None = None,
        *,
        cron: str | None = None,
        duration: timedelta | None = None,
    ) -> None:
        zone = _zone(timezone, "OffPeakWindow")
        parsed: _Cron | None = None
        if cron is not None:
            cron, parsed = _parse_cron(cron)
            if isinstance(duration, bool) or not isinstance(duration, timedelta):
                raise TypeError(
                    f"OffPeakWindow.duration must be a datetime.timedelta for a cron window, got {duration!r}"
                )
            if duration <= timedelta(0) or duration > MAX_CRON_DURATION:
                raise ValueError(
                    f"OffPeakWindow.duration must be greater than 0 and at most {MAX_CRON_DURATION}, got {duration}"
                )
            if duration.microseconds:
                raise ValueError(f"OffPeakWindow.duration must be whole seconds, got {duration}")
            first = parsed.times()[0]
            days = parsed.weekdays if parsed.dom_star else range(7)
            start = first
            end = (datetime.combine(date(2001, 1, 1), first) + duration).time()
            parsed_days = frozenset(days)
        else:
            if duration is not None:
                raise ValueError("OffPeakWindow.duration is only for a cron window (pass cron= as well)")
            for name, value in (("days", days), ("start", start), ("end", end)):
                if value is None:
                    raise TypeError(
                        f"OffPeakWindow.{name} is required (or build a cron window with from_cron)"
                    )
            parsed_days = _parse_days(days)
            start = _parse_time(start, "start")
            end = _parse_time(end, "end")
            if start == end:
                raise ValueError(
                    f"OffPeakWindow.start and end are both {_fmt_time(start)}: an empty window "
                    "(an end before the start crosses midnight, e.g. 22:00-06:00)"
                )
        assert isinstance(start, time) and isinstance(end, time)
        object.__setattr__(self, "days", parsed_days)
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)
        object.__setattr__(self, "timezone", zone.key)
        object.__setattr__(self, "cron", cron)
        object.__setattr__(self, "duration", duration)
        object.__setattr__(self, "_cron", parsed)

    # -- construction from text ---------------------------------------------------------------------

    @classmethod
    def parse(cls, spec: str) -> OffPeakWindow:
        """Parse ``"Mon-Fri 22:00-06:00 Asia/Seoul"`` or ``"cron 0 22 * * 1-5 for 8h Asia/Seoul"``.

        The inverse of :func:`str`. Days are as in the constructor; times are ``HH:MM[:SS]``; the
        time zone is an IANA name and is required. For several windows (``"A | B"``) use
        :func:`parse_window`.
        """
        if not isinstance(spec, str):
            raise TypeError(f"OffPeakWindow.parse needs a string, got {type(spec).__name__}")
        text = " ".join(spec.split())
        if "|" in text:
            raise ValueError(
                f"OffPeakWindow.parse reads one window; {spec!r} combines several (use parse_window or WindowSet.parse)"
            )
        cron_match = _CRON_SPEC_RE.fullmatch(text)
        if cron_match:
            duration = _parse_short_duration(cron_match["duration"])
            if duration is None:
                raise ValueError(
                    f"OffPeakWindow spec {spec!r}: bad duration {cron_match['duration']!r} (use e.g. 8h, 90m, 1h30m)"
                )
            return cls.from_cron(cron_match["cron"], duration, cron_match["tz"])
        match = _SPEC_RE.fullmatch(text)
        if not match:
            raise ValueError(
                f"OffPeakWindow spec {spec!r} is not '<days> <HH:MM>-<HH:MM> <time zone>' "
                "(e.g. 'Mon-Fri 22:00-06:00 Asia/Seoul') or 'cron <5 fields> for <duration> <time zone>'"
            )
        return cls(match["days"], match["start"], match["end"], match["tz"])

    @classmethod
    def from_cron(cls, cron: str, duration: timedelta, timezone: str) -> OffPeakWindow:
        """A window opening at each match of a 5-field ``cron`` expression, open for ``duration``.

        Supports numbers, ``*``, ranges (``1-5``), lists (``1,3``), steps (``*/15``, ``0-30/10``),
        month and day names (``JAN``, ``MON``; 0 and 7 are Sunday) and the macros ``@daily``,
        ``@hourly``, ``@weekly``, ``@monthly``, ``@yearly``. Day-of-month and day-of-week combine
        as in Vixie cron (either matches when both are restricted). ``duration`` is real elapsed
        time, at most 7 days.
        """
        return cls(timezone=timezone, cron=cron, duration=duration)

    def __str__(self) -> str:
        if self.cron is not None and self.duration is not None:
            return f"cron {self.cron} for {_exact_duration(self.duration)} {self.timezone}"
        return f"{_format_days(self.days)} {_fmt_time(self.start)}-{_fmt_time(self.end)} {self.timezone}"

    def __or__(self, other: OffPeakWindow | WindowSet) -> WindowSet:
        return WindowSet((*_window_members(self), *_window_members(other)))

    @property
    def tz(self) -> ZoneInfo:
        """The window's time zone."""
        return ZoneInfo(self.timezone)

    @property
    def crosses_midnight(self) -> bool:
        """True when an occurrence closes on the day after it opens (plain form only)."""
        return self.cron is None and self.end < self.start

    # -- arithmetic ---------------------------------------------------------------------------------

    def _raw(self, lo: datetime, hi: datetime) -> list[tuple[datetime, datetime]]:
        tz = self.tz
        lookback = 2 if self.duration is None else self.duration.days + 2
        first = lo.astimezone(tz).date() - timedelta(days=lookback)
        last = hi.astimezone(tz).date() + timedelta(days=1)
        out: list[tuple[datetime, datetime]] = []
        day = first
        while day <= last:
            out.extend(self._on(day, tz))
            day += _DAY
        return [(o, c) for o, c in out if c >= lo and o <= hi]

    def _on(self, day: date, tz: ZoneInfo) -> list[tuple[datetime, datetime]]:
        """The occurrences opening on local date ``day``."""
        if self._cron is not None and self.duration is not None:
            if not self._cron.matches(day):
                return []
            out = []
            for at in self._cron.times():
                opened = resolve_local(datetime.combine(day, at), tz)
                out.append((opened, opened + self.duration))
            return out
        if day.weekday() not in self.days:
            return []
        opened = resolve_local(datetime.combine(day, self.start), tz)
        close_day = day + _DAY if self.end < self.start else day
        closed = resolve_local(datetime.combine(close_day, self.end), tz)
        return [(opened, closed)] if opened < closed else []


@dataclass(frozen=True, init=False)
class WindowSet(_WindowOps):
    """The union of several windows: inside when inside any of them. Build it with ``a | b``."""

    windows: tuple[OffPeakWindow, ...]

    def __init__(self, windows: Iterable[OffPeakWindow | WindowSet]) -> None:
        if isinstance(windows, (OffPeakWindow, WindowSet)):
            windows = [windows]
        if not isinstance(windows, Iterable) or isinstance(windows, str):
            raise TypeError(
                f"WindowSet.windows must be an iterable of OffPeakWindow, got {type(windows).__name__}"
            )
        members: list[OffPeakWindow] = []
        for item in windows:
            if not isinstance(item, (OffPeakWindow, WindowSet)):
                raise TypeError(
                    f"WindowSet.windows must hold OffPeakWindow values, got {type(item).__name__}"
                )
            members.extend(_window_members(item))
        if not members:
            raise ValueError("WindowSet.windows must hold at least one window, got none")
        object.__setattr__(self, "windows", tuple(members))

    @classmethod
    def parse(cls, spec: str) -> WindowSet:
        """Parse ``"A | B"`` where each part is an :meth:`OffPeakWindow.parse` spec."""
        if not isinstance(spec, str):
            raise TypeError(f"WindowSet.parse needs a string, got {type(spec).__name__}")
        return cls(OffPeakWindow.parse(part) for part in spec.split("|"))

    def __str__(self) -> str:
        return " | ".join(str(w) for w in self.windows)

    def __or__(self, other: OffPeakWindow | WindowSet) -> WindowSet:
        return WindowSet((*self.windows, *_window_members(other)))

    def _raw(self, lo: datetime, hi: datetime) -> list[tuple[datetime, datetime]]:
        return sorted(occ for window in self.windows for occ in window._raw(lo, hi))


Window: TypeAlias = OffPeakWindow | WindowSet


def parse_window(spec: str) -> Window:
    """An :class:`OffPeakWindow` from one spec, or a :class:`WindowSet` from ``"A | B"``."""
    if not isinstance(spec, str):
        raise TypeError(f"a window spec must be a string, got {type(spec).__name__}")
    return WindowSet.parse(spec) if "|" in spec else OffPeakWindow.parse(spec)


# -- deadline ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Deadline:
    """Nothing is submitted, and no wait extends, past this instant.

    Either absolute (``at``, timezone-aware) or relative to the run's data interval end
    (``after_data_interval_end``); exactly one of the two.
    """

    at: datetime | None = None
    after_data_interval_end: timedelta | None = None

    def __post_init__(self) -> None:
        if (self.at is None) == (self.after_data_interval_end is None):
            got = "both" if self.at is not None else "neither"
            raise ValueError(f"Deadline needs exactly one of at= or after_data_interval_end=, got {got}")
        if self.at is not None:
            if not isinstance(self.at, datetime):
                raise TypeError(f"Deadline.at must be a datetime.datetime, got {type(self.at).__name__}")
            if self.at.tzinfo is None or self.at.utcoffset() is None:
                raise ValueError(
                    f"Deadline.at must be timezone-aware, got naive {self.at.isoformat()} "
                    "(add tzinfo, e.g. datetime(..., tzinfo=ZoneInfo('UTC')))"
                )
        if self.after_data_interval_end is not None:
            delta = self.after_data_interval_end
            if isinstance(delta, bool) or not isinstance(delta, timedelta):
                raise TypeError(
                    f"Deadline.after_data_interval_end must be a datetime.timedelta, got {type(delta).__name__}"
                )
            if delta < timedelta(0):
                raise ValueError(f"Deadline.after_data_interval_end must not be negative, got {delta}")

    @classmethod
    def coerce(cls, value: Deadline | datetime | timedelta) -> Deadline:
        """A :class:`Deadline` from itself, an aware ``datetime`` (absolute) or a ``timedelta``."""
        if isinstance(value, Deadline):
            return value
        if isinstance(value, datetime):
            return cls(at=value)
        if isinstance(value, timedelta):
            return cls(after_data_interval_end=value)
        raise TypeError(f"a deadline must be a Deadline, datetime or timedelta, got {type(value).__name__}")

    def resolve(self, data_interval_end: datetime | None, *, now: datetime | None = None) -> datetime:
        """The deadline instant (UTC) for a run whose data interval ends at ``data_interval_end``.

        With ``now``, a deadline that is not after ``now`` is refused with a ``ValueError``.
        """
        if self.at is not None:
            resolved = self.at.astimezone(UTC)
        else:
            assert self.after_data_interval_end is not None
            if data_interval_end is None:
                raise ValueError(
                    f"Deadline {self} is relative to the data interval end, but this run has no data interval"
                )
            resolved = _aware_utc(data_interval_end, "data_interval_end") + self.after_data_interval_end
        if now is not None and resolved <= _aware_utc(now, "now"):
            raise ValueError(
                f"the deadline {resolved.isoformat()} ({self}) has already passed (now {_aware_utc(now).isoformat()})"
            )
        return resolved

    def __str__(self) -> str:
        if self.at is not None:
            return f"by {self.at.isoformat()}"
        return f"{self.after_data_interval_end} after the data interval end"


# -- capacity retries -------------------------------------------------------------------------------

_NEVER_RETRY = {
    FailureKind.WORKLOAD_FAILED: "retrying a workload failure re-runs a job that already ran and failed "
    "(use Airflow task retries for that)",
    FailureKind.BAD_REQUEST: "retrying a bad request repeats a request the API has already refused",
    FailureKind.CANCELLED: "retrying a cancelled request undoes whoever cancelled it",
    FailureKind.TIMED_OUT: "the task's execution_timeout passed; Airflow task retries decide what follows",
}
_FAILURE_ORDER = list(FailureKind)


def _check_timedelta(owner: str, name: str, value: object) -> timedelta:
    if isinstance(value, bool) or not isinstance(value, timedelta):
        raise TypeError(f"{owner}.{name} must be a datetime.timedelta, got {type(value).__name__}")
    if value < timedelta(0):
        raise ValueError(f"{owner}.{name} must not be negative, got {value}")
    return value


@dataclass(frozen=True)
class CapacityRetry:
    """Resubmit a request that came back without capacity.

    :param attempts: total submissions, the first included (``attempts=3`` is two retries).
    :param backoff: the wait before the first retry in the same placement; doubles each retry.
    :param max_backoff: the cap of that wait.
    :param jitter: "full jitter": wait a random time between 0 and the capped backoff.
    :param on: the failure kinds that are retried (capacity not obtained, preempted).
    :param wait_for_next_window: when a retry would fall outside the off-peak window, wait for the
        next opening (True) or give up (False).
    """

    attempts: int = 3
    backoff: timedelta = timedelta(minutes=1)
    max_backoff: timedelta = timedelta(minutes=30)
    jitter: bool = True
    on: frozenset[FailureKind] = frozenset({FailureKind.CAPACITY_NOT_OBTAINED, FailureKind.PREEMPTED})
    wait_for_next_window: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise TypeError(f"CapacityRetry.attempts must be an int, got {type(self.attempts).__name__}")
        if self.attempts < 1:
            raise ValueError(
                f"CapacityRetry.attempts must be at least 1 (the first submission counts), got {self.attempts}"
            )
        _check_timedelta("CapacityRetry", "backoff", self.backoff)
        _check_timedelta("CapacityRetry", "max_backoff", self.max_backoff)
        if self.max_backoff < self.backoff:
            raise ValueError(
                f"CapacityRetry.max_backoff ({self.max_backoff}) must be at least backoff ({self.backoff})"
            )
        for name in ("jitter", "wait_for_next_window"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"CapacityRetry.{name} must be a bool, got {getattr(self, name)!r}")
        on = self.on
        if isinstance(on, (str, FailureKind)):
            on = [on]  # type: ignore[assignment]
        kinds: set[FailureKind] = set()
        for item in on:
            try:
                kind = FailureKind(item)
            except ValueError:
                raise ValueError(
                    f"CapacityRetry.on: unknown failure kind {item!r} "
                    f"(choose from {', '.join(k.value for k in FailureKind)})"
                ) from None
            if kind in _NEVER_RETRY:
                raise ValueError(f"CapacityRetry.on must not include {kind.value}: {_NEVER_RETRY[kind]}")
            kinds.add(kind)
        if not kinds:
            raise ValueError("CapacityRetry.on must name at least one failure kind to retry on")
        object.__setattr__(self, "on", frozenset(kinds))

    @property
    def retries(self) -> int:
        """How many resubmissions after the first attempt."""
        return self.attempts - 1

    def delay(self, retry_number: int, rng: random.Random | None = None) -> timedelta:
        """The wait before retry ``retry_number`` (1 = the first retry), in whole seconds.

        ``backoff * 2 ** (retry_number - 1)``, capped at ``max_backoff``; with ``jitter``, a uniform
        random duration between 0 and that (full jitter), drawn from ``rng``.
        """
        if isinstance(retry_number, bool) or not isinstance(retry_number, int) or retry_number < 1:
            raise ValueError(f"retry_number must be an int >= 1, got {retry_number!r}")
        cap = self.max_backoff.total_seconds()
        base = self.backoff.total_seconds()
        exponent = min(retry_number - 1, 64)
        seconds = min(cap, base * (2**exponent))
        if self.jitter:
            seconds = (rng or random.Random()).uniform(0, seconds)
        return timedelta(seconds=math.floor(seconds))

    def __str__(self) -> str:
        noun = "attempt" if self.attempts == 1 else "attempts"
        kinds = ", ".join(k.value for k in _FAILURE_ORDER if k in self.on)
        text = (
            f"up to {self.attempts} {noun}, backoff {self.backoff}..{self.max_backoff} "
            f"{'with' if self.jitter else 'without'} jitter, on {kinds}"
        )
        if not self.wait_for_next_window:
            text += ", giving up when the window closes"
        return text


# -- placements -------------------------------------------------------------------------------------

_LOCATION_RE = re.compile(r"^[a-z][a-z0-9-]*[a-z0-9]$")
_ZONE_RE = re.compile(r"^(?P<region>[a-z]+-[a-z]+\d+)-[a-z]$")


class Tier(str, enum.Enum):
    """Capacity tiers a placement may ask for (TPU queued resources)."""

    SPOT = "spot"
    GUARANTEED = "guaranteed"
    ON_DEMAND = "on-demand"


_TIERS = tuple(t.value for t in Tier)


@dataclass(frozen=True)
class Placement:
    """Where to ask for capacity: a region or zone, optionally another machine, accelerator or tier.

    ``None`` fields mean "the same as the operator's own"; :meth:`over` fills them in.
    """

    location: str
    machine_type: str | None = None
    accelerator_type: str | None = None
    tier: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.location, str) or not _LOCATION_RE.fullmatch(self.location):
            raise ValueError(
                f"Placement.location must be a region or zone such as 'us-central1' or 'us-west4-a', got {self.location!r}"
            )
        for name in ("machine_type", "accelerator_type"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"Placement.{name} must be a non-empty string or None, got {value!r}")
        if self.tier is not None:
            tier = self.tier.value if isinstance(self.tier, Tier) else self.tier
            if tier not in _TIERS:
                raise ValueError(
                    f"Placement.tier must be one of {', '.join(_TIERS)} or None, got {self.tier!r}"
                )
            object.__setattr__(self, "tier", tier)

    @classmethod
    def coerce(cls, value: Placement | str) -> Placement:
        """A placement from itself or a location string."""
        if isinstance(value, Placement):
            return value
        if isinstance(value, str):
            return cls(value)
        raise TypeError(f"a placement must be a Placement or a location string, got {type(value).__name__}")

    @property
    def is_zone(self) -> bool:
        """True for a zone (``us-west4-a``), False for a region."""
        return bool(_ZONE_RE.fullmatch(self.location))

    @property
    def region(self) -> str:
        """The region of the location (itself for a region)."""
        match = _ZONE_RE.fullmatch(self.location)
        return match["region"] if match else self.location

    def over(self, home: Placement) -> Placement:
        """This placement with its unset fields taken from ``home``."""
        return Placement(
            self.location,
            self.machine_type if self.machine_type is not None else home.machine_type,
            self.accelerator_type if self.accelerator_type is not None else home.accelerator_type,
            self.tier if self.tier is not None else home.tier,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "location": self.location,
            "machine_type": self.machine_type,
            "accelerator_type": self.accelerator_type,
            "tier": self.tier,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Placement:
        """Inverse of :meth:`to_dict`."""
        return cls(data["location"], data.get("machine_type"), data.get("accelerator_type"), data.get("tier"))

    def __str__(self) -> str:
        details = [d for d in (self.machine_type, self.accelerator_type, self.tier) if d]
        return f"{self.location} ({', '.join(details)})" if details else self.location


@dataclass(frozen=True, init=False)
class Failover:
    """Placements tried in order after the operator's own one: ``Failover("us-east4", "us-west1")``."""

    placements: tuple[Placement, ...]

    def __init__(
        self,
        placements: Placement | str | Iterable[Placement | str],
        *more: Placement | str,
    ) -> None:
        items: list[Placement | str] = (
            [placements] if isinstance(placements, (str, Placement)) else list(placements)
        ) + list(more)
        if not items:
            raise ValueError("Failover.placements must name at least one placement, got none")
        resolved: list[Placement] = []
        for item in items:
            if not isinstance(item, (str, Placement)):
                raise TypeError(
                    f"Failover.placements must hold Placement values or location strings, got {type(item).__name__}"
                )
            placement = Placement.coerce(item)
            if placement in resolved:
                raise ValueError(f"Failover.placements lists {placement} twice")
            resolved.append(placement)
        object.__setattr__(self, "placements", tuple(resolved))

    def __str__(self) -> str:
        return "fail over to " + ", then ".join(str(p) for p in self.placements)

    def __len__(self) -> int:
        return len(self.placements)

    def __iter__(self) -> Iterator[Placement]:
        return iter(self.placements)

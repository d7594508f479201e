"""Off-peak windows: recurring local-time windows, their union, and how DST is resolved.

- :class:`OffPeakWindow` - "Mon-Fri 22:00-06:00 Asia/Seoul", or a cron expression plus a duration
  (``"cron 0 22 * * 1-5 for 8h Asia/Seoul"``; which dates and times match is croniter's answer, see
  :mod:`airflow_provider_dws.scheduling.cron`).
- :class:`WindowSet` - ``window_a | window_b``: inside when inside any member.

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
import re
from collections.abc import Iterable, Iterator
from dataclasses import FrozenInstanceError
from datetime import date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from airflow_provider_dws.patterns import LazyPattern
from airflow_provider_dws.scheduling._time import check_duration, exact_duration, parse_duration

if TYPE_CHECKING:
    from airflow_provider_dws.scheduling.cron import CronExpression

__all__ = [
    "MAX_CRON_DURATION",
    "OffPeakWindow",
    "Window",
    "WindowSet",
    "coerce_window",
    "parse_window",
]

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
_TIME_RE = LazyPattern(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")
_SPEC_RE = LazyPattern(
    r"^(?P<days>.+?)\s+(?P<start>\d{1,2}:\d{2}(?::\d{2})?)\s*-\s*(?P<end>\d{1,2}:\d{2}(?::\d{2})?)"
    r"\s+(?P<tz>\S+)$"
)
#: Compiled (by ``re``'s cache) only for a spec that starts with "cron".
_CRON_SPEC = r"cron\s+(?P<cron>.+?)\s+for\s+(?P<duration>\S+)\s+(?P<tz>\S+)"


# -- small helpers ----------------------------------------------------------------------------------


def _zone(name: object, owner: str) -> ZoneInfo:
    if not isinstance(name, str):
        raise TypeError(f"{owner}.timezone must be an IANA time zone name (str), got {type(name).__name__}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"{owner}.timezone: unknown IANA time zone {name!r}") from None


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


# -- windows ----------------------------------------------------------------------------------------


class _WindowOps:
    """What both kinds of window are: immutable values, equal when their :attr:`_FIELDS` are (written
    out rather than made by ``dataclasses``, whose generated methods are compiled at every import,
    so at every parse of a DAG file on the off-peak timetable); and when they are open: the
    arithmetic is :mod:`airflow_provider_dws.scheduling.window_times`, loaded on the first question
    (a DAG file's parse asks none)."""

    #: The attributes that make the value (equality, hash, repr), in order.
    _FIELDS: ClassVar[tuple[str, ...]] = ()

    def _key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._FIELDS)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._FIELDS)
        return f"{type(self).__qualname__}({fields})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def current(self, moment: datetime) -> tuple[datetime, datetime] | None:
        """``(open, close)`` of the occurrence containing ``moment``, or None outside the window."""
        from airflow_provider_dws.scheduling import window_times

        return window_times.current(self, moment)

    def contains(self, moment: datetime) -> bool:
        """True if ``moment`` is inside an occurrence (``open <= moment < close``)."""
        return self.current(moment) is not None

    def next_open(self, moment: datetime) -> tuple[datetime, datetime]:
        """The earliest occurrence with ``close > moment``: the current one if inside, else the next."""
        from airflow_provider_dws.scheduling import window_times

        return window_times.next_open(self, moment)

    def occurrences(self, start: datetime, end: datetime) -> Iterator[tuple[datetime, datetime]]:
        """Merged occurrences overlapping ``[start, end)``, in order (not clipped to the range)."""
        from airflow_provider_dws.scheduling import window_times

        return window_times.occurrences(self, start, end)


def _window_members(value: object) -> tuple[OffPeakWindow, ...]:
    if isinstance(value, OffPeakWindow):
        return (value,)
    if isinstance(value, WindowSet):
        return value.windows
    raise TypeError(f"only windows can be combined with |, got {type(value).__name__}")


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
    #: The parsed ``cron`` (not part of the value: ``cron`` is).
    _cron: CronExpression | None = None
    _FIELDS = ("days", "start", "end", "timezone", "cron", "duration")

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
        parsed: CronExpression | None = None
        if cron is not None:
            # The cron parser loads only for a cron window, not with every plain window.
            from airflow_provider_dws.scheduling.cron import CronExpression

            parsed = CronExpression.parse(cron)
            cron = parsed.text
            if isinstance(duration, bool) or not isinstance(duration, timedelta):
                raise TypeError(
                    f"OffPeakWindow.duration must be a datetime.timedelta for a cron window, got {duration!r}"
                )
            duration = check_duration("OffPeakWindow.duration", duration, MAX_CRON_DURATION, seconds=False)
            first = parsed.times()[0]
            start = first
            end = (datetime.combine(date(2001, 1, 1), first) + duration).time()
            parsed_days = parsed.weekdays
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
        cron_match = re.fullmatch(_CRON_SPEC, text, re.IGNORECASE) if text[:5].lower() == "cron " else None
        if cron_match:
            duration = parse_duration(cron_match["duration"])
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

        The expression means what it means to croniter (and so to Airflow's cron schedules):
        numbers, ``*``, ranges (``1-5``), lists (``1,3``), steps (``*/15``, ``0-30/10``), month and
        day names (``JAN``, ``MON``; 0 and 7 are Sunday), the macros ``@hourly`` .. ``@yearly``, and
        ``L``, ``15W``, ``5#3``, ``L5``, ``?``; day-of-month and day-of-week combine with OR when
        both are restricted. A backwards range (``22-5``) is refused. See
        :mod:`airflow_provider_dws.scheduling.cron`. ``duration`` is real elapsed time, at most 7 days.
        """
        return cls(timezone=timezone, cron=cron, duration=duration)

    def __str__(self) -> str:
        if self.cron is not None and self.duration is not None:
            return f"cron {self.cron} for {exact_duration(self.duration)} {self.timezone}"
        return f"{_format_days(self.days)} {_fmt_time(self.start)}-{_fmt_time(self.end)} {self.timezone}"

    def __or__(self, other: OffPeakWindow | WindowSet) -> WindowSet:
        return WindowSet((*_window_members(self), *_window_members(other)))

    @property
    def tz(self) -> ZoneInfo:
        """The window's time zone."""
        return ZoneInfo(self.timezone)


class WindowSet(_WindowOps):
    """The union of several windows: inside when inside any of them. Build it with ``a | b``."""

    windows: tuple[OffPeakWindow, ...]
    _FIELDS = ("windows",)

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


Window: TypeAlias = OffPeakWindow | WindowSet


def __getattr__(name: str) -> Any:
    """The arithmetic's limits, named here as before and kept with it (``window_times``)."""
    if name in ("MERGE_HORIZON", "SEARCH_LIMIT", "resolve_local"):
        from airflow_provider_dws.scheduling import window_times

        return getattr(window_times, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def parse_window(spec: str) -> Window:
    """An :class:`OffPeakWindow` from one spec, or a :class:`WindowSet` from ``"A | B"``."""
    if not isinstance(spec, str):
        raise TypeError(f"a window spec must be a string, got {type(spec).__name__}")
    return WindowSet.parse(spec) if "|" in spec else OffPeakWindow.parse(spec)


def coerce_window(value: object, name: str = "window") -> Window | None:
    """A window from itself, a spec string (:func:`parse_window`) or None; anything else is refused."""
    if value is None or isinstance(value, (OffPeakWindow, WindowSet)):
        return value
    if isinstance(value, str):
        return parse_window(value)
    raise TypeError(f"{name} must be an OffPeakWindow or WindowSet (or None), got {type(value).__name__}")

"""Cron expressions of cron windows: croniter decides what matches; the DST rules are the windows'.

Which local dates and wall times a 5-field expression matches is croniter's answer, the library
Airflow's own cron schedules use: numbers, names, ``*``, ranges, lists, steps, the ``@`` macros,
and croniter's day extensions (``L`` the last day of the month, ``15W`` the weekday nearest the
15th, ``5#3`` the third Friday, ``L5`` the last Friday, ``?``). When day of month and day of week
are both restricted, either one matching is enough (croniter's ``day_or``, as in Airflow).

What stays here, and why:

- croniter is asked only about naive local dates. Turning wall times into instants is
  :func:`~airflow_provider_dws.scheduling.window_times.resolve_local`'s job, because the windows' DST
  rules (a skipped wall time opens at the moment of the change, a repeated one at its first
  occurrence) are neither croniter's nor Airflow's (pendulum moves a skipped 02:30 to 03:30).
- Each plain field is checked here first, for messages that name the field and the value (croniter
  says only ``[0 24 * * *] is not acceptable, out of range``), and to keep two of croniter's
  readings out of windows, where they would surprise: a backwards range (croniter reads ``22-5`` as
  wrapping; here it is refused) and an equal range (croniter reads ``1-1`` as the whole cycle; here
  it is ``1``). croniter's random and hashed forms (``R``, ``H``) are refused: a window must be the
  same on every machine.

croniter is imported when a cron expression is first built, not with this module: plain windows
and every DAG file without a cron window do not pay for it (30 to 60 ms of CPU).
"""

from __future__ import annotations

import calendar
import functools
import re
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta

__all__ = ["CronExpression"]

_MONTH_NAMES = {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
_DOW_NAMES = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, _MONTH_NAMES),
    ("day-of-week", 0, 7, _DOW_NAMES),
)
#: Items left to croniter to check: the day-of-month and day-of-week extensions.
_EXTENSION = (
    None,
    None,
    re.compile(r"^(\?|l|\d{1,2}w|w\d{1,2})$", re.IGNORECASE),
    None,
    re.compile(r"^(\?|[a-z0-9-]+#\d+|l\d+)$", re.IGNORECASE),
)
#: croniter's macros, spelled out so that their fields are checked like any other.
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
#: Where the search for a first match starts (a leap year; any fixed date would do).
_EPOCH = datetime(2000, 1, 1)


def _check_field(text: str, name: str, low: int, high: int, names: dict[str, int]) -> str:
    """Check one plain field; return it as croniter should read it (equal ranges made single)."""

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

    items = []
    for part in text.split(","):
        if not part:
            raise bad("has an empty list item")
        base, slash, step = part.partition("/")
        if slash and (not step.isdigit() or int(step) < 1):
            raise bad(f"has step {step!r}; a step must be a whole number >= 1")
        if base != "*" and "-" in base:
            a, _, b = base.partition("-")
            first, last = number(a), number(b)
            if first > last:
                raise bad(f"has the range {base!r}, which runs backwards")
            if first == last:  # croniter reads an equal range as the whole cycle
                part = a
        elif base != "*":
            number(base)
        items.append(part)
    return ",".join(items)


@functools.lru_cache(maxsize=4096)
def _days_in_month(day_fields: str, year: int, month: int) -> frozenset[int]:
    """The days of ``year-month`` on which the day fields ``"<dom> <month> <dow>"`` match."""
    from croniter import CroniterBadDateError, croniter

    it = croniter(f"0 0 {day_fields}", datetime(year, month, 1) - timedelta(seconds=1))
    days: set[int] = set()
    try:
        while True:
            found = it.get_next(datetime)
            if (found.year, found.month) != (year, month):
                break
            days.add(found.day)
    except CroniterBadDateError:  # no later match at all
        pass
    return frozenset(days)


@dataclass(frozen=True)
class CronExpression:
    """A checked 5-field cron expression; :meth:`matches` and :meth:`times` answer for local dates.

    ``text`` is the expression as written (whitespace normalised), what ``str`` of a window shows.
    """

    text: str
    _day_fields: str = field(repr=False, compare=False)
    minutes: tuple[int, ...] = field(repr=False, compare=False)
    hours: tuple[int, ...] = field(repr=False, compare=False)
    #: The weekdays (0=Mon) it can open on, for a window's summary fields.
    weekdays: frozenset[int] = field(repr=False, compare=False)

    @classmethod
    def parse(cls, expression: object) -> CronExpression:
        """Check ``expression``; the ``ValueError`` or ``TypeError`` names what is wrong."""
        if not isinstance(expression, str):
            raise TypeError(f"OffPeakWindow.cron must be a string, got {type(expression).__name__}")
        text = " ".join(expression.split())
        fields = _MACROS.get(text.lower(), text).split(" ")
        if len(fields) != 5:
            raise ValueError(
                "OffPeakWindow.cron must have 5 fields (minute hour day-of-month month day-of-week), "
                f"got {len(fields)} in {expression!r}"
            )
        fields = [
            f if ext is not None and ext.fullmatch(f) else _check_field(f, name, lo, hi, names)
            for f, ext, (name, lo, hi, names) in zip(fields, _EXTENSION, _FIELDS, strict=True)
        ]
        from croniter import CroniterBadDateError, CroniterError, croniter

        try:
            it = croniter(" ".join(fields), _EPOCH)
            it.get_next(datetime)
        except CroniterBadDateError:
            raise ValueError(
                f"OffPeakWindow.cron {expression!r} never matches: no such day in those months"
            ) from None
        except CroniterError as exc:
            raise ValueError(f"OffPeakWindow.cron {expression!r} is not accepted: {exc}") from None
        minute, hour, dom, _, dow = it.expanded
        if dom != ["*"] or dow == ["*"]:
            weekdays = frozenset(range(7))
        else:  # cron numbers Sunday 0, Python Monday 0
            weekdays = frozenset((int(str(d).split("#")[0]) - 1) % 7 for d in dow)
        return cls(
            text=text,
            _day_fields=" ".join(fields[2:]),
            minutes=tuple(range(60)) if minute == ["*"] else tuple(sorted(int(m) for m in minute)),
            hours=tuple(range(24)) if hour == ["*"] else tuple(sorted(int(h) for h in hour)),
            weekdays=weekdays,
        )

    def matches(self, day: date) -> bool:
        """True when the expression matches some time on local date ``day``."""
        return day.day in _days_in_month(self._day_fields, day.year, day.month)

    def times(self) -> list[time]:
        """The local wall times of day it matches at, in order."""
        return [time(h, m) for h in self.hours for m in self.minutes]

    def __str__(self) -> str:
        return self.text

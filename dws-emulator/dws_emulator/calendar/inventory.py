"""The calendar of free capacity: per zone, accelerator and UTC day, what calendar mode may still book.

Pure (no clock, no lock): :class:`CapacityCalendar` keeps a total per ``ZONE/ACCELERATOR`` (GPUs by
their Vertex AI name, TPU families in chips), optional totals for single days, and the bookings of
approved blocks. A block of ``units`` from ``start`` to ``end`` fits when that many units are free at
every moment of it (a day's total, less the blocks booked at that moment). This inventory is separate from the Flex Start pools of the capacity
model: a delivered block becomes a pool of its own there (:mod:`..core.reservations`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any

from ..core.capacity import PoolKey

DAY = 86400


def day_of(t: float) -> int:
    """The UTC day (days since the epoch) that ``t`` falls in."""
    return math.floor(t / DAY)


def day_name(day: int) -> str:
    return datetime.fromtimestamp(day * DAY, timezone.utc).date().isoformat()


def parse_day(text: str) -> int:
    """``YYYY-MM-DD`` as a day number."""
    return (date.fromisoformat(text) - date(1970, 1, 1)).days


def last_day(end: float) -> int:
    """The last UTC day a block ending at ``end`` (exclusive) touches."""
    return math.ceil(end / DAY) - 1


@dataclass
class Booking:
    """An approved block's hold on the calendar."""

    key: PoolKey
    start: float
    end: float
    units: int
    owner: str  # the future reservation's path


class CapacityCalendar:
    """Totals per pool and day, and bookings; a check costs O((days + bookings) x bookings of one pool)."""

    def __init__(self, totals: Mapping[Any, int] | None = None) -> None:
        self._totals: dict[PoolKey, int] = {}
        self._days: dict[tuple[PoolKey, int], int] = {}
        self._bookings: dict[int, Booking] = {}
        self._seq = itertools.count(1)
        for key, total in (totals or {}).items():
            self.set_total(key, total)

    @staticmethod
    def _key(key: PoolKey | str) -> PoolKey:
        return key if isinstance(key, PoolKey) else PoolKey.parse(key)

    def set_total(self, key: PoolKey | str, total: int) -> None:
        """Units free on every day of ``key`` (days set with :meth:`set_day` keep theirs)."""
        if total < 0:
            raise ValueError(f"calendar capacity must be >= 0, got {total}")
        self._totals[self._key(key)] = total

    def set_day(self, key: PoolKey | str, day: int, total: int) -> None:
        """Units of ``key`` on one UTC ``day`` (a number, see :func:`parse_day`)."""
        if total < 0:
            raise ValueError(f"calendar capacity must be >= 0, got {total}")
        self._days[(self._key(key), day)] = total

    def clear(self) -> None:
        """Forget every total and day (bookings stay)."""
        self._totals.clear()
        self._days.clear()

    def offers(self, key: PoolKey) -> bool:
        """True if ``key`` has an inventory (even 0)."""
        return key in self._totals or any(k == key for k, _ in self._days)

    def zones(self, accelerator: str) -> list[str]:
        """Zones with an inventory of ``accelerator``."""
        keys = set(self._totals) | {k for k, _ in self._days}
        return sorted(k.location for k in keys if k.accelerator == accelerator)

    def total(self, key: PoolKey, day: int) -> int:
        return self._days.get((key, day), self._totals.get(key, 0))

    def _points(self, key: PoolKey, start: float, end: float) -> tuple[list[Booking], list[float]]:
        """The bookings of ``key`` overlapping ``[start, end)`` and the times in it where what is
        free may drop: ``start``, each booking's start and each UTC midnight."""
        bookings = [b for b in self._bookings.values() if b.key == key and b.start < end and b.end > start]
        points = {start, *(b.start for b in bookings if b.start > start)}
        points.update(float(d * DAY) for d in range(day_of(start) + 1, last_day(end) + 1))
        return bookings, sorted(points)

    def free_at(self, key: PoolKey, t: float, bookings: list[Booking] | None = None) -> int:
        """Units of ``key`` free at time ``t``."""
        if bookings is None:
            bookings = [b for b in self._bookings.values() if b.key == key]
        used = sum(b.units for b in bookings if b.start <= t < b.end)
        return self.total(key, day_of(t)) - used

    def fits(self, key: PoolKey, start: float, end: float, units: int) -> bool:
        """True if ``units`` are free at every moment from ``start`` to ``end``."""
        return self.room_until(key, start, units, end) >= end

    def room_until(self, key: PoolKey, start: float, units: int, horizon: float) -> float:
        """How far from ``start`` a block of ``units`` fits: the first moment before ``horizon``
        when fewer are free (``start`` itself when they are not free at once), or ``horizon``."""
        bookings, points = self._points(key, start, horizon)
        for t in points:
            if t < horizon and self.free_at(key, t, bookings) < units:
                return t
        return horizon

    def book(self, key: PoolKey, start: float, end: float, units: int, owner: str) -> int:
        """Hold ``units`` of ``key`` from ``start`` to ``end`` (no check: see :meth:`fits`)."""
        booking_id = next(self._seq)
        self._bookings[booking_id] = Booking(key, start, end, units, owner)
        return booking_id

    def resize(self, booking_id: int, units: int, end: float | None = None) -> None:
        """Hold fewer units (a partial delivery) or stop holding at ``end`` (a block ended early)."""
        booking = self._bookings.get(booking_id)
        if booking is None:
            return
        booking.units = units
        if end is not None:
            booking.end = max(booking.start, min(booking.end, end))

    def release(self, booking_id: int | None) -> None:
        if booking_id is not None:
            self._bookings.pop(booking_id, None)

    def snapshot(self) -> dict[str, Any]:
        """``{"pools": {KEY: total}, "days": {DAY: {KEY: total}}, "bookings": [...]}`` for the control API."""
        days: dict[str, dict[str, int]] = {}
        for (key, day), total in sorted(self._days.items(), key=lambda item: (item[0][1], item[0][0])):
            days.setdefault(day_name(day), {})[str(key)] = total
        return {
            "pools": {str(k): v for k, v in sorted(self._totals.items())},
            "days": days,
            "bookings": [
                {
                    "pool": str(b.key),
                    "units": b.units,
                    "start": datetime.fromtimestamp(b.start, timezone.utc).isoformat(),
                    "end": datetime.fromtimestamp(b.end, timezone.utc).isoformat(),
                    "future_reservation": b.owner,
                }
                for _, b in sorted(self._bookings.items())
            ],
        }

"""``OffPeakTimetable``: one DAG run per off-peak window occurrence.

Airflow 3.3 loads custom timetables on the scheduler side only through a plugin: a DAG file passes an
instance as ``schedule=``; DAG serialization stores the class's import path plus :meth:`serialize`'s
dict, and the scheduler and API server rebuild it with :meth:`deserialize` after finding the class in
``AirflowPlugin.timetables`` (see :mod:`airflow_provider_dws.plugins.dws_plugin`). That is why the
class derives from the core :class:`airflow.timetables.base.Timetable`, the base the serializer
accepts for user timetables (the Task SDK's ``BaseTimetable`` subclasses are reserved for Airflow's
built-in schedules).

Every calendar question (which local wall times are off-peak, windows crossing midnight, DST) is
answered by :mod:`airflow_provider_dws.scheduling.windows`; this module only maps window occurrences
onto Airflow's scheduling protocol.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

import pendulum
from airflow.timetables.base import DagRunInfo, DataInterval, Timetable

from airflow_provider_dws.scheduling._time import aware_utc
from airflow_provider_dws.scheduling.windows import OffPeakWindow, WindowSet, parse_window

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow.timetables.base import TimeRestriction
    from pendulum import DateTime

__all__ = ["OffPeakTimetable"]

WindowLike = OffPeakWindow | WindowSet | str
Occurrence = tuple[datetime.datetime, datetime.datetime]

SERIALIZATION_VERSION = 1

# How far back the backward searches (manual runs, catchup_limit) look before giving up: the
# sparsest window (a cron expression plus a duration) could fire once a year.
_INITIAL_LOOKBACK = datetime.timedelta(days=8)
_MAX_LOOKBACK = datetime.timedelta(days=3 * 366)


class NoMoreOpenings(Exception):
    """The window never opens again (e.g. a cron window on a date that does not come)."""


def _utcnow() -> datetime.datetime:
    """The scheduler's notion of now (a seam for tests)."""
    return datetime.datetime.now(datetime.timezone.utc)


def _to_pendulum(moment: datetime.datetime) -> DateTime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"the off-peak window returned a naive datetime {moment!r}; expected UTC-aware")
    return pendulum.instance(moment.astimezone(datetime.timezone.utc)).in_timezone("UTC")


def _coerce_window(window: object) -> OffPeakWindow | WindowSet:
    if isinstance(window, (OffPeakWindow, WindowSet)):
        return window
    if isinstance(window, str):
        if not window.strip():
            raise ValueError(
                "OffPeakTimetable window spec is empty; expected e.g. 'Mon-Fri 22:00-06:00 Asia/Seoul'"
            )
        try:
            return parse_window(window)
        except ValueError as exc:
            raise ValueError(f"OffPeakTimetable: invalid window spec {window!r}: {exc}") from exc
    raise TypeError(
        "OffPeakTimetable window must be an OffPeakWindow, a WindowSet or a spec string such as "
        f"'Mon-Fri 22:00-06:00 Asia/Seoul', got {type(window).__name__}"
    )


def _window_specs(window: OffPeakWindow | WindowSet) -> list[str]:
    if isinstance(window, WindowSet):
        return [str(w) for w in window.windows]
    return [str(window)]


class OffPeakTimetable(Timetable):
    """
    Schedule one DAG run per occurrence of an off-peak window.

    Each run is created when its window opens (``run_after`` is the opening instant) and its data
    interval is the occurrence ``[open, close)``. Opening and closing instants come from local wall
    times in the window's time zone, so across a DST change the run still starts at the local opening
    time and the interval is 1 h shorter or longer when the jump falls inside the window.

    :param window: an :class:`~airflow_provider_dws.scheduling.policies.OffPeakWindow`, a
        :class:`~airflow_provider_dws.scheduling.policies.WindowSet` (``window_a | window_b``) or a spec
        string such as ``"Mon-Fri 22:00-06:00 Asia/Seoul"`` (``"A | B"`` combines several).
    :param catchup_limit: with ``catchup=True``, create runs for at most this many of the most recent
        occurrences that have already opened; older missed occurrences are skipped. ``None`` (the
        default) catches up on all of them, like Airflow's own timetables.
    :param description: the sentence shown in the UI instead of the generated one.
    """

    periodic = True
    can_be_scheduled = True

    def __init__(
        self,
        window: WindowLike,
        *,
        catchup_limit: int | None = None,
        description: str | None = None,
    ) -> None:
        self.window: OffPeakWindow | WindowSet = _coerce_window(window)
        if catchup_limit is not None and (
            isinstance(catchup_limit, bool) or not isinstance(catchup_limit, int)
        ):
            raise TypeError(
                f"OffPeakTimetable catchup_limit must be a positive int or None, got {catchup_limit!r}"
            )
        if catchup_limit is not None and catchup_limit < 1:
            raise ValueError(
                f"OffPeakTimetable catchup_limit must be at least 1 (or None for no limit), got {catchup_limit}"
            )
        if description is not None and (not isinstance(description, str) or not description.strip()):
            raise ValueError(f"OffPeakTimetable description must be a non-empty string, got {description!r}")
        self.catchup_limit = catchup_limit
        self._specs = _window_specs(self.window)
        self._custom_description = description
        self.description = description or self._default_description()

    # -- presentation -------------------------------------------------------------------------------

    @property
    def specs(self) -> Sequence[str]:
        """The window spec strings, one per combined window."""
        return tuple(self._specs)

    @property
    def summary(self) -> str:
        return "off-peak " + " | ".join(self._specs)

    def _default_description(self) -> str:
        windows = " or ".join(self._specs)
        text = (
            f"One run per off-peak window ({windows}): each run starts when the window opens and its "
            "data interval is the window, from opening to closing time"
        )
        if self.catchup_limit is not None:
            text += f"; catchup creates at most the {self.catchup_limit} most recent missed runs"
        return text + "."

    def __repr__(self) -> str:
        args = [repr(" | ".join(self._specs))]
        if self.catchup_limit is not None:
            args.append(f"catchup_limit={self.catchup_limit}")
        if self._custom_description is not None:
            args.append(f"description={self._custom_description!r}")
        return f"OffPeakTimetable({', '.join(args)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OffPeakTimetable):
            return NotImplemented
        return self.serialize() == other.serialize()

    def __hash__(self) -> int:
        return hash((tuple(self._specs), self.catchup_limit, self._custom_description))

    # -- serialization ------------------------------------------------------------------------------

    def serialize(self) -> dict[str, Any]:
        return {
            "version": SERIALIZATION_VERSION,
            "windows": list(self._specs),
            "catchup_limit": self.catchup_limit,
            "description": self._custom_description,
        }

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> OffPeakTimetable:
        version = data.get("version", SERIALIZATION_VERSION)
        if version != SERIALIZATION_VERSION:
            raise ValueError(
                f"OffPeakTimetable cannot read serialization version {version!r} "
                f"(this provider writes and reads version {SERIALIZATION_VERSION})"
            )
        specs = data.get("windows")
        if not isinstance(specs, list) or not specs or not all(isinstance(s, str) for s in specs):
            raise ValueError(
                f"serialized OffPeakTimetable needs 'windows', a non-empty list of spec strings, got {specs!r}"
            )
        windows = [OffPeakWindow.parse(spec) for spec in specs]
        window: OffPeakWindow | WindowSet = (
            windows[0] if len(windows) == 1 else WindowSet(windows=tuple(windows))
        )
        return cls(window, catchup_limit=data.get("catchup_limit"), description=data.get("description"))

    # -- occurrences ----------------------------------------------------------------------------------

    def _next_open(self, moment: datetime.datetime) -> Occurrence:
        try:
            return self.window.next_open(moment)
        except ValueError as exc:  # the window does not open again within the policies' search limit
            raise NoMoreOpenings(str(exc)) from exc

    def _first_opening_at_or_after(self, moment: datetime.datetime) -> Occurrence:
        """The first occurrence that opens at or after ``moment``."""
        occurrence = self._next_open(moment)
        if occurrence[0] < moment:  # ``moment`` is inside it: take the one after
            occurrence = self._next_open(occurrence[1])
        return occurrence

    def _opened_before(self, moment: datetime.datetime, count: int) -> list[Occurrence]:
        """Up to ``count`` of the latest occurrences that opened at or before ``moment``, oldest first."""
        lookback = _INITIAL_LOOKBACK
        while True:
            found = [
                occ
                for occ in self.window.occurrences(moment - lookback, moment + datetime.timedelta(seconds=1))
                if occ[0] <= moment
            ]
            if len(found) >= count or lookback >= _MAX_LOOKBACK:
                return found[-count:]
            lookback = min(lookback * 4, _MAX_LOOKBACK)

    def _last_closed_before(self, moment: datetime.datetime) -> Occurrence | None:
        """The latest occurrence that closed at or before ``moment``."""
        lookback = _INITIAL_LOOKBACK
        while True:
            found = [occ for occ in self.window.occurrences(moment - lookback, moment) if occ[1] <= moment]
            if found:
                return found[-1]
            if lookback >= _MAX_LOOKBACK:
                return None
            lookback = min(lookback * 4, _MAX_LOOKBACK)

    # -- Airflow scheduling protocol ---------------------------------------------------------------------

    def next_dagrun_info(
        self,
        *,
        last_automated_data_interval: DataInterval | None,
        restriction: TimeRestriction,
    ) -> DagRunInfo | None:
        try:
            return self._next_run(last_automated_data_interval, restriction)
        except NoMoreOpenings:
            return None

    def _next_run(
        self, last_automated_data_interval: DataInterval | None, restriction: TimeRestriction
    ) -> DagRunInfo | None:
        floors: list[datetime.datetime] = []
        if last_automated_data_interval is not None:
            floors.append(aware_utc(last_automated_data_interval.end, "last data interval end"))
        if restriction.earliest is not None:
            floors.append(aware_utc(restriction.earliest, "restriction.earliest"))
        if not restriction.catchup or not floors:
            # No catchup (or nothing to catch up from): the occurrence open now, else the next one.
            floors.append(self._next_open(aware_utc(_utcnow(), "now"))[0])
        elif self.catchup_limit is not None:
            recent = self._opened_before(aware_utc(_utcnow(), "now"), self.catchup_limit)
            if len(recent) == self.catchup_limit:
                floors.append(recent[0][0])

        opening, closing = self._first_opening_at_or_after(max(floors))
        if restriction.latest is not None and opening > aware_utc(restriction.latest, "restriction.latest"):
            return None
        start, end = _to_pendulum(opening), _to_pendulum(closing)
        return DagRunInfo(run_after=start, data_interval=DataInterval(start, end))

    def infer_manual_data_interval(self, *, run_after: DateTime) -> DataInterval:
        moment = aware_utc(run_after, "run_after")
        occurrence = self.window.current(moment) or self._last_closed_before(moment)
        if occurrence is None:  # a window so sparse none closed in years: the run covers its own instant
            return DataInterval.exact(_to_pendulum(moment))
        return DataInterval(_to_pendulum(occurrence[0]), _to_pendulum(occurrence[1]))

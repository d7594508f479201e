"""``OffPeakTimetable``: one DAG run per off-peak window occurrence.

Airflow 3.3 loads custom timetables on the scheduler side only through a plugin: a DAG file passes an
instance as ``schedule=``; DAG serialization stores the class's import path plus :meth:`serialize`'s
dict, and the scheduler and API server rebuild it with :meth:`deserialize` after finding the class in
``AirflowPlugin.timetables`` (see :mod:`airflow_provider_dws.plugins.dws_plugin`). That is why the
class derives from the core :class:`airflow.timetables.base.Timetable`, the base the serializer
accepts for user timetables (the Task SDK's ``BaseTimetable`` subclasses are reserved for Airflow's
built-in schedules).

Every calendar question (which local wall times are off-peak, windows crossing midnight, DST) is
answered by :mod:`airflow_provider_dws.scheduling.windows`. This module is what a DAG file's parse
loads: the timetable built from its window, checked, described and serialized; the scheduler's
questions (the next run, a manual run's interval) are answered by
:mod:`airflow_provider_dws.timetables.runs`, loaded when first asked, which maps window occurrences
onto Airflow's scheduling protocol.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from airflow.timetables.base import DagRunInfo, DataInterval, Timetable

from airflow_provider_dws.scheduling.windows import OffPeakWindow, WindowSet, parse_window

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow.timetables.base import TimeRestriction
    from pendulum import DateTime

__all__ = ["OffPeakTimetable"]

WindowLike = OffPeakWindow | WindowSet | str

SERIALIZATION_VERSION = 1


def _utcnow() -> datetime.datetime:
    """The scheduler's notion of now (a seam for tests)."""
    return datetime.datetime.now(datetime.timezone.utc)


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

    # -- Airflow scheduling protocol: answered by :mod:`airflow_provider_dws.timetables.runs` ----------

    def next_dagrun_info(
        self,
        *,
        last_automated_data_interval: DataInterval | None,
        restriction: TimeRestriction,
    ) -> DagRunInfo | None:
        from airflow_provider_dws.timetables import runs

        return runs.next_dagrun_info(self, last_automated_data_interval, restriction, _utcnow())

    def infer_manual_data_interval(self, *, run_after: DateTime) -> DataInterval:
        from airflow_provider_dws.timetables import runs

        return runs.infer_manual_data_interval(self, run_after)

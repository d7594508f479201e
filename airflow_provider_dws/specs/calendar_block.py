"""A calendar block's times and shape: read and checked by the calendar operators (detailed checks,
loaded when a quick rule refuses) and by the tasks that book and find blocks (the catalog is
imported only when a shape is read).

A time given as a literal is checked at every parse for its form and time zone, and for what no clock
can make right: a relative start (a ``timedelta`` from when the task runs) past calendar mode's horizon,
or an earliest start after the latest. Whether an absolute time lies ahead, within what calendar mode
books, depends on the clock, and a DAG whose block has started must still parse (and its tasks adopt
their block). That is checked when it matters: the Find task's range when it asks the advice
(:func:`search_range`), a block's start when a new block is submitted (:func:`check_block_start`),
never when a retry adopts the block it made."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider_dws import facts

if TYPE_CHECKING:
    from airflow_provider_dws.catalog import CalendarShape


def check_shape(op: Any) -> None:
    """A machine type calendar mode offers and its VM count, or a TPU version and its chips."""
    from airflow_provider_dws import catalog

    error = catalog.calendar_shape_error(
        op.machine_type, op.vm_count, op.tpu_version, op.chip_count, op.workload_type
    )
    if error:
        raise op._param_error(error)


def shape_of(op: Any) -> CalendarShape:
    """The block's shape from the operator's (rendered, resolved) parameters."""
    from airflow_provider_dws import catalog

    try:
        return catalog.calendar_shape(
            op.machine_type, op.vm_count, op.tpu_version, op.chip_count, op.workload_type
        )
    except ValueError as err:
        raise op._param_error(str(err)) from None


def shape_fields(shape: CalendarShape, workload_type: str) -> dict[str, Any]:
    """What a block reserves, as the tasks return it (and the reserve reads back from a Find)."""
    return {
        "machine_type": shape.machine_type,
        "vm_count": shape.vm_count or None,
        "tpu_version": shape.tpu_version,
        "chip_count": shape.chip_count or None,
        "workload_type": workload_type,
        "accelerator_type": shape.accelerator_type,
        "accelerator_count": shape.accelerator_count,
    }


def parse_moment(op: Any, name: str, value: Any, *, now: datetime | None = None) -> datetime:
    """``value`` (an aware datetime, an ISO 8601 string with an offset, or a duration from ``now``)
    as an aware UTC datetime; a parameter error naming ``name`` otherwise."""
    now = now or datetime.now(timezone.utc)
    if type(value) is timedelta:
        if value < timedelta(0):
            raise op._param_error(
                f"{name} as a duration counts from when the task runs: it cannot be negative, got {value}"
            )
        return now + value
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise op._param_error(f"{name} must be an ISO 8601 time with an offset, got {value!r}") from None
    if not isinstance(value, datetime):
        raise op._param_error(
            f"{name} must be an aware datetime, an ISO 8601 time or a timedelta, got {value!r}"
        )
    if value.utcoffset() is None:
        raise op._param_error(
            f"{name} must carry a time zone (e.g. datetime(..., tzinfo=timezone.utc)), got {value!r}"
        )
    return datetime.fromtimestamp(value.timestamp(), timezone.utc)


def horizon(op: Any) -> timedelta:
    """How far ahead calendar mode sees for this block (VMs 60 days, TPUs 120)."""
    return facts.CALENDAR_TPU_HORIZON if op.tpu_version is not None else facts.CALENDAR_GPU_HORIZON


def search_range(op: Any, *, now: datetime | None = None) -> tuple[datetime, datetime]:
    """The Find operator's start range, resolved at ``now``: it must lie ahead, in order, within the
    horizon. Raises a parameter error saying which bound is wrong."""
    now = now or datetime.now(timezone.utc)
    earliest = (
        now
        if op.earliest_start is None
        else max(now, parse_moment(op, "earliest_start", op.earliest_start, now=now))
    )
    latest = parse_moment(op, "latest_start", op.latest_start, now=now)
    if latest <= now:
        raise op._param_error(
            f"latest_start {latest.isoformat()} has passed: a block must start in the future"
        )
    if latest < earliest:
        raise op._param_error(
            f"latest_start {latest.isoformat()} is before earliest_start {earliest.isoformat()}"
        )
    ahead = horizon(op)
    if latest - now > ahead + timedelta(minutes=1):
        what = "TPUs" if op.tpu_version is not None else "VMs"
        raise op._param_error(
            f"latest_start {latest.isoformat()} is more than {ahead.days} days ahead: calendar mode sees "
            f"{what} up to {ahead.days} days in advance"
        )
    return earliest, latest


def check_search_range(op: Any, value: Any, is_unrendered: Callable[[Any], bool]) -> None:
    """``earliest_start`` / ``latest_start``: valid moments; what no clock can make right (a relative
    start past the horizon, or the bounds out of order) at once, the rest when the task runs."""
    given: dict[str, Any] = {}
    for name in ("latest_start", "earliest_start"):
        moment = getattr(op, name)
        if moment is not None and not is_unrendered(moment):
            parse_moment(op, name, moment)
            check_relative_start(op, name, moment)
            given[name] = moment
    earliest, latest = given.get("earliest_start"), given.get("latest_start")
    if earliest is None or latest is None:
        return
    if type(earliest) is timedelta and type(latest) is timedelta:
        _check_order(op, earliest, latest, " (both count from when the task runs)")
    elif type(earliest) is not timedelta and type(latest) is not timedelta:
        _check_order(
            op, parse_moment(op, "earliest_start", earliest), parse_moment(op, "latest_start", latest), ""
        )
    # One relative and one absolute: their order depends on when the task runs.


def _check_order(op: Any, earliest: Any, latest: Any, relative: str) -> None:
    """Two bounds of the same kind (both durations, or both moments) must not be out of order."""
    if earliest > latest:
        raise op._param_error(
            f"earliest_start {_moment(earliest)} is after latest_start {_moment(latest)}{relative}: no "
            "block can start between them; swap them or widen the range"
        )


def check_start_time(op: Any, value: Any, is_unrendered: Callable[[Any], bool]) -> None:
    """``start_time``: an aware moment (whether it lies ahead is checked when a new block is submitted;
    a relative one that no clock can make right, at once)."""
    if is_unrendered(value):
        return
    parse_moment(op, "start_time", value)
    check_relative_start(op, "start_time", value)


def check_relative_start(op: Any, name: str, value: Any) -> None:
    """A start given as a ``timedelta`` counts from when the task runs, so whether it lies ahead and
    within calendar mode's horizon does not depend on the clock: refuse it now if it cannot."""
    if type(value) is not timedelta:
        return
    if not value:
        raise op._param_error(
            f"{name} timedelta(0) is the moment the task runs, which has passed by the time the block is "
            "asked for: a block starts in the future; give a later start"
        )
    ahead = parse_horizon(op)
    if value > ahead:
        raise op._param_error(
            f"{name} {_moment(value)} from when the task runs is beyond what calendar mode books for "
            f"{_booked(op)} ({ahead.days} days ahead), whenever it runs; give at most "
            f"timedelta(days={ahead.days})"
        )


def parse_horizon(op: Any) -> timedelta:
    """:func:`horizon` for a known shape; the longest one while the shape is the Find task's."""
    if op.tpu_version is None and op.machine_type is None:
        return max(facts.CALENDAR_GPU_HORIZON, facts.CALENDAR_TPU_HORIZON)
    return horizon(op)


def _booked(op: Any) -> str:
    if op.tpu_version is not None:
        return f"TPU {op.tpu_version}"
    return f"{op.machine_type} VMs" if op.machine_type is not None else "any block"


def _moment(value: datetime | timedelta) -> str:
    """A start for messages: ``90 days`` or an ISO 8601 time."""
    if isinstance(value, datetime):
        return value.isoformat()
    return f"{value.days} days" if value == timedelta(days=value.days) else str(value)


def check_block_start(op: Any, start: datetime, *, now: datetime | None = None) -> None:
    """A block's start must lie ahead, within the horizon."""
    error = block_start_error(start, now or datetime.now(timezone.utc), horizon(op))
    if error:
        raise op._param_error(error)


def block_start_error(start: datetime, now: datetime, ahead: timedelta) -> str | None:
    """Why a new block cannot start at ``start`` (``None``: it can): it must lie ahead of ``now``,
    within ``ahead`` (:func:`horizon`). The worker's check and the trigger's, right before a create."""
    if start <= now:
        return f"start_time {start.isoformat()} has passed: a calendar block starts in the future (find a new one)"
    if start - now > ahead + timedelta(minutes=1):
        return f"start_time {start.isoformat()} is more than {ahead.days} days ahead, beyond what calendar mode books"
    return None

"""The calendar operators' detailed checks: the times of a block and why a shape is refused (the
catalog is imported only then).

A time given as a literal is checked at every parse for its form and time zone only: whether it lies
ahead, within what calendar mode books, depends on the clock, and a DAG whose block has started must
still parse (and its tasks adopt their block). That is checked when it matters: the Find task's range
when it asks the advice (:func:`search_range`), a block's start when a new block is submitted
(:func:`check_block_start`), never when a retry adopts the block it made."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_provider_dws import facts


def check_shape(op: Any) -> None:
    """A machine type calendar mode offers and its VM count, or a TPU version and its chips."""
    from airflow_provider_dws import catalog

    error = catalog.calendar_shape_error(
        op.machine_type, op.vm_count, op.tpu_version, op.chip_count, op.workload_type
    )
    if error:
        raise op._param_error(error)


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
    """``earliest_start`` / ``latest_start``: valid moments (their range is checked when the task runs)."""
    for name in ("latest_start", "earliest_start"):
        moment = getattr(op, name)
        if moment is not None and not is_unrendered(moment):
            parse_moment(op, name, moment)


def check_start_time(op: Any, value: Any, is_unrendered: Callable[[Any], bool]) -> None:
    """``start_time``: an aware moment (whether it lies ahead is checked when a new block is submitted)."""
    if is_unrendered(value):
        return
    parse_moment(op, "start_time", value)


def check_block_start(op: Any, start: datetime, *, now: datetime | None = None) -> None:
    """A block's start must lie ahead, within the horizon."""
    now = now or datetime.now(timezone.utc)
    if start <= now:
        raise op._param_error(
            f"start_time {start.isoformat()} has passed: a calendar block starts in the future (find a new one)"
        )
    ahead = horizon(op)
    if start - now > ahead + timedelta(minutes=1):
        raise op._param_error(
            f"start_time {start.isoformat()} is more than {ahead.days} days ahead, beyond what calendar mode books"
        )

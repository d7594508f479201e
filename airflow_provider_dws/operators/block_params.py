"""What a workload on a calendar block cannot go with, checked at parse time.

Loaded at parse time only by a DAG file whose operator names a block (``block_task_id`` or
``reservation``): :meth:`~airflow_provider_dws.operators.reserved.BlockConsumer.init_block` calls
:func:`check_block` then.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow_provider_dws.specs.templates import has_template, is_template


def check_block(op: Any, allow_past_block_end: bool, failover: Any) -> None:
    """Refuse a failover, a ``max_run`` longer than the whole block (unless allowed) and a literal
    location that cannot hold the block's reservation; raise ``op._param_error`` saying why."""
    failover = failover if failover is not None else getattr(op, "failover", None)
    if failover is not None:
        raise op._param_error(
            f"failover ({failover}) cannot be combined with a calendar reservation: the workload "
            "runs where its reservation is, and nowhere else has it"
        )
    length, run_for = _block_length(op), op.block_run_for()
    if length is not None and run_for is not None and run_for > length and not allow_past_block_end:
        raise op._param_error(
            f"max_run {run_for} is longer than the whole calendar block of task {op.block_task_id!r} "
            f"({length}): it would run past the block's end, when the block and everything on it are "
            "deleted; shorten max_run or pass allow_past_block_end=True"
        )
    _check_block_location(op)


def _check_block_location(op: Any) -> None:
    """A literal region (or zone) must be able to hold the block's reservation, when the DAG names
    its zone literally: elsewhere the workload could never run on it."""
    field = op.LOCATION_FIELD
    given = getattr(op, field, None)
    found = _block_zones(op)
    if not isinstance(given, str) or is_template(given) or found is None:
        return
    zones, source = found
    places = [zone if field == "zone" else zone.rsplit("-", 1)[0] for zone in zones]
    if given not in places:
        where = f"zone {zones[0]!r}" if len(zones) == 1 else f"one of the zones {list(zones)}"
        raise op._param_error(
            f"{field} {given!r} cannot hold the block's reservation, which is in {where} ({source}): "
            f"a workload runs where its reservation is; leave {field} out to follow it, or give "
            f"{places[0]!r}"
        )


def _block_tasks(op: Any) -> list[Any]:
    """The calendar tasks of the operator's DAG that describe the block, nearest first (a WaitFor
    task, its Reserve task, that one's Find task), as far as the DAG already holds them."""
    has_dag = getattr(op, "has_dag", None)
    dag = getattr(op, "dag", None) if has_dag is not None and has_dag() else None
    tasks: list[Any] = []
    task_id = op.block_task_id
    while dag is not None and task_id and len(tasks) < 3:
        task = dag.task_dict.get(task_id)
        if task is None:
            break
        tasks.append(task)
        task_id = getattr(task, "reserve_task_id", None) or getattr(task, "find_task_id", None)
    return tasks


def _block_length(op: Any) -> timedelta | None:
    """The block's length when the DAG gives it literally (the Reserve task's or its Find task's
    ``duration``, through a WaitFor task's ``reserve_task_id``), else ``None``."""
    for task in _block_tasks(op):
        length = getattr(task, "duration", None)
        if isinstance(length, timedelta):
            return length
    return None


def _block_zones(op: Any) -> tuple[tuple[str, ...], str] | None:
    """The zone(s) the block's reservation may be in, and where that comes from, when literal: the
    ``reservation``'s, or the block task's (a WaitFor task's future reservation, a Reserve task's
    zone, a Find task's zones); ``None`` when not known at parse time."""
    if op.reservation is not None:
        if is_template(op.reservation):
            return None
        return (op.reservation.split("/")[3],), f"reservation {op.reservation!r}"
    tasks = _block_tasks(op)
    if not tasks:
        return None
    from airflow_provider_dws.operators import calendar  # the DAG's block tasks loaded it already

    for task in tasks:
        source = f"task {task.task_id!r}"
        if isinstance(task, calendar.WaitForCalendarBlockOperator) and task.future_reservation:
            name = task.future_reservation
            return None if is_template(name) else ((name.split("/")[3],), source)
        if isinstance(task, calendar.ReserveCalendarBlockOperator) and task.zone is not None:
            return None if is_template(task.zone) else ((task.zone,), source)
        if isinstance(task, calendar.FindCalendarBlockOperator):
            zones = task.zones
            return None if has_template(zones) else (tuple(zones), source)
    return None

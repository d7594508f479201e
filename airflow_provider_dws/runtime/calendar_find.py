"""The Find task's choice: made when the Find task runs (ask each region's calendar-mode advice for a
block, choose one as the operator's ``order`` says, and say what each zone answered), taken by the
Reserve task (``find_task_id``), and found again, once, by a Reserve task that runs after the chosen
block has started (:func:`find_again_if_started`)."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends.calendar import FutureReservationBackend
from airflow_provider_dws.backends.calendar_advice import advice_request, choose_offer, read_offers
from airflow_provider_dws.backends.calendar_block import describe_length
from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError
from airflow_provider_dws.exceptions import BadRequestError, CapacityNotObtainedError
from airflow_provider_dws.runtime.task import pulled, resolve_project
from airflow_provider_dws.specs import roles
from airflow_provider_dws.specs.calendar_block import (
    check_block_start,
    parse_moment,
    search_range,
    shape_fields,
    shape_of,
)
from airflow_provider_dws.specs.roles import task_in_role

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_dws.operators.calendar import (
        FindCalendarBlockOperator,
        ReserveCalendarBlockOperator,
    )

_REFUSED = (InvalidRequestError, PermissionDeniedApiError)
#: The Reserve task's XCom of the block it found again (:func:`find_again_if_started`): what it takes
#: instead of its Find task's choice from then on, whenever it resumes.
FOUND_AGAIN_KEY = "calendar_block_found_again"
#: What a Reserve task may take from its Find task's choice (``shape``: the four shape parameters).
_FROM_FIND = ("zone", "start_time", "duration", "shape")


def region_of(zone: str) -> str:
    """``us-central1`` for ``us-central1-a``."""
    return zone.rsplit("-", 1)[0]


def find_block(op: FindCalendarBlockOperator, context: Context) -> dict[str, Any]:
    """Ask each region's calendar-mode advice, choose a block as ``op.order`` says, log the choice and
    the alternatives and return them; no block anywhere is capacity not obtained, with each zone's answer."""
    shape = shape_of(op)
    zones = [str(z) for z in op.zones]
    earliest, latest = search_range(op)
    project = resolve_project(op)
    backend = FutureReservationBackend(project, zones[0], op.gcp_conn_id, op.impersonation_chain)
    regions: dict[str, list[str]] = {}
    for zone in zones:
        regions.setdefault(region_of(zone), []).append(zone)
    offers: list[Any] = []
    unavailable: dict[str, str] = {}
    refused: list[str] = []
    for region, in_region in regions.items():
        request = advice_request(shape, in_region, earliest, latest, op.duration, op.workload_type)
        try:
            response = backend.advise(region, request)
        except _REFUSED as err:
            # One region's refusal (a zone it does not serve, no permission there) is that region's
            # answer: the others may still have a block.
            refused.append(f"{region}: {err.message}")
            unavailable.update({zone: f"the advice was refused: {err.message}" for zone in in_region})
            continue
        found, why = read_offers(response, in_region)
        offers += found
        unavailable.update(why)
    if len(refused) == len(regions):
        raise BadRequestError(f"Compute Engine refused the calendar-mode advice ({'; '.join(refused)})")
    span = f"{shape.describe()} for {describe_length(op.duration)}, starting between {earliest:%Y-%m-%d %H:%M} and {latest:%Y-%m-%d %H:%M} UTC"
    if not offers:
        answers = "; ".join(f"{zone}: {unavailable.get(zone, 'no recommendation')}" for zone in zones)
        raise CapacityNotObtainedError(f"no calendar block of {span} in {', '.join(zones)} ({answers})")
    chosen, others = choose_offer(offers, op.order, zones)
    op.log.info("Calendar-mode advice for %s:", span)
    op.log.info(
        "Chosen (%s): %s from %s to %s",
        "earliest start" if op.order == "earliest" else "first zone in order",
        chosen.zone,
        chosen.start.isoformat(),
        (chosen.start + op.duration).isoformat(),
    )
    for offer in others:
        op.log.info(
            "Alternative: %s from %s to %s", offer.zone, offer.start.isoformat(), offer.end.isoformat()
        )
    for zone, answer in unavailable.items():
        op.log.info("Not offered in %s: %s", zone, answer)
    return {
        "zone": chosen.zone,
        "region": region_of(chosen.zone),
        "start_time": chosen.start.isoformat(),
        "end_time": (chosen.start + op.duration).isoformat(),
        "duration_seconds": int(op.duration.total_seconds()),
        "recommendation_id": chosen.recommendation_id,
        "order": op.order,
        **shape_fields(shape, op.workload_type),
        "alternatives": [offer.to_dict() for offer in others],
        "unavailable": unavailable,
    }


# -- the Reserve task's use of the choice ---------------------------------------------------------


def take_find_choice(op: ReserveCalendarBlockOperator, context: Context) -> None:
    """Fill what the Reserve task does not give itself (zone, start, length, shape) from its Find
    task's choice, or from the block it found again since (:data:`FOUND_AGAIN_KEY`)."""
    assert op.find_task_id is not None
    # What the DAG gives the task itself, noted before anything is filled in: the rest follows the
    # choice, and follows it again when the block is found again.
    given = op.__dict__.setdefault(
        "_dws_given",
        {name for name in _FROM_FIND[:3] if getattr(op, name) is not None}
        | ({"shape"} if op.has_shape() else set()),
    )
    again = pulled(context, op.task_id, FOUND_AGAIN_KEY)
    again = again if isinstance(again, dict) and again.get("zone") else None
    choice = again or pulled(context, op.find_task_id)
    if not isinstance(choice, dict) or not choice.get("zone"):
        raise op._param_error(
            f"task {op.find_task_id!r} left no calendar block to reserve (did it run and succeed in this DAG run?)"
        )
    _take(op, choice, given)
    op.__dict__["_dws_found_again"] = again


def _take(op: ReserveCalendarBlockOperator, choice: dict[str, Any], given: set[str]) -> None:
    if "zone" not in given:
        op.zone = str(choice["zone"])
    if "start_time" not in given:
        op.start_time = str(choice["start_time"])
    if "duration" not in given:
        op.duration = timedelta(seconds=int(choice["duration_seconds"]))
    if "shape" not in given:
        op._set_shape(
            choice.get("machine_type"),
            choice.get("vm_count"),
            choice.get("tpu_version"),
            choice.get("chip_count"),
            choice.get("workload_type") or "BATCH",
        )


def starts_from_find(op: ReserveCalendarBlockOperator) -> bool:
    """Whether the Reserve task's start is its Find task's choice (not a ``start_time`` of its own)."""
    return op.find_task_id is not None and "start_time" not in op.__dict__.get("_dws_given", {"start_time"})


def find_again_if_started(op: ReserveCalendarBlockOperator, context: Context, now: datetime) -> None:
    """Before a new block is booked: if the block taken from the Find task has started already (the
    Reserve task ran later than the Find task's lead allowed: a busy machine, a slow scheduler, a
    task cleared and run again), ask the calendar-mode advice again, once, as the Find task would ask
    it now (the same zones, shape, duration and order; a range given as durations counts from now),
    and take that block. A block found again that has started too fails the task with
    :class:`~airflow_provider_dws.exceptions.CapacityNotObtainedError` (retryable: a later try finds
    again). A start the DAG gives the Reserve task itself is never replaced (see ``check_new_start``)."""
    if not starts_from_find(op):
        return
    start = _start(op)
    if start > now:
        return
    found_again = op.__dict__.get("_dws_found_again")
    if found_again is not None:
        raise missed_again(op, found_again, start, now)
    assert op.find_task_id is not None
    op.log.warning(
        "The calendar block task %r chose (%s from %s) started %s ago, before this task could book it: "
        "asking the calendar-mode advice again, once, for the same shape and duration",
        op.find_task_id,
        op.zone,
        start.isoformat(),
        timedelta(seconds=round((now - start).total_seconds())),
    )
    find = find_task_of(op)
    if find is None:
        raise CapacityNotObtainedError(
            f"the calendar block task {op.find_task_id!r} chose starts at {start.isoformat()}, which has "
            f"passed, and {op.find_task_id!r} is not a FindCalendarBlockOperator of this DAG to ask "
            "again: run the DAG again"
        )
    why = f"the calendar block {op.find_task_id!r} chose started at {start.isoformat()} before it was booked"
    try:
        choice = find_block(_FindNow(find, context), context)  # type: ignore[arg-type]
    except (CapacityNotObtainedError, BadRequestError, ValueError) as err:
        raise type(err)(f"{why}, and finding a block again failed: {err}") from None
    choice["found_again_at"] = now.isoformat()
    choice["missed_start_time"] = start.isoformat()
    context["ti"].xcom_push(key=FOUND_AGAIN_KEY, value=choice)
    _take(op, choice, op.__dict__["_dws_given"])
    op.__dict__["_dws_found_again"] = choice
    op.log.info(
        "Found again: %s from %s to %s; booking it instead", op.zone, choice["start_time"], choice["end_time"]
    )


def check_new_start(op: ReserveCalendarBlockOperator, start: datetime, now: datetime) -> None:
    """Right before a new block is created: its start must lie ahead. One taken from the Find task
    that has passed since it was looked at fails retryably (a later try finds again); a start the DAG
    gives is a parameter the user must change (``check_block_start``)."""
    if starts_from_find(op) and start <= now:
        found_again = op.__dict__.get("_dws_found_again")
        if found_again is not None:
            raise missed_again(op, found_again, start, now)
        raise CapacityNotObtainedError(
            f"the calendar block task {op.find_task_id!r} chose started at {start.isoformat()}, before this "
            "task could book it; the task's next try asks the advice again"
        )
    check_block_start(op, start, now=now)


def missed_again(
    op: ReserveCalendarBlockOperator, found_again: dict[str, Any], start: datetime, now: datetime
) -> CapacityNotObtainedError:
    """The error of a block found again that started before it could be booked too."""
    return CapacityNotObtainedError(
        f"the calendar block task {op.find_task_id!r} chose started at "
        f"{found_again.get('missed_start_time', '?')} before this task could book it, and the block "
        f"found again at {found_again.get('found_again_at', '?')} ({found_again['zone']} from "
        f"{start.isoformat()}) has started too (it is {now.isoformat()}): the task runs too long after "
        f"the advice for the blocks it offers. Give {op.find_task_id!r} a later earliest_start (a lead "
        "longer than the time from the Find task to the booking), then run the DAG again"
    )


def _start(op: ReserveCalendarBlockOperator) -> datetime:
    return parse_moment(op, "start_time", op.start_time).replace(microsecond=0)


def find_task_of(op: ReserveCalendarBlockOperator) -> FindCalendarBlockOperator | None:
    """The Reserve task's Find task, as the DAG defines it (``None``: not a Find task of its DAG)."""
    find: FindCalendarBlockOperator | None = task_in_role(op, op.find_task_id, roles.CALENDAR_FIND)
    return find


class _FindNow:
    """A Find task's parameters as it would ask now: its templated fields rendered for this run,
    everything else (the shape, the log, the errors naming it) the DAG's task, which is not changed
    (rendering an operator renders it in place)."""

    def __init__(self, find: FindCalendarBlockOperator, context: Context) -> None:
        from airflow_provider_dws.specs.templates import has_template

        for name in find.template_fields:
            value = getattr(find, name)
            self.__dict__[name] = (
                find.render_template(copy.deepcopy(value), context) if has_template(value) else value
            )
        self.__dict__["_find"] = find

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_find"], name)

"""Give a calendar block back (:class:`~airflow_provider_dws.operators.calendar.ReleaseCalendarBlockOperator`):
find every block of the reserve task instance, cancel or delete it, and say what it cost and what used it."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends.calendar import (
    AWAITING_APPROVAL,
    UNDELIVERED,
    FutureReservationBackend,
    future_reservation_status,
)
from airflow_provider_dws.backends.calendar_block import (
    DELIVERED,
    block_shape,
    block_window,
    parse_future_reservation_name,
)
from airflow_provider_dws.console import CONSOLE, push_url
from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError
from airflow_provider_dws.exceptions import BadRequestError
from airflow_provider_dws.links import CalendarBlockLink
from airflow_provider_dws.records import XCOM_KEY, RequestRecord, parse_time, read_records
from airflow_provider_dws.runtime.task import pulled, resolve_project, task_identity
from airflow_provider_dws.scheduling.reattach import Candidate, choose_existing
from airflow_provider_dws.specs import roles
from airflow_provider_dws.specs.roles import is_in_role, task_in_role

if TYPE_CHECKING:
    from airflow.sdk import Context
    from google.cloud.compute_v1 import FutureReservation

    from airflow_provider_dws.operators.calendar import (
        ReleaseCalendarBlockOperator,
        ReserveCalendarBlockOperator,
    )

_REFUSED = (InvalidRequestError, PermissionDeniedApiError)
#: The states of a block the API may refuse to give back before its end: booked (locked for
#: procurement, or provisioning) or delivered.
HELD_UNTIL_END = frozenset({*UNDELIVERED, *DELIVERED}) - set(AWAITING_APPROVAL)


# Here, not in .calendar: the adapters there import this module, and this one must not import them
# (no import loop), yet the release pushes the same link.
def future_reservation_console_url(project_id: str, zone: str, name: str) -> str:
    """The console page of one future reservation (a calendar block)."""
    return f"{CONSOLE}/compute/futureReservations/details/zones/{zone}/{name}?project={project_id}"


def _task(op: Any, task_id: str) -> Any | None:
    dag = getattr(op, "dag", None) if op.has_dag() else None
    if dag is None or not dag.has_task(task_id):
        return None
    return dag.get_task(task_id)


def _reserve_of(op: Any, task_id: str) -> ReserveCalendarBlockOperator | None:
    reserve: ReserveCalendarBlockOperator | None = task_in_role(op, task_id, roles.CALENDAR_RESERVE)
    return reserve


def reserve_zones(op: Any, context: Context, task_id: str) -> list[str]:
    """The zones the reserve task ``task_id`` of ``op``'s DAG may have booked in (:func:`zones_of`)."""
    reserve = _reserve_of(op, task_id)
    return [] if reserve is None else zones_of(reserve, context)


def zones_of(reserve: ReserveCalendarBlockOperator, context: Context) -> list[str]:
    """The zones a reserve task may have booked in: its own (rendered), its Find task's choice, and
    the zones that Find task considered (a Find run again may have chosen another)."""
    from airflow_provider_dws.specs.templates import has_template

    zones: list[str] = []
    if reserve.zone is not None:
        zones.append(
            str(
                reserve.render_template(reserve.zone, context) if has_template(reserve.zone) else reserve.zone
            )
        )
    if reserve.find_task_id:
        choice = pulled(context, reserve.find_task_id)
        if isinstance(choice, dict) and isinstance(choice.get("zone"), str):
            zones.append(choice["zone"])
        find = _task(reserve, reserve.find_task_id)
        considered = getattr(find, "zones", None)
        if find is not None and considered is not None:
            rendered = (
                find.render_template(copy.deepcopy(considered), context)
                if has_template(considered)
                else considered
            )
            zones += [str(z) for z in rendered]
    return list(dict.fromkeys(zones))


def reserve_candidates(op: Any, context: Context, task_id: str) -> list[str]:
    """Every future reservation of the reserve task's instance (the same run and map index), found by
    name in each zone it may have used, the one to adopt first (live, newest), then the others."""
    identity = task_identity(context, task_id=task_id)
    project = resolve_project(op)
    found = []
    for zone in reserve_zones(op, context, task_id):
        found += FutureReservationBackend(project, zone, op.gcp_conn_id, op.impersonation_chain).find(
            identity
        )
    decision = choose_existing([Candidate(s.name, s.phase, s.timings.submitted) for s in found])
    names = [
        s.name
        for s in sorted(
            found,
            key=lambda s: s.timings.submitted or datetime.min.replace(tzinfo=timezone.utc),
            reverse=True,
        )
    ]
    if decision.name is not None:
        names.remove(decision.name)
        names.insert(0, decision.name)
    return names


def locked_message(name: str, refusal: str, end: datetime | None = None) -> str:
    """Why a block could not be given back, and what then happens to it."""
    until = f" at {end.isoformat()}" if end is not None else ""
    return (
        f"Compute Engine will not let {name} go ({refusal}): a calendar block locked for procurement or "
        f"delivered is billed until its end{until}, when Compute Engine deletes its reservation and "
        "everything on it; calendar mode gives no block back early. A release that runs after its end "
        "deletes the request's record (a record left blocks new requests of the same shape)"
    )


def _waits_of(op: Any, task_id: str) -> list[str]:
    """The wait tasks of this DAG that follow ``task_id``'s block (their records saw it delivered)."""
    dag = getattr(op, "dag", None) if op.has_dag() else None
    tasks = dag.tasks if dag is not None else []
    return [t.task_id for t in tasks if is_in_role(t, roles.CALENDAR_WAIT) and t.reserve_task_id == task_id]


def consumer_records(op: Any, context: Context) -> list[RequestRecord]:
    """The request records of every task of this DAG run (the consumers of a block among them)."""
    dag = getattr(op, "dag", None) if op.has_dag() else None
    if dag is None:
        return []
    try:
        values = context["ti"].xcom_pull(task_ids=[t for t in dag.task_ids if t != op.task_id], key=XCOM_KEY)
    except Exception:
        op.log.warning("Could not read the request records of this DAG run", exc_info=True)
        return []
    return [record for value in values or () for record in read_records(value)]


def usage(
    fr: FutureReservation, name: str, records: Iterable[RequestRecord], now: datetime
) -> dict[str, Any]:
    """What the block reserved and what the recorded workloads used of it, in accelerator-hours.

    ``reserved``: the whole block (accelerators x its length); ``delivered``: from its start to its
    end or ``now`` if it was delivered; ``used``: over the requests recorded on its reservation
    (``RequestRecord.reservation``, their own accelerators x their run inside the block). Work not
    recorded (another DAG's, a VM made by hand) is not counted: ``used`` is a floor.
    """
    shape = block_shape(fr)
    count = shape.accelerator_count if shape else 0
    start, end = block_window(fr)
    state = fr.status.procurement_status
    hours = ((end - start).total_seconds() / 3600.0) if start and end else 0.0
    delivered = 0.0
    if state in DELIVERED and start is not None and now > start:
        delivered = ((min(now, end) if end else now) - start).total_seconds() / 3600.0
    reservations = {r.rsplit("/", 1)[-1] for r in fr.status.auto_created_reservations}
    reservations.add(fr.reservation_name or parse_future_reservation_name(name).future_reservation)
    # One request may be recorded by several tasks (its setup, and the release that deleted it, as
    # for a TPU slice): counted once, the release's record (it knows when the request ended) winning.
    merged: dict[str, RequestRecord] = {}
    for record in records:
        known = merged.get(record.request_name)
        if known is None or record.released or not known.released:
            merged[record.request_name] = record
    used, workloads = 0.0, 0
    for record in merged.values():
        if not record.reservation or record.reservation.rsplit("/", 1)[-1] not in reservations:
            continue
        workloads += 1
        began, ended = parse_time(record.started), parse_time(record.ended) or now
        if began is None:
            continue
        if start is not None:
            began = max(began, start)
        if end is not None:
            ended = min(ended, end)
        used += max(0.0, (ended - began).total_seconds()) / 3600.0 * record.accelerator_count
    return {
        "accelerator_type": shape.accelerator_type if shape else None,
        "accelerators": count,
        "reserved_hours": count * hours,
        "delivered_hours": count * delivered,
        "used_hours": used,
        "workloads": workloads,
    }


def release_blocks(op: ReleaseCalendarBlockOperator, context: Context) -> dict[str, Any]:
    """Cancel the setup's block if it is not delivered; delete its reservations and itself if it was
    delivered or has ended; every other block of the setup's task instance too. Already gone is success."""
    from airflow_provider_dws.runtime.recording import Released, ReleasedApi, record_release

    result = pulled(context, op.setup_task_id)
    names: list[str] = []
    pushed = (result.get("future_reservation") if isinstance(result, dict) else None) or pulled(
        context, op.setup_task_id, roles.FUTURE_RESERVATION_NAME_KEY
    )
    if isinstance(pushed, str) and pushed:
        names.append(pushed)
    names += reserve_candidates(op, context, op.setup_task_id)
    if not names and _reserve_of(op, op.setup_task_id) is None:
        op.log.warning(
            "Task %r is not a ReserveCalendarBlockOperator of this DAG and left no block", op.setup_task_id
        )
    records = consumer_records(op, context)
    released: list[tuple[str, str]] = []
    windows: dict[str, tuple[datetime | None, datetime | None]] = {}
    spent: list[dict[str, Any]] = []
    kept: list[dict[str, Any]] = []
    for name in dict.fromkeys(names):
        where = parse_future_reservation_name(name)
        backend = FutureReservationBackend(where.project, where.zone, op.gcp_conn_id, op.impersonation_chain)
        fr = backend.get(name)
        if fr is None:
            op.log.info("%s is already gone", name)
            continue
        push_url(
            context,
            CalendarBlockLink.key,
            future_reservation_console_url(where.project, where.zone, where.future_reservation),
        )
        now = datetime.now(timezone.utc)
        status = future_reservation_status(fr, name, now=now)
        cost = usage(fr, name, records, now)
        start, end = block_window(fr)
        try:
            done = backend.discard(name)
        except _REFUSED as err:
            kept.append(_kept(op, backend, name, err, end))  # recorded as held, not released
            windows[name] = (start, end)  # held until its end: the record says when
        else:
            windows[name] = (start, end if end is not None and end < now else None)
            op.log.info(
                "%s (%s, %s): %s",
                name,
                status.state,
                status.description,
                ", ".join(done) or "nothing left to do",
            )
        _log_cost(op, name, cost)
        released.append((name, status.state))
        spent.append({"future_reservation": name, "state_before": status.state, **cost})
    blocks = ReleasedApi(
        FutureReservationBackend.kind,
        "Compute Engine calendar block",
        lambda n: parse_future_reservation_name(n).zone,
        DELIVERED,
    )
    still_held = {k["future_reservation"] for k in kept}
    record_release(
        op,
        context,
        blocks,
        Released(
            released,
            records_of=[op.setup_task_id, *_waits_of(op, op.setup_task_id)],
            held_between=lambda n: windows.get(n, (None, None)),
            kept=still_held,
        ),
    )
    given_back = [(name, state) for name, state in released if name not in still_held]
    if not given_back and not kept:
        op.log.info(
            "No calendar block of task %r (never made, or already released): nothing to do", op.setup_task_id
        )
    return {
        "released": [name for name, _ in given_back],
        "states_before": [state for _, state in given_back],
        "usage": spent,
        "kept": kept,
    }


def _kept(
    op: Any, backend: FutureReservationBackend, name: str, refusal: Exception, end: datetime | None
) -> dict[str, Any]:
    """A block the API will not let go (locked, or delivered and not ended): not an error of the
    release (nothing more can be done for it), but said loudly. Anything else refused (a permission
    missing, a block in another state) fails the task."""
    message = getattr(refusal, "message", str(refusal))
    fr = backend.get(name)
    state = fr.status.procurement_status if fr is not None else "gone"
    if not isinstance(refusal, InvalidRequestError) or state not in HELD_UNTIL_END:
        raise BadRequestError(f"Compute Engine refused to give back {name} [{state}]: {message}") from None
    op.log.warning("%s", locked_message(name, message, end))
    return {"future_reservation": name, "state": state, "until": end.isoformat() if end else None}


def _log_cost(op: Any, name: str, cost: dict[str, Any]) -> None:
    what = (
        f"{cost['accelerators']} x {cost['accelerator_type']}"
        if cost["accelerator_type"]
        else "VMs without accelerators"
    )
    booked = "%s reserved %.1f accelerator-hours (%s), %.1f of them delivered"
    if not cost["workloads"]:
        # Nothing to count from: "used 0" would claim the block sat idle.
        op.log.info(
            booked + "; no consumer records of this DAG run name this reservation, so its use is not known",
            name,
            cost["reserved_hours"],
            what,
            cost["delivered_hours"],
        )
        return
    op.log.info(
        booked
        + "; the %d workload(s) of this DAG run recorded on it used %.1f (%s); work not recorded on it "
        "(other DAGs) is not counted",
        name,
        cost["reserved_hours"],
        what,
        cost["delivered_hours"],
        cost["workloads"],
        cost["used_hours"],
        f"{cost['used_hours'] / cost['delivered_hours']:.0%} of the delivered"
        if cost["delivered_hours"]
        else "none delivered",
    )

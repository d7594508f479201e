"""Compute Engine calendar mode as DWS capacity requests: future reservations in CALENDAR mode, the
calendar-mode advice that finds a free block, and the reservations a delivered block creates.

A calendar block is one zonal future reservation, named from the task instance (as a resize
request is) and created with a ``request_id``, so a retry adopts it instead of booking twice. Its
life is :data:`FUTURE_RESERVATION_STATES`, its state table (here): pending approval (waiting),
approved until delivered (provisioning), delivered (running), and past its end time succeeded. The
backend's location is the zone: the shared poller lists the zone's future reservations once per
interval for every wait there, however far away the blocks start.

The calls are the Compute Engine design's (:mod:`.compute`): sync ``compute_v1`` clients, run in the
process's one bounded pool from the event loop, ``*_unary()`` mutations whose zone operation is
polled on the same clients.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends.base import RESULT, RequestStatus, classify_listed, clear_ended
from airflow_provider_dws.backends.calendar_block import (
    DELIVERED,
    BlockAsk,
    FutureReservationName,
    adopted_warning,
    ask_from_spec,
    block_description,
    block_differences,
    block_result,
    block_window,
    build_future_reservation,
    delivered_line,
    describe_block,
    parse_future_reservation_name,
    parse_reservation_name,
    procurement_message,
    reserved_count,
)
from airflow_provider_dws.backends.compute_base import ComputeBackend, _each, _when, in_pool
from airflow_provider_dws.errors import (
    ConflictError,
    InvalidRequestError,
    RequestNotFoundError,
)
from airflow_provider_dws.scheduling.identity import RequestIdentity, is_attempt_of, parse_attempt_name
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings, StateTable
from airflow_provider_dws.specs.calendar_block import block_start_error

if TYPE_CHECKING:
    from google.cloud.compute_v1 import CalendarModeAdviceRequest, FutureReservation

log = logging.getLogger(__name__)

# The one table from Compute Engine future reservation procurement states
# (``FutureReservationStatus.ProcurementStatus``, a string on the wire) to phases: calendar mode.
# One table serves both waits on a calendar block. The reserve wait ends when the request is
# approved, the delivery wait when it is FULFILLED, so the phases split exactly there:
# * DRAFTING and PENDING_APPROVAL: WAITING. Nothing is promised yet; this is the only phase the
#   trigger's max wait applies to, so a request never approved is cancelled at the max wait,
#   while an approved one is never given up by a wait (it is the user's booking).
# * APPROVED, PROCURING (locked at ``lock_time``), PROVISIONING (from the start time, at most
#   24 h): PROVISIONING, the capacity is promised and not usable yet, which is what the shared
#   phase means ("capacity found, not yet usable"; a record calls it waiting). COMMITTED (a
#   commitment was bought with it) is approved too, and so is PENDING_AMENDMENT_APPROVAL: an
#   amendment is asked of an approved request and, if declined, the request stays as it was.
# * FULFILLED: RUNNING, the reservations exist and are billed whether used or not; past the
#   block's end (a fact, ``ended``) SUCCEEDED, as the service has deleted them and everything on them.
# * DECLINED, FAILED, FAILED_PARTIALLY_FULFILLED: NOT_OBTAINED (capacity not obtained, with the
#   reason). A partial fulfilment does hold what was delivered: the release deletes it; the phase
#   says the request as asked (the whole block) was not obtained.
# * CANCELLED: CANCELLED.
# Refined by :func:`classify_future_reservation`.
FUTURE_RESERVATION_STATE_PHASES: dict[str, Phase] = {
    "PROCUREMENT_STATUS_UNSPECIFIED": Phase.WAITING,
    "DRAFTING": Phase.WAITING,
    "PENDING_APPROVAL": Phase.WAITING,
    "APPROVED": Phase.PROVISIONING,
    "COMMITTED": Phase.PROVISIONING,
    "PENDING_AMENDMENT_APPROVAL": Phase.PROVISIONING,
    "PROCURING": Phase.PROVISIONING,
    "PROVISIONING": Phase.PROVISIONING,
    "FULFILLED": Phase.RUNNING,
    "DECLINED": Phase.NOT_OBTAINED,
    "FAILED": Phase.NOT_OBTAINED,
    "FAILED_PARTIALLY_FULFILLED": Phase.NOT_OBTAINED,
    "CANCELLED": Phase.CANCELLED,
}

_PROCUREMENT_FAILURES = {
    # The API says no more than the status (a future reservation has no reason field): say what it
    # means and what to do.
    "DECLINED": (
        "Compute Engine declined the request: it cannot reserve this capacity for this window, or the "
        "request was still pending at its start; ask for other dates, another zone or a smaller block "
        "(FindCalendarBlockOperator's advice shows what is free)"
    ),
    "FAILED": "procurement failed: no reservation was delivered, and none of it is billed",
    "FAILED_PARTIALLY_FULFILLED": "procurement failed part way: fewer reserved slots were delivered than asked",
}


def classify_future_reservation(state_name: str, *, ended: bool = False, message: str = "") -> Outcome:
    """Classify a future reservation's procurement status into a phase and, for failures, a reason.

    :param ended: the block's end time has passed (the service deleted its reservations then).
    :param message: what the request says of itself (delivered counts, the service's reason).
    """
    phase = FUTURE_RESERVATION_STATE_PHASES.get(state_name, Phase.WAITING)
    if state_name == "FULFILLED" and ended:
        return Outcome(Phase.SUCCEEDED, None, message or "the block ended; its reservations were deleted")
    if phase is Phase.NOT_OBTAINED:
        what = _PROCUREMENT_FAILURES.get(state_name, "capacity was not obtained")
        return Outcome(
            Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, f"{what}: {message}" if message else what
        )
    if phase is Phase.CANCELLED:
        return Outcome(
            Phase.CANCELLED, FailureKind.CANCELLED, message or "the future reservation was cancelled"
        )
    return Outcome(phase, None, message)


#: Compute Engine future reservations in calendar mode (``FutureReservationStatus.ProcurementStatus``);
#: facts: ``ended``, ``message``.
FUTURE_RESERVATION_STATES = StateTable(
    "compute_future_reservation", FUTURE_RESERVATION_STATE_PHASES, classify_future_reservation
)


class BlockStartError(ValueError):
    """A new block's start has passed, or lies beyond the horizon, when its trigger would book it:
    nothing is booked. ``missed``: a start the Find task chose, now passed (capacity not obtained,
    retryable); otherwise the request is bad as it is."""

    def __init__(self, message: str, *, missed: bool) -> None:
        super().__init__(message)
        self.failure = FailureKind.CAPACITY_NOT_OBTAINED if missed else FailureKind.BAD_REQUEST


#: Future reservations per list page.
LIST_PAGE_SIZE = 250
#: Not delivered yet: a release cancels these.
UNDELIVERED = tuple(
    state
    for state, phase in FUTURE_RESERVATION_STATES.phases.items()
    if phase.value in ("waiting", "provisioning")
)
#: Not approved yet: nothing is booked for it; the only states a max wait gives up.
AWAITING_APPROVAL = ("DRAFTING", "PENDING_APPROVAL")
#: Namespace of the cancel and delete calls' request ids (one per resource and verb).
_CALL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "airflow-provider-dws/calendar")


def future_reservation_status(
    fr: FutureReservation, name: str, *, now: datetime | None = None
) -> RequestStatus:
    """Classify a future reservation into the shared vocabulary (no API call).

    A delivered block is timed from its start (the request records no delivery time) and, once its
    end time passed, until its end; an unsuccessful end is timed ``now`` (default: the clock).
    """
    where = parse_future_reservation_name(name)
    state = fr.status.procurement_status or "PROCUREMENT_STATUS_UNSPECIFIED"
    now = now or datetime.now(timezone.utc)
    start, end = block_window(fr)
    ended = state == "FULFILLED" and end is not None and now >= end
    outcome = FUTURE_RESERVATION_STATES.classify(state, ended=ended, message=procurement_message(fr))
    delivered = state in DELIVERED
    parsed = parse_attempt_name(where.future_reservation)
    finished = (end if ended else now) if outcome.phase.terminal else None
    return RequestStatus(
        name=name,
        state=state,
        outcome=outcome,
        timings=RequestTimings(
            submitted=_when(fr.creation_timestamp),
            started=start if delivered else None,
            finished=finished,
        ),
        description=describe_block(fr),
        details={
            "zone": where.zone,
            "start_time": start.isoformat() if start else None,
            "end_time": end.isoformat() if end else None,
            "reservations": list(fr.status.auto_created_reservations),
            "reserved": reserved_count(fr),
            "fulfilled": int(fr.status.fulfilled_count),
            "lock_time": fr.status.lock_time or None,
            "attempt": parsed[2] if parsed else 1,
        },
    )


# -- the backend -----------------------------------------------------------------------------------


class FutureReservationBackend(ComputeBackend):
    """Create, read, list, cancel and delete the future reservations of one zone, and the
    reservations they create; ask the calendar-mode advice of a region.

    Releasing a block that is not delivered cancels it; one delivered (wholly or in part) has its
    reservations deleted, then itself; one that ended (declined, failed, cancelled) is deleted.
    """

    kind = "compute_future_reservation"
    location_key = "location"
    call_namespace = _CALL_NAMESPACE
    #: Cancelled while not delivered (the API refuses once the block is locked for procurement).
    cancellable = UNDELIVERED
    #: The trigger's kill path (the waiting task marked failed, cleared or killed) gives up only a
    #: block awaiting approval, as the worker's does (``CalendarReserveAdapter.release_or_keep``): one
    #: approved is booked, and left to the release teardown, which cancels it before its lock time.
    kill_cancellable = AWAITING_APPROVAL

    @property
    def zone(self) -> str:
        """The zone (the backend's location)."""
        return self.location

    def name_of(self, future_reservation: str) -> str:
        """The full name of ``future_reservation`` here."""
        return FutureReservationName(self.project_id, self.zone, future_reservation).path

    def _api(self) -> Any:
        return self.hook.get_future_reservations_client()

    def _message(self, verb: str, **fields: Any) -> Any:
        from google.cloud import compute_v1

        return getattr(compute_v1, f"{verb}FutureReservationRequest")(**fields)

    def _insert(self, request: FutureReservation, token: str) -> tuple[str, Any]:
        message = self._message(
            "Insert",
            project=self.project_id,
            zone=self.zone,
            future_reservation_resource=request,
            request_id=token,
        )
        return self.name_of(request.name), message

    def _state(self, resource: FutureReservation) -> str:
        return str(resource.status.procurement_status)

    def _classify(self, resource: FutureReservation, name: str) -> RequestStatus:
        return future_reservation_status(resource, name)

    def _key(self, name: str) -> dict[str, Any]:
        where = parse_future_reservation_name(name)
        return {"project": where.project, "zone": where.zone, "future_reservation": where.future_reservation}

    def _list_message(self) -> Any:
        from google.cloud.compute_v1 import ListFutureReservationsRequest

        return ListFutureReservationsRequest(
            project=self.project_id, zone=self.zone, max_results=LIST_PAGE_SIZE
        )

    # -- sync (worker) -----------------------------------------------------------------------------

    def list_zone(self) -> list[RequestStatus]:
        """Every future reservation of the zone (all pages), classified."""
        client = self._api()

        def list_all() -> list[Any]:
            return list(client.list(request=self._list_message(), timeout=self.rpc_timeout))

        items = self._call(f"list future reservations of {self.zone}", list_all)
        return [future_reservation_status(fr, self.name_of(fr.name)) for fr in items]

    def find(self, identity: RequestIdentity) -> list[RequestStatus]:
        """Every future reservation of this task instance here (any try and attempt), one paged list."""
        base = identity.queued_resource_base()
        return [
            status
            for status in self.list_zone()
            if is_attempt_of(parse_future_reservation_name(status.name).future_reservation, base)
        ]

    def delete_reservation(self, url: str) -> bool:
        """Delete one reservation a delivered block created (its full name or URL); False when gone."""
        from google.cloud.compute_v1 import DeleteReservationRequest

        project, zone, reservation = parse_reservation_name(url)
        token = str(uuid.uuid5(_CALL_NAMESPACE, f"delete:{url}"))
        message = DeleteReservationRequest(
            project=project, zone=zone, reservation=reservation, request_id=token
        )
        client = self.hook.get_reservations_client()
        try:
            operation = self._rpc(f"delete reservation {reservation}", client.delete_unary, request=message)
            self.wait_operation(operation, f"delete reservation {reservation}")
        except RequestNotFoundError:
            return False
        return True

    def get_reservation(self, url: str) -> Any | None:
        """Read one reservation (its full name or URL); ``None`` when it does not exist."""
        project, zone, reservation = parse_reservation_name(url)
        client = self.hook.get_reservations_client()
        try:
            return self._rpc(
                f"get reservation {reservation}",
                client.get,
                project=project,
                zone=zone,
                reservation=reservation,
            )
        except RequestNotFoundError:
            return None

    def release(self, name: str, *, wait: bool = False) -> bool:
        """Give the block back: cancel it if it is not delivered (and, with ``wait``, delete it once
        cancelled). A delivered one is left to :meth:`discard` (the release task's). False when there
        was nothing to release."""
        current = self.get(name)
        if current is None:
            return False
        if current.status.procurement_status not in UNDELIVERED:
            log.info("%s is %s: nothing to cancel", name, current.status.procurement_status)
            return False
        cancelled = self.cancel(name)
        if wait:
            self.discard(name)
        return cancelled

    def discard(self, name: str) -> list[str]:
        """Leave nothing of a block: cancel it if it is not delivered, delete the reservations it
        delivered and the one it names (``reservation_name``: created at its approval, INACTIVE until
        its start, and left behind by a block that was cancelled or failed), then delete it. Returns
        what was done (empty when it was gone)."""
        current = self.get(name)
        if current is None:
            return []
        done: list[str] = []
        state = current.status.procurement_status
        if state in UNDELIVERED:
            try:
                if self.cancel(name):
                    done.append("cancelled")
            except (ConflictError, InvalidRequestError) as err:
                # Locked (PROCURING): a cancel is refused there, a delete may not be.
                log.warning("%s is %s and its cancel was refused (%s); deleting it", name, state, err.message)
            current = self.get(name) or current
        urls = [parse_reservation_name(url) for url in current.status.auto_created_reservations]
        where = parse_future_reservation_name(name)
        if current.reservation_name and current.status.procurement_status not in UNDELIVERED:
            # Still to be delivered (locked): its reservation is delivered with it, not deleted now.
            urls.append((where.project, where.zone, current.reservation_name))
        for project, zone, reservation in dict.fromkeys(urls):
            if self.delete_reservation(f"projects/{project}/zones/{zone}/reservations/{reservation}"):
                done.append(f"deleted reservation {reservation}")
        if self.delete(name):
            done.append("deleted")
        return done

    def advise(self, region: str, request: CalendarModeAdviceRequest) -> Any:
        """The calendar-mode advice of ``region`` for ``request`` (one call; not a long-running one)."""
        from google.cloud.compute_v1 import CalendarModeAdviceRpcRequest

        message = CalendarModeAdviceRpcRequest(
            project=self.project_id, region=region, calendar_mode_advice_request_resource=request
        )
        client = self.hook.get_advice_client()
        return self._rpc(f"calendar-mode advice in {region}", client.calendar_mode, request=message)

    # -- a block its trigger books (``CalendarReserveAdapter.request_spec``) --------------------------

    def submit_spec(self, spec: Mapping[str, Any], identity: RequestIdentity) -> tuple[RequestStatus, bool]:
        """:meth:`submit` of a block given as JSON, named and described from ``identity`` as the
        worker books it; a new one only if its start still lies ahead within the horizon (one a lost
        reply made is adopted whatever its start)."""
        ask = ask_from_spec(spec["ask"])
        fr = build_future_reservation(
            self.project_id, identity.queued_resource_id(), ask, block_description(identity, ask)
        )

        def check_start() -> None:
            error = block_start_error(
                ask.start, datetime.now(timezone.utc), timedelta(seconds=float(spec["horizon_seconds"]))
            )
            if error:
                # A start the Find task chose is missed, not wrong: retryable, and found again then.
                raise BlockStartError(error, missed=bool(spec.get("start_from_find")))

        return self.submit(fr, identity, identity.request_uuid(), before_create=check_start)

    def adopt_warning(self, status: RequestStatus, spec: Mapping[str, Any]) -> str | None:
        """Why adopting ``status``, a block an earlier try booked, is worth a warning: it differs
        from the block ``spec`` asks (its Find task chose again, or its parameters changed)."""
        return self.differs(status.name, ask_from_spec(spec["ask"]))

    def differs(self, name: str, ask: BlockAsk) -> str | None:
        """The warning of adopting block ``name`` (read now) where it differs from ``ask``; ``None``
        when it does not, or is gone. The trigger's lookup and the worker's say it alike."""
        fr = self.get(name)
        return None if fr is None else adopted_warning(name, block_differences(fr, ask))

    def delete_ended(self, found: Sequence[RequestStatus]) -> None:
        """Delete the blocks of ``found`` (a lookup's) that ended undelivered (declined, failed,
        cancelled); one delivered (in part, or whose block is over) is left to the release task: its
        reservations may still run workloads."""
        for status in found:
            if status.phase.terminal and status.state in DELIVERED:
                log.info(
                    "An earlier request %s ended %s; it was delivered, so the release task deletes it",
                    status.name,
                    status.state,
                )
        clear_ended([s for s in found if s.state not in DELIVERED], self.discard)

    async def aended(self, status: RequestStatus) -> RequestStatus:
        """An approved or delivered block with what its task returns (:data:`RESULT`, read in the
        pool), so the task needs neither the client library nor another call."""
        if status.phase not in (Phase.PROVISIONING, Phase.RUNNING) or RESULT in status.details:
            return status
        try:
            fr = await in_pool(self.get, status.name)
        except Exception as err:  # the task reads it itself then: never lose the event over it
            log.warning("Could not read %s for its task (%s)", status.name, err)
            return status
        if fr is None:
            return status
        return replace(status, details={**status.details, RESULT: block_result(fr, status.name)})

    def result_line(self, status: RequestStatus) -> str | None:
        """What a trigger that ends the task logs of its block."""
        result = status.details.get(RESULT)
        if not isinstance(result, dict):
            return None
        if status.phase is Phase.RUNNING:
            return delivered_line(result)
        return f"{status.name} is approved [{status.state}]: {status.description}"

    # -- async (triggerer), in the shared pool -----------------------------------------------------

    async def alist_live(self, only: Container[str] | None = None) -> dict[str, RequestStatus]:
        """The zone's blocks named in ``only`` (all when ``None``), classified, with one paged list in the
        pool: one list per zone per interval serves every wait there, whenever the blocks start. Ended
        blocks stay listed until deleted, classified as such. Errors propagate: the poller backs off."""
        wanted: set[str] | None = None
        if isinstance(only, Iterable):
            wanted = {parse_future_reservation_name(name).future_reservation for name in only}
        pages = await in_pool(self._pages, self._list_message())
        listed = await classify_listed(
            _each(pages), wanted, lambda fr: future_reservation_status(fr, self.name_of(fr.name))
        )
        return {status.name: status for status in listed.values()}

    async def agive_up(self, name: str) -> RequestStatus | None:
        """The max wait for approval passed: cancel the block if it still awaits approval (read again
        now). One approved (or locked, or delivered) meanwhile is booked for its task and not
        cancelled: its status is returned, and the wait ends on it. ``None`` once given up or gone."""
        try:
            current = await self._acall(f"get {name}", in_pool, self._get_once, name)
            if self._state(current) in AWAITING_APPROVAL:
                await self._acall(f"cancel {name}", in_pool, self._cancel_once, name)
                return None
        except RequestNotFoundError:
            return None
        except (ConflictError, InvalidRequestError):
            try:
                current = await self._acall(f"get {name}", in_pool, self._get_once, name)
            except RequestNotFoundError:
                return None
            if self._state(current) in AWAITING_APPROVAL:
                raise
        return self._classify(current, name)

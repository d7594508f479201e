"""Compute Engine calendar mode as DWS capacity requests: future reservations in CALENDAR mode, the
calendar-mode advice that finds a free block, and the reservations a delivered block creates.

A calendar block is one zonal future reservation, named from the task instance (as a resize
request is) and created with a ``request_id``, so a retry adopts it instead of booking twice. Its
life is :data:`~airflow_provider_dws.scheduling.phases.FUTURE_RESERVATION_STATES`: pending
approval (waiting), approved until delivered (provisioning), delivered (running), and past its
end time succeeded. The backend's location is the zone: the shared poller lists the zone's
future reservations once per interval for every wait there, however far away the blocks start.

The calls are the Compute Engine design's (:mod:`.compute`): sync ``compute_v1`` clients, run in the
process's one bounded pool from the event loop, ``*_unary()`` mutations whose zone operation is
polled on the same clients.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Container, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_provider_dws.backends.base import RequestStatus, classify_listed
from airflow_provider_dws.backends.compute_base import ComputeBackend, _each, _when, in_pool
from airflow_provider_dws.errors import (
    ConflictError,
    InvalidRequestError,
    RequestNotFoundError,
)
from airflow_provider_dws.facts import CALENDAR_TPU_ROWS
from airflow_provider_dws.scheduling.identity import RequestIdentity, is_attempt_of, parse_attempt_name
from airflow_provider_dws.scheduling.phases import FUTURE_RESERVATION_STATES, RequestTimings

if TYPE_CHECKING:
    from google.cloud.compute_v1 import CalendarModeAdviceRequest, FutureReservation

    from airflow_provider_dws.catalog import CalendarShape

log = logging.getLogger(__name__)

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
#: Delivered, wholly or in part: reservations exist; a release deletes them and the request.
DELIVERED = ("FULFILLED", "FAILED_PARTIALLY_FULFILLED")
#: Namespace of the cancel and delete calls' request ids (one per resource and verb).
_CALL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "airflow-provider-dws/calendar")
_FR_RE = re.compile(r"^projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/futureReservations/(?P<name>[^/]+)$")
_RES_RE = re.compile(r"^projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/reservations/(?P<name>[^/]+)$")
_VERSION_OF_FAMILY = {row[0]: version for version, row in CALENDAR_TPU_ROWS.items()}


class FutureReservationName(NamedTuple):
    """The parts of ``projects/P/zones/Z/futureReservations/N``."""

    project: str
    zone: str
    future_reservation: str

    @property
    def path(self) -> str:
        """The full name."""
        return f"projects/{self.project}/zones/{self.zone}/futureReservations/{self.future_reservation}"


def parse_future_reservation_name(name: str) -> FutureReservationName:
    """Split a future reservation's full name (the provider's, or its ``selfLink``) into its parts."""
    match = _FR_RE.fullmatch(name.split("/compute/v1/", 1)[-1])
    if match is None:
        raise ValueError(f"not a Compute Engine future reservation name: {name!r}")
    return FutureReservationName(*match.groups())


def parse_reservation_name(name: str) -> tuple[str, str, str]:
    """(project, zone, reservation) of a reservation's full name or URL (``status.auto_created_reservations``)."""
    match = _RES_RE.fullmatch(name.split("/compute/v1/", 1)[-1])
    if match is None:
        raise ValueError(f"not a Compute Engine reservation name: {name!r}")
    return match["project"], match["zone"], match["name"]


def rfc3339(when: datetime) -> str:
    """``2026-12-01T10:00:00Z``: a time as the API takes it (UTC, whole seconds)."""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def block_window(fr: FutureReservation) -> tuple[datetime | None, datetime | None]:
    """The block's start and end (an end given as a duration is added to the start)."""
    window = fr.time_window
    start = _when(window.start_time)
    end = _when(window.end_time)
    if end is None and start is not None and "duration" in window:
        end = start + timedelta(seconds=window.duration.seconds)
    return start, end


def reserved_count(fr: FutureReservation) -> int:
    """VMs (GPU or H4D blocks) or TPU chips the request asks for."""
    if "aggregate_reservation" in fr:
        return sum(int(r.accelerator.accelerator_count) for r in fr.aggregate_reservation.reserved_resources)
    return int(fr.specific_sku_properties.total_count)


def block_shape(fr: FutureReservation) -> CalendarShape | None:
    """What a future reservation reserves, as the catalog describes it (``None``: not a calendar shape)."""
    from airflow_provider_dws.catalog import calendar_shape

    try:
        if "aggregate_reservation" in fr:
            version = _VERSION_OF_FAMILY.get(fr.aggregate_reservation.vm_family)
            workload = fr.aggregate_reservation.workload_type or "BATCH"
            return calendar_shape(None, None, version, reserved_count(fr), workload)
        machine = fr.specific_sku_properties.instance_properties.machine_type.rsplit("/", 1)[-1]
        return calendar_shape(machine, reserved_count(fr))
    except ValueError:
        return None


def describe_block(fr: FutureReservation) -> str:
    """``8 x a3-highgpu-8g from 2026-12-01 10:00 UTC for 7 days`` (or ``32 TPU v6e chips ...``)."""
    start, end = block_window(fr)
    if "aggregate_reservation" in fr:
        version = _VERSION_OF_FAMILY.get(
            fr.aggregate_reservation.vm_family, fr.aggregate_reservation.vm_family
        )
        what = f"{reserved_count(fr)} TPU {version} chips"
    else:
        machine = fr.specific_sku_properties.instance_properties.machine_type.rsplit("/", 1)[-1]
        what = f"{reserved_count(fr)} x {machine}"
    if start is None:
        return what
    length = f" for {describe_length(end - start)}" if end is not None else ""
    return f"{what} from {start:%Y-%m-%d %H:%M} UTC{length}"


def describe_length(delta: timedelta) -> str:
    """``7 days`` for whole days, else as ``timedelta`` prints (``1 day, 6:00:00``)."""
    if delta.seconds == 0 and delta.microseconds == 0 and delta.days > 0:
        return f"{delta.days} day{'s' if delta.days != 1 else ''}"
    return str(delta)


def procurement_message(fr: FutureReservation) -> str:
    """What the request says of how procurement went (delivered counts), for the user."""
    state = fr.status.procurement_status
    if state == "FAILED_PARTIALLY_FULFILLED":
        return f"{int(fr.status.fulfilled_count)} of {reserved_count(fr)} reserved slots were delivered"
    if state == "FULFILLED":
        reservations = [r.rsplit("/", 1)[-1] for r in fr.status.auto_created_reservations]
        return f"delivered as {', '.join(reservations)}" if reservations else "delivered"
    return ""


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


# -- what a block asks for -------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockAsk:
    """A calendar block: its shape, zone, start and length (and, for TPUs, its workload type)."""

    shape: CalendarShape
    zone: str
    start: datetime
    duration: timedelta
    workload_type: str = "BATCH"

    @property
    def end(self) -> datetime:
        """When the block (and everything running on it) ends."""
        return self.start + self.duration


def build_future_reservation(project: str, name: str, ask: BlockAsk, description: str) -> FutureReservation:
    """The future reservation of ``ask``, in CALENDAR mode and submitted for approval: GPU and H4D VMs by
    ``specific_sku_properties``, TPUs by ``aggregate_reservation``; a dense deployment, consumed only
    by VMs that name it, its reservation (named ``name`` too) deleted at the end."""
    from google.cloud import compute_v1

    fields: dict[str, Any] = {}
    shape = ask.shape
    if shape.tpu_version is not None:
        family, accelerator = CALENDAR_TPU_ROWS[shape.tpu_version][:2]
        fields["aggregate_reservation"] = compute_v1.AllocationAggregateReservation(
            vm_family=family,
            workload_type=ask.workload_type,
            reserved_resources=[
                compute_v1.AllocationAggregateReservationReservedResourceInfo(
                    accelerator=compute_v1.AllocationAggregateReservationReservedResourceInfoAccelerator(
                        accelerator_count=shape.chip_count,
                        accelerator_type=f"projects/{project}/zones/{ask.zone}/acceleratorTypes/{accelerator}",
                    )
                )
            ],
        )
    else:
        fields["specific_sku_properties"] = compute_v1.FutureReservationSpecificSKUProperties(
            instance_properties=compute_v1.AllocationSpecificSKUAllocationReservedInstanceProperties(
                machine_type=shape.machine_type
            ),
            total_count=shape.vm_count,
        )
    return compute_v1.FutureReservation(
        name=name,
        description=description,
        reservation_mode="CALENDAR",
        planning_status="SUBMITTED",
        deployment_type="DENSE",
        specific_reservation_required=True,
        auto_delete_auto_created_reservations=True,
        reservation_name=name,
        time_window=compute_v1.FutureReservationTimeWindow(
            start_time=rfc3339(ask.start), end_time=rfc3339(ask.end)
        ),
        **fields,
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

"""Calendar mode when the task runs: the Reserve task's future reservation in the attempt loop (until
approved, or delivered), and the Wait task's wait for delivery with its asset event. The Find task's
advice and choice are in :mod:`.calendar_find`, the release in :mod:`.calendar_release`."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends.base import RESULT
from airflow_provider_dws.backends.calendar import AWAITING_APPROVAL, UNDELIVERED, FutureReservationBackend
from airflow_provider_dws.backends.calendar_block import (
    DELIVERED,
    BlockAsk,
    ask_to_spec,
    block_description,
    block_result,
    block_shape,
    block_window,
    build_future_reservation,
    delivered_line,
    parse_future_reservation_name,
)
from airflow_provider_dws.console import push_url
from airflow_provider_dws.errors import InvalidRequestError, PermissionDeniedApiError
from airflow_provider_dws.exceptions import BadRequestError, CapacityNotObtainedError, RequestCancelledError
from airflow_provider_dws.facts import CALENDAR_PROVISIONING_LIMIT
from airflow_provider_dws.links import CalendarBlockLink
from airflow_provider_dws.records import BLOCK_PRICING
from airflow_provider_dws.runtime.adapter import Found, RequestAdapter
from airflow_provider_dws.runtime.calendar_release import (
    future_reservation_console_url,
    locked_message,
    reserve_candidates,
    zones_of,
)
from airflow_provider_dws.runtime.task import pulled, resolve_project
from airflow_provider_dws.scheduling.phases import FailureKind, Phase
from airflow_provider_dws.scheduling.reattach import Candidate, choose_existing
from airflow_provider_dws.specs import roles
from airflow_provider_dws.specs.calendar_block import parse_moment, shape_of
from airflow_provider_dws.triggers.submit import is_pending

if TYPE_CHECKING:
    from airflow.sdk import Context
    from google.cloud.compute_v1 import FutureReservation

    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.catalog import CalendarShape
    from airflow_provider_dws.operators.calendar import (
        ReserveCalendarBlockOperator,
        WaitForCalendarBlockOperator,
    )
    from airflow_provider_dws.scheduling.identity import RequestIdentity
    from airflow_provider_dws.scheduling.policies import Placement

_REFUSED = (InvalidRequestError, PermissionDeniedApiError)
#: The XCom key of the future reservation a reserve made or adopted (the wait and release read it).
NAME_KEY = roles.FUTURE_RESERVATION_NAME_KEY


# -- Reserve ---------------------------------------------------------------------------------------


def resolve_reserve(op: ReserveCalendarBlockOperator, context: Context) -> None:
    """Fill the block from the Find task's choice, or the block found again since it started (what the
    operator does not give itself); the operator then knows its zone, start, length and shape. Called
    whenever the task runs or resumes."""
    if op.find_task_id is not None:
        from airflow_provider_dws.runtime.calendar_find import take_find_choice

        take_find_choice(op, context)
    op.home_placement()  # the zone is valid now


class CalendarReserveAdapter(RequestAdapter["ReserveCalendarBlockOperator", FutureReservationBackend]):
    """A future reservation per attempt, named ``<base>-t<try>-a<attempt>``; the wait ends when it is
    approved (``wait_for_delivery``: delivered). The API has no max wait for approval: the trigger
    cancels at ``max_wait`` with no grace, and an attempt that ends without its block leaves nothing."""

    name_key = NAME_KEY
    submits_in_trigger = True

    target = "provisioning"
    wait_grace = timedelta(0)
    op: ReserveCalendarBlockOperator

    def __init__(self, operator: ReserveCalendarBlockOperator) -> None:
        super().__init__(operator)
        if operator.wait_for_delivery:
            self.target = "running"  # type: ignore[misc]  # per operator: approved is not enough
        self._ended: list[RequestStatus] = []

    def backend(self, location: str | None = None) -> FutureReservationBackend:
        """The backend of ``location`` (default: the block's zone)."""
        return self.cached_backend(FutureReservationBackend, location or str(self.op.zone))

    def location_of(self, name: str) -> str:
        """The zone of a future reservation."""
        return parse_future_reservation_name(name).zone

    def ask(self) -> BlockAsk:
        """The block the operator asks for (its parameters resolved)."""
        op = self.op
        assert op.duration is not None
        # Whole seconds: the API's times have no fraction, and the block is compared with them.
        start = parse_moment(op, "start_time", op.start_time).replace(microsecond=0)
        return BlockAsk(shape_of(op), str(op.zone), start, op.duration, op.workload_type)

    def build(self, identity: RequestIdentity) -> FutureReservation:
        """This attempt's future reservation (its name and its reservation's from the identity)."""
        ask = self.ask()
        return build_future_reservation(
            resolve_project(self.op), identity.queued_resource_id(), ask, block_description(identity, ask)
        )

    # -- booked by the trigger (a deferrable task whose block still lies ahead) -----------------------

    def makes_in_trigger(self) -> bool:
        """A deferrable task's trigger books its block, unless the block's start has passed: then the
        worker looks it up and, for a Find task's choice, finds a block again first
        (:func:`~.calendar_find.find_again_if_started`), which asks the advice."""
        return self.submits_in_trigger and self.ask().start > utcnow()

    def request_spec(
        self, identity: RequestIdentity, placement: Placement | None = None, max_wait: timedelta | None = None
    ) -> dict[str, Any]:
        """The block as JSON (the trigger builds the future reservation, named from the identity),
        with what its check before a create needs (the horizon, whether the Find task chose it)."""
        from airflow_provider_dws.runtime.calendar_find import starts_from_find
        from airflow_provider_dws.specs.calendar_block import horizon

        return {
            "ask": ask_to_spec(self.ask()),
            "horizon_seconds": horizon(self.op).total_seconds(),
            "start_from_find": starts_from_find(self.op),
        }

    def lookup(self, context: Context, identity: RequestIdentity, first: Placement) -> list[dict[str, Any]]:
        """The block's zone, then every zone its Find task considered (as :meth:`find` looks)."""
        from airflow_provider_dws.scheduling.policies import Placement

        zones = dict.fromkeys([first.location, *zones_of(self.op, context)])
        return [
            {"backend_spec": self.backend(zone).spec(), "placement": Placement(zone).to_dict()}
            for zone in zones
        ]

    def announce(self) -> dict[str, Any]:
        """The block's name and console link, pushed by the trigger that books it."""
        return {
            "name_key": self.name_key,
            "link_key": CalendarBlockLink.key,
            "link": future_reservation_console_url(resolve_project(self.op), "{location}", "{id}"),
        }

    def find(self, context: Context, identity: RequestIdentity) -> Found | None:
        """The newest live (pending, approved or delivered) block of any try and attempt of this task
        instance, in its zone and every zone its Find task considered (a Find run again may have
        chosen another zone since an earlier try booked): one list per zone, as the release looks.
        Ended ones are deleted later (:meth:`delete_ended`)."""
        from airflow_provider_dws.scheduling.policies import Placement

        statuses: list[RequestStatus] = []
        for zone in dict.fromkeys([str(self.op.zone), *zones_of(self.op, context)]):
            statuses += self.backend(zone).find(identity)
        self._ended = [s for s in statuses if s.phase.terminal]
        decision = choose_existing([Candidate(s.name, s.phase, s.timings.submitted) for s in statuses])
        self.log.info("%s", decision.describe(identity.describe()))
        if decision.name is None:
            from airflow_provider_dws.runtime.calendar_find import find_again_if_started

            # A new block will be booked: one whose start passed while the task waited to run is
            # found again now, before the attempt loop places the booking in its zone.
            find_again_if_started(self.op, context, utcnow())
            return None
        status = next(s for s in statuses if s.name == decision.name)
        self._say_differences(status)
        self.remember(context, status)
        zone = self.location_of(status.name)
        return Found(status, Placement(zone), int(status.details.get("attempt") or 1))

    def _say_differences(self, status: RequestStatus) -> None:
        """Log how an adopted block differs from what this try asks (its Find task chose again, or
        its parameters changed): it is adopted as booked, never booked twice."""
        warning = self.backend(self.location_of(status.name)).differs(status.name, self.ask())
        if warning:
            self.log.warning("%s", warning)

    def delete_ended(self) -> None:
        """Delete the ended requests (declined, failed, cancelled) the last :meth:`find` saw, as the
        trigger's lookup does (``FutureReservationBackend.delete_ended``: a delivered one is the
        release task's)."""
        by_zone: dict[str, list[RequestStatus]] = {}
        for status in self._ended:
            by_zone.setdefault(self.location_of(status.name), []).append(status)
        for zone, found in by_zone.items():
            self.backend(zone).delete_ended(found)
        self._ended = []

    def persist_link(self, context: Context, status: RequestStatus) -> str:
        """The block's console page."""
        where = parse_future_reservation_name(status.name)
        return push_url(
            context,
            CalendarBlockLink.key,
            future_reservation_console_url(where.project, where.zone, where.future_reservation),
        )

    def submit(
        self, context: Context, identity: RequestIdentity, placement: Placement, max_wait: timedelta
    ) -> RequestStatus:
        """Create this attempt's future reservation, its start checked to lie ahead within the horizon
        (a request of that name already there is adopted, unchecked)."""
        from airflow_provider_dws.runtime.calendar_find import check_new_start

        ask = self.ask()
        backend = self.backend(placement.location)
        try:
            # Whether the start still lies ahead matters for a new block only: one a lost reply made
            # is adopted whenever it starts.
            status, created = backend.submit(
                self.build(identity),
                identity,
                identity.request_uuid(),
                before_create=lambda: check_new_start(self.op, ask.start, utcnow()),
            )
        except _REFUSED as err:
            raise BadRequestError(
                f"Compute Engine refused the calendar block {identity.queued_resource_id()} ({ask.shape.describe()} "
                f"in {ask.zone} from {ask.start.isoformat()} for {ask.duration}): {err.message}"
            ) from None
        self.log.info(
            "%s future reservation %s (attempt %d): %s in %s, ending %s; waiting up to %s for its approval%s",
            "Created" if created else "Adopted",
            status.name,
            identity.attempt,
            status.description,
            ask.zone,
            ask.end.isoformat(),
            max_wait,
            " and then for its delivery" if self.target == "running" else "",
        )
        self.remember(context, status)
        return status

    def release_or_keep(self, name: str) -> str | None:
        """Give the block up if it still waits for approval (read again now: the trigger's last status
        may be old): cancel it, then delete it. One approved, locked or delivered since is booked and
        kept (returns why: its release task gives it back); one that ended is deleted. A refused
        cancel raises (the caller says to cancel it by hand)."""
        backend = self.backend(self.location_of(name))
        current = backend.get(name)
        if current is not None and current.status.procurement_status in AWAITING_APPROVAL:
            backend.cancel(name)
            current = backend.get(name)
        if current is None:
            return None
        state = current.status.procurement_status
        if state in UNDELIVERED or state in DELIVERED:
            why = f"the block is {state}: booked, its release task gives it back"
            self.log.warning("Keeping %s: %s", name, why)
            return why
        done = backend.discard(name)  # ended (cancelled, declined, failed): leave nothing of it
        self.log.info("%s (%s): %s", name, state, ", ".join(done) or "already gone")
        return None

    def kept_after_failed_wait(self, status: RequestStatus) -> str | None:
        """Only a block still waiting for approval is given up with the wait: an approved one is
        booked (and may be locked), and is the release task's to give back."""
        if status.phase is Phase.WAITING:
            return None
        return "the block is approved; its release task gives it back"

    def release_failed(self, status: RequestStatus, placement: Placement) -> None:
        """Declined, failed, delivered in part, not approved in time, timed out: leave nothing of it."""
        done = self._discard(status.name)
        if done is not None:
            what = ", ".join(done) or "already gone"
            self.log.info("%s (%s): %s, so nothing is left behind", status.name, status.state, what)

    def _discard(self, name: str) -> list[str] | None:
        """:meth:`FutureReservationBackend.discard`; a block the API will not let go (locked before its
        delivery) is said so in the log, with what to do (``None``)."""
        try:
            return self.backend(self.location_of(name)).discard(name)
        except _REFUSED as err:
            self.log.warning("%s", locked_message(name, err.message))
            return None

    def ended(self, context: Context, status: RequestStatus) -> None:
        """Note the approval (or delivery, or the end) in the task log."""
        if status.phase in (Phase.PROVISIONING, Phase.RUNNING):
            # An approval has no time of its own in the API: timed when this task learns of it.
            timings = status.timings
            at = timings.started or timings.finished or utcnow()
            after = (
                f", {timedelta(seconds=round((at - timings.submitted).total_seconds()))} after it was submitted"
                if timings.submitted is not None
                else ""
            )
            self.log.info(
                "%s is %s [%s]%s: %s",
                status.name,
                "delivered" if status.phase is Phase.RUNNING else "approved",
                status.state,
                after,
                status.description,
            )
            return
        super().ended(context, status)

    def result(self, context: Context, status: RequestStatus) -> dict[str, Any]:
        """The block: the future reservation's full name, zone, start, end and what it reserves; once
        delivered (``wait_for_delivery``) its reservations too, with the asset event, as a wait's."""
        result = status.details.get(RESULT)  # read by the trigger: no client library here
        if not isinstance(result, dict):
            fr = self.backend(self.location_of(status.name)).get(status.name)
            if fr is None:
                raise RequestCancelledError(f"{status.name} disappeared right after it was {status.state}")
            result = block_result(fr, status.name, self.op.workload_type)
        if status.phase is Phase.RUNNING:
            return delivered(self, context, result)
        return result

    def record_facts(self, status: RequestStatus, placement: Placement) -> dict[str, Any]:
        """The block's accelerators (GPUs over every VM, or TPU chips), machine type, console page, end."""
        return block_facts(shape_of(self.op), status.name, status.details.get("end_time") or self.ask().end)

    def error(self, status: RequestStatus, placement: Placement, max_wait: timedelta) -> Exception:
        """The classified exception for a block that was not obtained."""
        return block_error(status, max_wait)


def block_facts(shape: CalendarShape | None, name: str, end: Any = None) -> dict[str, Any]:
    """The request record's facts of a calendar block; ``end`` (a datetime or ISO text), when known,
    is when the block stops being held whatever its tasks do."""
    until = end.isoformat() if isinstance(end, datetime) else end if isinstance(end, str) else None
    # Not named yet while its trigger books it (``submitting/...``): no page to link to.
    where = None if is_pending(name) else parse_future_reservation_name(name)
    url = (
        None
        if where is None
        else future_reservation_console_url(where.project, where.zone, where.future_reservation)
    )
    return {
        "held_until": until,
        "api": FutureReservationBackend.kind,
        "kind": "Compute Engine calendar block",
        "accelerator_type": shape.accelerator_type if shape else None,
        "accelerator_count": shape.accelerator_count if shape else 0,
        "machine_type": shape.machine_type if shape else None,
        "pricing_model": BLOCK_PRICING,
        "console_url": url,
    }


def delivered(
    adapter: CalendarReserveAdapter | CalendarWaitAdapter, context: Context, result: dict[str, Any]
) -> dict[str, Any]:
    """A delivered block's result (:func:`~..backends.calendar_block.block_result`), logged, and
    the event of the task's asset with the same as extra (a wait's, or a reserve's with
    ``wait_for_delivery``)."""
    adapter.log.info("%s", delivered_line(result))
    asset = getattr(adapter.op, "asset", None)
    events = context.get("outlet_events")
    if asset is not None and events is not None:
        ti = context["ti"]
        extra = {k: v for k, v in result.items() if v is not None}
        extra.update({"dag_id": ti.dag_id, "run_id": ti.run_id})
        events[asset].extra.update(extra)
        adapter.log.info("Asset event for %s: %s", asset.uri, ", ".join(result["reservation_names"]))
    return result


def block_error(status: RequestStatus, max_wait: timedelta) -> Exception:
    """The exception for a block that ended without being obtained (or ended before it was used)."""
    message = status.outcome.message
    detail = f"{status.name} [{status.state}]{': ' + message if message else ''}"
    what = status.description or "the calendar block"
    if status.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED:
        if status.state in ("PENDING_APPROVAL", "DRAFTING", "PROCUREMENT_STATUS_UNSPECIFIED"):
            return CapacityNotObtainedError(
                f"{what} was not approved within max wait {max_wait}; the provider cancelled it ({detail})"
            )
        return CapacityNotObtainedError(f"{what} was not obtained ({detail})")
    if status.outcome.failure is FailureKind.BAD_REQUEST:
        return BadRequestError(f"Compute Engine refused {what} ({detail})")
    if status.phase is Phase.SUCCEEDED:
        return RequestCancelledError(
            f"{what} has already ended: its reservations and everything on them were deleted ({detail})"
        )
    return RequestCancelledError(f"{what} was cancelled ({detail})")


# -- Wait ------------------------------------------------------------------------------------------

#: Why a wait task never gives its block up.
OWNED_BY_RESERVE = "the block belongs to its reserve task, whose release gives it back"


class CalendarWaitAdapter(RequestAdapter["WaitForCalendarBlockOperator", FutureReservationBackend]):
    """Follow a reserve's block until it is delivered: the shared poller lists its zone once per
    interval for every wait there. Nothing is submitted: no block is an error."""

    target = "running"
    #: The block is the reserve task's: its trigger never cancels it (kill, timeout, give-up).
    releases = False
    op: WaitForCalendarBlockOperator

    def kept_after_failed_wait(self, status: RequestStatus) -> str | None:
        """The block is its reserve task's: a wait that failed never gives it up."""
        return OWNED_BY_RESERVE

    def release_or_keep(self, name: str) -> str | None:
        """Never: the block is its reserve task's (killed, cleared or timed out, a wait only stops)."""
        self.log.info("Leaving %s alone: %s", name, OWNED_BY_RESERVE)
        return OWNED_BY_RESERVE

    def __init__(self, operator: WaitForCalendarBlockOperator) -> None:
        super().__init__(operator)
        self._blocks: dict[str, FutureReservation] = {}

    def backend(self, location: str | None = None) -> FutureReservationBackend:
        """The backend of ``location`` (default: the block's zone)."""
        return self.cached_backend(FutureReservationBackend, location or self.op.home_placement().location)

    def location_of(self, name: str) -> str:
        """The zone of a future reservation."""
        return parse_future_reservation_name(name).zone

    def block_name(self, context: Context) -> str:
        """The block to wait for: given, in the reserve's XCom, or found by the reserve's identity."""
        op = self.op
        if op.future_reservation:
            return str(op.future_reservation)
        assert op.reserve_task_id is not None
        result = pulled(context, op.reserve_task_id)
        pushed = result.get("future_reservation") if isinstance(result, dict) else None
        pushed = pushed or pulled(context, op.reserve_task_id, NAME_KEY)
        if isinstance(pushed, str) and pushed:
            return pushed
        names = reserve_candidates(op, context, op.reserve_task_id)
        if not names:
            raise RequestCancelledError(f"task {op.reserve_task_id!r} made no calendar block in this DAG run")
        return names[0]

    def find(self, context: Context, identity: RequestIdentity) -> Found | None:
        """The block, as it is now; one that ended without delivery fails the task here."""
        from airflow_provider_dws.scheduling.policies import Placement

        name = self.block_name(context)
        zone = self.location_of(name)
        self.op._zone = zone
        fr = self.backend(zone).get(name)
        if fr is None:
            raise RequestCancelledError(f"{name} no longer exists (deleted outside this task)")
        self._blocks[name] = fr
        from airflow_provider_dws.backends.calendar import future_reservation_status

        status = future_reservation_status(fr, name)
        placement = Placement(zone)
        where = parse_future_reservation_name(name)
        push_url(
            context,
            CalendarBlockLink.key,
            future_reservation_console_url(where.project, zone, where.future_reservation),
        )
        if status.phase.terminal and status.phase is not Phase.RUNNING:
            raise block_error(status, timedelta(0))
        start, _ = block_window(fr)
        self.log.info(
            "Waiting for %s (%s) to be delivered%s; one list of %s per %.0fs serves every wait there",
            name,
            status.description,
            f" at {start.isoformat()}" if start else "",
            zone,
            self.op.poll_interval,
        )
        return Found(status, placement, 1)

    def submit(
        self, context: Context, identity: RequestIdentity, placement: Placement, max_wait: timedelta
    ) -> RequestStatus:
        """Never: the wait makes nothing (:meth:`find` finds the block or fails)."""
        raise RequestCancelledError("no calendar block to wait for")

    def wait_deadline(self, status: RequestStatus, max_wait: timedelta) -> datetime:
        """A block still not approved 24 hours past its start will not come: given up then."""
        start = status.details.get("start_time")
        if start:
            return datetime.fromisoformat(start) + CALENDAR_PROVISIONING_LIMIT
        return super().wait_deadline(status, max_wait)

    def _block(self, name: str) -> FutureReservation | None:
        if name not in self._blocks:
            fr = self.backend(self.location_of(name)).get(name)
            if fr is None:
                return None
            self._blocks[name] = fr
        return self._blocks[name]

    def result(self, context: Context, status: RequestStatus) -> dict[str, Any]:
        """The delivered block's reservation(s), zone, start and end; emits the asset event with the same."""
        self._blocks.pop(status.name, None)  # read it again: delivered now
        fr = self._block(status.name)
        if fr is None:
            raise RequestCancelledError(f"{status.name} disappeared right after it was delivered")
        return delivered(self, context, block_result(fr, status.name))

    def record_facts(self, status: RequestStatus, placement: Placement) -> dict[str, Any]:
        """The block's facts, read from the block itself (the wait does not describe it)."""
        fr = self._block(status.name)
        if fr is None:
            return block_facts(None, status.name)
        return block_facts(block_shape(fr), status.name, block_window(fr)[1])

    def error(self, status: RequestStatus, placement: Placement, max_wait: timedelta) -> Exception:
        """The classified exception for a block that was not delivered (one still awaiting approval
        when the wait gave up: said so, and left to its reserve task)."""
        if status.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED and status.state in AWAITING_APPROVAL:
            message = status.outcome.message
            return CapacityNotObtainedError(
                f"{status.description or 'the calendar block'} was not delivered: {status.name} was still "
                f"{status.state} {CALENDAR_PROVISIONING_LIMIT} after its start, so it will not come; "
                f"{OWNED_BY_RESERVE}{' (' + message + ')' if message else ''}"
            )
        return block_error(status, max_wait)


def utcnow() -> datetime:
    """The clock."""
    return datetime.now(timezone.utc)

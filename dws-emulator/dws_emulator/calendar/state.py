"""Calendar mode's state: future reservations and their procurement, on the shared core (see the
package doc). The reservations they deliver, the advice and the control calls are the mixins of
:mod:`.served` and :mod:`.controls`."""

from __future__ import annotations

import logging
from collections.abc import Container
from typing import Any

from google.cloud.compute_v1.types import compute as gce

from ..core.api import Api, Core
from ..core.clock import Schedule, iso
from ..core.gce import aggregated_json, compile_filter, invalid, link, list_json, page, parse_body, to_json
from ..core.reservations import Reservation
from ..core.rest import RestError, RestRoute, not_found
from ..facts import ZONE_RE
from . import CALENDAR_METHODS, COMPUTE_SERVICE
from .controls import CalendarControls
from .inventory import DAY, CapacityCalendar
from .records import CalendarSettings, FutureRecord
from .routes import calendar_routes
from .served import ServedReservations
from .validation import check_future_reservation

log = logging.getLogger("dws_emulator")

FutureReservationPb = gce.FutureReservation.pb()

#: A delivered block (its reservation exists until the block ends).
DELIVERED = frozenset({"FULFILLED", "FAILED_PARTIALLY_FULFILLED"})
#: Cancel: before the request locks (after that the capacity is being procured for it).
CANCELLABLE = frozenset({"DRAFTING", "PENDING_APPROVAL", "APPROVED"})
#: Delete: a draft, a request that ended without a block (and any whose block has ended).
DELETABLE = frozenset({"DRAFTING", "CANCELLED", "DECLINED", "FAILED"})
#: The documented cancel rule (see :func:`lock_time`).
LOCK_LEAD = 30 * DAY
CANCEL_GRACE = DAY
CANCEL_MIN_LEAD = 4 * DAY


def lock_time(approved: float, start: float) -> float:
    """When an approved request locks (PROCURING; no cancel after it). The documents let a calendar
    request be cancelled while its start is more than 30 days away, or within 24 hours of its
    approval if its start is at least 4 days away."""
    return max(approved, start - LOCK_LEAD, min(approved + CANCEL_GRACE, start - CANCEL_MIN_LEAD))


class CalendarState(ServedReservations, CalendarControls, Api):
    """Future reservations, calendar-mode advice and the reservations they deliver (``compute.v1``)."""

    name = "calendar"
    services = {COMPUTE_SERVICE: CALENDAR_METHODS}
    rest_service = COMPUTE_SERVICE

    def __init__(self, core: Core) -> None:
        super().__init__(core)
        self.settings = CalendarSettings.from_env()
        self.calendar = CapacityCalendar()
        self.live: dict[str, FutureRecord] = {}  # by path: the future reservations not deleted
        self.all_records: list[FutureRecord] = []
        self.served: dict[str, FutureRecord] = {}  # reservation path -> its block (from approval)
        self._due = Schedule()
        self._prefix_seq = 0

    # -- registration ----------------------------------------------------------------------
    def rest_routes(self) -> list[RestRoute]:
        return calendar_routes(self)

    def requests(self) -> list[tuple[float, dict[str, Any]]]:
        return [(rec.created_at, self.record(rec)) for rec in self.all_records]

    # -- life cycle ------------------------------------------------------------------------
    def _set(self, rec: FutureRecord, status: str, now: float) -> None:
        old = rec.status
        rec.pb.status.procurement_status = status
        rec.history.append((status, now))
        log.info("FutureReservation %s: %s -> %s", rec.path, old or "new", status)

    def _schedule(self, rec: FutureRecord) -> None:
        status, plan = rec.status, rec.plan
        when: float | None = None
        if status == "PENDING_APPROVAL":
            when = plan.start
            if self.settings.approval_seconds is not None:
                when = min(when, rec.created_at + self.settings.approval_seconds)
        elif status == "APPROVED":
            when = rec.lock_at
        elif status == "PROCURING":
            when = plan.start
        elif status == "PROVISIONING":
            when = rec.deliver_at
        elif status in DELIVERED and rec.ended_at is None:
            when = plan.end
        if when is not None:
            self._due.at(rec.path, when)

    def reschedule(self) -> None:
        """Look at every live request on the next tick (a setting changed)."""
        for path in self.live:
            self._due.next_tick(path)

    def before_advance(self, now: float) -> None:
        for path in self._due.due(now):
            rec = self.live.get(path)
            if rec is not None:
                self._advance(rec, now)
                self._schedule(rec)

    def _advance(self, rec: FutureRecord, now: float) -> None:
        """Every transition due at ``now``, in order (a late tick may pass several)."""
        plan = rec.plan
        while True:
            status = rec.status
            if status == "PENDING_APPROVAL":
                due = (
                    None
                    if self.settings.approval_seconds is None
                    else rec.created_at + self.settings.approval_seconds
                )
                if due is not None and due < plan.start and now >= due:
                    # Decided as of when it was due, however late this tick: a busy machine must not
                    # turn an approval due before the start into a decline at the start.
                    self._decide(rec, due)
                elif now >= plan.start:
                    self.decline(rec, now, "it was not approved before its start time")
                else:
                    return
            elif status == "APPROVED" and rec.lock_at is not None and now >= rec.lock_at:
                self._set(rec, "PROCURING", now)
            elif status == "PROCURING" and now >= plan.start:
                rec.deliver_at = plan.start + self.settings.provision_seconds
                rec.pb.status.fulfilled_count = 0
                self._set(rec, "PROVISIONING", now)
            elif status == "PROVISIONING" and rec.deliver_at is not None and now >= rec.deliver_at:
                self._deliver(rec, now)
            elif status in DELIVERED and rec.ended_at is None and now >= plan.end:
                self.end_block(rec, now, f"its block ended at {iso(plan.end)}")
            else:
                return

    def _decide(self, rec: FutureRecord, now: float) -> None:
        """The automatic decision: approved if the calendar has room for the block, else declined."""
        ask, plan = rec.plan.ask, rec.plan
        key = ask.key(rec.zone)
        if not self.calendar.offers(key):
            self.decline(rec, now, f"calendar mode offers no {ask.accelerator} in {rec.zone}")
        elif not self.calendar.fits(key, plan.start, plan.end, ask.units):
            self.decline(
                rec,
                now,
                f"there is not enough capacity for {ask.describe()} in {rec.zone} from {iso(plan.start)} "
                f"to {iso(plan.end)}",
            )
        else:
            self.approve(rec, now)

    def approve(self, rec: FutureRecord, now: float) -> None:
        """PENDING_APPROVAL -> APPROVED: the block is booked and its reservation declared (empty)."""
        plan, ask = rec.plan, rec.plan.ask
        rec.booking = self.calendar.book(ask.key(rec.zone), plan.start, plan.end, ask.units, rec.path)
        rec.approved_at = now
        rec.lock_at = lock_time(now, plan.start)
        rec.pb.status.lock_time = iso(rec.lock_at)
        name = plan.reservation_name
        if name is None:
            self._prefix_seq += 1
            day = iso(plan.start) or ""
            name = f"{plan.name_prefix}-{day[:10].replace('-', '')}-{self._prefix_seq:04d}"
        res = Reservation(
            path=f"projects/{rec.project}/zones/{rec.zone}/reservations/{name}",
            project=rec.project,
            zone=rec.zone,
            name=name,
            accelerator=ask.accelerator,
            machine_type=ask.machine_type,
            gpus_per_vm=ask.gpus_per_vm,
            owner=rec.path,
        )
        self.core.reservations.add(res)
        self.core.capacity.set_total(res.pool, 0)  # consumers may queue on it before delivery
        rec.reservation = res
        rec.reservation_pb = self.reservation_pb(rec, res, ask.count, now, "INACTIVE")
        self.served[res.path] = rec
        self._set(rec, "APPROVED", now)

    def decline(self, rec: FutureRecord, now: float, reason: str) -> None:
        """PENDING_APPROVAL -> DECLINED (``reason`` is kept in the control record and the log)."""
        rec.reason = reason
        rec.ended_at = now
        self._set(rec, "DECLINED", now)
        log.info("FutureReservation %s declined: %s", rec.path, reason)

    def _deliver(self, rec: FutureRecord, now: float) -> None:
        """PROVISIONING -> FULFILLED (or partly, or FAILED): the reservation exists with its capacity."""
        plan, ask, res = rec.plan, rec.plan.ask, rec.reservation
        assert res is not None
        count = ask.count if rec.partial is None else rec.partial
        rec.pb.status.fulfilled_count = count
        if count == 0:
            self._stop(rec, now, "FAILED", "no capacity could be provisioned for it")
            return
        units = count * ask.gpus_per_vm if ask.machine_type else count
        self.calendar.resize(rec.booking, units) if rec.booking is not None else None
        self.core.capacity.set_total(res.pool, units)
        res.delivered = True
        rec.delivered_at = now
        rec.reservation_pb = self.reservation_pb(rec, res, count, now)
        self.served[res.path] = rec
        rec.pb.status.auto_created_reservations.append(link(res.path))
        self._set(rec, "FULFILLED" if count == ask.count else "FAILED_PARTIALLY_FULFILLED", now)
        log.info(
            "FutureReservation %s: reservation %s delivered (%d %s, until %s)",
            rec.path,
            res.path,
            units,
            ask.unit,
            iso(plan.end),
        )

    def _stop(self, rec: FutureRecord, now: float, status: str, why: str) -> None:
        """Ends a request before delivery (CANCELLED, FAILED): booking freed, waiting consumers failed."""
        self.calendar.release(rec.booking)
        rec.booking = None
        rec.reason = rec.reason or why
        rec.ended_at = now
        self._set(rec, status, now)
        if rec.reservation is not None:
            self.core.end_reservation(
                rec.reservation.path,
                f"The reservation {rec.reservation.path} will not be delivered: its future reservation "
                f"{rec.path} is {status} ({why}).",
                now,
            )

    def end_block(self, rec: FutureRecord, now: float, why: str) -> None:
        """A delivered block is over: its reservation is deleted and every consumer of it ended."""
        res = rec.reservation
        assert res is not None
        rec.ended_at = now
        rec.reason = rec.reason or why
        self.calendar.release(rec.booking)
        rec.booking = None
        rec.reservation_pb = None
        self.served.pop(res.path, None)
        rec.history.append(("RESERVATION_DELETED", now))
        self.core.end_reservation(
            res.path,
            f"The reservation {res.path} ended at {iso(now)} ({why}); it was deleted, and every VM, "
            "job and TPU slice consuming it was stopped.",
            now,
        )

    # -- future reservation calls ----------------------------------------------------------
    def _lookup(self, project: str, zone: str, name: str) -> FutureRecord:
        path = f"projects/{project}/zones/{zone}/futureReservations/{name}"
        rec = self.live.get(path)
        if rec is None:
            raise not_found(path)
        return rec

    def insert(self, project: str, zone: str, body: Any, request_id: str) -> dict[str, Any]:
        ops = self.core.gce_operations
        with self.core.lock:
            self.core.tick()
            replayed = ops.replayed(project, request_id)
            if replayed is not None:
                return replayed
            if not ZONE_RE.fullmatch(zone):
                raise invalid("zone", zone, "Must be a zone, e.g. us-central1-a.")
            fr = parse_body(body, FutureReservationPb, "resource")
            now = self.core.clock()
            plan = check_future_reservation(fr, now, self.settings.min_lead_seconds)
            path = f"projects/{project}/zones/{zone}/futureReservations/{fr.name}"
            if path in self.live:
                raise RestError(409, "alreadyExists", f"The resource '{path}' already exists")
            if plan.reservation_name is not None:
                self._check_reservation_name(project, zone, plan.reservation_name)
            for output in (
                "id",
                "kind",
                "self_link",
                "self_link_with_id",
                "creation_timestamp",
                "status",
                "zone",
            ):
                fr.ClearField(output)
            fr.kind = "compute#futureReservation"
            fr.id = ops.new_id()
            fr.creation_timestamp = iso(now)
            fr.self_link = link(path)
            fr.self_link_with_id = link(f"projects/{project}/zones/{zone}/futureReservations/{fr.id}")
            fr.zone = link(f"projects/{project}/zones/{zone}")
            fr.planning_status = "SUBMITTED" if plan.submitted else "DRAFT"
            rec = FutureRecord(path, project, zone, fr, plan, now)
            self.live[path] = rec
            self.all_records.append(rec)
            log.info(
                "FutureReservation %s created: %s from %s to %s",
                path,
                plan.ask.describe(),
                iso(plan.start),
                iso(plan.end),
            )
            self._set(rec, "PENDING_APPROVAL" if plan.submitted else "DRAFTING", now)
            self._schedule(rec)
            op = ops.start(f"projects/{project}/zones/{zone}", "insert", path, fr.id, now)
            return ops.reply(project, request_id, op)

    def _check_reservation_name(self, project: str, zone: str, name: str) -> None:
        """A reservation name is one reservation at a time in a zone (whatever the project)."""
        for other in self.live.values():
            if other.zone == zone and other.plan.reservation_name == name and other.ended_at is None:
                raise RestError(
                    409,
                    "alreadyExists",
                    f"The reservation name '{name}' is already used by future reservation '{other.path}'.",
                )
        existing = self.core.reservations.get(f"projects/{project}/zones/{zone}/reservations/{name}")
        if existing is not None and not existing.ended:
            raise RestError(409, "alreadyExists", f"The resource '{existing.path}' already exists")

    def get(self, project: str, zone: str, name: str) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            return to_json(self._lookup(project, zone, name).pb)

    @staticmethod
    def _filter_fields(rec: FutureRecord) -> dict[str, str]:
        return {
            "name": rec.name,
            "status.procurementStatus": rec.status,
            "planningStatus": str(rec.pb.planning_status),
            "reservationMode": str(rec.pb.reservation_mode),
        }

    def _listed(self, query: dict[str, str], scope: str) -> list[FutureRecord]:
        matches = compile_filter(
            query.get("filter", ""), ("name", "status.procurementStatus", "planningStatus", "reservationMode")
        )
        recs = [r for p, r in self.live.items() if p.startswith(scope) and matches(self._filter_fields(r))]
        return sorted(recs, key=lambda r: (r.zone, r.name))

    def list(self, project: str, zone: str, query: dict[str, str]) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            scope = f"projects/{project}/zones/{zone}/futureReservations"
            chunk, token = page(self._listed(query, scope + "/"), query)
            return list_json(
                "compute#futureReservationsListResponse", scope, [to_json(r.pb) for r in chunk], token
            )

    def aggregated_list(self, project: str, query: dict[str, str]) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            chunk, token = page(self._listed(query, f"projects/{project}/zones/"), query)
            items = [(f"zones/{r.zone}", to_json(r.pb)) for r in chunk]
            return aggregated_json(
                "compute#futureReservationsAggregatedListResponse",
                project,
                "futureReservations",
                items,
                token,
            )

    def cancel(self, project: str, zone: str, name: str, request_id: str) -> dict[str, Any]:
        return self._change(project, zone, name, request_id, "cancel", CANCELLABLE)

    def delete(self, project: str, zone: str, name: str, request_id: str) -> dict[str, Any]:
        return self._change(project, zone, name, request_id, "delete", DELETABLE)

    def _change(
        self, project: str, zone: str, name: str, request_id: str, verb: str, allowed: Container[str]
    ) -> dict[str, Any]:
        """Cancel or delete: ``requestId`` replayed, refused (412) in a status ``allowed`` lacks.

        Delete also takes a request whose block ended, whatever its status. A delivered block is
        not deleted before its end (the documents: delete after a cancel or after the end time):
        calendar-mode capacity is neither cancelled nor given back once it is locked.
        """
        ops = self.core.gce_operations
        with self.core.lock:
            self.core.tick()
            replayed = ops.replayed(project, request_id)
            if replayed is not None:
                return replayed
            rec = self._lookup(project, zone, name)
            now = self.core.clock()
            over = now >= rec.plan.end or rec.ended_at is not None  # ended (by its end, or control)
            if rec.status not in allowed and not (verb == "delete" and over):
                if verb == "cancel":
                    rule = (
                        "only a request that is DRAFTING, PENDING_APPROVAL or APPROVED (before its lock time "
                        f"{rec.pb.status.lock_time or 'at approval'}) can be cancelled."
                    )
                elif rec.status in DELIVERED:
                    rule = (
                        f"a delivered block can be deleted only after its end time {iso(rec.plan.end)}, when "
                        "its reservations and everything on them are deleted."
                    )
                else:
                    rule = (
                        "only a draft, a cancelled, declined or failed request, or one whose block has ended "
                        "can be deleted (cancel it first)."
                    )
                raise RestError(
                    412, "conditionNotMet", f"The future reservation '{rec.path}' is {rec.status}; {rule}"
                )
            if verb == "cancel":
                self._stop(rec, now, "CANCELLED", "it was cancelled")
            else:
                if rec.status in DELIVERED and rec.ended_at is None:  # its end came since the last tick
                    self.end_block(rec, now, f"its block ended at {iso(rec.plan.end)}")
                rec.deleted = True
                rec.history.append(("DELETED", now))
                del self.live[rec.path]
                log.info("FutureReservation %s: deleted", rec.path)
            op = ops.start(f"projects/{project}/zones/{zone}", verb, rec.path, rec.pb.id, now)
            return ops.reply(project, request_id, op)

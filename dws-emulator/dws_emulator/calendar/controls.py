"""Calendar mode's control calls and records (mixed into :class:`~.state.CalendarState`).

Control methods (JSON in, JSON out; a future reservation is named by its path
``projects/P/zones/Z/futureReservations/NAME``):

* ``ApproveFutureReservation {"name"}``: PENDING_APPROVAL -> APPROVED now (booked even if the
  calendar is full: the operator said so);
* ``DeclineFutureReservation {"name", "reason"}``: PENDING_APPROVAL -> DECLINED;
* ``PartlyFulfilFutureReservation {"name", "count"}``: before delivery, deliver only ``count`` VMs
  (GPUs) or chips (TPUs): FAILED_PARTIALLY_FULFILLED, or FAILED for 0;
* ``EndFutureReservation {"name"}``: a delivered block ends now, as if its end time had come;
* ``GetCalendar {}`` / ``SetCalendar {"approval_seconds": N or "manual", "min_lead_seconds",
  "provision_seconds", "pools": {"ZONE/ACC": N}, "days": {"YYYY-MM-DD": {"ZONE/ACC": N}},
  "replace": false}``: the settings and the calendar of free capacity.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from ..core.capacity import PoolKey
from ..core.clock import iso
from ..core.errors import EmulatorError
from .inventory import parse_day
from .records import FutureRecord, parse_seconds

BAD_ENDS = frozenset({"DECLINED", "FAILED", "FAILED_PARTIALLY_FULFILLED", "CANCELLED"})
BEFORE_DELIVERY = frozenset({"PENDING_APPROVAL", "APPROVED", "PROCURING", "PROVISIONING"})


def _bad(message: str) -> EmulatorError:
    return EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, message)


def _refused(rec: FutureRecord, what: str) -> EmulatorError:
    return EmulatorError(
        grpc.StatusCode.FAILED_PRECONDITION, f"FutureReservation {rec.path} is {rec.status}; {what}"
    )


class CalendarControls:
    """The control methods and control-API records of calendar mode."""

    core: Any
    calendar: Any
    settings: Any
    live: dict[str, FutureRecord]

    def approve(self, rec: FutureRecord, now: float) -> None: ...
    def decline(self, rec: FutureRecord, now: float, reason: str) -> None: ...
    def end_block(self, rec: FutureRecord, now: float, why: str) -> None: ...
    def reschedule(self) -> None: ...
    def _advance(self, rec: FutureRecord, now: float) -> None: ...
    def _schedule(self, rec: FutureRecord) -> None: ...

    def control_methods(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        return {
            "ApproveFutureReservation": self._control_approve,
            "DeclineFutureReservation": self._control_decline,
            "PartlyFulfilFutureReservation": self._control_partly_fulfil,
            "EndFutureReservation": self._control_end,
            "GetCalendar": lambda body: self.calendar_report(),
            "SetCalendar": self._control_set,
        }

    def _named(self, body: dict[str, Any]) -> FutureRecord:
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise _bad('expected {"name": "projects/P/zones/Z/futureReservations/NAME"}')
        rec = self.live.get(name)
        if rec is None:
            raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"FutureReservation {name} does not exist.")
        return rec

    def _act(self, body: dict[str, Any], act: Callable[[FutureRecord, float], None]) -> Any:
        with self.core.lock:
            self.core.tick()
            rec = self._named(body)
            now = self.core.clock()
            act(rec, now)
            self._advance(rec, now)
            self._schedule(rec)
            return {"future_reservation": self.record(rec)}

    def _control_approve(self, body: dict[str, Any]) -> Any:
        def act(rec: FutureRecord, now: float) -> None:
            if rec.status != "PENDING_APPROVAL":
                raise _refused(rec, "only a request PENDING_APPROVAL can be approved.")
            self.approve(rec, now)

        return self._act(body, act)

    def _control_decline(self, body: dict[str, Any]) -> Any:
        reason = body.get("reason") or "declined by the emulator's control API"
        if not isinstance(reason, str):
            raise _bad(f"reason must be a string, got {reason!r}")

        def act(rec: FutureRecord, now: float) -> None:
            if rec.status != "PENDING_APPROVAL":
                raise _refused(rec, "only a request PENDING_APPROVAL can be declined.")
            self.decline(rec, now, reason)

        return self._act(body, act)

    def _control_partly_fulfil(self, body: dict[str, Any]) -> Any:
        count = body.get("count")

        def act(rec: FutureRecord, now: float) -> None:
            ask = rec.plan.ask
            if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count < ask.count:
                what = "VMs" if ask.machine_type else "chips"
                raise _bad(f"count must be an integer from 0 to {ask.count - 1} ({what}), got {count!r}")
            if rec.status not in BEFORE_DELIVERY:
                raise _refused(rec, "only a request not yet delivered can be partly fulfilled.")
            rec.partial = count

        return self._act(body, act)

    def _control_end(self, body: dict[str, Any]) -> Any:
        def act(rec: FutureRecord, now: float) -> None:
            if rec.delivered_at is None or rec.ended_at is not None:
                raise _refused(rec, "only a delivered block that has not ended can be ended.")
            self.end_block(rec, now, f"its block ended at {iso(now)}")

        return self._act(body, act)

    def calendar_report(self) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            return {"settings": self.settings.to_json(), **self.calendar.snapshot()}

    def _control_set(self, body: dict[str, Any]) -> Any:
        try:
            pools = {PoolKey.parse(k): _count(v, k) for k, v in (body.get("pools") or {}).items()}
            days = {
                (parse_day(day), PoolKey.parse(k)): _count(v, f"{day} {k}")
                for day, entries in (body.get("days") or {}).items()
                for k, v in entries.items()
            }
            changes: dict[str, float | None] = {}
            if "approval_seconds" in body:
                changes["approval_seconds"] = parse_seconds(
                    body["approval_seconds"], "approval_seconds", True
                )
            for setting in ("min_lead_seconds", "provision_seconds"):
                if setting in body:
                    changes[setting] = parse_seconds(body[setting], setting)
        except (ValueError, AttributeError, TypeError) as exc:
            raise _bad(str(exc)) from None
        with self.core.lock:
            self.core.tick()
            if body.get("replace"):
                self.calendar.clear()
            for pool, total in pools.items():
                self.calendar.set_total(pool, total)
            for (day, pool), total in days.items():
                self.calendar.set_day(pool, day, total)
            for name, value in changes.items():
                setattr(self.settings, name, value)
            self.reschedule()
        return self.calendar_report()

    # -- records ---------------------------------------------------------------------------
    def record(self, rec: FutureRecord) -> dict[str, Any]:
        """The control API's record of a future reservation."""
        plan, ask, res = rec.plan, rec.plan.ask, rec.reservation
        delivered = rec.delivered_at is not None
        return {
            "kind": "FutureReservation",
            "name": rec.path,
            "display_name": rec.name,
            "project": rec.project,
            "location": rec.zone,
            "labels": {},
            "strategy": "CALENDAR",
            "machine_type": ask.machine_type,
            "vm_family": ask.vm_family,
            "accelerator_type": ask.accelerator,
            "accelerator_count": ask.units,
            "unit": ask.unit,
            "count": ask.count,
            "fulfilled_count": int(rec.pb.status.fulfilled_count) if delivered else None,
            "pool": str(res.pool) if res is not None else None,
            "state": rec.status,
            "planning_status": str(rec.pb.planning_status),
            "deleted": rec.deleted,
            "create_time": iso(rec.created_at),
            "approve_time": iso(rec.approved_at),
            "lock_time": iso(rec.lock_at),
            "block_start": iso(plan.start),
            "block_end": iso(plan.end),
            "start_time": iso(rec.delivered_at),
            "end_time": iso(rec.ended_at),
            "reservation": res.path if res is not None else None,
            "reservations": [res.path] if res is not None and delivered else [],
            "reservation_live": rec.reservation_pb is not None,
            # What its consumers hold of it now (VMs or chips' units: GPUs, or TPU chips).
            "reservation_in_use": self.core.capacity.pool_usage(res.pool)[1] if res is not None else 0,
            "consumers": [
                {"name": holder.split("#", 1)[0], "kind": kind}
                for holder, kind in (res.consumers.items() if res is not None else ())
            ],
            "history": [{"state": s, "time": iso(t)} for s, t in rec.history],
            "error": {"code": rec.status, "message": rec.reason} if rec.status in BAD_ENDS else None,
            "ended_reason": rec.reason or None,
        }


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what}: count must be an integer >= 0, got {value!r}")
    return value

"""What calendar mode serves besides future reservations: the reservations its blocks create (get,
list, aggregated list, delete) and the calendar-mode advice. A block's reservation exists from its
approval, ``INACTIVE`` and empty (as ``FutureReservation.reservation_name`` documents), ``READY``
with the block's capacity from its delivery, and is deleted at the block's end; one whose block
never came (cancelled, failed) stays ``INACTIVE`` until it is deleted. Mixed into :class:`~.state.CalendarState`;
every method runs under the core's lock."""

from __future__ import annotations

import math
import uuid
from typing import Any

from google.cloud.compute_v1.types import compute as gce

from ..core.clock import iso
from ..core.gce import aggregated_json, compile_filter, copy, link, list_json, page, parse_body, to_json
from ..core.reservations import Reservation
from ..core.rest import RestError, not_found
from .advice import advise
from .records import FutureRecord
from .validation import check_advice

ReservationPb = gce.Reservation.pb()
AdviceRequestPb = gce.CalendarModeAdviceRequest.pb()


class ServedReservations:
    """The Reservations API over the delivered blocks, and the advice."""

    core: Any
    calendar: Any
    settings: Any
    served: dict[str, FutureRecord]

    def end_block(self, rec: FutureRecord, now: float, why: str) -> None: ...

    # -- the blocks' reservations ----------------------------------------------------------
    def reservation_pb(
        self, rec: FutureRecord, res: Reservation, count: int, now: float, status: str = "READY"
    ) -> Any:
        """The Reservation message of a block (``count`` VMs or chips): ``INACTIVE`` from its approval,
        ``READY`` once delivered (the same resource: its id and creation time are kept)."""
        fr = rec.pb
        before = rec.reservation_pb
        out = ReservationPb(
            kind="compute#reservation",
            id=before.id if before is not None else self.core.gce_operations.new_id(),
            name=res.name,
            creation_timestamp=before.creation_timestamp if before is not None else iso(now),
            self_link=link(res.path),
            zone=link(f"projects/{res.project}/zones/{res.zone}"),
            status=status,
            specific_reservation_required=fr.specific_reservation_required
            if fr.HasField("specific_reservation_required")
            else True,
            deployment_type=fr.deployment_type or "DENSE",
            delete_at_time=iso(rec.plan.end),
            description=f"Delivered by future reservation {fr.name} (calendar mode).",
        )
        if res.machine_type:
            out.specific_reservation.count = count
            out.specific_reservation.assured_count = count if status == "READY" else 0
            out.specific_reservation.in_use_count = 0
            out.specific_reservation.instance_properties.CopyFrom(
                fr.specific_sku_properties.instance_properties
            )
        else:
            agg = out.aggregate_reservation
            agg.CopyFrom(fr.aggregate_reservation)
            del agg.in_use_resources[:]
            agg.reserved_resources[0].accelerator.accelerator_count = count
        return out

    def _reservation_json(self, rec: FutureRecord) -> dict[str, Any]:
        """The stored message with what is in use now (VMs for GPUs, chips for TPUs)."""
        res = rec.reservation
        assert res is not None and rec.reservation_pb is not None
        out = copy(rec.reservation_pb)
        _, in_use = self.core.capacity.pool_usage(res.pool)
        if res.machine_type:
            out.specific_reservation.in_use_count = math.ceil(in_use / res.gpus_per_vm)
        else:
            reserved = out.aggregate_reservation.reserved_resources[0].accelerator
            used = out.aggregate_reservation.in_use_resources.add().accelerator
            used.accelerator_type = reserved.accelerator_type
            used.accelerator_count = in_use
        return to_json(out)

    def _reservation(self, project: str, zone: str, name: str) -> FutureRecord:
        path = f"projects/{project}/zones/{zone}/reservations/{name}"
        rec = self.served.get(path)
        if rec is None:
            raise not_found(path)
        return rec

    def get_reservation(self, project: str, zone: str, name: str) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            return self._reservation_json(self._reservation(project, zone, name))

    def _listed_reservations(self, query: dict[str, str], prefix: str) -> list[tuple[str, FutureRecord]]:
        matches = compile_filter(query.get("filter", ""), ("name", "status"))
        found = [
            (path, rec)
            for path, rec in self.served.items()
            if path.startswith(prefix)
            and matches({"name": path.rsplit("/", 1)[1], "status": str(rec.reservation_pb.status)})
        ]
        return sorted(found, key=lambda item: (item[1].zone, item[0]))

    def list_reservations(self, project: str, zone: str, query: dict[str, str]) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            scope = f"projects/{project}/zones/{zone}/reservations"
            chunk, token = page(self._listed_reservations(query, scope + "/"), query)
            return list_json(
                "compute#reservationList", scope, [self._reservation_json(r) for _, r in chunk], token
            )

    def aggregated_reservations(self, project: str, query: dict[str, str]) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            chunk, token = page(self._listed_reservations(query, f"projects/{project}/zones/"), query)
            items = [(f"zones/{r.zone}", self._reservation_json(r)) for _, r in chunk]
            return aggregated_json("compute#reservationAggregatedList", project, "reservations", items, token)

    def delete_reservation(self, project: str, zone: str, name: str, request_id: str) -> dict[str, Any]:
        """A delivered reservation is not deleted before its block's end (412: the documents let a
        calendar-mode reservation change only after its end time; it is deleted then, consumers
        included). An ``INACTIVE`` one is deleted once its block will not come (cancelled, declined,
        failed); while the block is still to be delivered it is refused (412: cancel that first)."""
        ops = self.core.gce_operations
        with self.core.lock:
            self.core.tick()
            replayed = ops.replayed(project, request_id)
            if replayed is not None:
                return replayed
            rec = self._reservation(project, zone, name)
            res = rec.reservation
            assert res is not None and rec.reservation_pb is not None
            target_id = rec.reservation_pb.id
            now = self.core.clock()
            if rec.delivered_at is not None and rec.ended_at is None:
                raise RestError(
                    412,
                    "conditionNotMet",
                    f"The reservation '{res.path}' is the calendar block of future reservation "
                    f"'{rec.path}' until {iso(rec.plan.end)}; it is deleted then, with everything on it, "
                    "not before.",
                )
            if rec.ended_at is None:
                raise RestError(
                    412,
                    "conditionNotMet",
                    f"The reservation '{res.path}' is INACTIVE: future reservation '{rec.path}' is "
                    f"{rec.status} and delivers it at {iso(rec.plan.start)}; cancel that first.",
                )
            else:
                self.served.pop(res.path, None)
                rec.reservation_pb = None
            op = ops.start(f"projects/{project}/zones/{zone}", "delete", res.path, target_id, now)
            return ops.reply(project, request_id, op)

    # -- advice ----------------------------------------------------------------------------
    def calendar_mode_advice(self, project: str, region: str, body: Any) -> dict[str, Any]:
        with self.core.lock:
            self.core.tick()
            request = parse_body(body, AdviceRequestPb, "calendarModeAdviceRequestResource")
            spec = check_advice(request, region)
            rng = self.core.id_rng
            return advise(
                self.calendar,
                spec,
                region,
                self.core.clock(),
                self.settings.min_lead_seconds,
                lambda: str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            )

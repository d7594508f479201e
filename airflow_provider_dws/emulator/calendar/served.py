"""What calendar mode serves besides future reservations: the reservations it delivered (get, list,
aggregated list, delete) and the calendar-mode advice. Mixed into :class:`~.state.CalendarState`;
every method runs under the core's lock."""

from __future__ import annotations

import math
import uuid
from typing import Any

from google.cloud.compute_v1.types import compute as gce

from ..core.clock import iso
from ..core.gce import aggregated_json, compile_filter, copy, link, list_json, page, parse_body, to_json
from ..core.reservations import Reservation
from ..core.rest import not_found
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
    delivered: dict[str, FutureRecord]

    def end_block(self, rec: FutureRecord, now: float, why: str) -> None: ...

    # -- the delivered reservations --------------------------------------------------------
    def reservation_pb(self, rec: FutureRecord, res: Reservation, count: int, now: float) -> Any:
        """The Reservation message of a delivered block (``count`` VMs or chips)."""
        fr = rec.pb
        out = ReservationPb(
            kind="compute#reservation",
            id=self.core.gce_operations.new_id(),
            name=res.name,
            creation_timestamp=iso(now),
            self_link=link(res.path),
            zone=link(f"projects/{res.project}/zones/{res.zone}"),
            status="READY",
            specific_reservation_required=fr.specific_reservation_required
            if fr.HasField("specific_reservation_required")
            else True,
            deployment_type=fr.deployment_type or "DENSE",
            delete_at_time=iso(rec.plan.end),
            description=f"Delivered by future reservation {fr.name} (calendar mode).",
        )
        if res.machine_type:
            out.specific_reservation.count = count
            out.specific_reservation.assured_count = count
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
        rec = self.delivered.get(path)
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
            for path, rec in self.delivered.items()
            if path.startswith(prefix) and matches({"name": path.rsplit("/", 1)[1], "status": "READY"})
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
        """Deleting a delivered reservation ends its block at once, consumers included (the emulator's
        choice: whether the real API lets a calendar-mode reservation go early is not documented)."""
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
            self.end_block(rec, now, "the reservation was deleted")
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

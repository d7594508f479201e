"""A calendar block as Compute Engine writes it and as the provider reads it: the names of future
reservations and reservations, a block's window, shape and description, the future reservation a
block asks for (:class:`BlockAsk`, and its JSON form a trigger is handed), and what a task returns of
a block. No API call; the client library's types are imported where a message is built."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_provider_dws.backends.compute_base import _when
from airflow_provider_dws.facts import CALENDAR_TPU_ROWS

if TYPE_CHECKING:
    from google.cloud.compute_v1 import FutureReservation

    from airflow_provider_dws.catalog import CalendarShape
    from airflow_provider_dws.scheduling.identity import RequestIdentity

#: Delivered, wholly or in part: reservations exist; a release deletes them and the request.
DELIVERED = ("FULFILLED", "FAILED_PARTIALLY_FULFILLED")

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


def block_description(identity: RequestIdentity, ask: BlockAsk) -> str:
    """The description a block is booked with: the task instance, try and attempt, and its shape."""
    return (
        f"airflow-provider-dws {identity.dag_id}.{identity.task_id} try {identity.try_number} "
        f"attempt {identity.attempt}: {ask.shape.describe()}"
    )


def ask_to_spec(ask: BlockAsk) -> dict[str, Any]:
    """``ask`` as JSON (what a trigger that books the block is handed)."""
    return {
        "shape": ask.shape._asdict(),
        "zone": ask.zone,
        "start": ask.start.isoformat(),
        "duration_seconds": ask.duration.total_seconds(),
        "workload_type": ask.workload_type,
    }


def ask_from_spec(spec: Mapping[str, Any]) -> BlockAsk:
    """The :class:`BlockAsk` of :func:`ask_to_spec`'s JSON."""
    from airflow_provider_dws.catalog import CalendarShape

    return BlockAsk(
        CalendarShape(**spec["shape"]),
        str(spec["zone"]),
        datetime.fromisoformat(spec["start"]),
        timedelta(seconds=float(spec["duration_seconds"])),
        str(spec.get("workload_type") or "BATCH"),
    )


def block_differences(fr: FutureReservation, ask: BlockAsk) -> list[str]:
    """How a booked block differs from ``ask`` (zone, window, shape), in words; empty when it does not."""
    where = parse_future_reservation_name(fr.self_link) if fr.self_link else None
    start, end = block_window(fr)
    shape = block_shape(fr)
    out = []
    if where is not None and where.zone != ask.zone:
        out.append(f"zone {where.zone}, not {ask.zone}")
    if (start, end) != (ask.start, ask.end):
        out.append(
            f"from {start.isoformat() if start else '?'} to {end.isoformat() if end else '?'}, "
            f"not {ask.start.isoformat()} to {ask.end.isoformat()}"
        )
    if shape is None or (shape.accelerator_type, shape.accelerator_count, shape.vm_count) != (
        ask.shape.accelerator_type,
        ask.shape.accelerator_count,
        ask.shape.vm_count,
    ):
        out.append(f"{shape.describe() if shape else 'another shape'}, not {ask.shape.describe()}")
    return out


def adopted_warning(name: str, differences: list[str]) -> str | None:
    """The warning of a block adopted as an earlier try booked it, when it differs from what this
    try asks (``None``: it does not)."""
    if not differences:
        return None
    return (
        f"Adopting {name} as an earlier try booked it, which differs from what this try asks: "
        f"{'; '.join(differences)}. A block is never booked twice; release it and run again to book another"
    )


def block_result(fr: FutureReservation, name: str, workload_type: str = "BATCH") -> dict[str, Any]:
    """What a reserve (and a wait) returns of a block: once delivered, its reservations as the
    consumers name them (a TPU block's also as Cloud TPU does: ``tpu_reservation_names``)."""
    from airflow_provider_dws.specs.calendar_block import shape_fields

    where = parse_future_reservation_name(name)
    start, end = block_window(fr)
    shape = block_shape(fr)
    reservations = [_reservation_path(r) for r in fr.status.auto_created_reservations]
    if not reservations and fr.reservation_name and fr.status.procurement_status in DELIVERED:
        reservations = [f"projects/{where.project}/zones/{where.zone}/reservations/{fr.reservation_name}"]
    result = {
        "future_reservation": name,
        "name": where.future_reservation,
        "project_id": where.project,
        "zone": where.zone,
        "start_time": start.isoformat() if start else None,
        "end_time": end.isoformat() if end else None,
        "duration_seconds": int((end - start).total_seconds()) if start and end else None,
        "procurement_status": fr.status.procurement_status,
        "reservation_name": fr.reservation_name or None,
        "reservations": reservations,
        "reservation_names": [r.rsplit("/", 1)[-1] for r in reservations],
        **(shape_fields(shape, fr.aggregate_reservation.workload_type or workload_type) if shape else {}),
    }
    if result.get("tpu_version"):
        # Cloud TPU names a reservation by location: a queued resource's ``reservation_name``.
        result["tpu_reservation_names"] = [
            "projects/{}/locations/{}/reservations/{}".format(*parse_reservation_name(r))
            for r in reservations
        ]
    return result


def delivered_line(result: Mapping[str, Any]) -> str:
    """The log line of a delivered block (:func:`block_result`'s)."""
    return (
        f"{result['future_reservation']} is delivered: reservation(s) "
        f"{', '.join(result.get('reservation_names') or ()) or '?'} in {result['zone']} until "
        f"{result['end_time']} (everything on them is deleted then)"
    )


def _reservation_path(url: str) -> str:
    """``projects/P/zones/Z/reservations/R`` of a reservation URL (as the consumers name it)."""
    return url.split("/compute/v1/", 1)[-1]

"""Checks of future reservation bodies and calendar-mode advice requests, and what they ask for.

What calendar mode offers and its limits are the emulator's facts (:mod:`..facts`, from the Compute
Engine documents): GPU machine types of the A3 series and newer with their fixed GPUs
(:data:`~..facts.CALENDAR_MACHINES`), reserved by ``specificSkuProperties`` (instances of one
machine type), and TPU v5e, v5p and v6e (:data:`~..facts.CALENDAR_TPU_FAMILIES`), reserved by
``aggregateReservation`` (chips of one VM family). The emulator models no H4D (it has no
accelerators to book). A block lasts 1 to 90 days and starts at least the emulator's minimum lead
time from now, at most 60 days (GPUs) or 120 days (TPUs) ahead.
Errors are Compute's 400 ``Invalid value for field 'FIELD': 'VALUE'. WHY``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..core.capacity import PoolKey
from ..core.clock import iso
from ..core.gce import check_name, invalid, strip_link
from ..core.rest import RestError
from ..facts import (
    CALENDAR_GPU_HORIZON_SECONDS,
    CALENDAR_MACHINES,
    CALENDAR_MAX_GPU_VMS,
    CALENDAR_MAX_SECONDS,
    CALENDAR_MIN_SECONDS,
    CALENDAR_TPU_CHIPS,
    CALENDAR_TPU_FAMILIES,
    CALENDAR_TPU_HORIZON_SECONDS,
    CALENDAR_TPU_SERVING_CHIPS,
    CALENDAR_TPU_WORKLOADS,
    DAY_SECONDS,
    MAX_NAME_PREFIX,
    VERTEX_NAME,
)

DAY = DAY_SECONDS
MIN_BLOCK_SECONDS = CALENDAR_MIN_SECONDS
MAX_BLOCK_SECONDS = CALENDAR_MAX_SECONDS
#: How far ahead a block may start: GPU VMs 60 days, TPUs 120 days.
GPU_HORIZON_SECONDS = CALENDAR_GPU_HORIZON_SECONDS
TPU_HORIZON_SECONDS = CALENDAR_TPU_HORIZON_SECONDS
#: GPU VMs one request may reserve.
MAX_GPU_VMS = CALENDAR_MAX_GPU_VMS
#: TPU chips one request may reserve (a v5e SERVING block: 1, 4 or 8), and the workload types (the
#: API also takes none, or UNSPECIFIED).
TPU_CHIPS = CALENDAR_TPU_CHIPS
TPU_SERVING_CHIPS = CALENDAR_TPU_SERVING_CHIPS
TPU_WORKLOADS = ("", "UNSPECIFIED", *CALENDAR_TPU_WORKLOADS)
#: ``aggregateReservation.vmFamily`` of the calendar-mode TPUs -> the TPU family (the pools' name).
TPU_VM_FAMILIES = CALENDAR_TPU_FAMILIES
_DURATION_RE = re.compile(r"([0-9]+(?:\.[0-9]{1,9})?)s")
_PREFIX_RE = re.compile(r"[a-z](?:[-a-z0-9]{0,18}[a-z0-9])?")


@dataclass(frozen=True)
class Ask:
    """What a block holds: ``count`` VMs of ``machine_type`` (GPUs) or ``count`` chips (TPUs)."""

    accelerator: str  # the pools' name: a GPU's Vertex AI name, or a TPU family
    count: int
    machine_type: str | None = None
    gpus_per_vm: int = 0
    vm_family: str | None = None

    @property
    def units(self) -> int:
        """GPUs or chips."""
        return self.count * self.gpus_per_vm if self.machine_type else self.count

    @property
    def unit(self) -> str:
        return "GPUs" if self.machine_type else "chips"

    def key(self, zone: str) -> PoolKey:
        """The calendar inventory this draws on: ``ZONE/ACCELERATOR``."""
        return PoolKey(zone, self.accelerator)

    def describe(self) -> str:
        if self.machine_type:
            return f"{self.count} x {self.machine_type} ({self.units} x {self.accelerator})"
        return f"{self.count} {self.accelerator} chips"


@dataclass(frozen=True)
class BlockPlan:
    """A checked future reservation: what, when and the reservation it creates."""

    ask: Ask
    start: float
    end: float
    reservation_name: str | None
    name_prefix: str | None
    submitted: bool  # planningStatus SUBMITTED (else DRAFT)


def parse_time(value: str, field: str) -> float:
    """RFC 3339 text as epoch seconds (a time zone is required)."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"  # Python 3.10's fromisoformat knows no "Z"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise invalid(
            field, value, "Must be an RFC 3339 timestamp with a time zone, e.g. 2026-12-01T00:00:00Z."
        )
    return parsed.timestamp()


def parse_duration(value: str, field: str) -> float:
    """``"604800s"`` (a string ``Duration``, as the advice request spells it) as seconds."""
    match = _DURATION_RE.fullmatch(value.strip())
    if match is None:
        raise invalid(field, value, "Must be a duration in seconds, e.g. '604800s'.")
    return float(match[1])


def check_block_length(seconds: float, field: str) -> None:
    if not MIN_BLOCK_SECONDS <= seconds <= MAX_BLOCK_SECONDS:
        raise invalid(
            field,
            f"{seconds:g}s",
            "A calendar-mode reservation lasts from 1 day (86400s) to 90 days (7776000s).",
        )


def check_start(start: float, now: float, min_lead: float, field: str, tpu: bool) -> None:
    """``start`` is at least ``min_lead`` seconds from ``now``, and within 60 days (GPUs) or 120 (TPUs)."""
    if start < now + min_lead or start <= now:
        raise invalid(
            field,
            iso(start),
            f"The start time must be in the future, at least {min_lead:g}s after the request "
            f"(now {iso(now)}).",
        )
    horizon = TPU_HORIZON_SECONDS if tpu else GPU_HORIZON_SECONDS
    if start > now + horizon:
        what = "TPU" if tpu else "GPU"
        raise invalid(
            field, iso(start), f"{what} capacity can be reserved at most {horizon / DAY:g} days ahead."
        )


def gpu_ask(machine_type: str, count: int, field: str, count_field: str) -> Ask:
    """``count`` VMs of a calendar-mode GPU ``machine_type`` (a name, not a URL)."""
    row = CALENDAR_MACHINES.get(machine_type)
    if row is None:
        offered = ", ".join(sorted(CALENDAR_MACHINES))
        raise invalid(
            field,
            machine_type,
            f"Calendar mode offers A3-or-newer GPU machine types ({offered}); TPUs are reserved by "
            "aggregate resources.",
        )
    if not 0 < count <= MAX_GPU_VMS:
        raise invalid(count_field, count, f"Must be from 1 to {MAX_GPU_VMS} VMs.")
    return Ask(row[0], count, machine_type, row[1])


def tpu_ask(vm_family: str, chips: int, workload: str, where: str, count_field: str) -> Ask:
    """``chips`` TPU chips of a calendar-mode ``vm_family`` for a ``workload`` type (fields under ``where``)."""
    field = f"{where}.vmFamily"
    family = TPU_VM_FAMILIES.get(vm_family)
    if family is None:
        raise invalid(
            field,
            vm_family,
            f"Calendar mode offers TPU v5e, v5p and v6e: one of {', '.join(TPU_VM_FAMILIES)}.",
        )
    if workload not in TPU_WORKLOADS:
        raise invalid(f"{where}.workloadType", workload, "Must be BATCH or SERVING.")
    offered = TPU_SERVING_CHIPS if (family, workload) == ("v5litepod", "SERVING") else TPU_CHIPS
    if chips not in offered:
        raise invalid(
            count_field, chips, f"A calendar-mode TPU block has one of {', '.join(map(str, offered))} chips."
        )
    return Ask(family, chips, vm_family=vm_family)


def _gpu_of_reservation(fr: Any) -> Ask:
    sku = fr.specific_sku_properties
    where = "resource.specificSkuProperties"
    if sku.source_instance_template:
        raise invalid(
            f"{where}.sourceInstanceTemplate",
            sku.source_instance_template,
            "The emulator reserves by instanceProperties.machineType only.",
        )
    props = sku.instance_properties
    machine = strip_link(props.machine_type).rsplit("/", 1)[-1]
    ask = gpu_ask(machine, sku.total_count, f"{where}.instanceProperties.machineType", f"{where}.totalCount")
    for i, acc in enumerate(props.guest_accelerators):
        name = VERTEX_NAME.get(strip_link(acc.accelerator_type).rsplit("/", 1)[-1])
        if (name, acc.accelerator_count) != (ask.accelerator, ask.gpus_per_vm):
            raise invalid(
                f"{where}.instanceProperties.guestAccelerators[{i}]",
                f"{acc.accelerator_count} x {acc.accelerator_type}",
                f"Machine type {machine} comes with {ask.gpus_per_vm} x {ask.accelerator}.",
            )
    return ask


def _tpu_of_reservation(fr: Any) -> Ask:
    agg = fr.aggregate_reservation
    where = "resource.aggregateReservation"
    resources = list(agg.reserved_resources)
    if len(resources) != 1 or not resources[0].HasField("accelerator"):
        raise invalid(
            f"{where}.reservedResources",
            len(resources),
            "Exactly one reserved resource, an accelerator (its chip count), is required.",
        )
    chips = resources[0].accelerator.accelerator_count
    return tpu_ask(
        agg.vm_family,
        chips,
        agg.workload_type,
        where,
        f"{where}.reservedResources[0].accelerator.acceleratorCount",
    )


def check_future_reservation(fr: Any, now: float, min_lead: float) -> BlockPlan:
    """A FutureReservation body (raw protobuf) for calendar mode, checked; or a 400."""
    check_name(fr.name)
    if fr.reservation_mode != "CALENDAR":
        raise invalid(
            "resource.reservationMode",
            fr.reservation_mode or "",
            "The emulator serves calendar mode: reservationMode must be CALENDAR.",
        )
    if fr.planning_status not in ("", "DRAFT", "SUBMITTED"):
        raise invalid("resource.planningStatus", fr.planning_status, "Must be DRAFT or SUBMITTED.")
    if fr.deployment_type not in ("", "DENSE"):
        raise invalid(
            "resource.deploymentType", fr.deployment_type, "Calendar mode reserves DENSE deployments."
        )
    gpu, tpu = fr.HasField("specific_sku_properties"), fr.HasField("aggregate_reservation")
    if gpu == tpu:
        raise RestError(
            400,
            "invalid",
            "Exactly one of specificSkuProperties (GPU machine types) and aggregateReservation (TPUs) "
            "is required.",
        )
    ask = _gpu_of_reservation(fr) if gpu else _tpu_of_reservation(fr)
    window = fr.time_window
    if not window.start_time:
        raise RestError(400, "required", "Required field 'resource.timeWindow.startTime' not specified")
    start = parse_time(window.start_time, "resource.timeWindow.startTime")
    has_end, has_duration = bool(window.end_time), window.HasField("duration")
    if has_end == has_duration:
        raise invalid(
            "resource.timeWindow",
            "",
            "Exactly one of timeWindow.endTime and timeWindow.duration is required.",
        )
    if has_end:
        end = parse_time(window.end_time, "resource.timeWindow.endTime")
        check_block_length(end - start, "resource.timeWindow.endTime")
    else:
        seconds = window.duration.seconds + window.duration.nanos / 1e9
        check_block_length(seconds, "resource.timeWindow.duration")
        end = start + seconds
    check_start(start, now, min_lead, "resource.timeWindow.startTime", tpu)
    name = fr.reservation_name or None
    prefix = fr.name_prefix or None
    if (name is None) == (prefix is None):
        raise invalid(
            "resource.reservationName",
            name or "",
            "Exactly one of reservationName and namePrefix names the reservation to deliver.",
        )
    if name is not None:
        check_name(name, "resource.reservationName")
    if prefix is not None and not _PREFIX_RE.fullmatch(prefix):
        raise invalid(
            "resource.namePrefix", prefix, f"Must match RFC 1035 and be at most {MAX_NAME_PREFIX} characters."
        )
    return BlockPlan(ask, start, end, name, prefix, fr.planning_status == "SUBMITTED")


@dataclass(frozen=True)
class AdviceSpec:
    """A checked calendar-mode advice request (its one spec)."""

    key: str
    ask: Ask
    earliest: float | None  # startTimeNotEarlierThan
    latest: float | None  # startTimeNotLaterThan
    min_seconds: float
    max_seconds: float
    allowed: dict[str, bool]  # zone -> ALLOW (True) or DENY (False), as the location policy says


def check_advice(body: Any, region: str) -> AdviceSpec:
    """A CalendarModeAdviceRequest (raw protobuf) with exactly one spec, checked; or a 400."""
    specs = dict(body.future_resources_specs)
    if len(specs) != 1:
        raise invalid(
            "calendarModeAdviceRequest.futureResourcesSpecs", len(specs), "Exactly one spec is allowed."
        )
    key, spec = next(iter(specs.items()))
    where = f"calendarModeAdviceRequest.futureResourcesSpecs[{key}]"
    if spec.deployment_type not in ("", "DENSE"):
        raise invalid(
            f"{where}.deploymentType", spec.deployment_type, "Calendar mode reserves DENSE deployments."
        )
    target = spec.target_resources
    gpu, tpu = target.HasField("specific_sku_resources"), target.HasField("aggregate_resources")
    if gpu == tpu:
        raise invalid(
            f"{where}.targetResources",
            "",
            "Exactly one of specificSkuResources (GPU machine types) and aggregateResources (TPUs) is required.",
        )
    if gpu:
        sku = target.specific_sku_resources
        ask = gpu_ask(
            sku.machine_type,
            sku.instance_count,
            f"{where}.targetResources.specificSkuResources.machineType",
            f"{where}.targetResources.specificSkuResources.instanceCount",
        )
    else:
        agg = target.aggregate_resources
        ask = tpu_ask(
            agg.vm_family,
            agg.accelerator_count,
            agg.workload_type,
            f"{where}.targetResources.aggregateResources",
            f"{where}.targetResources.aggregateResources.acceleratorCount",
        )
    span = spec.time_range_spec
    rwhere = f"{where}.timeRangeSpec"
    earliest = (
        parse_time(span.start_time_not_earlier_than, f"{rwhere}.startTimeNotEarlierThan")
        if span.start_time_not_earlier_than
        else None
    )
    latest = (
        parse_time(span.start_time_not_later_than, f"{rwhere}.startTimeNotLaterThan")
        if span.start_time_not_later_than
        else None
    )
    low = parse_duration(span.min_duration, f"{rwhere}.minDuration") if span.min_duration else None
    high = parse_duration(span.max_duration, f"{rwhere}.maxDuration") if span.max_duration else None
    if low is None and high is None:
        raise RestError(
            400, "required", f"Required field '{rwhere}.minDuration' or '{rwhere}.maxDuration' not specified"
        )
    low = high if low is None else low
    high = low if high is None else high
    assert low is not None and high is not None
    check_block_length(low, f"{rwhere}.minDuration")
    check_block_length(high, f"{rwhere}.maxDuration")
    if low > high or (earliest is not None and latest is not None and earliest > latest):
        raise invalid(rwhere, "", "The time range is contradictory: no interval can match it.")
    allowed: dict[str, bool] = {}
    for location, preference in spec.location_policy.locations.items():
        zone = location.removeprefix("zones/")
        if not location.startswith("zones/") or zone.rsplit("-", 1)[0] != region:
            raise invalid(
                f"{where}.locationPolicy.locations", location, f"Must be a zone of {region}, as zones/ZONE."
            )
        if preference.preference not in ("", "ALLOW", "DENY", "PREFERENCE_UNSPECIFIED"):
            raise invalid(
                f"{where}.locationPolicy.locations[{location}].preference",
                preference.preference,
                "Must be ALLOW or DENY.",
            )
        allowed[zone] = preference.preference != "DENY"
    return AdviceSpec(key, ask, earliest, latest, low, high, allowed)

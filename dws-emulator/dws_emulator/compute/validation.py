"""Compute Engine request checks and what a VM of a template needs (:class:`VmPlan`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.capacity import PoolKey
from ..core.reservations import RESERVATION_KEY
from ..facts import COMPUTE_NAME, MACHINE_GPUS, VERTEX_NAME
from .resources import check_name, invalid, strip_link

#: ``requestedRunDuration`` bounds (seconds), and the VMs' lifetime when it is absent.
MIN_RUN_SECONDS = 600
MAX_RUN_SECONDS = 7 * 24 * 3600
DEFAULT_RUN_SECONDS = MAX_RUN_SECONDS


@dataclass(frozen=True)
class VmPlan:
    """One VM of a template: its machine, GPUs and whether it may be created by a resize request."""

    machine_type: str
    accelerator: str | None  # the pools' (Vertex AI) GPU name; None: no GPUs
    gpus_per_vm: int
    #: Why the template is neither flex-start nor reservation-bound ready ("" when it is one).
    not_flex_ready: str
    #: The reservation a RESERVATION_BOUND template's VMs consume (its affinity's one value).
    reservation: str | None = None

    def pool(self, zone: str) -> PoolKey | None:
        """The pool a VM in ``zone`` draws from: its region's pool of the GPU."""
        if self.accelerator is None:
            return None
        return PoolKey(zone.rsplit("-", 1)[0], self.accelerator)

    @property
    def compute_accelerator(self) -> str | None:
        """The GPU's Compute Engine name (``nvidia-h100-80gb``)."""
        if self.accelerator is None:
            return None
        return COMPUTE_NAME.get(self.accelerator, self.accelerator.lower().replace("_", "-"))


def check_template(template: Any) -> None:
    """An InstanceTemplate body: a valid name, a machine type, known GPUs, a positive GPU count."""
    check_name(template.name)
    props = template.properties
    if not props.machine_type:
        raise invalid("resource.properties.machineType", "", "A machine type is required.")
    for i, acc in enumerate(props.guest_accelerators):
        name = strip_link(acc.accelerator_type).rsplit("/", 1)[-1]
        if name not in VERTEX_NAME:
            raise invalid(
                f"resource.properties.guestAccelerators[{i}].acceleratorType",
                acc.accelerator_type,
                f"Unknown accelerator type; expected one of: {', '.join(VERTEX_NAME)}.",
            )
        if acc.accelerator_count <= 0:
            raise invalid(
                f"resource.properties.guestAccelerators[{i}].acceleratorCount",
                acc.accelerator_count,
                "Must be greater than 0.",
            )


def vm_plan(template: Any) -> VmPlan:
    """What each VM of ``template`` (a stored InstanceTemplate) needs."""
    props = template.properties
    machine = strip_link(props.machine_type).rsplit("/", 1)[-1]
    row = MACHINE_GPUS.get(machine)
    accelerator: str | None = None
    count = 0
    if row is not None:
        accelerator, count = row
    elif props.guest_accelerators:
        acc = props.guest_accelerators[0]
        accelerator = VERTEX_NAME[strip_link(acc.accelerator_type).rsplit("/", 1)[-1]]
        count = sum(a.accelerator_count for a in props.guest_accelerators)
    sched = props.scheduling
    problems = []
    reservation = None
    if sched.provisioning_model == "RESERVATION_BOUND":
        affinity = props.reservation_affinity
        if (
            affinity.consume_reservation_type != "SPECIFIC_RESERVATION"
            or affinity.key != RESERVATION_KEY
            or len(affinity.values) != 1
        ):
            problems.append(
                "a RESERVATION_BOUND template needs reservationAffinity {consumeReservationType: "
                f"SPECIFIC_RESERVATION, key: {RESERVATION_KEY}, values: [the reservation]}}"
            )
        else:
            reservation = str(affinity.values[0])
    elif sched.provisioning_model != "FLEX_START":
        problems.append(
            f"scheduling.provisioningModel is {sched.provisioning_model or 'unset'}, not FLEX_START "
            "(or RESERVATION_BOUND)"
        )
    if sched.on_host_maintenance != "TERMINATE":
        problems.append(
            f"scheduling.onHostMaintenance is {sched.on_host_maintenance or 'unset'}, not TERMINATE"
        )
    if reservation is None and (not sched.HasField("automatic_restart") or sched.automatic_restart):
        problems.append("scheduling.automaticRestart is not false")
    return VmPlan(machine, accelerator, count, "; ".join(problems), reservation)


def run_seconds(request: Any) -> float:
    """The checked ``requestedRunDuration`` of a resize request body, in seconds."""
    if not request.HasField("requested_run_duration"):
        return float(DEFAULT_RUN_SECONDS)
    duration = request.requested_run_duration
    seconds = duration.seconds + duration.nanos / 1e9
    if not MIN_RUN_SECONDS <= seconds <= MAX_RUN_SECONDS:
        raise invalid(
            "resource.requestedRunDuration",
            f"{seconds:g}s",
            f"The requested run duration must be between {MIN_RUN_SECONDS} seconds (10 minutes) and "
            f"{MAX_RUN_SECONDS} seconds (7 days).",
        )
    return seconds


def check_resize_request(request: Any) -> None:
    """A resize request body: a valid name and a positive ``resizeBy`` (``instances`` is not emulated)."""
    check_name(request.name)
    if request.instances:
        raise invalid(
            "resource.instances", "[...]", "The emulator supports resize requests by resizeBy only."
        )
    if not request.HasField("resize_by") or request.resize_by <= 0:
        raise invalid("resource.resizeBy", request.resize_by, "Must be greater than 0.")
    run_seconds(request)

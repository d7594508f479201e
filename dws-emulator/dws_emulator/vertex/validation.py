"""Validation of Vertex AI CreateCustomJob requests, mirroring the real API's INVALID_ARGUMENT errors.

Messages follow Vertex AI's format (``List of found errors: 1.Field: <path>; Message: <text>``)
so that callers asserting on the field path see the same text they would in production.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.cloud.aiplatform_v1.types import accelerator_type as gca_accelerator_type
from google.cloud.aiplatform_v1.types import custom_job as gca_custom_job
from google.protobuf import duration_pb2

from ..core.errors import EmulatorError, check_labels
from ..core.reservations import RESERVATION_KEY
from ..core.workload import EXIT_CODE_ENV, RUN_SECONDS_ENV, parse_workload

DEFAULT_MAX_WAIT_SECONDS = 24 * 3600.0  # the API default when max_wait_duration is unset
MAX_FLEX_TIMEOUT_SECONDS = 7 * 24 * 3600.0

Strategy = gca_custom_job.Scheduling.Strategy
AcceleratorType = gca_accelerator_type.AcceleratorType
#: ``ReservationAffinity.Type.SPECIFIC_RESERVATION`` (aiplatform_v1).
SPECIFIC_RESERVATION = 3
_RESERVATION_NAME_RE = re.compile(
    r"projects/[^/]+/zones/[^/]+/reservations/[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
)


def invalid(field: str, message: str) -> EmulatorError:
    """INVALID_ARGUMENT naming ``field`` the way Vertex AI does."""
    return EmulatorError(
        grpc.StatusCode.INVALID_ARGUMENT, f"List of found errors:\t1.Field: {field}; Message: {message}\t"
    )


@dataclass(frozen=True)
class JobPlan:
    """What the emulator needs to know to schedule and run a validated CustomJob."""

    strategy: str  # Scheduling.Strategy name
    accelerator: str | None  # AcceleratorType name, None when the job uses no accelerator
    accelerator_count: int  # replicas x accelerator_count summed over worker pools
    run_seconds: float
    exit_code: int
    timeout: float | None  # scheduling.timeout in seconds, None when unset
    max_wait: float | None  # seconds; None = wait indefinitely (only meaningful for FLEX_START)
    #: The full name of the reservation its machines consume (SPECIFIC_RESERVATION), or None.
    reservation: str | None = None
    machine_type: str = ""  # the machine type of the accelerated worker pools

    @property
    def flex_start(self) -> bool:
        return self.strategy == "FLEX_START"

    @property
    def queued(self) -> bool:
        """Waits in a pool's queue for its whole set: Flex Start, or on a reservation."""
        return self.flex_start or self.reservation is not None


def _seconds(d: duration_pb2.Duration) -> float:
    return d.seconds + d.nanos / 1e9


def _env_value(container_spec, name: str) -> str | None:
    for env in container_spec.env:
        if env.name == name:
            return str(env.value)
    return None


def validate_labels(
    labels, field: str = "custom_job.labels", make_error: Callable[[str, str], EmulatorError] = invalid
) -> None:
    """GCP label rules, refused in Vertex AI's message format unless ``make_error`` says otherwise."""
    check_labels(labels, field, make_error)


def validate_custom_job(job: Any) -> JobPlan:
    """Check a raw ``CustomJob`` protobuf and return its plan, or raise ``EmulatorError``."""
    if not job.display_name:
        raise invalid("custom_job.display_name", "Required field is not set.")
    validate_labels(job.labels)
    spec = job.job_spec
    pools = list(spec.worker_pool_specs)
    if not pools:
        raise invalid("custom_job.job_spec.worker_pool_specs", "Required field is not set.")

    strategy_value = spec.scheduling.strategy if spec.HasField("scheduling") else 0
    try:
        strategy = Strategy(strategy_value).name
    except ValueError:
        raise invalid(
            "custom_job.job_spec.scheduling.strategy", f"Unknown strategy {strategy_value}."
        ) from None
    flex = strategy == "FLEX_START"

    accelerator: str | None = None
    total = 0
    first_machine = None
    reservations: set[str | None] = set()
    machine_type = ""
    for i, pool in enumerate(pools):
        field = f"custom_job.job_spec.worker_pool_specs[{i}]"
        # The API accepts empty placeholder pools after the first one (e.g. to skip pool 1).
        if i > 0 and pool.replica_count == 0 and not pool.HasField("machine_spec"):
            continue
        if pool.replica_count < 1:
            raise invalid(
                f"{field}.replica_count",
                "Must be at least 1 for the first worker pool."
                if i == 0
                else "Must be at least 1 for a non-empty worker pool.",
            )
        if not pool.HasField("container_spec") and not pool.HasField("python_package_spec"):
            raise invalid(field, "One of container_spec or python_package_spec is required.")
        if pool.HasField("container_spec") and not pool.container_spec.image_uri:
            raise invalid(f"{field}.container_spec.image_uri", "Required field is not set.")
        machine = pool.machine_spec
        if machine.accelerator_count < 0:
            raise invalid(f"{field}.machine_spec.accelerator_count", "Must not be negative.")
        if machine.accelerator_count > 0:
            try:
                name = AcceleratorType(machine.accelerator_type).name
            except ValueError:
                name = None
            if name is None or machine.accelerator_type == 0:
                raise invalid(
                    f"{field}.machine_spec.accelerator_type",
                    f"A valid accelerator type is required when accelerator_count is "
                    f"{machine.accelerator_count}, got {name or machine.accelerator_type}.",
                )
            if accelerator is not None and accelerator != name:
                # One job draws its whole set from one pool, so mixed types cannot be scheduled.
                raise invalid(
                    f"{field}.machine_spec.accelerator_type",
                    f"All worker pools must use the same accelerator type, got {accelerator} and {name}.",
                )
            accelerator = name
            total += pool.replica_count * machine.accelerator_count
            machine_type = machine_type or machine.machine_type
            reservations.add(_reservation(machine, f"{field}.machine_spec.reservation_affinity"))
        if flex:
            if first_machine is None:
                first_machine = machine
            elif machine != first_machine:
                raise invalid(
                    f"{field}.machine_spec",
                    "All worker pools must use the same machine_spec when scheduling.strategy is FLEX_START.",
                )

    timeout = None
    max_wait: float | None = DEFAULT_MAX_WAIT_SECONDS
    if spec.HasField("scheduling"):
        sched = spec.scheduling
        if sched.HasField("timeout"):
            timeout = _seconds(sched.timeout)
            if timeout < 0:
                raise invalid("custom_job.job_spec.scheduling.timeout", "Must not be negative.")
            if timeout == 0:
                timeout = None
            elif flex and timeout > MAX_FLEX_TIMEOUT_SECONDS:
                raise invalid(
                    "custom_job.job_spec.scheduling.timeout",
                    f"Must be at most 7 days (604800s) when scheduling.strategy is FLEX_START, "
                    f"got {timeout:g}s.",
                )
        if sched.HasField("max_wait_duration"):
            max_wait = _seconds(sched.max_wait_duration)
            if max_wait < 0:
                raise invalid("custom_job.job_spec.scheduling.max_wait_duration", "Must not be negative.")
            if max_wait == 0:
                max_wait = None  # the API documents 0 as "wait indefinitely"

    if len(reservations) > 1:
        raise invalid(
            "custom_job.job_spec.worker_pool_specs",
            "All worker pools with accelerators must consume the same reservation, or none.",
        )
    reservation = next(iter(reservations), None)
    if reservation is not None and strategy in ("FLEX_START", "SPOT"):
        raise invalid(
            "custom_job.job_spec.scheduling.strategy",
            f"{strategy} cannot be combined with a specific reservation (machine_spec.reservation_affinity).",
        )

    container = pools[0].container_spec
    run_text = _env_value(container, RUN_SECONDS_ENV)
    exit_text = _env_value(container, EXIT_CODE_ENV)
    env_field = "custom_job.job_spec.worker_pool_specs[0].container_spec.env"
    run_seconds, exit_code = parse_workload(run_text, exit_text, env_field, invalid)

    return JobPlan(
        strategy=strategy,
        accelerator=accelerator,
        accelerator_count=total,
        run_seconds=run_seconds,
        exit_code=exit_code,
        timeout=timeout,
        max_wait=max_wait,
        reservation=reservation,
        machine_type=machine_type,
    )


def _reservation(machine: Any, field: str) -> str | None:
    """The reservation a ``machine_spec`` names with SPECIFIC_RESERVATION (others consume none here)."""
    if not machine.HasField("reservation_affinity"):
        return None
    affinity = machine.reservation_affinity
    if affinity.reservation_affinity_type != SPECIFIC_RESERVATION:
        return None
    if affinity.key != RESERVATION_KEY:
        raise invalid(
            f"{field}.key", f"Must be {RESERVATION_KEY} for SPECIFIC_RESERVATION, got {affinity.key!r}."
        )
    if len(affinity.values) != 1 or not _RESERVATION_NAME_RE.fullmatch(affinity.values[0]):
        raise invalid(
            f"{field}.values",
            "Exactly one value is required: the full reservation name "
            "projects/{project}/zones/{zone}/reservations/{reservation}.",
        )
    return str(affinity.values[0])

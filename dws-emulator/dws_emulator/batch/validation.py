"""Validation of Cloud Batch CreateJob requests and the plan the emulator schedules (no state).

Capacity: a Batch job draws on the same GPU pools as Vertex AI, ``REGION/VERTEX_ACCELERATOR``
(``us-central1/NVIDIA_L4``). Batch spells accelerator types the Compute Engine way
(``nvidia-l4``); :data:`~dws_emulator.facts.VERTEX_NAME` is the table between the two. A job needs, at once,
``vms x gpus_per_vm`` GPUs, where ``vms = ceil(min(task_count, parallelism) / task_count_per_node)``
(the VMs that run its tasks side by side) and ``gpus_per_vm`` comes from
``instances[0].policy.accelerators[0].count`` or, for accelerator-optimized machine types
(``g2-standard-4``, ``a3-highgpu-8g``...), from the GPUs the machine always has
(:data:`~dws_emulator.facts.MACHINE_GPUS`). A FLEX_START job may only have the GPUs flex-start VMs
offer (:data:`~dws_emulator.facts.FLEX_START_GPUS`: not an A4X's GB200s), asked for or built in.

Workload: ``DWS_EMULATOR_RUN_SECONDS`` / ``DWS_EMULATOR_EXIT_CODE`` (:mod:`..core.workload`) are read
from ``task_spec.environment.variables``, then from each runnable's ``environment.variables`` (a
runnable's value wins), as a task would see them.

Errors are INVALID_ARGUMENT ``Invalid value for field 'job.<path>': <why>``.
"""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass
from typing import Any

import grpc
from google.cloud.batch_v1.types import job as gcb_job

from ..core.capacity import PoolKey
from ..core.errors import EmulatorError, check_labels
from ..core.workload import EXIT_CODE_ENV, RUN_SECONDS_ENV, parse_workload
from ..facts import COMPUTE_NAME, FLEX_START_GPUS, MACHINE_GPUS, VERTEX_NAME

ProvisioningModel = gcb_job.AllocationPolicy.ProvisioningModel

JOB_ID_RE = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")
_PARENT_RE = re.compile(r"projects/([^/]+)/locations/([^/]+)")


def batch_error(field: str, message: str) -> EmulatorError:
    """INVALID_ARGUMENT naming ``field`` (a path from the request's ``job``, or a request field)."""
    return EmulatorError(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid value for field '{field}': {message}")


def parse_parent(parent: str) -> tuple[str, str]:
    """``projects/P/locations/REGION`` -> (P, REGION), or INVALID_ARGUMENT naming ``parent``."""
    match = _PARENT_RE.fullmatch(parent)
    if not match:
        raise batch_error("parent", f"{parent!r} must look like projects/{{project}}/locations/{{location}}.")
    return match.group(1), match.group(2)


def check_request_id(request_id: str) -> None:
    """A request id, when given, is a non-zero UUID (as the API documents)."""
    if not request_id:
        return
    try:
        value = uuid.UUID(request_id)
    except ValueError:
        raise batch_error("request_id", f"{request_id!r} must be a UUID.") from None
    if value.int == 0:
        raise batch_error("request_id", "The zero UUID is not supported.")


@dataclass(frozen=True)
class BatchPlan:
    """What the emulator needs to schedule and run a validated Batch job."""

    provisioning_model: str  # ProvisioningModel name; STANDARD when unset
    machine_type: str
    accelerator: str | None  # the pool's (Vertex) accelerator name; None for a CPU-only job
    gpus_per_vm: int
    vms: int  # VMs that run at once
    task_count: int
    parallelism: int
    run_seconds: float
    exit_code: int
    max_run: float | None  # task_spec.max_run_duration in seconds
    #: ``instances[0].policy.reservation``: the reservation its VMs consume (None: none named).
    reservation: str | None = None

    @property
    def flex_start(self) -> bool:
        return self.provisioning_model == "FLEX_START"

    @property
    def queued(self) -> bool:
        """Waits in a pool's queue for all its GPUs at once: FLEX_START, or on a reservation."""
        return self.flex_start or self.reservation is not None

    @property
    def gpus(self) -> int:
        """GPUs needed at once."""
        return self.vms * self.gpus_per_vm

    def pool(self, location: str) -> PoolKey | None:
        return None if self.accelerator is None else PoolKey(location, self.accelerator)


def _variables(spec: Any) -> dict[str, str]:
    """The task's environment as its runnables see it (a runnable's own variables win)."""
    env = dict(spec.environments)  # the deprecated map, lowest precedence
    env.update(spec.environment.variables)
    for runnable in spec.runnables:
        env.update(runnable.environment.variables)
    return env


def _seconds(duration: Any) -> float:
    return duration.seconds + duration.nanos / 1e9


def _task_group(job: Any) -> tuple[Any, int, int, int]:
    """The one task group and its (task_count, parallelism, task_count_per_node), checked."""
    if len(job.task_groups) != 1:
        raise batch_error(
            "job.task_groups", f"Exactly one task group is required, got {len(job.task_groups)}."
        )
    group = job.task_groups[0]
    field = "job.task_groups[0]"
    if group.task_count < 0:
        raise batch_error(f"{field}.task_count", f"Must be at least 1, got {group.task_count}.")
    task_count = group.task_count or 1  # 0 is unset: the API's default is one task
    if group.parallelism < 0:
        raise batch_error(f"{field}.parallelism", f"Must be at least 1, got {group.parallelism}.")
    parallelism = min(group.parallelism or task_count, task_count)
    if group.task_count_per_node < 0:
        raise batch_error(
            f"{field}.task_count_per_node", f"Must be at least 1, got {group.task_count_per_node}."
        )
    per_node = group.task_count_per_node or 1
    spec = group.task_spec
    if not spec.runnables:
        raise batch_error(f"{field}.task_spec.runnables", "At least one runnable is required.")
    for i, runnable in enumerate(spec.runnables):
        where = f"{field}.task_spec.runnables[{i}]"
        kind = runnable.WhichOneof("executable")
        if kind is None:
            raise batch_error(where, "One of container, script or barrier is required.")
        if kind == "container" and not runnable.container.image_uri:
            raise batch_error(f"{where}.container.image_uri", "Required field is not set.")
        if kind == "script" and not (runnable.script.text or runnable.script.path):
            raise batch_error(f"{where}.script", "One of text or path is required.")
    return group, task_count, parallelism, per_node


def _instance_policy(job: Any) -> tuple[str, str, str | None, int, str | None]:
    """(provisioning model, machine type, pool accelerator or None, GPUs per VM, reservation or None)
    from ``allocation_policy``."""
    instances = list(job.allocation_policy.instances) if job.HasField("allocation_policy") else []
    if not instances:
        return "STANDARD", "e2-standard-4", None, 0, None
    flex = any(
        item.WhichOneof("policy_template") == "policy"
        and item.policy.provisioning_model == ProvisioningModel.FLEX_START
        for item in instances
    )
    if len(instances) > 1:
        reason = (
            "FLEX_START cannot be combined with instance flexibility (more than one instances entry)."
            if flex
            else "Only one instances entry is supported."
        )
        raise batch_error("job.allocation_policy.instances", reason)
    item = instances[0]
    field = "job.allocation_policy.instances[0]"
    if item.WhichOneof("policy_template") == "instance_template":
        raise batch_error(
            f"{field}.instance_template",
            "Instance templates are not supported by dws-emulator (and FLEX_START needs an instance "
            "policy); set instances[0].policy instead.",
        )
    policy = item.policy
    try:
        model = ProvisioningModel(policy.provisioning_model).name
    except ValueError:
        raise batch_error(
            f"{field}.policy.provisioning_model", f"Unknown value {policy.provisioning_model}."
        ) from None
    if model == "PROVISIONING_MODEL_UNSPECIFIED":
        model = "STANDARD"
    machine = policy.machine_type or "e2-standard-4"
    built_in = MACHINE_GPUS.get(machine)
    accelerator, per_vm = (built_in[0], built_in[1]) if built_in else (None, 0)
    accelerators = list(policy.accelerators)
    if len(accelerators) > 1:
        raise batch_error(f"{field}.policy.accelerators", "At most one accelerator entry is supported.")
    if accelerators:
        acc = accelerators[0]
        where = f"{field}.policy.accelerators[0]"
        name = VERTEX_NAME.get(acc.type_)
        if name is None:
            raise batch_error(
                f"{where}.type",
                f"Unknown accelerator type {acc.type_!r}; expected one of: {', '.join(VERTEX_NAME)}.",
            )
        if acc.count < 1:
            raise batch_error(f"{where}.count", f"Must be at least 1, got {acc.count}.")
        if built_in and built_in != (name, acc.count):
            raise batch_error(
                where,
                f"Machine type {machine} comes with {built_in[1]} x {built_in[0]}; got {acc.count} x {acc.type_}.",
            )
        accelerator, per_vm = name, acc.count
    gpu = COMPUTE_NAME.get(accelerator or "")
    if model == "FLEX_START" and gpu is not None and gpu not in FLEX_START_GPUS:
        raise batch_error(
            f"{field}.policy.accelerators[0].type" if accelerators else f"{field}.policy.machine_type",
            f"{gpu} cannot be obtained with FLEX_START; flex-start VMs offer: "
            f"{', '.join(sorted(FLEX_START_GPUS))}.",
        )
    if model == "FLEX_START" and accelerator is None:
        raise batch_error(
            f"{field}.policy.provisioning_model",
            "FLEX_START needs GPUs: give accelerators or an accelerator-optimized machine type.",
        )
    reservation = policy.reservation if policy.reservation not in ("", "NO_RESERVATION") else None
    if reservation is not None and model in ("FLEX_START", "SPOT", "PREEMPTIBLE"):
        raise batch_error(
            f"{field}.policy.reservation",
            f"A {model} VM cannot consume a specific reservation; use RESERVATION_BOUND (or STANDARD).",
        )
    if reservation is not None and accelerator is None:
        raise batch_error(
            f"{field}.policy.reservation", "dws-emulator emulates reservations of GPU machines only."
        )
    return model, machine, accelerator, per_vm, reservation


def validate_job(parent: str, job_id: str, job: Any) -> BatchPlan:
    """Check a raw CreateJob request (``job`` a ``Job`` protobuf) and return its plan, or raise ``EmulatorError``.

    Pool existence is checked by the caller, which owns the capacity model.
    """
    parse_parent(parent)
    if job_id and not JOB_ID_RE.fullmatch(job_id):
        raise batch_error(
            "job_id",
            f"{job_id!r} must match {JOB_ID_RE.pattern}: 1-63 lowercase letters, digits and '-', "
            "starting with a letter and not ending with '-'.",
        )
    check_labels(job.labels, "job.labels", batch_error)
    group, task_count, parallelism, per_node = _task_group(job)
    model, machine, accelerator, per_vm, reservation = _instance_policy(job)
    env = _variables(group.task_spec)
    run_seconds, exit_code = parse_workload(
        env.get(RUN_SECONDS_ENV),
        env.get(EXIT_CODE_ENV),
        "job.task_groups[0].task_spec.environment.variables",
        batch_error,
    )
    max_run = None
    if group.task_spec.HasField("max_run_duration"):
        max_run = _seconds(group.task_spec.max_run_duration)
        if max_run < 0:
            raise batch_error("job.task_groups[0].task_spec.max_run_duration", "Must not be negative.")
        max_run = max_run or None
    return BatchPlan(
        provisioning_model=model,
        machine_type=machine,
        accelerator=accelerator,
        gpus_per_vm=per_vm,
        vms=math.ceil(parallelism / per_node),
        task_count=task_count,
        parallelism=parallelism,
        run_seconds=run_seconds,
        exit_code=exit_code,
        max_run=max_run,
        reservation=reservation,
    )

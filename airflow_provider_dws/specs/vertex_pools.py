"""What Flex Start accepts as worker pools and custom jobs, and why a value is refused.

Imported at parse time only when the quick test of the operator module cannot accept a value;
parse-time checks use plain dicts and the provider's tables (:mod:`airflow_provider_dws.catalog`);
the messages are built (and so checked by the client) only after rendering, in the worker.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_provider_dws import catalog
from airflow_provider_dws.facts import FLEX_START_GPUS as FLEX_START_ACCELERATORS
from airflow_provider_dws.facts import WORKER_POOL_FIELDS
from airflow_provider_dws.patterns import LazyPattern
from airflow_provider_dws.specs.templates import has_template

#: The Vertex AI custom job backend's kind (its ``kind`` and the records' ``api``).
VERTEX_JOB_KIND = "vertex_custom_job"
#: ``projects/P/locations/R/customJobs/ID``: read here without the client library or the backend,
#: so a task that only names its job (its region, its console link) imports neither.
_JOB_NAME = LazyPattern(r"projects/([^/]+)/locations/([^/]+)/customJobs/([^/]+)")


def parse_job_name(name: str) -> tuple[str, str]:
    """Split ``projects/P/locations/R/customJobs/ID`` into (region, job id)."""
    match = _JOB_NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"not a Vertex AI custom job name: {name!r}")
    return match.group(2), match.group(3)


_INT_FIELDS = ("replica_count", "accelerator_count")


def normalize_pool(pool: Any) -> Any:
    """Give integer fields back their type: proto-to-dict renders int64 as a string, and Jinja
    renders ``"{{ params.n }}"`` as one."""
    if not isinstance(pool, Mapping):
        return pool
    pool = dict(pool)
    machine = pool.get("machine_spec")
    if isinstance(machine, Mapping):
        machine = dict(machine)
        if isinstance(machine.get("accelerator_count"), str) and machine["accelerator_count"].isdigit():
            machine["accelerator_count"] = int(machine["accelerator_count"])
        pool["machine_spec"] = machine
    if isinstance(pool.get("replica_count"), str) and pool["replica_count"].isdigit():
        pool["replica_count"] = int(pool["replica_count"])
    return pool


def as_dict(value: Any, what: str) -> dict[str, Any]:
    """A worker pool spec or custom job as a plain dict (accepting dicts and proto messages)."""
    if isinstance(value, Mapping):
        return dict(value)
    # Not a dict: a message the DAG file built, so the client is imported already.
    from google.cloud.aiplatform_v1 import CustomJob, WorkerPoolSpec

    if isinstance(value, WorkerPoolSpec):
        return dict(normalize_pool(WorkerPoolSpec.to_dict(value, use_integers_for_enums=False)))
    if isinstance(value, CustomJob):
        data = dict(CustomJob.to_dict(value, use_integers_for_enums=False))
        spec = data.get("job_spec") or {}
        if spec.get("worker_pool_specs"):
            spec["worker_pool_specs"] = [normalize_pool(p) for p in spec["worker_pool_specs"]]
        return data
    pb = getattr(value, "_pb", None) or value
    if hasattr(pb, "DESCRIPTOR"):
        from google.protobuf.json_format import MessageToDict

        return MessageToDict(pb, preserving_proto_field_name=True)
    raise TypeError(
        f"{what} must be a dict or a google.cloud.aiplatform_v1 message, got {type(value).__name__}"
    )


def duration(value: timedelta) -> str:
    """A duration as protobuf's JSON writes it: ``"3600s"``, ``"0.5s"``."""
    seconds = value.total_seconds()
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{seconds:.9f}".rstrip("0") + "s"


def jsonable(value: Any) -> Any:
    """A spec as protobuf's JSON takes it: durations as ``"Ns"``, times in RFC 3339, enums by name,
    tuples as lists; the rest as it is (a wrong value is then refused with the field's name)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, timedelta):
        return duration(value)
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return aware.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    if isinstance(value, enum.Enum):
        return value.name
    return value


def spec_accelerators(job: Mapping[str, Any]) -> tuple[int, str, str]:
    """(accelerators over every pool and replica, the first accelerator type, the first machine
    type) of a JSON ``CustomJob`` spec; ``0, "", ...`` for a job without accelerators."""
    total, accelerator, machine = 0, "", ""
    for pool in (job.get("job_spec") or {}).get("worker_pool_specs") or []:
        spec = pool.get("machine_spec") or {}
        machine = machine or str(spec.get("machine_type") or "")
        count = int(spec.get("accelerator_count") or 0)
        if count:
            accelerator = accelerator or str(spec.get("accelerator_type") or "")
            total += count * max(int(pool.get("replica_count") or 0), 1)
    return total, accelerator, machine


def check_pools(op: Any, pools: Any, where: str, skip: Any) -> None:
    """Worker pool specs as Flex Start takes them: one machine spec, its own GPUs, an image."""
    if skip(pools):
        return
    if isinstance(pools, (str, bytes, Mapping)) or not isinstance(pools, Sequence):
        raise op._param_error(f"{where} must be a list of worker pool specs, got {type(pools).__name__}")
    if not pools:
        raise op._param_error(f"{where} must hold at least one worker pool spec")
    specs: list[dict[str, Any]] = []
    for index, pool in enumerate(pools):
        try:
            spec = as_dict(pool, f"{where}[{index}]")
        except TypeError as err:
            raise op._param_error(str(err)) from None
        specs.append(spec)
        _check_pool(op, spec, f"{where}[{index}]", skip, first=index == 0)
    machines = [
        {k: v for k, v in (s.get("machine_spec") or {}).items() if k != "reservation_affinity"}
        for s in specs
        if s
    ]
    if not any(has_template(m) for m in machines) and any(m != machines[0] for m in machines):
        raise op._param_error(
            f"{where}: every worker pool must use the same machine_spec under Flex Start, got "
            + ", ".join(str(m) for m in machines)
        )
    if machines and not has_template(machines[0]):
        _check_machine(op, machines[0], f"{where}[0].machine_spec")


def _check_machine(op: Any, machine: Mapping[str, Any], where: str) -> None:
    """The GPUs must be the ones the machine type comes with (a3-highgpu-8g: 8 x H100 80GB)."""
    accel = machine.get("accelerator_type")
    if isinstance(accel, int) and not isinstance(accel, bool):
        accel = {v: k for k, v in catalog.VERTEX_ACCELERATOR_TYPES.items()}.get(accel, accel)
    error = catalog.gpu_machine_error(
        str(machine.get("machine_type")), accel, machine.get("accelerator_count", 0)
    )
    if error:
        raise op._param_error(f"{where}: {error}")


def _check_pool(op: Any, spec: dict[str, Any], where: str, skip: Any, *, first: bool) -> None:
    if not spec:
        if first:
            raise op._param_error(f"{where} is empty; the first worker pool (the chief) is required")
        return  # An empty pool is how Vertex AI spells "no replicas of this kind".
    unknown = set(spec) - WORKER_POOL_FIELDS
    if unknown:
        raise op._param_error(f"{where} has unknown field(s) {sorted(unknown)}")
    machine = spec.get("machine_spec")
    if not isinstance(machine, Mapping) or not machine.get("machine_type"):
        raise op._param_error(f"{where}.machine_spec.machine_type is required (e.g. 'a3-highgpu-8g')")
    accel = machine.get("accelerator_type")
    count = machine.get("accelerator_count", 0)
    if not skip(accel):
        names = set(catalog.VERTEX_ACCELERATOR_TYPES)
        if isinstance(accel, int) and not isinstance(accel, bool):
            by_value = {v: k for k, v in catalog.VERTEX_ACCELERATOR_TYPES.items()}
            accel = by_value.get(accel, accel)
        if accel is None or accel == "ACCELERATOR_TYPE_UNSPECIFIED":
            raise op._param_error(
                f"{where}.machine_spec.accelerator_type is required: Flex Start schedules GPUs, one of "
                f"{sorted(FLEX_START_ACCELERATORS)}"
            )
        if accel not in names:
            raise op._param_error(
                f"{where}.machine_spec.accelerator_type {accel!r} is not a Vertex AI accelerator type; "
                f"Flex Start accepts {sorted(FLEX_START_ACCELERATORS)}"
            )
        if accel not in FLEX_START_ACCELERATORS:
            raise op._param_error(
                f"{where}.machine_spec.accelerator_type {accel!r} is not offered by Flex Start; "
                f"use one of {sorted(FLEX_START_ACCELERATORS)}"
            )
    if not skip(count):
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 16:
            raise op._param_error(
                f"{where}.machine_spec.accelerator_count must be an integer from 1 to 16, got {count!r}"
            )
    replicas = spec.get("replica_count", 1 if first else 0)
    if not skip(replicas):
        low = 1 if first else 0
        if isinstance(replicas, bool) or not isinstance(replicas, int) or not low <= replicas <= 1000:
            raise op._param_error(
                f"{where}.replica_count must be an integer from {low} to 1000, got {replicas!r}"
            )
    if not spec.get("container_spec") and not spec.get("python_package_spec"):
        raise op._param_error(f"{where} needs a container_spec (with image_uri) or a python_package_spec")
    container = spec.get("container_spec")
    if container is not None and not skip(container):
        if not isinstance(container, Mapping) or not container.get("image_uri"):
            raise op._param_error(f"{where}.container_spec.image_uri is required")
    if op._rendered and not has_template(spec):
        # The message itself is built only after rendering (in the worker), not at parse time.
        from google.cloud.aiplatform_v1 import WorkerPoolSpec

        try:
            WorkerPoolSpec(spec)
        except (TypeError, ValueError, KeyError) as err:
            raise op._param_error(f"{where} is not a valid WorkerPoolSpec: {err}") from None


def check_worker_pool_specs(op: Any, pools: Any, skip: Any) -> None:
    """The ``worker_pool_specs`` parameter (see :func:`check_pools`)."""
    check_pools(op, pools, "worker_pool_specs", skip)


def check_custom_job(op: Any, job: Any, skip: Any) -> None:
    """A whole CustomJob: its pools, and no scheduling fields the operator sets itself."""
    if skip(job):
        return
    try:
        data = as_dict(job, "custom_job")
    except TypeError as err:
        raise op._param_error(str(err)) from None
    spec = data.get("job_spec")
    if not isinstance(spec, Mapping):
        raise op._param_error("custom_job.job_spec is required (with worker_pool_specs)")
    scheduling = spec.get("scheduling") or {}
    for field in ("strategy", "max_wait_duration", "timeout"):
        value = scheduling.get(field)
        if value not in (None, "", 0, "STRATEGY_UNSPECIFIED", "FLEX_START", "0s"):
            raise op._param_error(
                f"custom_job.job_spec.scheduling.{field} is set by the operator (strategy FLEX_START, "
                f"max_wait, max_run); remove it, got {value!r}"
            )
    check_pools(op, spec.get("worker_pool_specs"), "custom_job.job_spec.worker_pool_specs", skip)

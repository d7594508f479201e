"""Vertex AI inference on flex-start (``aiplatform.v1beta1``, Preview): names, shapes, limits.

Read without the client library, so an operator at parse time and a task that only names its
request (its region, its console link) import neither the client nor a backend. The facts, from
Google's "Use Flex-start VMs with inference" page and the ``aiplatform.v1beta1`` discovery
document (read 2026-12):

* ``DedicatedResources.flexStart.maxRuntimeDuration`` (deploy) and
  ``BatchDedicatedResources.flexStart`` (batch prediction): at most 7 days; a deployed model is
  undeployed when it ends, counted from the deploy request.
* No TPU Pods, no queued provisioning, preemptible quota; billed only while running.
* The request itself has no max wait: the provider keeps the max wait and gives the request up.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from airflow_provider_dws import facts
from airflow_provider_dws.patterns import LazyPattern

#: The backends' kinds (their ``kind`` and the records' ``api``).
VERTEX_BATCH_KIND = "vertex_batch_prediction"
VERTEX_DEPLOYMENT_KIND = "vertex_endpoint_deployment"

#: A flex-start deployment or batch job runs at most 7 days (``maxRuntimeDuration``).
MAX_RUNTIME_LIMIT = timedelta(days=7)

#: GPUs flex-start inference takes, on their accelerator-optimized machine types: the flex-start
#: GPUs without A4X's GB200 ("Flex-start VMs support all accelerator-optimized machine types
#: (except A4X and G4)", Compute Engine, read 2026-12; the inference page names no other limit
#: than TPU Pods). N1 machines with attached GPUs are not offered: no flex-start page names them
#: for inference.
INFERENCE_FLEX_START_GPUS = facts.FLEX_START_GPUS - {"NVIDIA_GB200"}
#: Machine type -> (GPU, GPUs per machine) for the machines above.
INFERENCE_MACHINES: dict[str, tuple[str, int]] = {
    machine: row for machine, row in facts.GPU_MACHINE_ROWS.items() if row[0] in INFERENCE_FLEX_START_GPUS
}

#: ``instancesFormat`` and ``predictionsFormat`` values the discovery document lists.
INSTANCES_FORMATS = frozenset({"jsonl", "csv", "bigquery", "tf-record", "tf-record-gzip", "file-list"})
PREDICTIONS_FORMATS = frozenset({"jsonl", "csv", "bigquery"})

_BATCH_NAME = LazyPattern(r"projects/([^/]+)/locations/([^/]+)/batchPredictionJobs/([^/]+)")
_ENDPOINT_NAME = LazyPattern(r"projects/([^/]+)/locations/([^/]+)/endpoints/([^/]+)")
_OPERATION_NAME = LazyPattern(r"(projects/[^/]+/locations/([^/]+)/endpoints/([^/]+))/operations/([^/]+)")


def parse_batch_job_name(name: str) -> tuple[str, str]:
    """Split ``projects/P/locations/R/batchPredictionJobs/ID`` into (region, job id)."""
    match = _BATCH_NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"not a Vertex AI batch prediction job name: {name!r}")
    return match.group(2), match.group(3)


def parse_endpoint_name(name: str) -> tuple[str, str]:
    """Split ``projects/P/locations/R/endpoints/ID`` into (region, endpoint id)."""
    match = _ENDPOINT_NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"not a Vertex AI endpoint name: {name!r}")
    return match.group(2), match.group(3)


def parse_operation_name(name: str) -> tuple[str, str]:
    """Split a deploy operation ``projects/P/locations/R/endpoints/E/operations/O`` into (its
    endpoint's full name, region)."""
    match = _OPERATION_NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"not a Vertex AI endpoint operation name: {name!r}")
    return match.group(1), match.group(2)


def machine_spec(machine_type: str) -> dict[str, Any]:
    """The ``MachineSpec`` of an accelerator-optimized machine type, with its own GPUs."""
    accelerator, count = INFERENCE_MACHINES.get(machine_type, ("", 0))
    spec: dict[str, Any] = {"machine_type": machine_type}
    if count:
        spec.update(accelerator_type=accelerator, accelerator_count=count)
    return spec


def spec_shape(resources: Mapping[str, Any], replicas_key: str) -> tuple[int, str, str]:
    """(GPUs over the replicas asked for, the GPU, the machine type) of JSON dedicated resources
    (``replicas_key``: ``starting_replica_count`` or ``min_replica_count``)."""
    spec = resources.get("machine_spec") or {}
    replicas = int(resources.get(replicas_key) or resources.get("max_replica_count") or 1)
    count = int(spec.get("accelerator_count") or 0)
    return count * replicas, str(spec.get("accelerator_type") or ""), str(spec.get("machine_type") or "")


def deployed_model_id(key: str, try_number: int, attempt: int) -> str:
    """The id of the deployed model of one try and attempt: 10 digits from the task instance's
    identity key, the Airflow try and the attempt (``DeployedModel.id`` takes 1 to 10 digits), so
    a lookup finds it again and no two submissions share one."""
    import hashlib

    digest = hashlib.sha256(f"{key}/t{try_number}/a{attempt}".encode()).digest()
    return str(1_000_000_000 + int.from_bytes(digest[:8], "big") % 9_000_000_000)


def endpoint_id(key: str) -> str:
    """The id of a task instance's own endpoint: ``dws-`` and 20 hex digits of its identity key (an
    id starting with a letter takes up to 63 of ``[a-z0-9-]``)."""
    import hashlib

    return "dws-" + hashlib.sha256(key.encode()).hexdigest()[:20]

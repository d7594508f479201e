"""Vertex AI batch prediction jobs on flex-start (``aiplatform.v1beta1``), as DWS capacity requests.

Everything but the message is :class:`~.vertex_ai.VertexJobBackend`'s: the identity labels and
lookups, the ``JobState`` table, the live and ended lists, cancel. A batch prediction job has no
max wait of its own: the trigger gives it up at the provider's (the adapter's ``wait_grace = 0``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends.base import RESULT, RequestStatus
from airflow_provider_dws.backends.vertex_ai import (
    VERTEX_JOB_STATES,
    VertexJobBackend,
    classify_vertex_job,
    enum_names,
    message_class,
    message_dict,
    message_from_spec,
    raw_version,
    when,
)
from airflow_provider_dws.hooks.vertex_ai import DwsVertexAIBetaHook, DwsVertexAIBetaJobsAsyncHook
from airflow_provider_dws.scheduling.identity import LABEL_ATTEMPT, LABEL_TRY
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings, StateTable
from airflow_provider_dws.specs.vertex_inference import VERTEX_BATCH_KIND, parse_batch_job_name

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1beta1 import BatchPredictionJob


_MESSAGE = "google.cloud.aiplatform_v1beta1:BatchPredictionJob"
_MODULE = "google.cloud.aiplatform_v1beta1"


def _raw(job: BatchPredictionJob) -> Any:
    """The protobuf message under a proto-plus ``BatchPredictionJob`` (read without conversion)."""
    return message_class(_MESSAGE).pb(job)


def classify_batch_job(
    state_name: str, *, started: bool, error_code: int = 0, error_message: str = ""
) -> Outcome:
    """As a custom job's (:func:`~.vertex_ai.classify_vertex_job`), but a batch job that failed before
    it started is capacity not obtained only for the codes of capacity (a stock-out, a deadline,
    unavailable, none given): a missing input (NOT_FOUND) or permission is a bad request, another
    code a failure of the job. A partial success is a success: its predictions are there, with the
    failed count in ``completion_stats``."""
    if state_name == "JOB_STATE_PARTIALLY_SUCCEEDED":
        return Outcome(Phase.SUCCEEDED, None, error_message)
    outcome = classify_vertex_job(
        state_name, started=started, error_code=error_code, error_message=error_message
    )
    if outcome.phase is not Phase.NOT_OBTAINED or error_code in _CAPACITY_CODES:
        return outcome
    if error_code in _BAD_REQUEST_CODES:
        return Outcome(Phase.FAILED, FailureKind.BAD_REQUEST, error_message)
    return Outcome(Phase.FAILED, FailureKind.WORKLOAD_FAILED, error_message)


#: google.rpc codes of a job that failed for capacity: none, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
#: UNAVAILABLE; and of a request that cannot succeed: NOT_FOUND, PERMISSION_DENIED.
_CAPACITY_CODES = frozenset({0, 4, 8, 14})
_BAD_REQUEST_CODES = frozenset({5, 7})
BATCH_JOB_STATES = StateTable(
    VERTEX_BATCH_KIND,
    {**VERTEX_JOB_STATES.phases, "JOB_STATE_PARTIALLY_SUCCEEDED": Phase.SUCCEEDED},
    classify_batch_job,
)


def batch_shape(raw: Any) -> tuple[int, str, str]:
    """(GPUs over the replicas it starts with, the GPU, the machine type) of a raw job."""
    resources = raw.dedicated_resources
    spec = resources.machine_spec
    replicas = resources.starting_replica_count or resources.max_replica_count or 1
    accelerator = (
        enum_names("AcceleratorType", _MODULE).get(spec.accelerator_type, "")
        if spec.accelerator_count
        else ""
    )
    return spec.accelerator_count * replicas, accelerator, spec.machine_type


def batch_status(job: BatchPredictionJob) -> RequestStatus:
    """Classify a ``BatchPredictionJob`` into the shared vocabulary (pure: no API call)."""
    raw = _raw(job)
    region = parse_batch_job_name(raw.name)[0] if raw.name else ""
    state = enum_names("JobState", _MODULE).get(raw.state, str(raw.state))
    started = when(raw, "start_time")
    outcome = BATCH_JOB_STATES.classify(
        state, started=started is not None, error_code=raw.error.code, error_message=raw.error.message
    )
    total, accelerator, machine = batch_shape(raw)
    what = f"{total} x {accelerator}" if accelerator else (machine or "CPU")
    attempt = raw.labels.get(LABEL_ATTEMPT, "")
    details: dict[str, Any] = {
        "display_name": raw.display_name,
        "region": region,
        "max_wait_seconds": None,
        "attempt": int(attempt) if attempt.isdigit() else 1,
        "try": int(tried) if (tried := raw.labels.get(LABEL_TRY, "")).isdigit() else None,
    }
    if outcome.phase is Phase.SUCCEEDED:
        details[RESULT] = message_dict(message_class(_MESSAGE), job)
    return RequestStatus(
        name=raw.name,
        state=state,
        outcome=outcome,
        timings=RequestTimings(
            submitted=when(raw, "create_time"), started=started, finished=when(raw, "end_time")
        ),
        description=f"flex-start {what} in {region}",
        details=details,
    )


def batch_from_spec(spec: dict[str, Any]) -> BatchPredictionJob:
    """The ``BatchPredictionJob`` of a JSON request spec; an unknown field is refused (``ValueError``)."""
    job: BatchPredictionJob = message_from_spec(message_class(_MESSAGE), spec)
    return job


def batch_version(job: BatchPredictionJob) -> tuple[int, int, int]:
    """The update time and the state, read from the raw message."""
    return raw_version(_raw(job))


class VertexBatchPredictionBackend(VertexJobBackend):
    """Create, find, read and cancel batch prediction jobs through ``aiplatform_v1beta1``."""

    kind = VERTEX_BATCH_KIND
    resource = "batch_prediction_job"
    client_module = "google.cloud.aiplatform_v1beta1"
    noun = "batch prediction job"
    sync_hook_class = DwsVertexAIBetaHook
    async_hook_class = DwsVertexAIBetaJobsAsyncHook

    def status_of(self, job: Any) -> RequestStatus:
        """:func:`batch_status`."""
        return batch_status(job)

    def message_of(self, spec: dict[str, Any]) -> Any:
        """:func:`batch_from_spec`."""
        return batch_from_spec(spec)

    version_of = staticmethod(batch_version)

"""Vertex AI batch prediction jobs on flex-start (``aiplatform.v1beta1``), as DWS capacity requests.

Everything but the message is :class:`~.vertex_ai.VertexJobBackend`'s: the identity labels and
lookups, the ``JobState`` table, the live and ended lists, cancel. A batch prediction job has no
max wait of its own: the trigger gives it up at the provider's (the adapter's ``wait_grace = 0``).
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from airflow_provider_dws.backends.base import RESULT, RequestStatus
from airflow_provider_dws.backends.vertex_ai import VERTEX_JOB_STATES, VertexJobBackend, when
from airflow_provider_dws.hooks.vertex_ai import DwsVertexAIBetaHook, DwsVertexAIBetaJobsAsyncHook
from airflow_provider_dws.scheduling.identity import LABEL_ATTEMPT, LABEL_TRY
from airflow_provider_dws.scheduling.phases import RequestTimings
from airflow_provider_dws.specs.vertex_inference import VERTEX_BATCH_KIND, parse_batch_job_name

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1beta1 import BatchPredictionJob


@functools.cache
def _names(enum_name: str) -> dict[int, str]:
    """Number -> name of one of ``aiplatform_v1beta1``'s enums."""
    from google.cloud import aiplatform_v1beta1

    return {member.value: member.name for member in getattr(aiplatform_v1beta1, enum_name)}


def _raw(job: BatchPredictionJob) -> Any:
    """The protobuf message under a proto-plus ``BatchPredictionJob`` (read without conversion)."""
    from google.cloud.aiplatform_v1beta1 import BatchPredictionJob as Message

    return Message.pb(job)


def batch_shape(raw: Any) -> tuple[int, str, str]:
    """(GPUs over the replicas it starts with, the GPU, the machine type) of a raw job."""
    resources = raw.dedicated_resources
    spec = resources.machine_spec
    replicas = resources.starting_replica_count or resources.max_replica_count or 1
    accelerator = _names("AcceleratorType").get(spec.accelerator_type, "") if spec.accelerator_count else ""
    return spec.accelerator_count * replicas, accelerator, spec.machine_type


def batch_status(job: BatchPredictionJob) -> RequestStatus:
    """Classify a ``BatchPredictionJob`` into the shared vocabulary (pure: no API call)."""
    raw = _raw(job)
    region = parse_batch_job_name(raw.name)[0] if raw.name else ""
    state = _names("JobState").get(raw.state, str(raw.state))
    started = when(raw, "start_time")
    outcome = VERTEX_JOB_STATES.classify(
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
    if state == "JOB_STATE_SUCCEEDED":
        details[RESULT] = batch_dict(job)
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


def batch_dict(job: BatchPredictionJob) -> dict[str, Any]:
    """A ``BatchPredictionJob`` as the task returns it: proto field names, enums by name."""
    from google.cloud.aiplatform_v1beta1 import BatchPredictionJob as Message

    return dict(Message.to_dict(job, use_integers_for_enums=False, preserving_proto_field_name=True))


def batch_from_spec(spec: dict[str, Any]) -> BatchPredictionJob:
    """The ``BatchPredictionJob`` of a JSON request spec; an unknown field is refused (``ValueError``)."""
    from google.cloud.aiplatform_v1beta1 import BatchPredictionJob as Message
    from google.protobuf.json_format import ParseError

    try:
        return Message.from_json(json.dumps(spec))
    except ParseError as err:
        raise ValueError(f"not a valid BatchPredictionJob: {err}") from None


def batch_version(job: BatchPredictionJob) -> tuple[int, int, int]:
    """The update time and the state, read from the raw message."""
    raw = _raw(job)
    return raw.update_time.seconds, raw.update_time.nanos, raw.state


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

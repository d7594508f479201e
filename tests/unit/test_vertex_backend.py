"""Pure parts of the Vertex AI backend: job names, descriptions and classification."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from google.cloud.aiplatform_v1 import CustomJob, JobState

from airflow_provider_dws.backends.base import RESULT, RequestStatus
from airflow_provider_dws.backends.vertex_ai import (
    VertexCustomJobBackend,
    describe_job,
    job_status,
    parse_job_name,
)
from airflow_provider_dws.registry import backend_from_spec
from airflow_provider_dws.scheduling.phases import FailureKind, Phase

NAME = "projects/my-proj/locations/europe-west4/customJobs/987"
T0 = datetime(2026, 2, 1, 8, 0, tzinfo=timezone.utc)


def job(state: JobState, *, started: bool = False, error_code: int = 0, **extra) -> CustomJob:
    j = CustomJob(
        name=NAME,
        display_name="train",
        state=state,
        create_time=T0,
        job_spec={
            "worker_pool_specs": [
                {
                    "machine_spec": {
                        "machine_type": "a3-highgpu-8g",
                        "accelerator_type": "NVIDIA_H100_80GB",
                        "accelerator_count": 8,
                    },
                    "replica_count": 2,
                },
                {},
                {
                    "machine_spec": {
                        "machine_type": "a3-highgpu-8g",
                        "accelerator_type": "NVIDIA_H100_80GB",
                        "accelerator_count": 8,
                    },
                    "replica_count": 1,
                },
            ],
            "scheduling": {"strategy": "FLEX_START", "max_wait_duration": timedelta(hours=2)},
        },
        **extra,
    )
    if started:
        j.start_time = T0 + timedelta(minutes=10)
    if error_code:
        j.error.code = error_code
        j.error.message = "boom"
    return j


def test_parse_job_name() -> None:
    assert parse_job_name(NAME) == ("europe-west4", "987")


@pytest.mark.parametrize(
    "name",
    ["", "customJobs/1", "projects/p/locations/r/customJobs/", "projects/p/locations/r/hp/1", NAME + "/x"],
)
def test_parse_bad_job_name(name: str) -> None:
    with pytest.raises(ValueError, match="not a Vertex AI custom job name"):
        parse_job_name(name)


def test_describe_job_counts_every_replica() -> None:
    assert (
        describe_job(job(JobState.JOB_STATE_QUEUED), "europe-west4")
        == "24 x NVIDIA_H100_80GB in europe-west4"
    )


def test_describe_cpu_job() -> None:
    cpu = CustomJob(job_spec={"worker_pool_specs": [{"machine_spec": {"machine_type": "n2-standard-4"}}]})
    assert describe_job(cpu, "us-central1") == "n2-standard-4 in us-central1"
    assert describe_job(CustomJob(), "us-central1") == "CPU in us-central1"


def test_job_status_waiting() -> None:
    status = job_status(job(JobState.JOB_STATE_PENDING))
    assert status.name == NAME
    assert status.state == "JOB_STATE_PENDING"
    assert status.phase is Phase.WAITING
    assert status.timings.submitted == T0
    assert status.details == {
        "display_name": "train",
        "region": "europe-west4",
        "max_wait_seconds": 7200.0,
        "attempt": 1,
        "try": None,  # the job carries no try label
    }


def test_job_status_expired_without_start_is_not_obtained() -> None:
    status = job_status(job(JobState.JOB_STATE_EXPIRED, end_time=T0 + timedelta(hours=2)))
    assert status.phase is Phase.NOT_OBTAINED
    assert status.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED
    assert status.timings.wait_seconds == 7200.0
    assert status.timings.run_seconds == 0.0


def test_job_status_failed_after_start_is_workload_failure() -> None:
    status = job_status(job(JobState.JOB_STATE_FAILED, started=True, error_code=13))
    assert status.outcome.failure is FailureKind.WORKLOAD_FAILED
    assert status.outcome.message == "boom"


def test_job_status_bad_request() -> None:
    status = job_status(job(JobState.JOB_STATE_FAILED, error_code=3))
    assert status.outcome.failure is FailureKind.BAD_REQUEST


def test_status_event_round_trip() -> None:
    status = job_status(
        job(JobState.JOB_STATE_SUCCEEDED, started=True, end_time=T0 + timedelta(hours=1, minutes=10))
    )
    event = status.to_event()
    assert event["phase"] == "succeeded"
    assert event["timings"]["wait_seconds"] == 600.0
    assert event["timings"]["run_seconds"] == 3600.0
    # Everything but the details (region, display name, max wait), which the task has itself.
    # Only what the task returns travels from the details (the job as a dict, for a success).
    assert RequestStatus.from_event(event) == replace(status, details={RESULT: status.details[RESULT]})
    assert "details" not in event


def test_backend_spec_round_trip() -> None:
    backend = VertexCustomJobBackend("my-proj", "us-central1", "gc", ("a@b.com", "c@d.com"))
    assert backend.parent == "projects/my-proj/locations/us-central1"
    spec = backend.spec()
    assert spec["impersonation_chain"] == ["a@b.com", "c@d.com"]
    rebuilt = backend_from_spec("vertex_custom_job", spec)
    assert isinstance(rebuilt, VertexCustomJobBackend)
    assert rebuilt.spec() == spec


def test_unknown_backend_kind() -> None:
    with pytest.raises(
        ValueError,
        match=r"unknown DWS backend kind 'gke'; known: \['batch_job', 'compute_future_reservation', "
        r"'compute_instance_set', 'compute_resize_request', 'gke_flex_start_job', 'gke_kueue_job', 'gke_provisioning_request', "
        r"'tpu_flex_start', 'tpu_queued_resource', 'vertex_batch_prediction', 'vertex_custom_job', "
        r"'vertex_endpoint_deployment'\]",
    ):
        backend_from_spec("gke", {})

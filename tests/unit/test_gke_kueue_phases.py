"""The Kueue Job table: a Job and its Workload into the shared phases, and the timings read off them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from airflow_provider_dws.backends.kueue import job_state, job_status, workload_of
from airflow_provider_dws.backends.kueue_states import (
    KUEUE_JOB_STATE_PHASES,
    KUEUE_JOB_STATES,
    classify_kueue_job,
)
from airflow_provider_dws.scheduling.phases import FailureKind, Phase

T0 = "2026-12-01T10:00:00Z"
T1 = "2026-12-01T10:30:00Z"
T2 = "2026-12-01T11:30:00Z"
UID = "5f0c-job-uid"


def job(
    *, suspend: bool = True, conditions: list[dict[str, Any]] | None = None, **status: Any
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "dws-train-0123456789abcdef-t1-a1",
            "namespace": "default",
            "uid": UID,
            "creationTimestamp": T0,
            "labels": {"kueue.x-k8s.io/queue-name": "dws", "dws_attempt": "2", "dws_max_wait": "3600"},
        },
        "spec": {
            "suspend": suspend,
            "parallelism": 2,
            "template": {
                "spec": {
                    "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
                    "containers": [
                        {"name": "main", "image": "img", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
                    ],
                }
            },
        },
        "status": {"conditions": conditions or [], **status},
    }


def workload(
    *,
    conditions: dict[str, tuple[str, str, str]] | None = None,
    checks: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """``conditions``: type -> (reason, message, lastTransitionTime), all True."""
    return {
        "metadata": {
            "name": "job-dws-train-0123456789abcdef-t1-a1-3f2a1",
            "namespace": "default",
            "creationTimestamp": T0,
            "labels": {"kueue.x-k8s.io/job-uid": UID},
            "ownerReferences": [{"kind": "Job", "uid": UID, "name": "x"}],
        },
        "spec": {"queueName": "dws", **spec},
        "status": {
            "conditions": [
                {"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": when}
                for t, (r, m, when) in (conditions or {}).items()
            ],
            "admissionChecks": checks or [],
        },
    }


def check(state: str, message: str = "", when: str = T1) -> dict[str, Any]:
    return {"name": "dws-prov", "state": state, "message": message, "lastTransitionTime": when}


def test_every_state_has_a_phase_and_live_states_come_from_the_table() -> None:
    assert set(KUEUE_JOB_STATES.live_states()) == {
        "Suspended",
        "Queued",
        "AwaitingCapacity",
        "Requeued",
        "Admitted",
        "Running",
    }
    assert KUEUE_JOB_STATES.api == "gke_kueue_job"
    for state, phase in KUEUE_JOB_STATE_PHASES.items():
        assert classify_kueue_job(state).phase is phase
    assert KUEUE_JOB_STATES.phase("SomethingNew") is Phase.WAITING  # unknown: keep watching


@pytest.mark.parametrize(
    ("state", "failure"),
    [
        ("Failed", FailureKind.WORKLOAD_FAILED),
        ("Rejected", FailureKind.CAPACITY_NOT_OBTAINED),
        ("CapacityRevoked", FailureKind.PREEMPTED),
        ("Deleting", FailureKind.CANCELLED),
        ("Complete", None),
        ("Running", None),
    ],
)
def test_each_end_has_its_reason_and_keeps_the_message(state: str, failure: FailureKind | None) -> None:
    outcome = classify_kueue_job(state, message="what Kueue said")
    assert outcome.failure is failure
    assert outcome.message == "what Kueue said"
    assert classify_kueue_job(state).message or failure is None  # a default message for every failure


def test_a_suspended_job_without_a_workload_waits() -> None:
    assert job_state(job(), None)[0] == "Suspended"
    assert job_status(job(), None).phase is Phase.WAITING


def test_a_workload_without_quota_is_queued_with_kueues_words() -> None:
    wl = workload()
    wl["status"]["conditions"] = [
        {
            "type": "QuotaReserved",
            "status": "False",
            "reason": "Pending",
            "message": "couldn't assign flavors",
        }
    ]
    assert job_state(job(), wl) == ("Queued", "couldn't assign flavors")


def test_quota_reserved_with_the_provisioning_check_pending_awaits_capacity() -> None:
    wl = workload(
        conditions={"QuotaReserved": ("QuotaReserved", "", T0)}, checks=[check("Pending", "Accepted")]
    )
    state, message = job_state(job(), wl)
    assert state == "AwaitingCapacity"
    assert "dws-prov Pending: Accepted" in message
    assert job_status(job(), wl).phase is Phase.WAITING
    retry = workload(
        conditions={"QuotaReserved": ("QuotaReserved", "", T0)}, checks=[check("Retry", "Failed")]
    )
    assert job_state(job(), retry)[0] == "AwaitingCapacity"


def test_admitted_but_still_suspended_is_provisioning_and_unsuspended_is_running() -> None:
    admitted = workload(
        conditions={"QuotaReserved": ("", "", T0), "Admitted": ("Admitted", "", T1)}, checks=[check("Ready")]
    )
    assert job_status(job(), admitted).phase is Phase.PROVISIONING
    running = job_status(job(suspend=False, startTime=T1, active=2), admitted)
    assert running.state == "Running"
    assert running.phase is Phase.RUNNING
    assert running.timings.wait_seconds == 1800.0  # until admission


def test_a_complete_job_succeeded_with_its_counts_and_timings() -> None:
    done = job(
        suspend=False,
        startTime=T1,
        completionTime=T2,
        succeeded=2,
        conditions=[{"type": "Complete", "status": "True", "lastTransitionTime": T2}],
    )
    status = job_status(done, workload(conditions={"Admitted": ("", "", T1), "Finished": ("", "", T2)}))
    assert (status.state, status.phase) == ("Complete", Phase.SUCCEEDED)
    assert status.timings.wait_seconds == 1800.0
    assert status.timings.run_seconds == 3600.0
    assert status.details["succeeded"] == 2
    assert status.details["attempt"] == 2
    assert status.details["max_wait_seconds"] == 3600.0
    assert status.description == "2 pods x 8 nvidia-h100-80gb in namespace default, queue dws"


def test_a_failed_job_is_the_workloads_failure_with_its_reason() -> None:
    failed = job(
        suspend=False,
        startTime=T1,
        failed=1,
        conditions=[
            {
                "type": "Failed",
                "status": "True",
                "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit",
                "lastTransitionTime": T2,
            }
        ],
    )
    status = job_status(failed, workload(conditions={"Admitted": ("", "", T1)}))
    assert status.state == "Failed"
    assert status.outcome.failure is FailureKind.WORKLOAD_FAILED
    assert "BackoffLimitExceeded" in status.outcome.message
    assert status.timings.finished == datetime(2026, 12, 1, 11, 30, tzinfo=timezone.utc)


def test_a_rejected_admission_check_is_capacity_not_obtained_with_its_message() -> None:
    wl = workload(
        conditions={"QuotaReserved": ("", "", T0)},
        checks=[check("Rejected", "ProvisioningRequest failed: no capacity in 3 attempts", T2)],
    )
    status = job_status(job(), wl)
    assert (status.state, status.phase) == ("Rejected", Phase.NOT_OBTAINED)
    assert status.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED
    assert "no capacity in 3 attempts" in status.outcome.message
    assert status.timings.started is None
    assert status.timings.wait_seconds == 5400.0  # all of it waiting, until the rejection


def test_a_workload_deactivated_for_an_admission_check_is_not_obtained() -> None:
    wl = workload(
        conditions={
            "Evicted": (
                "DeactivatedDueToAdmissionCheck",
                "The workload is deactivated due to an AdmissionCheck",
                T2,
            )
        },
        active=False,
    )
    state, message = job_state(job(), wl)
    assert state == "Rejected"
    assert "deactivated" in message


def test_evicted_for_capacity_revoked_is_preempted_not_a_workload_failure() -> None:
    wl = workload(
        conditions={
            "Evicted": ("DeactivatedDueToAdmissionCheck", "CapacityRevoked: maxRunDurationSeconds passed", T2)
        },
        active=False,
    )
    status = job_status(job(suspend=True), wl)
    assert status.state == "CapacityRevoked"
    assert status.outcome.failure is FailureKind.PREEMPTED
    # a Job failed by the nodes going away is preempted too
    failed = job(
        suspend=False,
        startTime=T1,
        conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}],
    )
    revoked = workload(checks=[check("Rejected", "capacity revoked")])
    assert job_status(failed, revoked).outcome.failure is FailureKind.PREEMPTED


def test_a_rejection_after_the_job_started_is_its_capacity_taken_back() -> None:
    wl = workload(conditions={"Admitted": ("", "", T1)}, checks=[check("Rejected", "nodes were deleted")])
    assert job_state(job(suspend=False, startTime=T1), wl)[0] == "CapacityRevoked"


def test_requeued_after_an_eviction_waits_again() -> None:
    wl = workload(conditions={"Evicted": ("Preempted", "preempted by a higher priority", T1)})
    assert job_status(job(), wl).state == "Requeued"
    assert job_status(job(), wl).phase is Phase.WAITING
    # When: the trigger's max wait counts anew from it after a run.
    assert job_status(job(), wl).details["requeued_at"] == "2026-12-01T10:30:00+00:00"
    queued = workload(conditions={"QuotaReserved": ("", "", T0)})
    assert "requeued_at" not in job_status(job(), queued).details


def test_a_job_being_deleted_is_cancelled() -> None:
    deleting = job()
    deleting["metadata"]["deletionTimestamp"] = T2
    assert job_status(deleting, None).phase is Phase.CANCELLED


def test_the_workload_is_found_by_its_uid_label_or_owner_reference() -> None:
    by_label = workload()
    by_label["metadata"]["ownerReferences"] = []
    by_owner = workload()
    by_owner["metadata"]["labels"] = {}
    other = workload()
    other["metadata"]["labels"] = {"kueue.x-k8s.io/job-uid": "another"}
    other["metadata"]["ownerReferences"] = [{"uid": "another"}]
    assert workload_of(job(), [other, by_label]) is by_label
    assert workload_of(job(), [other, by_owner]) is by_owner
    assert workload_of(job(), [other]) is None


def test_kueues_deactivation_for_a_revoked_request_is_preempted_in_the_emulators_words() -> None:
    # What Kueue (and the dws-emulator) leaves once the check was rejected for CapacityRevoked: the
    # checks reset to Pending, the Workload inactive and evicted with the check's message, the Job
    # suspended again with its startTime cleared.
    revoked = (
        'The workload is deactivated due to AdmissionCheck in Rejected state: "dws-prov" (The capacity of '
        "ProvisioningRequest default/job-x-dws-prov-1 was revoked: maxRunDurationSeconds (600) passed)"
    )
    wl = workload(
        conditions={"Evicted": ("DeactivatedDueToAdmissionCheck", revoked, T2)},
        checks=[check("Pending", "Reset to Pending after eviction. Previously: Rejected")],
        active=False,
    )
    status = job_status(job(), wl)
    assert status.state == "CapacityRevoked"
    assert status.outcome.failure is FailureKind.PREEMPTED
    assert "maxRunDurationSeconds (600) passed" in status.outcome.message
    failed = (
        'The workload is deactivated due to AdmissionCheck in Rejected state: "dws-prov" (FailedToBookCapacity: '
        "more GPUs than the pool can ever hold)"
    )
    wl = workload(conditions={"Evicted": ("DeactivatedDueToAdmissionCheck", failed, T2)}, active=False)
    assert job_status(job(), wl).outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED
    # between the two writes: inactive, not yet evicted
    wl = workload(
        conditions={"DeactivationTarget": ("AdmissionCheck", "AdmissionCheck in Rejected state", T2)},
        active=False,
    )
    assert job_state(job(), wl) == ("Rejected", "AdmissionCheck in Rejected state")

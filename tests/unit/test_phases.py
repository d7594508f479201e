"""The shared phase vocabulary and the Vertex AI state table."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from google.cloud.aiplatform_v1 import JobState

from airflow_provider_dws.backends.vertex_ai import VERTEX_JOB_STATE_PHASES, classify_vertex_job, vertex_phase
from airflow_provider_dws.scheduling.phases import FailureKind, Phase, RequestTimings

EXPECTED_PHASES = {
    "JOB_STATE_UNSPECIFIED": Phase.WAITING,
    "JOB_STATE_QUEUED": Phase.WAITING,
    "JOB_STATE_PENDING": Phase.WAITING,
    "JOB_STATE_PAUSED": Phase.WAITING,
    "JOB_STATE_RUNNING": Phase.RUNNING,
    "JOB_STATE_UPDATING": Phase.RUNNING,
    "JOB_STATE_SUCCEEDED": Phase.SUCCEEDED,
    "JOB_STATE_PARTIALLY_SUCCEEDED": Phase.FAILED,
    "JOB_STATE_FAILED": Phase.FAILED,
    "JOB_STATE_EXPIRED": Phase.FAILED,
    "JOB_STATE_CANCELLED": Phase.CANCELLED,
}


@pytest.mark.parametrize("state", [s.name for s in JobState])
def test_every_api_job_state_is_mapped(state: str) -> None:
    assert state in VERTEX_JOB_STATE_PHASES, f"JobState {state} has no phase; add it to the table"


def test_table_has_no_states_the_api_does_not_know() -> None:
    assert set(VERTEX_JOB_STATE_PHASES) == {s.name for s in JobState}


@pytest.mark.parametrize(("state", "phase"), sorted(EXPECTED_PHASES.items()))
def test_expected_phase_of_each_state(state: str, phase: Phase) -> None:
    assert vertex_phase(state) is phase


def test_cancelling_job_is_still_live() -> None:
    # Phase.terminal promises "can no longer change (and holds no capacity)". A CANCELLING job
    # violates both, so the trigger would stop watching it and reattach would submit a duplicate.
    assert vertex_phase("JOB_STATE_CANCELLING").live


def test_terminal_and_live_properties() -> None:
    terminal = {Phase.SUCCEEDED, Phase.FAILED, Phase.NOT_OBTAINED, Phase.CANCELLED}
    for phase in Phase:
        assert phase.terminal is (phase in terminal), phase
        assert phase.live is (phase not in terminal), phase


def test_unknown_state_name_keeps_waiting() -> None:
    assert vertex_phase("JOB_STATE_FROM_THE_FUTURE") is Phase.WAITING
    outcome = classify_vertex_job("JOB_STATE_FROM_THE_FUTURE", started=False)
    assert outcome.phase is Phase.WAITING
    assert outcome.failure is None


@pytest.mark.parametrize("state", ["JOB_STATE_FAILED", "JOB_STATE_EXPIRED"])
def test_failed_without_start_is_capacity_not_obtained(state: str) -> None:
    outcome = classify_vertex_job(state, started=False, error_code=4, error_message="stockout")
    assert outcome.phase is Phase.NOT_OBTAINED
    assert outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED
    assert outcome.message == "stockout"
    assert not outcome.succeeded


def test_failed_after_start_is_workload_failure() -> None:
    outcome = classify_vertex_job(
        "JOB_STATE_FAILED", started=True, error_code=13, error_message="non-zero status of 1"
    )
    assert outcome.phase is Phase.FAILED
    assert outcome.failure is FailureKind.WORKLOAD_FAILED
    assert outcome.message == "non-zero status of 1"


@pytest.mark.parametrize("code", [3, 9])
def test_invalid_argument_without_start_is_bad_request(code: int) -> None:
    outcome = classify_vertex_job("JOB_STATE_FAILED", started=False, error_code=code, error_message="bad")
    assert outcome.phase is Phase.FAILED
    assert outcome.failure is FailureKind.BAD_REQUEST


def test_cancelled() -> None:
    outcome = classify_vertex_job("JOB_STATE_CANCELLED", started=True, error_message="by user")
    assert outcome.phase is Phase.CANCELLED
    assert outcome.failure is FailureKind.CANCELLED
    assert outcome.message == "by user"


def test_succeeded_has_no_failure() -> None:
    outcome = classify_vertex_job("JOB_STATE_SUCCEEDED", started=True)
    assert outcome.phase is Phase.SUCCEEDED
    assert outcome.failure is None
    assert outcome.succeeded


@pytest.mark.parametrize("state", ["JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING"])
def test_live_states_have_no_failure(state: str) -> None:
    outcome = classify_vertex_job(state, started=state == "JOB_STATE_RUNNING")
    assert outcome.failure is None
    assert outcome.phase.live


T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def test_timings_wait_and_run() -> None:
    timings = RequestTimings(T0, T0 + timedelta(minutes=30), T0 + timedelta(hours=2, minutes=30))
    assert timings.wait_seconds == 1800.0
    assert timings.run_seconds == 7200.0


def test_timings_never_started() -> None:
    timings = RequestTimings(T0, None, T0 + timedelta(hours=1))
    assert timings.wait_seconds == 3600.0
    assert timings.run_seconds == 0.0


def test_timings_unknown() -> None:
    assert RequestTimings().wait_seconds is None
    assert RequestTimings().run_seconds is None
    assert RequestTimings(T0).wait_seconds is None
    assert RequestTimings(T0, T0).run_seconds is None


def test_timings_round_trip_keeps_time_zone() -> None:
    plus2 = timezone(timedelta(hours=2))
    timings = RequestTimings(T0, T0.astimezone(plus2) + timedelta(seconds=90), T0 + timedelta(hours=1))
    data = timings.to_dict()
    assert data["wait_seconds"] == 90.0
    assert data["run_seconds"] == 3510.0
    back = RequestTimings.from_dict(data)
    assert back == timings
    assert back.started is not None and back.started.utcoffset() == timedelta(hours=2)
    assert back.to_dict() == data


def test_timings_round_trip_of_empty() -> None:
    data = RequestTimings().to_dict()
    assert data == {
        "submitted": None,
        "started": None,
        "finished": None,
        "wait_seconds": None,
        "run_seconds": None,
    }
    assert RequestTimings.from_dict(data) == RequestTimings()
    assert RequestTimings.from_dict({}) == RequestTimings()


def test_state_tables_derive_live_states_and_classify() -> None:
    from airflow_provider_dws.backends.tpu import TPU_QUEUED_RESOURCE_STATES
    from airflow_provider_dws.backends.vertex_ai import VERTEX_JOB_STATES
    from airflow_provider_dws.scheduling.phases import FailureKind, Phase

    assert "JOB_STATE_CANCELLING" in VERTEX_JOB_STATES.live_states()
    assert "JOB_STATE_EXPIRED" not in VERTEX_JOB_STATES.live_states()
    assert set(TPU_QUEUED_RESOURCE_STATES.live_states()) == {
        "STATE_UNSPECIFIED",
        "CREATING",
        "ACCEPTED",
        "WAITING_FOR_RESOURCES",
        "PROVISIONING",
        "ACTIVE",
    }
    expired = VERTEX_JOB_STATES.classify("JOB_STATE_EXPIRED", started=False, error_code=0, error_message="")
    assert expired.failure is FailureKind.CAPACITY_NOT_OBTAINED
    assert TPU_QUEUED_RESOURCE_STATES.classify("SUSPENDED").failure is FailureKind.PREEMPTED
    assert TPU_QUEUED_RESOURCE_STATES.phase("NEW_STATE") is Phase.WAITING

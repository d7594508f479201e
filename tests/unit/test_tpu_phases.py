"""The Cloud TPU queued resource state table and the classification of how a request ended."""

from __future__ import annotations

import pytest
from google.cloud.tpu_v2 import QueuedResourceState

from airflow_provider_dws.backends.tpu import (
    TPU_QUEUED_RESOURCE_STATE_PHASES,
    classify_tpu_queued_resource,
    tpu_phase,
)
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase

API_STATES = [s.name for s in QueuedResourceState.State]

EXPECTED_PHASES = {
    "STATE_UNSPECIFIED": Phase.WAITING,
    "CREATING": Phase.WAITING,
    "ACCEPTED": Phase.WAITING,
    "WAITING_FOR_RESOURCES": Phase.WAITING,
    "PROVISIONING": Phase.PROVISIONING,
    "ACTIVE": Phase.RUNNING,
    "FAILED": Phase.NOT_OBTAINED,
    "SUSPENDING": Phase.FAILED,
    "SUSPENDED": Phase.FAILED,
    "DELETING": Phase.CANCELLED,
}

# google.rpc.Code numbers.
INVALID_ARGUMENT = 3
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
DEADLINE_EXCEEDED = 4
UNAVAILABLE = 14


@pytest.mark.parametrize("state", API_STATES)
def test_every_api_state_is_mapped(state: str) -> None:
    assert state in TPU_QUEUED_RESOURCE_STATE_PHASES, f"QueuedResourceState {state} has no phase"


def test_table_has_no_states_the_api_does_not_know() -> None:
    assert set(TPU_QUEUED_RESOURCE_STATE_PHASES) == set(API_STATES)


def test_expected_table_covers_the_api() -> None:
    assert set(EXPECTED_PHASES) == set(API_STATES)


@pytest.mark.parametrize(("state", "phase"), sorted(EXPECTED_PHASES.items()))
def test_phase_of_each_state(state: str, phase: Phase) -> None:
    assert tpu_phase(state) is phase
    assert TPU_QUEUED_RESOURCE_STATE_PHASES[state] is phase


@pytest.mark.parametrize("state", ["", "HIBERNATING", "active", "JOB_STATE_RUNNING"])
def test_unknown_state_keeps_being_watched(state: str) -> None:
    assert tpu_phase(state) is Phase.WAITING
    outcome = classify_tpu_queued_resource(state)
    assert outcome == Outcome(Phase.WAITING, None, "")
    assert outcome.phase.live


@pytest.mark.parametrize("code", [0, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, UNAVAILABLE, 13])
def test_failed_is_capacity_not_obtained_by_default(code: int) -> None:
    outcome = classify_tpu_queued_resource("FAILED", error_code=code, error_message="no capacity")
    assert outcome.phase is Phase.NOT_OBTAINED
    assert outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED
    assert outcome.message == "no capacity"
    assert outcome.phase.terminal
    assert not outcome.succeeded


@pytest.mark.parametrize("code", [INVALID_ARGUMENT, FAILED_PRECONDITION, PERMISSION_DENIED])
def test_failed_with_a_request_error_is_a_bad_request(code: int) -> None:
    outcome = classify_tpu_queued_resource("FAILED", error_code=code, error_message="bad runtime")
    assert outcome == Outcome(Phase.FAILED, FailureKind.BAD_REQUEST, "bad runtime")
    assert outcome.phase.terminal


@pytest.mark.parametrize("state", ["SUSPENDING", "SUSPENDED"])
def test_suspension_is_a_preemption(state: str) -> None:
    outcome = classify_tpu_queued_resource(state)
    assert outcome.phase is Phase.FAILED
    assert outcome.failure is FailureKind.PREEMPTED
    assert "preempted" in outcome.message
    assert outcome.phase.terminal
    # An error message from the API is kept rather than replaced.
    kept = classify_tpu_queued_resource(state, error_code=14, error_message="maintenance event")
    assert kept == Outcome(Phase.FAILED, FailureKind.PREEMPTED, "maintenance event")


def test_deleting_is_cancelled() -> None:
    outcome = classify_tpu_queued_resource("DELETING")
    assert outcome.phase is Phase.CANCELLED
    assert outcome.failure is FailureKind.CANCELLED
    assert "deleted" in outcome.message
    assert outcome.phase.terminal
    assert classify_tpu_queued_resource("DELETING", error_message="by admin").message == "by admin"


def test_active_is_running_and_not_terminal() -> None:
    outcome = classify_tpu_queued_resource("ACTIVE")
    assert outcome == Outcome(Phase.RUNNING, None, "")
    assert not outcome.phase.terminal
    assert outcome.phase.live
    assert not outcome.succeeded


@pytest.mark.parametrize("state", ["STATE_UNSPECIFIED", "CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES"])
def test_waiting_states_are_live_without_failure(state: str) -> None:
    outcome = classify_tpu_queued_resource(state)
    assert outcome == Outcome(Phase.WAITING, None, "")
    assert outcome.phase.live


def test_provisioning_is_live() -> None:
    outcome = classify_tpu_queued_resource("PROVISIONING")
    assert outcome == Outcome(Phase.PROVISIONING, None, "")
    assert outcome.phase.live


@pytest.mark.parametrize("state", [s for s in API_STATES if s != "FAILED"])
@pytest.mark.parametrize("code", [INVALID_ARGUMENT, PERMISSION_DENIED])
def test_only_failed_is_refined_by_error_codes(state: str, code: int) -> None:
    outcome = classify_tpu_queued_resource(state, error_code=code)
    assert outcome.failure is not FailureKind.BAD_REQUEST
    assert outcome.phase is EXPECTED_PHASES[state]

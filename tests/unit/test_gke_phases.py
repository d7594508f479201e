"""The ProvisioningRequest condition table: state from conditions, phases, and classification."""

from __future__ import annotations

import pytest

from airflow_provider_dws.backends.provisioning_request_states import (
    PROVISIONING_REQUEST_CONDITIONS,
    provisioning_request_state,
)
from airflow_provider_dws.scheduling.phases import FailureKind, Phase, reached


def cond(kind: str, at: str, status: str = "True", reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "lastTransitionTime": at, "reason": reason, "message": message}


@pytest.mark.parametrize(
    ("conditions", "state"),
    [
        (None, "Pending"),
        ([], "Pending"),
        ([cond("Accepted", "2026-12-02T10:00:00Z", status="False")], "Pending"),
        ([cond("Accepted", "2026-12-02T10:00:00Z")], "Accepted"),
        (
            [cond("Accepted", "2026-12-02T10:00:00Z"), cond("Provisioned", "2026-12-02T10:05:00Z")],
            "Provisioned",
        ),
        # The latest in the life cycle wins, whatever the list order.
        (
            [cond("BookingExpired", "2026-12-02T10:15:00Z"), cond("Provisioned", "2026-12-02T10:05:00Z")],
            "BookingExpired",
        ),
        # ... even when an earlier one was stamped again after it, or a type we do not know is newer:
        # a Provisioned request never reads as waiting.
        (
            [cond("Provisioned", "2026-12-02T10:05:00Z"), cond("Accepted", "2026-12-02T10:07:00Z")],
            "Provisioned",
        ),
        (
            [cond("Provisioned", "2026-12-02T10:05:00Z"), cond("SomethingNew", "2026-12-02T10:08:00Z")],
            "Provisioned",
        ),
        ([cond("SomethingNew", "2026-12-02T10:08:00Z")], "Pending"),
        # A tie (same second) goes to the later one in the life cycle.
        (
            [cond("Provisioned", "2026-12-02T10:05:00Z"), cond("CapacityRevoked", "2026-12-02T10:05:00Z")],
            "CapacityRevoked",
        ),
        (
            [cond("Accepted", "2026-12-02T10:00:00Z"), cond("Failed", "2026-12-02T10:00:00Z")],
            "Failed",
        ),
        # A condition that went False is not the state.
        (
            [
                cond("Accepted", "2026-12-02T10:00:00Z"),
                cond("Provisioned", "2026-12-02T10:09:00Z", status="False"),
            ],
            "Accepted",
        ),
    ],
)
def test_state_is_the_true_condition_latest_in_the_life_cycle(conditions: list | None, state: str) -> None:
    assert provisioning_request_state(conditions) == state


def test_table_phases_and_live_states() -> None:
    table = PROVISIONING_REQUEST_CONDITIONS
    assert table.api == "gke_provisioning_request"
    assert {s: table.phase(s) for s in table.phases} == {
        "Pending": Phase.WAITING,
        "Accepted": Phase.WAITING,
        "Provisioned": Phase.RUNNING,
        "Failed": Phase.NOT_OBTAINED,
        "BookingExpired": Phase.NOT_OBTAINED,
        "CapacityRevoked": Phase.FAILED,
    }
    assert table.live_states() == ("Pending", "Accepted", "Provisioned")
    assert table.phase("SomethingNew") is Phase.WAITING  # keep watching what we do not know
    # The setup's wait ("running") ends on Provisioned, not on Accepted.
    assert reached("running", table.phase("Provisioned")) and not reached("running", table.phase("Accepted"))


def test_waiting_and_provisioned_have_no_failure() -> None:
    for state in ("Pending", "Accepted"):
        assert PROVISIONING_REQUEST_CONDITIONS.classify(state).failure is None
    provisioned = PROVISIONING_REQUEST_CONDITIONS.classify("Provisioned", reason="Provisioned", message="ok")
    assert (provisioned.phase, provisioned.failure) == (Phase.RUNNING, None)


@pytest.mark.parametrize(
    ("reason", "message", "phase", "failure"),
    [
        (
            "CapacityIsNotFound",
            "no capacity in us-central1",
            Phase.NOT_OBTAINED,
            FailureKind.CAPACITY_NOT_OBTAINED,
        ),
        ("", "", Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED),
        # The open-source cluster autoscaler's other Failed reasons, with its own messages.
        (
            "FailedToBookCapacity",
            "Capacity is not booked",
            Phase.NOT_OBTAINED,
            FailureKind.CAPACITY_NOT_OBTAINED,
        ),
        ("Expired", "ProvisioningRequest is expired", Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED),
        ("FailedToCreatePods", "pod template rejected", Phase.FAILED, FailureKind.BAD_REQUEST),
        ("Unknown", "spec.podSets[0].count: Invalid value", Phase.FAILED, FailureKind.BAD_REQUEST),
        (
            "NotProvisioned",
            "no node pool with queued provisioning matches",
            Phase.FAILED,
            FailureKind.BAD_REQUEST,
        ),
    ],
)
def test_failed_is_capacity_unless_the_request_was_wrong(
    reason: str, message: str, phase: Phase, failure: FailureKind
) -> None:
    outcome = PROVISIONING_REQUEST_CONDITIONS.classify("Failed", reason=reason, message=message)
    assert (outcome.phase, outcome.failure) == (phase, failure)
    if reason:
        assert reason in outcome.message and message in outcome.message


def test_booking_expired_says_pods_must_come_in_the_booking_window() -> None:
    outcome = PROVISIONING_REQUEST_CONDITIONS.classify(
        "BookingExpired", reason="BookingExpired", message="capacity booking expired"
    )
    assert (outcome.phase, outcome.failure) == (Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED)
    assert "booking window" in outcome.message and "capacity booking expired" in outcome.message


def test_capacity_revoked_is_a_preemption_with_its_reason() -> None:
    outcome = PROVISIONING_REQUEST_CONDITIONS.classify(
        "CapacityRevoked", reason="MaxRunDurationReached", message="ran 3600s"
    )
    assert (outcome.phase, outcome.failure) == (Phase.FAILED, FailureKind.PREEMPTED)
    assert (
        "maxRunDurationSeconds" in outcome.message and "MaxRunDurationReached: ran 3600s" in outcome.message
    )
    assert outcome.phase.terminal

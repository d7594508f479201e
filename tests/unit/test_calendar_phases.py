"""Calendar mode: the future reservation state table, its classification and what each wait ends on."""

from __future__ import annotations

import pytest
from google.cloud.compute_v1 import FutureReservationStatus

from airflow_provider_dws.backends.calendar import FUTURE_RESERVATION_STATE_PHASES, FUTURE_RESERVATION_STATES
from airflow_provider_dws.runtime.adapter import RequestAdapter
from airflow_provider_dws.runtime.loop import is_success
from airflow_provider_dws.scheduling.phases import WAIT_TARGETS, FailureKind, Phase, reached

TABLE = FUTURE_RESERVATION_STATES


def test_the_table_names_every_procurement_status_of_the_client() -> None:
    # A status the client knows and the table does not would be watched as WAITING forever.
    names = {s.name for s in FutureReservationStatus.ProcurementStatus if s.value}
    assert set(FUTURE_RESERVATION_STATE_PHASES) == names


@pytest.mark.parametrize(
    ("state", "phase"),
    [
        ("DRAFTING", Phase.WAITING),
        ("PENDING_APPROVAL", Phase.WAITING),
        ("APPROVED", Phase.PROVISIONING),
        ("COMMITTED", Phase.PROVISIONING),
        ("PENDING_AMENDMENT_APPROVAL", Phase.PROVISIONING),
        ("PROCURING", Phase.PROVISIONING),
        ("PROVISIONING", Phase.PROVISIONING),
        ("FULFILLED", Phase.RUNNING),
        ("DECLINED", Phase.NOT_OBTAINED),
        ("FAILED", Phase.NOT_OBTAINED),
        ("FAILED_PARTIALLY_FULFILLED", Phase.NOT_OBTAINED),
        ("CANCELLED", Phase.CANCELLED),
        ("SOMETHING_NEW", Phase.WAITING),
    ],
)
def test_each_status_has_its_phase(state: str, phase: Phase) -> None:
    assert TABLE.classify(state).phase is phase


def test_live_and_ended_states() -> None:
    assert "FULFILLED" in TABLE.live_states()  # delivered: held and billed, listed by the poller
    assert set(TABLE.ended_states()) == {"DECLINED", "FAILED", "FAILED_PARTIALLY_FULFILLED", "CANCELLED"}


def test_a_block_past_its_end_has_succeeded() -> None:
    outcome = TABLE.classify("FULFILLED", ended=True)
    assert outcome.phase is Phase.SUCCEEDED and outcome.failure is None
    assert TABLE.classify("FULFILLED", ended=False).phase is Phase.RUNNING


@pytest.mark.parametrize("state", ["DECLINED", "FAILED", "FAILED_PARTIALLY_FULFILLED"])
def test_bad_ends_are_capacity_not_obtained_with_the_reason(state: str) -> None:
    outcome = TABLE.classify(state, message="4 of 8 reserved slots were delivered")
    assert outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED
    assert outcome.message.endswith("4 of 8 reserved slots were delivered")
    declined = TABLE.classify("DECLINED").message
    # The API gives no reason: the message says what DECLINED means and what to do.
    assert declined.startswith("Compute Engine declined the request") and "another zone" in declined


def test_cancelled() -> None:
    outcome = TABLE.classify("CANCELLED")
    assert (outcome.phase, outcome.failure) == (Phase.CANCELLED, FailureKind.CANCELLED)


@pytest.mark.parametrize(
    ("target", "phase", "done"),
    [
        ("provisioning", Phase.WAITING, False),
        ("provisioning", Phase.PROVISIONING, True),  # approved: the reserve is done
        ("provisioning", Phase.RUNNING, True),  # already delivered (a retry adopting it)
        ("running", Phase.PROVISIONING, False),  # the delivery wait goes on past the approval
        ("running", Phase.RUNNING, True),
        ("end", Phase.RUNNING, False),
        ("running", Phase.NOT_OBTAINED, True),
        ("provisioning", Phase.CANCELLED, True),
    ],
)
def test_both_waits_end_where_they_should(target: str, phase: Phase, done: bool) -> None:
    assert target in WAIT_TARGETS
    assert reached(target, phase) is done


class _Adapter(RequestAdapter):  # type: ignore[type-arg]
    pass


def test_success_per_target() -> None:
    from airflow_provider_dws.backends.base import RequestStatus
    from airflow_provider_dws.scheduling.phases import Outcome, RequestTimings

    def status(phase: Phase) -> RequestStatus:
        return RequestStatus("n", "S", Outcome(phase), RequestTimings())

    adapter = _Adapter(object())  # type: ignore[arg-type]
    adapter.target = "provisioning"  # type: ignore[misc]
    assert is_success(adapter, status(Phase.PROVISIONING)) and is_success(adapter, status(Phase.RUNNING))
    assert not is_success(adapter, status(Phase.SUCCEEDED))  # a block past its end is no success
    adapter.target = "running"  # type: ignore[misc]
    assert not is_success(adapter, status(Phase.PROVISIONING)) and is_success(adapter, status(Phase.RUNNING))

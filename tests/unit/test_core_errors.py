"""Which task failures Airflow's own ``retries`` may retry (D5)."""

from __future__ import annotations

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_provider_dws.exceptions import (
    BadRequestError,
    CapacityNotObtainedError,
    CapacityPreemptedError,
    DwsError,
    RequestCancelledError,
    WorkloadFailedError,
)


@pytest.mark.parametrize("exc", [RequestCancelledError, BadRequestError])
def test_deliberate_or_hopeless_ends_fail_without_airflow_retry(exc: type[Exception]) -> None:
    # A cancel made in the console must not be undone by ``retries=``; the task runner skips the
    # retry for AirflowFailException.
    assert issubclass(exc, AirflowFailException)
    assert issubclass(exc, DwsError)


@pytest.mark.parametrize("exc", [CapacityNotObtainedError, CapacityPreemptedError, WorkloadFailedError])
def test_capacity_and_workload_failures_stay_retryable(exc: type[Exception]) -> None:
    assert not issubclass(exc, AirflowFailException)

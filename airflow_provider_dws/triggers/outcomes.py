"""The statuses a wait reports when it, not the request, decides the end, and the event they go in."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow_provider_dws.backends.base import EVENT_MESSAGE_LIMIT, RESUME, WAIT_ERROR, RequestStatus
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings


def gone(name: str) -> RequestStatus:
    """The request was deleted outside the task."""
    return RequestStatus(
        name=name,
        state="NOT_FOUND",
        outcome=Outcome(Phase.CANCELLED, FailureKind.CANCELLED, "the request was deleted outside this task"),
        timings=RequestTimings(),
    )


def unknown(name: str) -> RequestStatus:
    """Before the first status arrived (the API was unreachable so far)."""
    return RequestStatus(
        name=name, state="UNKNOWN", outcome=Outcome(Phase.WAITING, None, ""), timings=RequestTimings()
    )


def wait_failed(name: str, last: RequestStatus | None, error: Exception) -> RequestStatus:
    """The request as last seen (still live, or unknown), when an error ended the wait."""
    last = last or unknown(name)
    return RequestStatus(
        name=name,
        state=last.state,
        outcome=Outcome(last.phase, None, f"the wait failed: {type(error).__name__}: {error}"),
        timings=last.timings,
        description=last.description,
    )


def not_obtained(status: RequestStatus, message: str, now: datetime) -> RequestStatus:
    """``status`` given up at its max wait, ended ``now`` without capacity; what the request last
    said of its wait (``3 of 4 pods have a node``, a scheduler's reason) follows ``message``, so
    the task's error says where it stood."""
    said = status.outcome.message
    return RequestStatus(
        name=status.name,
        state=status.state,
        outcome=Outcome(
            Phase.NOT_OBTAINED,
            FailureKind.CAPACITY_NOT_OBTAINED,
            f"{message} (it last said: {said})" if said and said not in message else message,
        ),
        timings=RequestTimings(status.timings.submitted, None, now),
        description=status.description,
        details=status.details,
    )


def timed_out(status: RequestStatus, message: str, now: datetime) -> RequestStatus:
    """``status`` when the task's ``execution_timeout`` ended the wait ``now``."""
    return RequestStatus(
        name=status.name,
        state=status.state,
        outcome=Outcome(Phase.CANCELLED, FailureKind.TIMED_OUT, message),
        timings=RequestTimings(status.timings.submitted, status.timings.started, now),
        description=status.description,
        details=status.details,
    )


def event_payload(
    status: RequestStatus, resume: dict[str, Any] | None, wait_error: Exception | None = None
) -> dict[str, Any]:
    """The event: the status (:meth:`RequestStatus.to_event`) and the attempt's ``resume`` state,
    whose empty values (no attempt history yet, most often) are left out to keep it small; with
    ``wait_error``, the error that ended the wait before the request did (its type and text)."""
    payload = status.to_event()
    if wait_error is not None:
        payload[WAIT_ERROR] = f"{type(wait_error).__name__}: {wait_error}"[:EVENT_MESSAGE_LIMIT]
    if resume is not None:
        payload[RESUME] = {key: value for key, value in resume.items() if value not in (None, [], {})}
    return payload

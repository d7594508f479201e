"""The trigger's status lines (state, wait, max wait, give-up time, then the request's name), a line on
every change of state, and the heartbeat ``[dws] log_heartbeat``."""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings
from airflow_provider_dws.triggers import capacity_request, poller, status_line
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger, first_event
from airflow_provider_dws.triggers.status_line import DEFAULT_HEARTBEAT, log_heartbeat

NAME = "projects/my-gcp-project/locations/us-central1/customJobs/1714299797848622522"
SPEC = {"project_id": "p", "region": "us-central1", "gcp_conn_id": "gc", "impersonation_chain": None}
T0 = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)
WHAT = "2 x a3-highgpu-8g, 16 x NVIDIA_H100_80GB in us-central1"
HEARTBEAT_ENV = "AIRFLOW__DWS__LOG_HEARTBEAT"


def status(
    state: str,
    phase: Phase,
    *,
    message: str = "",
    details: dict[str, Any] | None = None,
    **timings: Any,
) -> RequestStatus:
    return RequestStatus(
        name=NAME,
        state=state,
        outcome=Outcome(phase, FailureKind.WORKLOAD_FAILED if phase is Phase.FAILED else None, message),
        timings=RequestTimings(**timings),
        description=WHAT,
        details={"max_wait_seconds": 7200.0} if details is None else details,
    )


class _At:
    """``datetime`` with ``now()`` stopped at :data:`T0` + :attr:`offset`."""

    offset = timedelta(minutes=12, seconds=30)

    @classmethod
    def now(cls, tz: Any = None) -> datetime:
        return T0 + cls.offset


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> type[_At]:
    class At(_At, datetime):  # type: ignore[misc]
        pass

    monkeypatch.setattr(capacity_request, "datetime", At)
    return At


def trigger(**kwargs: Any) -> CapacityRequestTrigger:
    args: dict[str, Any] = {
        "kind": "vertex_custom_job",
        "backend_spec": SPEC,
        "request_name": NAME,
        "poll_interval": 0.01,
    }
    args.update(kwargs)
    return CapacityRequestTrigger(**args)


# -- the line's shape --------------------------------------------------------------------------------


def test_the_waiting_line_puts_state_wait_and_give_up_time_before_the_name(clock: Any) -> None:
    t = trigger(wait_deadline=(T0 + timedelta(hours=2)).isoformat())
    line = t._describe(status("JOB_STATE_PENDING", Phase.WAITING, submitted=T0))
    assert line == (
        "Waiting for capacity [JOB_STATE_PENDING], waited 0:12:30 of max 2:00:00, gives up at "
        f"2026-05-01 14:00:00 UTC: {NAME} ({WHAT})"
    )
    # In a log viewer that cuts the line at the resource name, all a reader looks for is before it.
    assert line.index(NAME) > line.index("UTC") > line.index("[JOB_STATE_PENDING]")


def test_the_give_up_time_is_the_execution_timeout_when_that_ends_the_wait_first(clock: Any) -> None:
    t = trigger(
        wait_deadline=(T0 + timedelta(hours=2)).isoformat(),
        task_deadline=(T0 + timedelta(hours=1)).isoformat(),
    )
    line = t._describe(status("JOB_STATE_PENDING", Phase.WAITING, submitted=T0))
    assert "gives up at 2026-05-01 13:00:00 UTC:" in line


def test_an_api_without_a_max_wait_shows_the_providers(clock: Any) -> None:
    """Cloud Batch has no max-wait field: the provider's wait deadline is the max wait."""
    t = trigger(wait_deadline=(T0 + timedelta(hours=1)).isoformat(), wait_grace=0)
    line = t._describe(status("QUEUED", Phase.WAITING, details={}, submitted=T0))
    assert line.startswith("Waiting for capacity [QUEUED], waited 0:12:30 of max 1:00:00, gives up at ")


def test_a_wait_with_no_limit_says_only_how_long(clock: Any) -> None:
    line = trigger()._describe(status("PENDING_APPROVAL", Phase.WAITING, details={}, submitted=T0))
    assert line == f"Waiting for capacity [PENDING_APPROVAL], waited 0:12:30: {NAME} ({WHAT})"


def test_running_and_ended_lines() -> None:
    now = T0 + timedelta(hours=1)
    started, finished = T0 + timedelta(minutes=40), T0 + timedelta(minutes=43, seconds=10)
    running = status("JOB_STATE_RUNNING", Phase.RUNNING, submitted=T0, started=started)
    assert status_line.status_line(running, NAME, now=now) == (
        f"Running [JOB_STATE_RUNNING], waited 0:40:00 for capacity: {NAME} ({WHAT})"
    )
    failed = status(
        "JOB_STATE_FAILED",
        Phase.FAILED,
        message="exit code 3",
        submitted=T0,
        started=started,
        finished=finished,
    )
    # Why it ended comes before the name: it is what the reader wants.
    assert status_line.status_line(failed, NAME, now=now) == (
        f"Failed [JOB_STATE_FAILED], waited 0:40:00, ran 0:03:10: exit code 3: {NAME} ({WHAT})"
    )
    expired = status("JOB_STATE_FAILED", Phase.NOT_OBTAINED, submitted=T0, finished=T0 + timedelta(hours=2))
    assert status_line.status_line(expired, NAME, now=now).startswith(
        "Capacity not obtained [JOB_STATE_FAILED], waited 2:00:00: "
    )


# -- a line on every change of state ---------------------------------------------------------------


class RecordingLog:
    """A structlog-like logger: the trigger's lines go through its shared line writer."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.lock = threading.Lock()

    def info(self, message: str, *args: Any) -> None:
        with self.lock:
            self.lines.append(message % args)

    async def ainfo(self, message: str, *args: Any) -> None:
        raise AssertionError("not used: the trigger writes through its line writer")

    def warning(self, message: str, *args: Any, **kwargs: Any) -> None:
        self.info(message, *args)

    error = exception = warning

    def waiting(self) -> list[str]:
        with self.lock:
            return [line for line in self.lines if line.startswith("Waiting for capacity")]


class ScriptedBackend:
    """Answers each read from ``answer(reads)``."""

    kind = "vertex_custom_job"

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.reads = 0

    def spec(self) -> dict[str, Any]:
        return SPEC

    async def aget_status(self, name: str) -> RequestStatus:
        self.reads += 1
        result: RequestStatus = self.answer(self.reads)
        return result

    async def alist_live(self, only: Any = None) -> dict[str, RequestStatus]:
        return {}

    async def arelease(self, name: str) -> None:
        raise AssertionError("nothing is cancelled here")


def install(monkeypatch: pytest.MonkeyPatch, backend: ScriptedBackend) -> None:
    monkeypatch.setattr(poller, "backend_from_spec", lambda kind, spec: backend)


def run_logged(
    t: CapacityRequestTrigger, log: RecordingLog | None = None
) -> tuple[dict[str, Any], RecordingLog]:
    log = log or RecordingLog()
    t._log = log  # type: ignore[assignment]
    return asyncio.run(asyncio.wait_for(first_event(t), timeout=60)), log


def test_a_change_of_the_apis_state_within_one_phase_gets_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """QUEUED then PENDING are both waiting: the second state was not logged before."""
    states = [
        status("JOB_STATE_QUEUED", Phase.WAITING, submitted=T0),
        status("JOB_STATE_PENDING", Phase.WAITING, submitted=T0),
        status("JOB_STATE_SUCCEEDED", Phase.SUCCEEDED, submitted=T0, started=T0, finished=T0),
    ]
    log = RecordingLog()
    # The API moves on once the trigger logged the state before (its first line is the request's)
    # and read it a few times more (a line per read, not per change, would show as repeats); polled
    # every 10 ms on a loaded machine, a state could otherwise come and go between two of the
    # trigger's reads. A state still not logged after 200 reads is given up on, so a trigger that
    # never logs it fails on the lines below, not on the timeout.
    at = {"index": 0, "reads": 0}

    def answer(reads: int) -> RequestStatus:
        index, since = at["index"], at["reads"] + 1
        logged = len(log.lines) >= index + 2
        if index < len(states) - 1 and ((logged and since > 3) or since > 200):
            index, since = index + 1, 0
        at.update(index=index, reads=since)
        return states[index]

    install(monkeypatch, ScriptedBackend(answer))
    event, _ = run_logged(trigger(), log)
    assert event["phase"] == "succeeded"
    assert [line.split(",")[0] for line in log.lines[1:]] == [
        "Waiting for capacity [JOB_STATE_QUEUED]",
        "Waiting for capacity [JOB_STATE_PENDING]",
        "Succeeded [JOB_STATE_SUCCEEDED]",
    ]


# -- the heartbeat -----------------------------------------------------------------------------------


def test_the_heartbeat_option_is_read_from_the_airflow_config(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(HEARTBEAT_ENV, raising=False)
    assert log_heartbeat() == DEFAULT_HEARTBEAT == timedelta(minutes=10)
    monkeypatch.setenv(HEARTBEAT_ENV, "120")
    assert log_heartbeat() == timedelta(minutes=2)
    monkeypatch.setenv(HEARTBEAT_ENV, "0")
    assert log_heartbeat() is None  # state changes only
    for bad in ("ten minutes", "-5", "nan"):
        monkeypatch.setenv(HEARTBEAT_ENV, bad)
        with caplog.at_level(logging.WARNING, logger=status_line.__name__):
            assert log_heartbeat() == DEFAULT_HEARTBEAT
        assert "log_heartbeat must be a number of seconds" in caplog.text
        caplog.clear()


def test_an_unchanged_wait_is_logged_again_at_the_configured_heartbeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The request waits until its wait has been mentioned twice (its first line, then a heartbeat),
    which the default heartbeat of ten minutes would not do within the test's timeout."""
    monkeypatch.setenv(HEARTBEAT_ENV, "0.05")
    log_holder: list[RecordingLog] = []
    waiting = status("JOB_STATE_PENDING", Phase.WAITING, submitted=T0)
    done = status("JOB_STATE_SUCCEEDED", Phase.SUCCEEDED, submitted=T0, started=T0, finished=T0)
    install(
        monkeypatch, ScriptedBackend(lambda reads: done if len(log_holder[0].waiting()) >= 2 else waiting)
    )
    t = trigger()
    log = RecordingLog()
    log_holder.append(log)
    t._log = log  # type: ignore[assignment]
    event = asyncio.run(asyncio.wait_for(first_event(t), timeout=60))
    assert event["phase"] == "succeeded"
    first, again = log.waiting()[:2]
    assert first.split(",")[0] == again.split(",")[0] == "Waiting for capacity [JOB_STATE_PENDING]"


def test_the_next_wake_up_follows_the_heartbeat(clock: Any) -> None:
    t = trigger()
    last = T0 + _At.offset - timedelta(seconds=10)
    now = T0 + _At.offset
    t.limits.heartbeat = timedelta(seconds=30)
    assert t.limits.wake_in(None, last, now) == 20.0
    assert not t.limits.heartbeat_due(now, last)
    assert t.limits.heartbeat_due(last + timedelta(seconds=30), last)
    # No heartbeat and no deadline: only a change of the request wakes the trigger.
    t.limits.heartbeat = None
    assert t.limits.wake_in(None, last, now) is None
    assert not t.limits.heartbeat_due(last + timedelta(days=1), last)
    # A deadline still does.
    t = trigger(task_deadline=(T0 + _At.offset + timedelta(seconds=5)).isoformat())
    t.limits.heartbeat = None
    assert t.limits.wake_in(status("JOB_STATE_PENDING", Phase.WAITING, submitted=T0), last, now) == 5.0

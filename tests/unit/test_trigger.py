"""CapacityRequestTrigger against a fake backend (no network)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import structlog.testing

from airflow_provider_dws import errors
from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings
from airflow_provider_dws.triggers import capacity_request, on_kill, poller
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger, first_event
from airflow_provider_dws.triggers.log_lines import LINES

NAME = "projects/p/locations/us-central1/customJobs/123"
SPEC = {"project_id": "p", "region": "us-central1", "gcp_conn_id": "gc", "impersonation_chain": None}
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def status(state: str, phase: Phase, failure: FailureKind | None = None, **timings: Any) -> RequestStatus:
    return RequestStatus(
        name=NAME,
        state=state,
        outcome=Outcome(phase, failure, ""),
        timings=RequestTimings(**timings),
        description="8 x NVIDIA_H100_80GB in us-central1",
        details={"region": "us-central1", "max_wait_seconds": 3600.0},
    )


class FakeBackend:
    kind = "vertex_custom_job"

    def __init__(self, script: list[RequestStatus | Exception]) -> None:
        self.script = list(script)
        self.reads = 0
        self.cancelled: list[str] = []

    def spec(self) -> dict[str, Any]:
        return SPEC

    async def aget_status(self, name: str) -> RequestStatus:
        assert name == NAME
        self.reads += 1
        item = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(item, Exception):
            raise item
        return item

    async def alist_live(self, only: Any = None) -> dict[str, RequestStatus]:
        return {}  # nothing listed: the shared poller reads each request directly

    async def arelease(self, name: str) -> None:
        self.cancelled.append(name)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    made: list[FakeBackend] = []

    def install(script: list[RequestStatus | Exception]) -> FakeBackend:
        backend = FakeBackend(script)
        made.append(backend)

        def backend_from_spec(kind: str, spec: dict[str, Any]) -> FakeBackend:
            assert kind == "vertex_custom_job"
            assert spec == SPEC
            return backend

        monkeypatch.setattr(poller, "backend_from_spec", backend_from_spec)
        return backend

    return install


def trigger(**kwargs: Any) -> CapacityRequestTrigger:
    args: dict[str, Any] = {
        "kind": "vertex_custom_job",
        "backend_spec": SPEC,
        "request_name": NAME,
        "poll_interval": 0.01,
    }
    args.update(kwargs)
    return CapacityRequestTrigger(**args)


async def collect(t: CapacityRequestTrigger) -> list[dict[str, Any]]:
    return [event.payload async for event in t.run()]


def run_all(t: CapacityRequestTrigger) -> list[dict[str, Any]]:
    return asyncio.run(asyncio.wait_for(collect(t), timeout=10))


# -- construction and serialization ------------------------------------------------------------


def test_serialize_round_trips() -> None:
    t = trigger(
        wait_deadline="2026-01-01T02:00:00+00:00", cancel_on_kill=False, poll_interval=5, target="running"
    )
    path, kwargs = t.serialize()
    assert path == "airflow_provider_dws.triggers.capacity_request.CapacityRequestTrigger"
    assert kwargs == {
        "kind": "vertex_custom_job",
        "backend_spec": SPEC,
        "request_name": NAME,
        "poll_interval": 5.0,
        "wait_deadline": "2026-01-01T02:00:00+00:00",
        "cancel_on_kill": False,
        "target": "running",
        "resume": None,
        "task_deadline": None,
    }
    rebuilt = CapacityRequestTrigger(**kwargs)
    assert rebuilt.serialize() == (path, kwargs)


def test_serialize_round_trips_defaults() -> None:
    path, kwargs = CapacityRequestTrigger("vertex_custom_job", SPEC, NAME).serialize()
    assert kwargs["poll_interval"] == 30.0
    assert kwargs["wait_deadline"] is None
    assert kwargs["cancel_on_kill"] is True
    assert kwargs["target"] == "end"
    assert CapacityRequestTrigger(**kwargs).serialize() == (path, kwargs)


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        (
            {"kind": "gke"},
            ValueError,
            r"kind must be one of \['batch_job', 'compute_future_reservation', 'compute_instance_set', 'compute_resize_request', 'gke_flex_start_job', 'gke_kueue_job', 'gke_provisioning_request', "
            r"'tpu_flex_start', 'tpu_queued_resource', 'vertex_batch_prediction', 'vertex_custom_job', "
            r"'vertex_endpoint_deployment'\], got 'gke'",
        ),
        (
            {"target": "started"},
            ValueError,
            r"target must be one of \['end', 'provisioning', 'running'\], got 'started'",
        ),
        ({"request_name": ""}, ValueError, "request_name must be a non-empty string, got ''"),
        ({"request_name": None}, ValueError, "request_name must be a non-empty string, got None"),
        ({"backend_spec": [1]}, TypeError, "backend_spec must be a dict, got list"),
        ({"poll_interval": 0}, ValueError, "poll_interval must be greater than 0, got 0"),
        ({"poll_interval": -1.5}, ValueError, "poll_interval must be greater than 0, got -1.5"),
        ({"poll_interval": True}, TypeError, "poll_interval must be a number of seconds, got bool"),
        ({"poll_interval": "30"}, TypeError, "poll_interval must be a number of seconds, got str"),
        (
            {"wait_deadline": "2026-01-01T00:00:00"},
            ValueError,
            "wait_deadline must carry a time zone, got '2026-01-01T00:00:00'",
        ),
        ({"wait_deadline": "tomorrow"}, ValueError, "tomorrow"),
        (
            {"task_deadline": "2026-01-01T00:00:00"},
            ValueError,
            "task_deadline must carry a time zone, got '2026-01-01T00:00:00'",
        ),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], exc: type[Exception], message: str) -> None:
    with pytest.raises(exc, match=message):
        trigger(**kwargs)


# -- run ---------------------------------------------------------------------------------------


def test_run_yields_one_event_with_the_final_status(fake: Any) -> None:
    final = status(
        "JOB_STATE_SUCCEEDED",
        Phase.SUCCEEDED,
        submitted=T0,
        started=T0 + timedelta(minutes=5),
        finished=T0 + timedelta(minutes=65),
    )
    backend = fake(
        [
            status("JOB_STATE_QUEUED", Phase.WAITING, submitted=T0),
            status("JOB_STATE_PENDING", Phase.WAITING, submitted=T0),
            status("JOB_STATE_RUNNING", Phase.RUNNING, submitted=T0, started=T0 + timedelta(minutes=5)),
            final,
        ]
    )
    events = run_all(trigger())
    assert events == [final.to_event()]
    assert events[0]["phase"] == "succeeded"
    assert events[0]["timings"]["wait_seconds"] == 300.0
    assert events[0]["timings"]["run_seconds"] == 3600.0
    # Every status was read, in order. Not "exactly 4 reads": at a 10 ms interval a loaded machine
    # can fit one more round in before the trigger leaves the poller (CI met 5).
    assert backend.script == [final] and backend.reads >= 4
    assert backend.cancelled == []


def test_run_reports_failures_as_classified(fake: Any) -> None:
    final = status("JOB_STATE_FAILED", Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, submitted=T0)
    fake([status("JOB_STATE_PENDING", Phase.WAITING), final])
    (event,) = run_all(trigger())
    # The event leaves the backend's details behind (see test_event_is_small).
    assert RequestStatus.from_event(event) == replace(final, details={})
    assert event["failure"] == "capacity_not_obtained"


def test_first_event_helper(fake: Any) -> None:
    final = status("JOB_STATE_CANCELLED", Phase.CANCELLED, FailureKind.CANCELLED)
    fake([final])
    assert asyncio.run(first_event(trigger())) == final.to_event()


def test_request_deleted_outside_is_a_cancelled_event(fake: Any) -> None:
    backend = fake([status("JOB_STATE_PENDING", Phase.WAITING), errors.RequestNotFoundError("gone")])
    (event,) = run_all(trigger())
    assert event["name"] == NAME
    assert event["state"] == "NOT_FOUND"
    assert event["phase"] == "cancelled"
    assert event["failure"] == "cancelled"
    assert "deleted outside" in event["message"]
    assert backend.cancelled == []


def test_wait_deadline_passed_cancels_and_reports_not_obtained(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(capacity_request, "WAIT_DEADLINE_GRACE", timedelta(0))
    backend = fake([status("JOB_STATE_PENDING", Phase.WAITING, submitted=T0)])
    deadline = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()
    (event,) = run_all(trigger(wait_deadline=deadline))
    assert backend.cancelled == [NAME]
    assert event["phase"] == "not_obtained"
    assert event["failure"] == "capacity_not_obtained"
    assert "max wait passed" in event["message"]
    assert event["timings"]["submitted"] == T0.isoformat()
    assert event["timings"]["started"] is None
    assert event["timings"]["finished"] is not None
    assert event["timings"]["run_seconds"] == 0.0


def test_wait_deadline_within_grace_keeps_waiting(fake: Any) -> None:
    backend = fake(
        [
            status("JOB_STATE_PENDING", Phase.WAITING),
            status("JOB_STATE_PENDING", Phase.WAITING),
            status("JOB_STATE_SUCCEEDED", Phase.SUCCEEDED),
        ]
    )
    deadline = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()  # inside the 2-min grace
    (event,) = run_all(trigger(wait_deadline=deadline))
    assert event["phase"] == "succeeded"
    assert backend.cancelled == []
    assert len(backend.script) == 1 and backend.reads >= 3  # all read; a loaded machine may read once more


def test_no_grace_gives_up_exactly_at_the_wait_deadline(fake: Any) -> None:
    # An API without a max wait of its own (Cloud Batch): the provider's deadline is the only one.
    backend = fake([status("QUEUED", Phase.WAITING, submitted=T0)])
    deadline = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()  # inside the default grace
    (event,) = run_all(trigger(wait_deadline=deadline, wait_grace=0))
    assert backend.cancelled == [NAME]
    assert event["phase"] == "not_obtained"


def test_capacity_that_came_since_the_last_read_is_not_given_up(fake: Any) -> None:
    """The max wait ends on a status a poll interval old: read again, the request is Provisioned
    (here a job RUNNING), so it is kept and the wait ends on it; nothing is cancelled."""
    backend = fake(
        [
            status("QUEUED", Phase.WAITING, submitted=T0),
            status("RUNNING", Phase.RUNNING, submitted=T0, started=T0),
        ]
    )
    past = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()
    # A long interval: the poller reads once, and the only other read is the give-up's own (at a
    # 0.01 s interval a loaded machine let the poller read again first, and the count varied).
    (event,) = run_all(trigger(wait_deadline=past, wait_grace=0, target="running", poll_interval=30))
    assert (event["phase"], event["state"]) == ("running", "RUNNING")
    assert backend.cancelled == [] and backend.reads == 2


@pytest.mark.parametrize(
    "read_again", [errors.RequestNotFoundError("gone"), errors.TransientApiError("UNAVAILABLE")]
)
def test_a_give_up_whose_read_again_fails_goes_ahead(fake: Any, read_again: Exception) -> None:
    backend = fake([status("QUEUED", Phase.WAITING, submitted=T0), read_again])
    past = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()
    (event,) = run_all(trigger(wait_deadline=past, wait_grace=0))
    assert event["phase"] == "not_obtained" and backend.cancelled == [NAME]


def requeued(at: datetime) -> RequestStatus:
    """A Kueue Job evicted and queued again by Kueue at ``at``."""
    s = status("Requeued", Phase.WAITING, submitted=T0)
    return RequestStatus(
        s.name, s.state, s.outcome, s.timings, s.description, {"requeued_at": at.isoformat()}
    )


def test_a_request_queued_again_after_it_ran_waits_its_max_wait_anew(fake: Any) -> None:
    """Admitted and running, then evicted and requeued by Kueue: its first max wait is long past,
    but the new wait counts from the requeue, so the Job is kept (and runs again)."""
    now = datetime.now(timezone.utc)
    backend = fake(
        [
            status("Running", Phase.RUNNING, submitted=T0, started=T0),
            requeued(now - timedelta(seconds=1)),
            requeued(now - timedelta(seconds=1)),
            status("Complete", Phase.SUCCEEDED, submitted=T0, started=T0, finished=now),
        ]
    )
    past = (T0 + timedelta(hours=1)).isoformat()  # the max wait: an hour from submission
    (event,) = run_all(trigger(wait_deadline=past, wait_grace=0, target="end"))
    assert event["phase"] == "succeeded" and backend.cancelled == []


def test_a_request_queued_again_before_it_ran_keeps_its_first_max_wait(fake: Any) -> None:
    """Evicted before it ever got capacity (an admission check retried): the same wait, given up."""
    backend = fake([requeued(datetime.now(timezone.utc) - timedelta(seconds=1))])
    past = (T0 + timedelta(hours=1)).isoformat()
    (event,) = run_all(trigger(wait_deadline=past, wait_grace=0, target="end"))
    assert event["phase"] == "not_obtained" and backend.cancelled == [NAME]


def test_wait_grace_round_trips_and_is_checked() -> None:
    path, kwargs = trigger(wait_deadline="2026-01-01T02:00:00+00:00", wait_grace=0).serialize()
    assert kwargs["wait_grace"] == 0
    assert CapacityRequestTrigger(**kwargs).serialize() == (path, kwargs)
    # The default is not written, so triggers stored before the parameter existed stay valid.
    assert "wait_grace" not in trigger().serialize()[1]
    with pytest.raises(ValueError, match="wait_grace must be a number of seconds >= 0"):
        trigger(wait_grace=-1)


def test_running_request_is_not_given_up_after_its_wait_deadline(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(capacity_request, "WAIT_DEADLINE_GRACE", timedelta(0))
    backend = fake(
        [
            status("JOB_STATE_RUNNING", Phase.RUNNING),
            status("JOB_STATE_RUNNING", Phase.RUNNING),
            status("JOB_STATE_SUCCEEDED", Phase.SUCCEEDED),
        ]
    )
    deadline = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat()
    (event,) = run_all(trigger(wait_deadline=deadline))
    assert event["phase"] == "succeeded"
    assert backend.cancelled == []


def test_on_kill_cancels_when_asked(fake: Any) -> None:
    backend = fake([status("JOB_STATE_PENDING", Phase.WAITING)])
    asyncio.run(trigger(cancel_on_kill=True).on_kill())
    assert backend.cancelled == [NAME]


def test_on_kill_writes_the_requests_end_after_cancelling_it(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The killed task never resumes to write its record: the trigger writes the end itself, only
    for a request it cancelled."""
    from airflow_provider_dws.triggers import final_record

    fake([status("JOB_STATE_PENDING", Phase.WAITING)])
    written: list[tuple[str, str, str]] = []
    monkeypatch.setattr(
        final_record,
        "write_final_record",
        lambda ti, name, phase, message: written.append((ti.task_id, name, phase)) or True,
    )

    async def not_deferred(ti: Any, log: Any) -> bool:
        return False

    monkeypatch.setattr(on_kill, "still_deferred", not_deferred)
    killed = trigger(cancel_on_kill=True)
    killed.task_instance = type("TI", (), {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1})()
    asyncio.run(killed.on_kill())
    assert written == [("t", NAME, "cancelled")]
    kept = trigger(cancel_on_kill=False)
    kept.task_instance = killed.task_instance
    asyncio.run(kept.on_kill())
    assert len(written) == 1  # left alone: not ended by the provider


def test_on_kill_leaves_the_request_alone_when_not_asked(fake: Any) -> None:
    backend = fake([status("JOB_STATE_PENDING", Phase.WAITING)])
    asyncio.run(trigger(cancel_on_kill=False).on_kill())
    assert backend.cancelled == []


def test_on_kill_swallows_cancel_errors(fake: Any, caplog: pytest.LogCaptureFixture) -> None:
    backend = fake([status("JOB_STATE_PENDING", Phase.WAITING)])
    attempts: list[str] = []

    async def broken(name: str) -> None:
        attempts.append(name)
        raise errors.TransientApiError("down")

    backend.arelease = broken  # type: ignore[method-assign]
    # A trigger logs through structlog from Airflow 3.1, through the standard library on 3.0.
    with structlog.testing.capture_logs() as captured, caplog.at_level(logging.ERROR):
        asyncio.run(trigger().on_kill())  # must not raise
    assert attempts == [NAME]  # the cancel was tried
    errors_logged = [str(e["event"]) for e in captured if e.get("log_level") == "error"]
    errors_logged += [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors_logged == [f"Could not cancel {NAME}; cancel it by hand"]


def test_the_event_carries_the_status_as_the_backend_refines_it(fake: Any) -> None:
    """D6: a TPU slice first seen ACTIVE long after it became ACTIVE reports the real wait."""
    backend = fake([status("ACTIVE", Phase.RUNNING, submitted=T0, started=T0 + timedelta(hours=3))])

    async def aended(seen: RequestStatus) -> RequestStatus:
        return RequestStatus(
            seen.name,
            seen.state,
            seen.outcome,
            RequestTimings(T0, T0 + timedelta(minutes=5)),
            seen.description,
        )

    backend.aended = aended  # type: ignore[attr-defined]
    event = asyncio.run(first_event(trigger(target="running")))
    assert event["phase"] == "running"
    assert event["timings"]["wait_seconds"] == 300


# -- execution_timeout ---------------------------------------------------------------------------


def test_task_deadline_round_trips() -> None:
    t = trigger(task_deadline="2026-01-01T03:00:00+00:00")
    _, kwargs = t.serialize()
    assert kwargs["task_deadline"] == "2026-01-01T03:00:00+00:00"
    assert CapacityRequestTrigger(**kwargs).serialize()[1] == kwargs


@pytest.mark.parametrize("phase", [Phase.WAITING, Phase.RUNNING])
def test_task_deadline_passed_cancels_and_reports_timed_out(fake: Any, phase: Phase) -> None:
    backend = fake([status("JOB_STATE_PENDING", phase, submitted=T0)])
    deadline = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()
    (event,) = run_all(trigger(task_deadline=deadline))
    assert backend.cancelled == [NAME]
    assert event["phase"] == "cancelled"
    assert event["failure"] == "timed_out"
    assert "execution_timeout passed; the provider cancelled" in event["message"]
    assert event["timings"]["submitted"] == T0.isoformat()


def test_task_deadline_without_cancel_on_kill_leaves_the_request(fake: Any) -> None:
    backend = fake([status("JOB_STATE_PENDING", Phase.WAITING)])
    deadline = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()
    (event,) = run_all(trigger(task_deadline=deadline, cancel_on_kill=False))
    assert backend.cancelled == []
    assert event["failure"] == "timed_out"
    assert "left as it was" in event["message"]


def test_task_deadline_does_not_wait_for_the_next_poll(fake: Any) -> None:
    """A 60 s poll interval must not carry the wait a minute past the deadline."""
    backend = fake([status("JOB_STATE_PENDING", Phase.WAITING)])
    deadline = (datetime.now(timezone.utc) + timedelta(seconds=0.3)).isoformat()
    (event,) = run_all(trigger(task_deadline=deadline, poll_interval=60))  # run_all times out at 10 s
    assert event["failure"] == "timed_out"
    assert backend.reads == 1
    assert backend.cancelled == [NAME]


def test_task_deadline_passed_before_the_first_read_reports_what_the_read_says(fake: Any) -> None:
    """A triggerer that starts after the deadline must not call a succeeded job timed out."""
    backend = fake([status("JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)])
    deadline = (datetime.now(timezone.utc) - timedelta(minutes=5)).isoformat()
    (event,) = run_all(trigger(task_deadline=deadline))
    assert event["phase"] == "succeeded"
    assert backend.cancelled == []


def test_request_ending_before_the_task_deadline_is_reported_as_is(fake: Any) -> None:
    backend = fake(
        [status("JOB_STATE_PENDING", Phase.WAITING), status("JOB_STATE_SUCCEEDED", Phase.SUCCEEDED)]
    )
    deadline = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    (event,) = run_all(trigger(task_deadline=deadline))
    assert event["phase"] == "succeeded"
    assert backend.cancelled == []


# -- on_kill: a user's kill, or a trigger moved to another triggerer -------------------------------


class FakeTI:
    dag_id = "d"
    task_id = "t"
    run_id = "r"
    map_index = -1
    try_number = 1


def _states(monkeypatch: pytest.MonkeyPatch, answer: Any) -> list[dict[str, Any]]:
    from airflow.sdk.execution_time import task_runner

    calls: list[dict[str, Any]] = []

    def get_task_states(**kwargs: Any) -> Any:
        calls.append(kwargs)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(task_runner.RuntimeTaskInstance, "get_task_states", staticmethod(get_task_states))
    return calls


@pytest.mark.parametrize(
    "state", ["failed", "success", None, "scheduled", "queued", "running", "up_for_retry"]
)
def test_on_kill_cancels_once_the_task_left_deferred(
    fake: Any, monkeypatch: pytest.MonkeyPatch, state: str | None
) -> None:
    backend = fake([status("JOB_STATE_PENDING", Phase.WAITING)])
    calls = _states(monkeypatch, {"r": {"t": state}})
    t = trigger()
    t.task_instance = FakeTI()  # type: ignore[assignment]
    asyncio.run(t.on_kill())
    assert calls == [{"dag_id": "d", "task_ids": ["t"], "run_ids": ["r"]}]
    assert backend.cancelled == [NAME]


def test_on_kill_leaves_the_request_when_the_task_is_still_deferred(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redistribution: another triggerer runs the trigger now; cancelling would end its wait."""
    backend = fake([status("JOB_STATE_PENDING", Phase.WAITING)])
    _states(monkeypatch, {"r": {"t": "deferred", "other": "failed"}})
    t = trigger()
    t.task_instance = FakeTI()  # type: ignore[assignment]
    asyncio.run(t.on_kill())
    assert backend.cancelled == []


def test_on_kill_reads_the_state_of_its_own_map_index(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = fake([status("JOB_STATE_PENDING", Phase.WAITING)])
    _states(monkeypatch, {"r": {"t_3": "deferred", "t_4": "failed"}})
    ti = FakeTI()
    ti.map_index = 4
    t = trigger()
    t.task_instance = ti  # type: ignore[assignment]
    asyncio.run(t.on_kill())
    assert backend.cancelled == [NAME]


def test_on_kill_cancels_when_the_state_cannot_be_read(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = fake([status("JOB_STATE_PENDING", Phase.WAITING)])
    _states(monkeypatch, RuntimeError("no supervisor"))
    t = trigger()
    t.task_instance = FakeTI()  # type: ignore[assignment]
    asyncio.run(t.on_kill())
    assert backend.cancelled == [NAME]


def test_on_kill_survives_the_triggerer_cancelling_it_again(fake: Any) -> None:
    """Airflow 3.3 re-cancels a dropped trigger at every sync (~1 s), interrupting ``on_kill``: a
    cancel that needs a retry must still go through."""
    backend = fake([status("JOB_STATE_PENDING", Phase.WAITING)])
    calls = 0
    started = asyncio.Event()
    answer = asyncio.Event()

    async def slow_cancel(name: str) -> None:
        nonlocal calls
        calls += 1
        started.set()
        await answer.wait()  # a retried UNAVAILABLE, or one slow API call
        backend.cancelled.append(name)

    backend.arelease = slow_cancel  # type: ignore[method-assign]

    async def scenario() -> None:
        t = trigger()
        killer = asyncio.ensure_future(t.on_kill())
        await started.wait()
        killer.cancel("__airflow_user_action__")  # the next sync's cancel, mid-call
        with pytest.raises(asyncio.CancelledError):
            await killer
        assert backend.cancelled == []
        answer.set()  # the API answers after the interruption
        await asyncio.gather(*on_kill.KILL_TASKS)

    asyncio.run(scenario())
    assert calls == 1
    assert backend.cancelled == [NAME]
    assert not on_kill.KILL_TASKS


def test_a_kill_during_a_status_read_keeps_airflow_s_cancel_message(fake: Any) -> None:
    """grpc.aio drops the message of a cancel that lands during a call; Airflow 3.3 calls on_kill
    only when it sees its "user action" message, so the trigger must keep it."""
    backend = fake([status("JOB_STATE_PENDING", Phase.WAITING)])
    reading = asyncio.Event()

    async def in_flight_read(name: str) -> RequestStatus:
        reading.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise asyncio.CancelledError() from None  # what a cancelled grpc.aio call raises
        raise AssertionError("unreachable")

    backend.aget_status = in_flight_read  # type: ignore[method-assign]

    seen: list[tuple[Any, ...]] = []

    async def run_trigger() -> None:
        # As Airflow's triggerer reads it: inside the cancelled task (Python 3.10 does not hand the
        # message on to a task that awaits this one; 3.11+ does).
        try:
            await collect(trigger())
        except asyncio.CancelledError as err:
            seen.append(err.args)
            raise

    async def scenario() -> None:
        task = asyncio.ensure_future(run_trigger())
        await reading.wait()
        task.cancel("__airflow_user_action__")
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert seen == [("__airflow_user_action__",)]


# -- the event's size --------------------------------------------------------------------------


def test_event_is_small(fake: Any) -> None:
    """Airflow logs and stores every event, hundreds at once when capacity comes for many: the
    event carries the status without the backend's details, and the resume state without empty values."""
    final = RequestStatus(
        name=NAME,
        state="JOB_STATE_SUCCEEDED",
        outcome=Outcome(Phase.SUCCEEDED, None, ""),
        timings=RequestTimings(T0, T0 + timedelta(seconds=109.665335), T0 + timedelta(seconds=109.72)),
        description="8 x NVIDIA_H100_80GB in us-central1",
        details={"display_name": "llm-fine-tune-0005", "region": "us-central1", "max_wait_seconds": 7200.0},
    )
    fake([final])
    resume = {
        "history": [],
        "attempt": 1,
        "placement": {"location": "us-central1"},
        "max_wait_seconds": 7200.0,
    }
    (event,) = run_all(trigger(resume=resume))
    assert "details" not in event
    assert event["resume"] == {
        "attempt": 1,
        "placement": {"location": "us-central1"},
        "max_wait_seconds": 7200.0,
    }
    assert len(json.dumps(event)) <= 500  # 496; with the details and the whole state it was 677
    again = RequestStatus.from_event(event)
    assert (again.name, again.state, again.outcome, again.timings, again.description) == (
        NAME,
        final.state,
        final.outcome,
        final.timings,
        final.description,
    )


def test_event_cuts_a_long_message(fake: Any) -> None:
    long = "The requested resources were not available. " * 40
    fake([RequestStatus(NAME, "JOB_STATE_FAILED", Outcome(Phase.NOT_OBTAINED, None, long), RequestTimings())])
    (event,) = run_all(trigger())
    assert len(event["message"]) == 500
    assert event["message"].endswith("...") and long.startswith(event["message"][:-3])


class RecordingLog:
    """A structlog-like logger (it has ``ainfo``) that records each line and the thread it was
    written from."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []
        self.threads: list[int] = []

    def info(self, message: str, *args: Any) -> None:
        self.threads.append(threading.get_ident())
        self.lines.append(("info", message % args))

    async def ainfo(self, message: str, *args: Any) -> None:
        raise AssertionError("a line per executor job: the trigger uses the shared line writer")

    def warning(self, message: str, *args: Any, **kwargs: Any) -> None:
        self.lines.append(("warning", message % args))

    error = exception = warning


def test_status_lines_are_not_written_from_the_loop(fake: Any) -> None:
    """When capacity comes for hundreds at once, a write from the event loop's thread waits for
    the triggerer's supervisor, busy storing the events: the lines are written by a worker thread,
    in order."""
    fake(
        [
            status("JOB_STATE_PENDING", Phase.WAITING),
            status("JOB_STATE_SUCCEEDED", Phase.SUCCEEDED, submitted=T0, started=T0, finished=T0),
        ]
    )
    t = trigger()
    log = RecordingLog()
    t._log = log  # type: ignore[assignment]
    assert asyncio.run(first_event(t))["phase"] == "succeeded"
    assert [how for how, _ in log.lines] == ["info", "info", "info"]
    assert "Waiting on" in log.lines[0][1]
    assert log.lines[1][1].startswith("Waiting for capacity") and log.lines[2][1].startswith("Succeeded")
    assert threading.main_thread().ident not in log.threads


class GatedLog(RecordingLog):
    """Writing the final status line blocks until ``gate`` is set (a full log socket)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def info(self, message: str, *args: Any) -> None:
        if (message % args).startswith("Succeeded"):
            assert self.gate.wait(60)
        super().info(message, *args)


def test_the_event_does_not_wait_for_the_last_line(fake: Any) -> None:
    """Waiting for the final line held each event behind the log socket (500 events spread over
    28.8 s instead of 5): it is queued for the worker thread and the event goes out at once."""
    fake([status("JOB_STATE_SUCCEEDED", Phase.SUCCEEDED, submitted=T0, started=T0, finished=T0)])
    t = trigger()
    log = GatedLog()
    t._log = log  # type: ignore[assignment]

    async def scenario() -> tuple[dict[str, Any], list[str]]:
        events = t.run()
        event = await asyncio.wait_for(events.__anext__(), timeout=10)
        before = [line for _, line in log.lines]
        log.gate.set()
        await events.aclose()
        await LINES.flush()
        return event.payload, before

    payload, before = asyncio.run(scenario())
    assert payload["phase"] == "succeeded"
    assert not any(line.startswith("Succeeded") for line in before)
    assert log.lines[-1][1].startswith("Succeeded")


class SlowLog(RecordingLog):
    """Each line takes a while to write, as on a busy log socket."""

    def info(self, message: str, *args: Any) -> None:
        time.sleep(0.05)
        super().info(message, *args)


def test_first_event_writes_the_last_line_before_the_loop_ends(fake: Any) -> None:
    """``deferrable=False``: the worker's loop ends with ``first_event``, which would cancel a
    line still being written."""
    fake([status("JOB_STATE_SUCCEEDED", Phase.SUCCEEDED, submitted=T0, started=T0, finished=T0)])
    t = trigger()
    t._log = SlowLog()  # type: ignore[assignment]
    assert asyncio.run(first_event(t))["phase"] == "succeeded"
    assert t._log.lines[-1][1].startswith("Succeeded")  # type: ignore[attr-defined]


# -- a request another task owns (a calendar block a wait task follows) ----------------------------


def test_releases_false_round_trips_and_only_then_is_written() -> None:
    path, kwargs = trigger(releases=False).serialize()
    assert kwargs["releases"] is False
    assert CapacityRequestTrigger(**kwargs).serialize() == (path, kwargs)
    assert "releases" not in trigger().serialize()[1]  # triggers stored before it stay valid
    with pytest.raises(TypeError, match="releases must be True or False"):
        trigger(releases="no")


def test_a_trigger_that_does_not_own_its_request_never_cancels_it(fake: Any) -> None:
    """Killed, timed out or past its wait's deadline, a wait on another task's request only reports."""
    backend = fake([status("PENDING_APPROVAL", Phase.WAITING, submitted=T0)])
    asyncio.run(trigger(releases=False, cancel_on_kill=True).on_kill())
    past = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()
    (timed_out,) = run_all(trigger(releases=False, task_deadline=past))
    assert timed_out["failure"] == "timed_out" and "left as it was" in timed_out["message"]
    (given_up,) = run_all(trigger(releases=False, wait_deadline=past, wait_grace=0))
    assert given_up["phase"] == "not_obtained" and "left to its owner" in given_up["message"]
    assert backend.cancelled == []


# -- a backend whose requests may move on just before the max wait ends ----------------------------


def _install(monkeypatch: pytest.MonkeyPatch, backend: FakeBackend) -> Any:
    """The shared poller (and the trigger) use ``backend``."""
    monkeypatch.setattr(poller, "backend_from_spec", lambda kind, spec: backend)
    return backend


class GivingUpBackend(FakeBackend):
    """A backend with ``agive_up``: the request was approved just before its max wait ended."""

    def __init__(self, script: list[RequestStatus | Exception], now: RequestStatus | None) -> None:
        super().__init__(script)
        self.now, self.given_up = now, 0

    async def agive_up(self, name: str) -> RequestStatus | None:
        self.given_up += 1
        return self.now


def test_a_request_approved_just_before_its_max_wait_ends_on_that_status(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not cancelled: the wait ends on the fresh status (its target reached)."""
    backend = GivingUpBackend(
        [status("PENDING_APPROVAL", Phase.WAITING, submitted=T0)], status("APPROVED", Phase.PROVISIONING)
    )
    backend = _install(monkeypatch, backend)
    past = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()
    (event,) = run_all(trigger(wait_deadline=past, wait_grace=0, target="provisioning"))
    assert (event["phase"], event["state"]) == ("provisioning", "APPROVED")
    assert backend.given_up == 1 and backend.cancelled == []


def test_a_request_approved_before_its_max_wait_waits_on_for_its_target(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Approved, not delivered, for a wait until delivery: the wait goes on (never given up again)."""
    backend = GivingUpBackend(
        [
            status("PENDING_APPROVAL", Phase.WAITING, submitted=T0),
            status("APPROVED", Phase.PROVISIONING),
            status("FULFILLED", Phase.RUNNING),
        ],
        status("APPROVED", Phase.PROVISIONING),
    )
    backend = _install(monkeypatch, backend)
    past = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()
    (event,) = run_all(trigger(wait_deadline=past, wait_grace=0, target="running"))
    assert (event["phase"], event["state"]) == ("running", "FULFILLED")
    assert backend.given_up == 1 and backend.cancelled == []


def test_a_request_given_up_by_its_backend_is_not_obtained(
    fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = _install(
        monkeypatch, GivingUpBackend([status("PENDING_APPROVAL", Phase.WAITING, submitted=T0)], None)
    )
    past = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat()
    (event,) = run_all(trigger(wait_deadline=past, wait_grace=0, target="provisioning"))
    assert event["phase"] == "not_obtained" and backend.given_up == 1
    assert backend.cancelled == []  # agive_up did it, not arelease

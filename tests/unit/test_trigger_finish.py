"""A successful wait its trigger ends (issue 36): the triggerer writes what the resumed task would,
and no worker runs again. Against fake backends; the fault matrix and ``make bench-airflow`` run it
in real Airflow processes."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.exceptions import TaskDeferred
from airflow.triggers.base import TaskSuccessEvent, TriggerEvent

from airflow_provider_dws.backends.base import RESULT, RequestStatus
from airflow_provider_dws.records import XCOM_KEY, RequestRecord, read_records
from airflow_provider_dws.runtime.recording import stored, stored_waiting
from airflow_provider_dws.runtime.vertex_ai import VertexFlexStartAdapter
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings
from airflow_provider_dws.triggers import finish
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger
from airflow_provider_dws.triggers.submit import Submission, pending_name
from tests.unit.test_trigger_submission import (  # noqa: F401  (``backends`` is a fixture)
    IDENTITY,
    NAME,
    SPEC,
    T0,
    TI,
    FakeBackend,
    Store,
    backends,
    op,
    status,
)

JOB = {"name": NAME.format(7), "state": "JOB_STATE_SUCCEEDED"}


def succeeded(number: int = 7, **details: Any) -> RequestStatus:
    done = status(number, Phase.SUCCEEDED, **details)
    timings = RequestTimings(T0, T0 + timedelta(minutes=10), T0 + timedelta(hours=1))
    return replace(done, timings=timings, details={**done.details, RESULT: JOB})


def deferred_trigger(task: Any, ti: TI) -> CapacityRequestTrigger:
    """The trigger the worker defers on, as the triggerer rebuilds it from its serialized form."""
    with pytest.raises(TaskDeferred) as deferred:
        task.attempt_loop().run({"ti": ti})
    path, kwargs = deferred.value.trigger.serialize()
    assert path.endswith("CapacityRequestTrigger")
    return CapacityRequestTrigger(**kwargs)


def first(t: CapacityRequestTrigger) -> TriggerEvent:
    async def one() -> TriggerEvent:
        async for event in t.run():
            return event
        raise AssertionError("no event")

    return asyncio.run(asyncio.wait_for(one(), 20))


@pytest.fixture
def pushed(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the trigger pushes through the Task SDK's XCom (to the triggerer's supervisor)."""
    written: dict[str, Any] = {}

    def push(ti: Any, xcoms: dict[str, Any]) -> bool:
        assert ti is not None
        written.update(xcoms)
        return True

    monkeypatch.setattr(finish, "push_xcoms", push)
    return written


def in_a_triggerer(t: CapacityRequestTrigger) -> CapacityRequestTrigger:
    t.trigger_id = 42  # set by Airflow's triggerer, and only there
    t.task_instance = TI()  # type: ignore[assignment]
    return t


def test_the_triggerer_ends_a_success_with_what_the_resumed_task_would_write(
    backends: dict[str, FakeBackend],  # noqa: F811
    pushed: dict[str, Any],
) -> None:
    backend = backends["us-central1"] = FakeBackend(SPEC, [], status(7, Phase.WAITING))
    backend.reads[NAME.format(7)] = succeeded()
    ended = first(in_a_triggerer(deferred_trigger(op(), TI())))
    assert isinstance(ended, TaskSuccessEvent) and not ended.xcoms

    # The same wait run where no triggerer ends tasks (`airflow dags test`): the worker resumes.
    worker_ti = TI()
    resumed = first(deferred_trigger(op(), worker_ti))
    assert type(resumed) is TriggerEvent
    result = op().attempt_loop().complete({"ti": worker_ti}, resumed.payload, {})

    written = dict(pushed)
    assert written.pop("return_value") == result == JOB
    assert written == worker_ti.xcom
    [record] = read_records(written[XCOM_KEY])
    assert (record.request_name, record.phase, record.outcome) == (NAME.format(7), "succeeded", "succeeded")
    assert record.ended == (T0 + timedelta(hours=1)).isoformat()
    assert [a["outcome"] for a in written["dws_attempts"]] == ["succeeded"]
    assert (written["wait_seconds"], written["run_seconds"]) == (600.0, 3000.0)


def test_the_trigger_ends_nothing_but_a_success(
    backends: dict[str, FakeBackend],  # noqa: F811
    pushed: dict[str, Any],
) -> None:
    backend = backends["us-central1"] = FakeBackend(SPEC, [], status(7, Phase.WAITING))
    failed = status(7, Phase.FAILED)
    backend.reads[NAME.format(7)] = replace(
        failed, outcome=Outcome(Phase.FAILED, FailureKind.WORKLOAD_FAILED, "exit 1")
    )
    event = first(in_a_triggerer(deferred_trigger(op(), TI())))
    assert type(event) is TriggerEvent and event.payload["phase"] == "failed"
    assert pushed == {}


def test_xcoms_the_triggerer_cannot_write_leave_the_end_to_a_worker(
    backends: dict[str, FakeBackend],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An Airflow whose triggerer cannot forward an XCom (or an API server that refused it): the
    task resumes in a worker, which writes everything, and no metric was counted twice."""
    sent: list[str] = []
    monkeypatch.setattr("airflow_provider_dws.metrics.timing", lambda name, value, tag: sent.append(name))
    monkeypatch.setattr(finish, "push_xcoms", lambda ti, xcoms: False)
    backend = backends["us-central1"] = FakeBackend(SPEC, [], status(7, Phase.WAITING))
    backend.reads[NAME.format(7)] = succeeded()
    event = first(in_a_triggerer(deferred_trigger(op(), TI())))
    assert type(event) is TriggerEvent and event.payload["phase"] == "succeeded"
    assert sent == []


def callback(context: Any) -> None:
    pass


@pytest.mark.parametrize(
    "kwargs",
    [{"outlets": ["gs://bucket/model"]}, {"multiple_outputs": True}, {"on_success_callback": callback}],
)
def test_a_task_airflow_must_end_in_a_worker_is_not_ended_by_its_trigger(kwargs: dict[str, Any]) -> None:
    """Airflow records outlets' asset events, splits a return value and runs a success callback
    with the task's context only in a worker."""
    from airflow.sdk import Asset

    if "outlets" in kwargs:
        kwargs = {"outlets": [Asset(kwargs["outlets"][0])]}
    t = deferred_trigger(op(**kwargs), TI())
    assert finish.FINISH not in (t.resume or {})
    assert finish.FINISH in (deferred_trigger(op(), TI()).resume or {})


def stub(target: str, resume: dict[str, Any], result_line: Any = None) -> Any:
    return SimpleNamespace(
        trigger_id=1,
        target=target,
        resume=resume,
        submission=None,
        limits=SimpleNamespace(wait_deadline=None),
        backend=SimpleNamespace(result_line=result_line or (lambda status: None)),
    )


def held(value: dict[str, Any]) -> RequestStatus:
    return RequestStatus(
        name="pr-1",
        state="Provisioned",
        outcome=Outcome(Phase.RUNNING, None, ""),
        timings=RequestTimings(T0, T0 + timedelta(minutes=5)),
        details={RESULT: value},
    )


def test_capacity_held_is_recorded_held_and_its_keys_pushed_on_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wait for capacity (a GKE request Provisioned, a TPU slice ACTIVE) ends held, not ended,
    with no run time yet; the return value's keys a workload templates go out under their own."""
    sent: list[tuple[str, Any]] = []
    monkeypatch.setattr(
        "airflow_provider_dws.metrics.timing", lambda name, value, tag: sent.append((name, value))
    )
    value = {"name": "pr-1", "annotations": {"a": "b"}, "node_selector": {"n": "s"}, "tolerations": []}
    waiting = RequestRecord(
        api="gke", kind="k", project="p", location="l", request_name="submitting/x", phase="waiting"
    )
    resume = {
        "attempt": 1,
        "placement": {"location": "us-central1"},
        "pending": "submitting/x",
        "records": [waiting.to_dict()],
        finish.FINISH: {"push_return": True, "result_keys": ["annotations", "node_selector", "tolerations"]},
    }
    trigger = stub("provisioning", resume, lambda status: "booked")
    ending = finish.task_end(trigger, held(value), {"name": "pr-1", "resume": resume})
    assert ending is not None
    xcoms, lines = ending.xcoms, ending.lines
    assert sent == []  # counted once the XComs are written
    ending.count(held(value))
    assert (
        xcoms["return_value"] == value and xcoms["annotations"] == {"a": "b"} and xcoms["tolerations"] == []
    )
    assert "run_seconds" not in xcoms and "resume" not in xcoms["dws_request"]
    [record] = read_records(xcoms[XCOM_KEY])
    assert (record.request_name, record.phase, record.holds, record.ended) == ("pr-1", "running", True, None)
    assert "booked" in lines and lines[-1].startswith("The task ends here")
    assert ("dws.request.wait", 300.0) in sent and ("dws.request.run", None) in sent


def test_without_the_result_in_the_event_the_worker_finishes() -> None:
    resume = {"attempt": 1, "placement": {"location": "us-central1"}, finish.FINISH: {"push_return": True}}
    bare = replace(held({}), details={})
    assert finish.task_end(stub("running", resume), bare, {}) is None
    resume[finish.FINISH] = {"push_return": False}
    assert finish.task_end(stub("running", resume), bare, {}) is not None


def test_a_try_after_a_clear_keeps_what_the_earlier_trigger_ended_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Try 1's trigger ended the task with its job (it cannot write the task state store, which
    still says try 1 waits on it); the task is cleared. Try 2 must not give that job up, and its
    record must say it succeeded, not that try 1 abandoned it."""
    done = replace(succeeded(3), details={**succeeded(3).details, "try": 1})
    released: list[str] = []

    class Backend:
        kind = "vertex_custom_job"

        def find(self, identity: RequestIdentity) -> list[RequestStatus]:
            return [done]

        def spec(self) -> dict[str, Any]:
            return SPEC

    monkeypatch.setattr(VertexFlexStartAdapter, "backend", lambda self, location=None: Backend())
    monkeypatch.setattr(VertexFlexStartAdapter, "release_or_keep", lambda self, name: released.append(name))
    pending = pending_name(IDENTITY)
    try1 = RequestRecord(
        api="vertex_ai",
        kind="k",
        project="my-project",
        location="us-central1",
        request_name=pending,
        phase="waiting",
    )
    store = Store({XCOM_KEY: stored([try1.to_dict()], {"request": pending, "try": 1})})
    ti = TI()
    ti.try_number = 2
    with pytest.raises(TaskDeferred) as deferred:
        op().attempt_loop().run({"ti": ti, "task_state_store": store})
    assert released == []
    assert Submission.from_dict(deferred.value.trigger.submit).avoid == []
    records = {r.request_name: r for r in read_records(ti.xcom[XCOM_KEY])}
    assert (records[done.name].phase, records[done.name].outcome) == ("succeeded", "succeeded")
    assert records[done.name].ended == (T0 + timedelta(hours=1)).isoformat()
    assert stored_waiting(store.values[XCOM_KEY])["try"] == 2


def test_a_success_taken_again_keeps_one_record_and_is_not_counted_twice() -> None:
    """Try 2 of a task cleared after its success finds try 1's job and ends with it: its own
    provisional record goes, try 1's stays as it was, and no metric counts the job again."""
    job = succeeded(3)
    done = RequestRecord(
        api="vertex_ai",
        kind="k",
        project="p",
        location="us-central1",
        request_name=job.name,
        phase="succeeded",
    )
    done = replace(done, outcome="succeeded", ended=(T0 + timedelta(hours=1)).isoformat(), try_number=1)
    mine = RequestRecord(
        api="vertex_ai",
        kind="k",
        project="p",
        location="us-central1",
        request_name="submitting/x/t2/a1",
        phase="waiting",
    )
    resume = {
        "attempt": 1,
        "placement": {"location": "us-central1"},
        "pending": mine.request_name,
        "records": [done.to_dict(), replace(mine, try_number=2).to_dict()],
        finish.FINISH: {"push_return": True, "result_keys": []},
    }
    ending = finish.task_end(stub("end", resume), job, {"name": job.name})
    assert ending is not None and ending.counted is None
    [record] = read_records(ending.xcoms[XCOM_KEY])
    assert (record.request_name, record.phase, record.try_number) == (job.name, "succeeded", 1)


@pytest.mark.parametrize("mapped", [True, False])
def test_a_task_a_mapped_task_expands_over_ends_in_a_worker(mapped: bool) -> None:
    """Airflow counts what a downstream mapped task expands over only when a worker pushes it."""
    from airflow.sdk import DAG, task

    @task
    def use(value: Any) -> None:
        pass

    with DAG("d", schedule=None):
        request = op()
        if mapped:
            use.expand(value=request.output)
        else:
            use(request.output)
    resume = deferred_trigger(request, TI()).resume or {}
    assert (finish.FINISH in resume) is not mapped


def test_a_success_the_triggerer_ends_joins_the_wait_history(
    backends: dict[str, FakeBackend],  # noqa: F811
    pushed: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No worker resumes such a task, so the triggerer adds its wait to the history itself."""
    from airflow_provider_dws import wait_history

    kept: list[Any] = []
    monkeypatch.setattr(wait_history, "observe", kept.append)
    backend = backends["us-central1"] = FakeBackend(SPEC, [], status(7, Phase.WAITING))
    backend.reads[NAME.format(7)] = succeeded()
    ended = first(in_a_triggerer(deferred_trigger(op(), TI())))
    assert isinstance(ended, TaskSuccessEvent)
    [record] = kept
    assert (record.request_name, record.phase, record.started) == (
        NAME.format(7),
        "succeeded",
        (T0 + timedelta(minutes=10)).isoformat(),
    )

"""The attempt loop's promises, with the API steps stubbed: a request abandoned by a cleared or
marked try is cancelled and never adopted; execution_timeout reaches the trigger and ends the
task as a timeout; deferrable=False cancels on kill."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.exceptions import TaskDeferred
from airflow.providers.common.compat.sdk import AirflowTaskTimeout

from airflow_provider_dws.backends.base import WAIT_ERROR, RequestStatus
from airflow_provider_dws.exceptions import WaitFailedError
from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.records import XCOM_KEY
from airflow_provider_dws.runtime.adapter import Found
from airflow_provider_dws.runtime.recording import stored, stored_waiting
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings
from airflow_provider_dws.scheduling.policies import Placement


@pytest.fixture(autouse=True)
def _worker_submits(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests pin the attempt loop's worker-side submission (every adapter that does not hand
    its request to the trigger, and ``deferrable=False``), with Vertex AI as the example adapter;
    its trigger-side submission is ``tests/unit/test_trigger_submission.py``'s."""
    from airflow_provider_dws.runtime.vertex_ai import VertexFlexStartAdapter

    monkeypatch.setattr(VertexFlexStartAdapter, "submits_in_trigger", False)


POOL = {
    "machine_spec": {
        "machine_type": "a3-highgpu-8g",
        "accelerator_type": "NVIDIA_H100_80GB",
        "accelerator_count": 8,
    },
    "replica_count": 1,
    "container_spec": {"image_uri": "us-docker.pkg.dev/p/r/train:1"},
}
OLD = "projects/my-project/locations/us-central1/customJobs/1"
NEW = "projects/my-project/locations/us-central1/customJobs/2"
STARTED = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)


class Store:
    """A dict-backed stand-in for ``context["task_state_store"]``."""

    def __init__(self, data: dict[str, Any] | None = None, broken: bool = False) -> None:
        self.data = dict(data or {})
        self.broken = broken

    def get(self, key: str, default: Any = None) -> Any:
        if self.broken:
            raise RuntimeError("store down")
        return self.data.get(key, default)

    def set(self, key: str, value: Any) -> None:
        if self.broken:
            raise RuntimeError("store down")
        self.data[key] = value

    def delete(self, key: str) -> None:
        if self.broken:
            raise RuntimeError("store down")
        self.data.pop(key, None)


class TI:
    dag_id = "d"
    task_id = "t"
    run_id = "r"
    map_index = -1

    def __init__(self, try_number: int, max_tries: int = 0) -> None:
        self.try_number = try_number
        self.max_tries = max_tries
        self.start_date = STARTED
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def status(name: str, phase: Phase, failure: FailureKind | None = None) -> RequestStatus:
    return RequestStatus(
        name=name,
        state=phase.value,
        outcome=Outcome(phase, failure, "x"),
        timings=RequestTimings(submitted=STARTED),
        details={"max_wait_seconds": 3600.0},
    )


class Harness:
    """Records what the operator asked of the API."""

    def __init__(self, op: Any, found: RequestStatus | None, monkeypatch: pytest.MonkeyPatch) -> None:
        self.cancelled: list[str] = []
        self.submitted: list[int] = []
        self.triggers: list[Any] = []
        home = Placement(location="us-central1")

        def find_existing(context: Any, identity: Any) -> Any:
            return Found(found, home, 1) if found is not None else None

        def submit_attempt(context: Any, identity: Any, placement: Any, max_wait: Any) -> RequestStatus:
            self.submitted.append(identity.attempt)
            return status(NEW, Phase.WAITING)

        adapter = op.adapter()
        monkeypatch.setattr(adapter, "find", find_existing)
        monkeypatch.setattr(adapter, "submit", submit_attempt)
        monkeypatch.setattr(adapter, "release_or_keep", self.cancelled.append)
        loop = op.attempt_loop()
        original = loop.trigger

        def make_trigger(*args: Any) -> Any:
            trigger = original(*args)
            self.triggers.append(trigger)
            return trigger

        monkeypatch.setattr(loop, "trigger", make_trigger)


def vertex(**kwargs: Any) -> CreateVertexAIFlexStartJobOperator:
    return CreateVertexAIFlexStartJobOperator(
        task_id="t",
        project_id="my-project",
        region="us-central1",
        worker_pool_specs=[copy.deepcopy(POOL)],
        **{"deferrable": True, **kwargs},
    )


def context(try_number: int, store: Store | None, max_tries: int = 0) -> dict[str, Any]:
    ctx: dict[str, Any] = {"ti": TI(try_number, max_tries)}
    if store is not None:
        ctx["task_state_store"] = store
    return ctx


# -- a request abandoned by an earlier try ---------------------------------------------------------


def test_request_an_earlier_try_was_deferred_on_is_cancelled_not_adopted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    op = vertex()
    h = Harness(op, status(OLD, Phase.WAITING), monkeypatch)
    store = Store({XCOM_KEY: stored([], {"request": OLD, "try": 1})})
    with pytest.raises(TaskDeferred):
        op.attempt_loop().run(context(2, store))
    assert h.cancelled == [OLD]
    assert h.submitted == [1]
    assert h.triggers[0].request_name == NEW
    assert stored_waiting(store.data[XCOM_KEY]) == {"request": NEW, "try": 2}


def test_live_request_of_a_try_that_never_deferred_is_adopted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker died between submit and defer: nothing was recorded, the labels find the request."""
    op = vertex()
    h = Harness(op, status(OLD, Phase.WAITING), monkeypatch)
    store = Store()
    with pytest.raises(TaskDeferred):
        op.attempt_loop().run(context(2, store))
    assert h.cancelled == []
    assert h.submitted == []
    assert h.triggers[0].request_name == OLD
    assert stored_waiting(store.data[XCOM_KEY]) == {"request": OLD, "try": 2}


def test_record_of_the_same_try_is_not_an_abandonment(monkeypatch: pytest.MonkeyPatch) -> None:
    op = vertex()
    h = Harness(op, status(OLD, Phase.WAITING), monkeypatch)
    with pytest.raises(TaskDeferred):
        op.attempt_loop().run(context(1, Store({XCOM_KEY: stored([], {"request": OLD, "try": 1})})))
    assert h.cancelled == []
    assert h.triggers[0].request_name == OLD


def test_abandoned_request_is_adopted_when_cancel_on_kill_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    op = vertex(cancel_on_kill=False)
    h = Harness(op, status(OLD, Phase.WAITING), monkeypatch)
    store = Store({XCOM_KEY: stored([], {"request": OLD, "try": 1})})
    with pytest.raises(TaskDeferred):
        op.attempt_loop().run(context(2, store))
    assert h.cancelled == []
    assert h.submitted == []
    assert h.triggers[0].request_name == OLD


def test_a_succeeded_request_is_still_taken_when_another_was_abandoned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    op = vertex()
    h = Harness(op, status(NEW, Phase.SUCCEEDED), monkeypatch)
    monkeypatch.setattr(op.adapter(), "result", lambda ctx, st: {"name": st.name})
    result = op.attempt_loop().run(context(3, Store({XCOM_KEY: stored([], {"request": OLD, "try": 2})})))
    assert result == {"name": NEW}
    assert h.cancelled == [OLD]
    assert h.submitted == []


@pytest.mark.parametrize(
    "store", [None, Store(broken=True), Store({XCOM_KEY: {"records": [], "waiting": "garbage"}})]
)
def test_without_a_usable_store_the_labels_decide(
    monkeypatch: pytest.MonkeyPatch, store: Store | None
) -> None:
    op = vertex()
    h = Harness(op, status(OLD, Phase.WAITING), monkeypatch)
    with pytest.raises(TaskDeferred):
        op.attempt_loop().run(context(2, store))
    assert h.cancelled == []
    assert h.triggers[0].request_name == OLD


def test_trigger_event_clears_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    op = vertex()
    Harness(op, None, monkeypatch)
    store = Store({XCOM_KEY: stored([], {"request": NEW, "try": 1})})
    monkeypatch.setattr(op.adapter(), "result", lambda ctx, st: "ok")
    monkeypatch.setattr(op.adapter(), "backend", lambda region=None: pytest.fail("no API call expected"))
    event = status(NEW, Phase.SUCCEEDED).to_event()
    assert op.complete_attempt(context(1, store), event) == "ok"
    assert stored_waiting(store.data.get(XCOM_KEY)) is None


# -- a wait that ended on an error (the trigger's ``wait_error``) ----------------------------------


def failed_wait(phase: Phase) -> dict[str, Any]:
    event = status(NEW, phase).to_event()
    event[WAIT_ERROR] = "PermissionDeniedApiError: the credentials lost access"
    return event


def released_after_failure(op: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    released: list[str] = []
    monkeypatch.setattr(op.adapter(), "release_failed", lambda st, placement: released.append(st.name))
    return released


def test_a_failed_wait_with_a_retry_left_keeps_the_request_for_the_next_try(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    op = vertex(retries=1)
    h = Harness(op, None, monkeypatch)
    released = released_after_failure(op, monkeypatch)
    store = Store({XCOM_KEY: stored([], {"request": NEW, "try": 1})})
    with pytest.raises(WaitFailedError, match="credentials lost access; the next try adopts the request"):
        op.complete_attempt(context(1, store, max_tries=1), failed_wait(Phase.WAITING))
    assert (h.cancelled, released) == ([], [])
    # Not recorded as waited on by this try: the next one adopts the request, it does not cancel it.
    assert stored_waiting(store.data.get(XCOM_KEY)) is None


@pytest.mark.parametrize("phase", [Phase.WAITING, Phase.PROVISIONING])
def test_a_failed_wait_on_the_last_try_cancels_a_queued_request(
    phase: Phase, monkeypatch: pytest.MonkeyPatch
) -> None:
    op = vertex()
    h = Harness(op, None, monkeypatch)
    released = released_after_failure(op, monkeypatch)
    with pytest.raises(WaitFailedError, match="no retry is left, so the request was cancelled"):
        op.complete_attempt(context(1, Store()), failed_wait(phase))
    assert h.cancelled == released == [NEW]


def test_a_failed_wait_on_the_last_try_leaves_a_running_workload_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Vertex job that runs is doing its work (and billed as it would be anyway): not killed."""
    op = vertex()
    h = Harness(op, None, monkeypatch)
    with pytest.raises(WaitFailedError, match=r"left running \(its workload is running\)"):
        op.complete_attempt(context(2, Store(), max_tries=1), failed_wait(Phase.RUNNING))
    assert h.cancelled == []


def test_a_failed_wait_on_the_last_try_keeps_the_request_when_cancel_on_kill_is_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    op = vertex(cancel_on_kill=False)
    h = Harness(op, None, monkeypatch)
    with pytest.raises(WaitFailedError, match=r"left waiting \(cancel_on_kill=False\)"):
        op.complete_attempt(context(1, Store()), failed_wait(Phase.WAITING))
    assert h.cancelled == []


def test_a_failed_wait_whose_cancel_fails_says_to_cancel_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    op = vertex()
    Harness(op, None, monkeypatch)

    def refuse(name: str) -> None:
        raise RuntimeError("API down")

    monkeypatch.setattr(op.adapter(), "release_or_keep", refuse)
    with pytest.raises(WaitFailedError, match="cancelling the request failed: cancel it by hand"):
        op.complete_attempt(context(1, Store()), failed_wait(Phase.WAITING))


# -- execution_timeout ---------------------------------------------------------------------------


def test_execution_timeout_reaches_the_trigger(monkeypatch: pytest.MonkeyPatch) -> None:
    op = vertex(execution_timeout=timedelta(hours=2))
    h = Harness(op, None, monkeypatch)
    with pytest.raises(TaskDeferred) as deferred:
        op.attempt_loop().run(context(1, Store()))
    assert h.triggers[0].task_deadline == (STARTED + timedelta(hours=2)).isoformat()
    # The trigger enforces it (and cancels first); an Airflow trigger timeout would not cancel.
    assert deferred.value.timeout is None


def test_without_execution_timeout_the_trigger_has_no_task_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    op = vertex()
    h = Harness(op, None, monkeypatch)
    with pytest.raises(TaskDeferred):
        op.attempt_loop().run(context(1, Store()))
    assert h.triggers[0].task_deadline is None


def test_tpu_trigger_gets_the_task_deadline_too(monkeypatch: pytest.MonkeyPatch) -> None:
    op = CreateTPUQueuedResourceOperator(
        task_id="t",
        project_id="my-project",
        zone="us-west4-a",
        accelerator_type="v5litepod-16",
        runtime_version="v2-alpha-tpuv5-lite",
        execution_timeout=timedelta(minutes=30),
    )
    trigger = op.attempt_loop().trigger(
        status("projects/my-project/locations/us-west4-a/queuedResources/q", Phase.WAITING),
        Placement(location="us-west4-a"),
        timedelta(hours=1),
        {},
        STARTED + timedelta(minutes=30),
    )
    assert trigger.task_deadline == (STARTED + timedelta(minutes=30)).isoformat()


def test_timed_out_event_fails_the_task_as_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    op = vertex(execution_timeout=timedelta(minutes=5), capacity_retry=3)
    Harness(op, None, monkeypatch)
    monkeypatch.setattr(op.adapter(), "backend", lambda region=None: pytest.fail("no API call expected"))
    event = status(NEW, Phase.CANCELLED, FailureKind.TIMED_OUT).to_event()
    with pytest.raises(AirflowTaskTimeout, match="execution_timeout 0:05:00 passed"):
        op.complete_attempt(context(1, Store()), event)


# -- deferrable=False --------------------------------------------------------------------------------


def test_on_kill_while_waiting_in_the_worker_cancels(monkeypatch: pytest.MonkeyPatch) -> None:
    op = vertex(deferrable=False)
    h = Harness(op, None, monkeypatch)
    seen: list[str | None] = []

    async def first_event(trigger: Any) -> dict[str, Any]:
        seen.append(op.attempt_loop().waiting_on)
        op.on_kill()  # what Airflow does when it kills or times out the worker
        return status(NEW, Phase.SUCCEEDED).to_event()

    monkeypatch.setattr("airflow_provider_dws.triggers.capacity_request.first_event", first_event)
    monkeypatch.setattr(op.adapter(), "result", lambda ctx, st: "ok")
    assert op.attempt_loop().run(context(1, Store())) == "ok"
    assert seen == [NEW]
    assert h.cancelled == [NEW]
    assert op.attempt_loop().waiting_on is None
    op.on_kill()  # nothing is waited on any more: nothing to cancel
    assert h.cancelled == [NEW]


def test_a_kill_while_waiting_in_the_worker_writes_the_requests_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """The task will not come back to say how its request ended: the kill path writes it, so the
    DWS page shows it ended, not waiting for ever."""
    from airflow_provider_dws.records import TASK_ENDED, read_records

    op = vertex(deferrable=False)
    h = Harness(op, None, monkeypatch)
    ctx = context(1, Store())
    seen: list[tuple[str, str | None]] = []

    async def first_event(trigger: Any) -> dict[str, Any]:
        op.on_kill()
        (record,) = read_records(ctx["ti"].xcom["dws_requests"])
        seen.append((record.phase, record.outcome))
        raise AirflowTaskTimeout("Timeout, PID: 1")  # the worker's end, as the runner sees it

    monkeypatch.setattr("airflow_provider_dws.triggers.capacity_request.first_event", first_event)
    with pytest.raises(AirflowTaskTimeout):
        op.attempt_loop().run(ctx)
    assert h.cancelled == [NEW]
    assert seen == [("cancelled", TASK_ENDED)]
    (record,) = read_records(ctx["ti"].xcom["dws_requests"])
    assert record.ended is not None and "killed or timed out in the worker" in record.message


def test_a_timeout_between_the_submit_and_the_deferral_cancels_the_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seen in the fault matrix on a loaded machine: execution_timeout fired while the record of
    the new request was written, before the task deferred; no trigger existed to cancel it."""
    op = vertex(execution_timeout=timedelta(minutes=5))
    h = Harness(op, None, monkeypatch)

    def timed_out(*args: Any, **kwargs: Any) -> None:
        raise AirflowTaskTimeout("Timeout, PID: 1")

    monkeypatch.setattr(op.attempt_loop().recorder, "submitted", timed_out)
    with pytest.raises(AirflowTaskTimeout):
        op.attempt_loop().run(context(1, Store()))
    assert h.submitted == [1] and h.cancelled == []
    op.on_kill()  # what the task runner does on AirflowTaskTimeout
    assert h.cancelled == [NEW]


def test_a_deferred_request_is_not_the_worker_kill_path_s(monkeypatch: pytest.MonkeyPatch) -> None:
    op = vertex()
    h = Harness(op, None, monkeypatch)
    with pytest.raises(TaskDeferred):
        op.attempt_loop().run(context(1, Store()))
    op.on_kill()  # the trigger owns the wait now
    assert h.submitted == [1] and h.cancelled == []


def test_waiting_for_the_window_defers_with_the_execution_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """No request exists yet, so Airflow's own trigger timeout may end this wait."""
    now = datetime.now(timezone.utc)
    start, end = now + timedelta(hours=2), now + timedelta(hours=3)
    window = f"Mon-Sun {start:%H:%M}-{end:%H:%M} UTC"
    op = vertex(window=window, execution_timeout=timedelta(hours=1))
    h = Harness(op, None, monkeypatch)
    ctx = context(1, Store())
    ctx["ti"].start_date = now
    with pytest.raises(TaskDeferred) as deferred:
        op.attempt_loop().run(ctx)
    assert h.submitted == []
    assert type(deferred.value.trigger).__name__ == "ResumeAtTrigger"
    assert timedelta(minutes=59) < deferred.value.timeout <= timedelta(hours=1)


def test_the_attempt_state_travels_once_in_the_trigger_event(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not twice (deferral kwargs and event): the trigger's ``resume`` is what both Airflow's triggerer
    and ``airflow dags test`` hand back."""
    op = vertex(capacity_retry=2)
    h = Harness(op, None, monkeypatch)
    with pytest.raises(TaskDeferred) as deferred:
        op.attempt_loop().run(context(1, Store()))
    assert not deferred.value.kwargs
    resume = h.triggers[0].resume
    assert resume["attempt"] == 1 and resume["placement"] == {"location": "us-central1"}
    # The resumed task reads it back from the event alone.
    monkeypatch.setattr(op.adapter(), "result", lambda ctx, st: st.name)
    event = {**status(NEW, Phase.SUCCEEDED).to_event(), "resume": resume}
    ctx = context(1, Store())
    assert op.complete_attempt(ctx, event) == NEW
    assert ctx["ti"].xcom["dws_attempts"][0]["number"] == 1
    assert "resume" not in ctx["ti"].xcom["dws_request"]

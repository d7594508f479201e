"""A request its trigger makes (issue 36): the worker builds the request as JSON and defers at once;
the trigger looks the task instance's requests up, adopts one or creates it, then waits on it.
Against fake backends (no network); the emulator ring runs it end to end
(``tests/emulator/test_records_on_emulator.py``), the fault matrix in real Airflow processes."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.exceptions import TaskDeferred

from airflow_provider_dws import errors
from airflow_provider_dws.backends.base import RESULT, RequestStatus
from airflow_provider_dws.exceptions import BadRequestError, WaitFailedError
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.records import XCOM_KEY, read_records
from airflow_provider_dws.runtime.recording import stored, stored_records, stored_waiting
from airflow_provider_dws.runtime.vertex_ai import VertexFlexStartAdapter
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind, Outcome, Phase, RequestTimings
from airflow_provider_dws.triggers import poller, submit
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger
from airflow_provider_dws.triggers.submit import Submission, is_pending, pending_name

NAME = "projects/my-project/locations/us-central1/customJobs/{}"
SPEC = {"project_id": "my-project", "region": "us-central1", "gcp_conn_id": "gc", "impersonation_chain": None}
OTHER = {**SPEC, "region": "europe-west4"}
IDENTITY = RequestIdentity("d", "t", "r")
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def status(
    number: int, phase: Phase, attempt: int = 1, region: str = "us-central1", **details: Any
) -> RequestStatus:
    return RequestStatus(
        name=f"projects/my-project/locations/{region}/customJobs/{number}",
        state=phase.value.upper(),
        outcome=Outcome(phase, FailureKind.BAD_REQUEST if phase is Phase.FAILED else None, ""),
        timings=RequestTimings(submitted=T0),
        description="8 x NVIDIA_H100_80GB in us-central1",
        details={"attempt": attempt, "max_wait_seconds": 7200.0, **details},
    )


class FakeBackend:
    """Sync ``find`` / ``submit_spec`` (run in the trigger's threads) and the async reads of a wait."""

    kind = "vertex_custom_job"

    def __init__(
        self, spec: dict[str, Any], found: list[RequestStatus], made: RequestStatus | Exception
    ) -> None:
        self._spec = spec
        self.found = found
        self.made = made
        self.calls: list[str] = []
        self.cancelled: list[str] = []
        self.gate: threading.Event | None = None
        self.reads: dict[str, RequestStatus] = {}

    def spec(self) -> dict[str, Any]:
        return self._spec

    def find(self, identity: RequestIdentity) -> list[RequestStatus]:
        assert identity.key == IDENTITY.key
        self.calls.append("find")
        return list(self.found)

    def submit_spec(self, spec: dict[str, Any], identity: RequestIdentity) -> tuple[RequestStatus, bool]:
        self.calls.append("create")
        if self.gate is not None:
            self.gate.wait(10)
        if isinstance(self.made, Exception):
            raise self.made
        assert spec["job_spec"]["scheduling"]["strategy"] == "FLEX_START"
        return self.made, True

    async def aget_status(self, name: str) -> RequestStatus:
        return self.reads.get(name) or replace(
            status(int(name.rsplit("/", 1)[1]), Phase.SUCCEEDED), name=name
        )

    async def alist_live(self, only: Any = None) -> dict[str, RequestStatus]:
        return {}

    async def arelease(self, name: str) -> bool:
        self.cancelled.append(name)
        return True


@pytest.fixture
def backends(monkeypatch: pytest.MonkeyPatch) -> dict[str, FakeBackend]:
    made: dict[str, FakeBackend] = {}

    def from_spec(kind: str, spec: dict[str, Any]) -> FakeBackend:
        return made[spec["region"]]

    monkeypatch.setattr(poller, "backend_from_spec", from_spec)
    monkeypatch.setattr(submit, "_PACERS", {})
    monkeypatch.setattr(submit, "SUBMIT_RATE", 1000.0)
    return made


def submission(**kwargs: Any) -> dict[str, Any]:
    request = {"job_spec": {"scheduling": {"strategy": "FLEX_START"}}}
    lookup = [{"backend_spec": SPEC, "placement": {"location": "us-central1"}}]
    return Submission(request, IDENTITY.__dict__.copy(), 7200.0, lookup, **kwargs).to_dict()


def trigger(sub: dict[str, Any] | None = None) -> CapacityRequestTrigger:
    return CapacityRequestTrigger(
        "vertex_custom_job",
        SPEC,
        pending_name(IDENTITY),
        poll_interval=0.01,
        resume={"attempt": 1, "pending": pending_name(IDENTITY)},
        submit=sub or submission(),
    )


def events(t: CapacityRequestTrigger) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [event.payload async for event in t.run()]

    return asyncio.run(asyncio.wait_for(collect(), 20))


def test_it_looks_up_first_then_creates_and_waits(backends: dict[str, FakeBackend]) -> None:
    backend = backends["us-central1"] = FakeBackend(SPEC, [], status(7, Phase.WAITING))
    [event] = events(trigger())
    assert backend.calls == ["find", "create"]
    assert (event["name"], event["phase"]) == (NAME.format(7), "succeeded")
    assert event["resume"]["pending"] == pending_name(IDENTITY)
    assert event["resume"]["max_wait_seconds"] == 7200.0


def test_a_live_request_anywhere_the_task_may_be_is_adopted(backends: dict[str, FakeBackend]) -> None:
    home = backends["us-central1"] = FakeBackend(SPEC, [], status(7, Phase.WAITING))
    away = backends["europe-west4"] = FakeBackend(
        OTHER, [status(9, Phase.WAITING, 2, "europe-west4")], status(0, Phase.WAITING)
    )
    lookup = [
        {"backend_spec": SPEC, "placement": {"location": "us-central1"}},
        {"backend_spec": OTHER, "placement": {"location": "europe-west4"}},
    ]
    [event] = events(trigger(submission() | {"lookup": lookup}))
    assert "create" not in home.calls + away.calls
    assert event["name"].endswith("/europe-west4/customJobs/9")
    assert event["resume"]["attempt"] == 2 and event["resume"]["placement"] == {"location": "europe-west4"}


def test_a_success_found_is_the_event_at_once(backends: dict[str, FakeBackend]) -> None:
    done = status(5, Phase.SUCCEEDED, **{RESULT: {"name": NAME.format(5)}})
    backend = backends["us-central1"] = FakeBackend(SPEC, [done], status(0, Phase.WAITING))
    [event] = events(trigger())
    assert backend.calls == ["find"]
    assert (event["name"], event["phase"], event[RESULT]) == (
        NAME.format(5),
        "succeeded",
        {"name": NAME.format(5)},
    )


def test_a_request_the_task_gave_up_is_never_adopted(backends: dict[str, FakeBackend]) -> None:
    backend = backends["us-central1"] = FakeBackend(
        SPEC, [status(3, Phase.WAITING)], status(7, Phase.WAITING)
    )
    [event] = events(trigger(submission(avoid=[NAME.format(3)])))
    assert backend.calls == ["find", "create"] and event["name"] == NAME.format(7)


class ClearingBackend(FakeBackend):
    """An API that keeps ended requests listed (Cloud TPU): the lookup hands what it found, except
    the request adopted, to the backend's ``delete_ended``, which deletes the ended ones (the real
    TPU backend's filter: ``test_the_tpu_backend_deletes_only_what_ended_without_success``)."""

    def delete_ended(self, found: list[RequestStatus]) -> None:
        self.calls.append("handed " + ",".join(s.name.rsplit("/", 1)[1] for s in found))
        ended = [s for s in found if s.phase.terminal and s.phase is not Phase.SUCCEEDED]
        self.calls.append("clear " + ",".join(s.name.rsplit("/", 1)[1] for s in ended))


def test_ended_requests_the_api_keeps_listed_are_cleared_before_the_create(
    backends: dict[str, FakeBackend],
) -> None:
    found = [status(3, Phase.NOT_OBTAINED), status(4, Phase.FAILED), status(5, Phase.CANCELLED)]
    backend = backends["us-central1"] = ClearingBackend(SPEC, found, status(7, Phase.WAITING))
    [event] = events(trigger())
    # Cleared after the lookup and before the create; none of them adopted.
    assert backend.calls == ["find", "handed 3,4,5", "clear 3,4,5", "create"] and event[
        "name"
    ] == NAME.format(7)


def test_a_live_request_is_never_cleared(backends: dict[str, FakeBackend]) -> None:
    found = [status(3, Phase.FAILED), status(6, Phase.WAITING), status(8, Phase.SUCCEEDED)]
    backend = backends["us-central1"] = ClearingBackend(SPEC, found, status(7, Phase.WAITING))
    [event] = events(trigger())
    # The adopted request is never handed over; of the rest, only what ended without success goes.
    assert backend.calls == ["find", "handed 3,8", "clear 3"] and event["name"] == NAME.format(6)


def test_the_tpu_backend_deletes_only_what_ended_without_success(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_dws.backends.tpu import TpuQueuedResourceBackend

    released: list[str] = []
    backend = TpuQueuedResourceBackend("my-project", "us-west4-a")
    monkeypatch.setattr(backend, "release", lambda name, **kwargs: released.append(name))
    found = [
        status(3, Phase.FAILED),
        status(6, Phase.WAITING),
        status(8, Phase.SUCCEEDED),
        status(9, Phase.CANCELLED),
    ]
    backend.delete_ended(found)
    assert released == [NAME.format(3), NAME.format(9)]


def test_a_refused_create_fails_the_task_as_a_bad_request(backends: dict[str, FakeBackend]) -> None:
    backends["us-central1"] = FakeBackend(SPEC, [], errors.InvalidRequestError("bad machine type"))
    [event] = events(trigger())
    assert (event["phase"], event["failure"]) == ("failed", "bad_request")
    assert "bad machine type" in event["message"] and is_pending(event["name"])
    with pytest.raises(BadRequestError, match="bad machine type"):
        op().attempt_loop().complete({"ti": TI()}, event, {})


def test_a_failed_lookup_leaves_nothing_to_cancel(backends: dict[str, FakeBackend]) -> None:
    backend = backends["us-central1"] = FakeBackend(SPEC, [], status(7, Phase.WAITING))
    backend.find = lambda identity: (_ for _ in ()).throw(RuntimeError("boom"))  # type: ignore[method-assign]
    [event] = events(trigger())
    assert is_pending(event["name"]) and "boom" in event["wait_error"]
    with pytest.raises(WaitFailedError, match="making the request failed"):
        op().attempt_loop().complete({"ti": TI()}, event, {})


def test_a_kill_while_the_request_is_made_cancels_what_is_made(backends: dict[str, FakeBackend]) -> None:
    backend = backends["us-central1"] = FakeBackend(SPEC, [], status(7, Phase.WAITING))
    backend.gate = threading.Event()

    async def scenario() -> None:
        t = trigger()
        run = asyncio.ensure_future(t.run().__anext__())
        while "create" not in backend.calls:
            await asyncio.sleep(0.01)
        run.cancel()
        kill = asyncio.ensure_future(t.on_kill())
        await asyncio.sleep(0.05)
        assert backend.cancelled == []  # not before the create has answered
        backend.gate.set()
        await asyncio.wait_for(kill, 10)

    asyncio.run(scenario())
    assert backend.cancelled == [NAME.format(7)]


def test_submissions_are_paced_per_api_and_location(
    backends: dict[str, FakeBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(submit, "SUBMIT_CONCURRENCY", 2)
    in_flight, most = [0], [0]
    lock = threading.Lock()
    # Lookups meet in pairs: 2 at once is reached however slow the threads start, and a pacer
    # letting one at a time breaks the barrier (the lookup fails). The hold after it lets a third
    # one in, should the pacer let more than 2 through.
    pair = threading.Barrier(2, timeout=10)
    backend = backends["us-central1"] = FakeBackend(SPEC, [], status(7, Phase.SUCCEEDED))

    def find(identity: RequestIdentity) -> list[RequestStatus]:
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        pair.wait()
        threading.Event().wait(0.05)
        with lock:
            in_flight[0] -= 1
        return []

    backend.find = find  # type: ignore[method-assign]

    async def many() -> None:
        await asyncio.gather(
            *(
                submit.find_or_submit("vertex_custom_job", Submission.from_dict(submission()))
                for _ in range(8)
            )
        )

    asyncio.run(asyncio.wait_for(many(), 20))
    assert most[0] == 2


# -- the worker's side ----------------------------------------------------------------------------


class TI:
    dag_id, task_id, run_id, map_index, try_number, max_tries = "d", "t", "r", -1, 1, 0

    def __init__(self) -> None:
        self.start_date = T0
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value

    def xcom_pull(self, **kwargs: Any) -> Any:
        return None


def op(**kwargs: Any) -> CreateVertexAIFlexStartJobOperator:
    pool = {
        "machine_spec": {
            "machine_type": "a3-highgpu-8g",
            "accelerator_type": "NVIDIA_H100_80GB",
            "accelerator_count": 8,
        },
        "replica_count": 1,
        "container_spec": {"image_uri": "us-docker.pkg.dev/p/r/i:1"},
    }
    params = {
        "task_id": "t",
        "project_id": "my-project",
        "region": "us-central1",
        "worker_pool_specs": [pool],
    }
    return CreateVertexAIFlexStartJobOperator(**{**params, "deferrable": True, **kwargs})


def test_the_worker_defers_at_once_with_the_request_and_looks_nothing_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_call(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the worker called the API")

    monkeypatch.setattr(VertexFlexStartAdapter, "find", no_call)
    monkeypatch.setattr(VertexFlexStartAdapter, "submit", no_call)
    ti = TI()
    task = op(max_wait=timedelta(hours=2), failover=["europe-west4"], capacity_retry=1)
    with pytest.raises(TaskDeferred) as deferred:
        task.attempt_loop().run({"ti": ti})
    trig = deferred.value.trigger
    assert isinstance(trig, CapacityRequestTrigger) and is_pending(trig.request_name)
    assert trig.wait_deadline is None  # counted from when the trigger makes the job
    sub = Submission.from_dict(trig.submit)
    scheduling = sub.request["job_spec"]["scheduling"]
    assert scheduling == {"strategy": "FLEX_START", "max_wait_duration": "7200s", "timeout": "604800s"}
    assert sub.request["labels"]["dws_managed"] == "true"
    assert [x["placement"]["location"] for x in sub.lookup] == ["us-central1", "europe-west4"]
    assert sub.announce["name_key"] == "job_name" and "{id}" in sub.announce["link"]
    [record] = read_records(ti.xcom["dws_requests"])
    assert (record.request_name, record.phase) == (trig.request_name, "waiting")


def test_the_resumed_task_takes_the_result_from_the_event(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_call(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the worker called the API")

    monkeypatch.setattr(VertexFlexStartAdapter, "backend", no_call)
    done = status(7, Phase.SUCCEEDED, **{RESULT: {"name": NAME.format(7), "state": "JOB_STATE_SUCCEEDED"}})
    ti = TI()
    event = done.to_event() | {"resume": {"attempt": 1, "pending": pending_name(IDENTITY)}}
    result = op().attempt_loop().complete({"ti": ti}, event, {})
    assert result == {"name": NAME.format(7), "state": "JOB_STATE_SUCCEEDED"}
    assert ti.xcom["job_name"] == NAME.format(7)
    assert ti.xcom["dws_vertex_job_link"].endswith("/training/7/cpu?project=my-project")


@pytest.mark.parametrize("told", [True, False])
def test_the_event_says_whether_the_trigger_told_the_task_its_request(
    backends: dict[str, FakeBackend], monkeypatch: pytest.MonkeyPatch, told: bool
) -> None:
    backends["us-central1"] = FakeBackend(SPEC, [], status(7, Phase.WAITING))
    seen: list[str] = []

    def fake_announced(
        ti: Any, pending: str, made: RequestStatus, announce: Any, carried: Any = None
    ) -> bool:
        seen.append(made.name)
        return told

    monkeypatch.setattr(submit, "announced", fake_announced)
    t = trigger()
    t.task_instance = TI()  # type: ignore[assignment]
    [event] = events(t)
    assert seen == [NAME.format(7)]
    assert event["resume"].get(submit.ANNOUNCED, False) is told


def test_a_resumed_task_writes_no_name_or_link_its_trigger_pushed() -> None:
    from airflow_provider_dws import console

    done = status(7, Phase.SUCCEEDED, **{RESULT: {"name": NAME.format(7), "state": "JOB_STATE_SUCCEEDED"}})
    links_read: list[str] = []

    class LinkStore(Store):
        def get(self, key: str) -> Any:
            if key == console.LINKS_KEY:
                links_read.append(key)
            return super().get(key)

    ti, store = TI(), LinkStore({})
    context = {"ti": ti, "task_state_store": store}
    console.track(context)
    resume = {"attempt": 1, "pending": pending_name(IDENTITY), submit.ANNOUNCED: True}
    op().attempt_loop().complete(context, done.to_event() | {"resume": resume}, {})  # type: ignore[arg-type]
    assert "job_name" not in ti.xcom and "dws_vertex_job_link" not in ti.xcom
    assert console.LINKS_KEY not in store.values
    # The link Airflow stores when the task ends is still known to this run, without a read.
    url = console.tracked_url(ti, "dws_vertex_job_link")
    assert url is not None and url.endswith("/training/7/cpu?project=my-project")
    assert links_read == []


class Store:
    def __init__(self, values: dict[str, Any]) -> None:
        self.values = dict(values)

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value

    def delete(self, key: str) -> None:
        self.values.pop(key, None)


def test_a_try_after_a_clear_gives_up_what_the_earlier_trigger_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """Try 1 deferred on a request its trigger made (the worker knew only its provisional name) and
    was cleared: try 2 finds try 1's live request by its labels, cancels it, and its trigger must
    not adopt it."""
    earlier = status(3, Phase.WAITING, **{"try": 1})
    other = status(4, Phase.WAITING, **{"try": 2})
    released: list[str] = []

    class Backend:
        kind = "vertex_custom_job"

        def find(self, identity: RequestIdentity) -> list[RequestStatus]:
            return [earlier, other]

        def spec(self) -> dict[str, Any]:
            return SPEC

    monkeypatch.setattr(VertexFlexStartAdapter, "backend", lambda self, location=None: Backend())
    monkeypatch.setattr(VertexFlexStartAdapter, "release_or_keep", lambda self, name: released.append(name))
    ti = TI()
    ti.try_number = 2
    store = Store({XCOM_KEY: stored([], {"request": pending_name(IDENTITY), "try": 1})})
    with pytest.raises(TaskDeferred) as deferred:
        op().attempt_loop().run({"ti": ti, "task_state_store": store})
    assert released == [earlier.name]
    assert Submission.from_dict(deferred.value.trigger.submit).avoid == [earlier.name]
    assert stored_waiting(store.values[XCOM_KEY])["try"] == 2  # this try's own wait, remembered in its place


def test_the_first_run_of_try_1_reads_nothing_from_the_task_state_store() -> None:
    """Each read is a call to the API server: try 1's first run has no earlier try to read of."""
    reads: list[str] = []

    class CountingStore(Store):
        def get(self, key: str) -> Any:
            reads.append(key)
            return super().get(key)

    from airflow_provider_dws import console

    store = CountingStore({})
    context = {"ti": TI(), "task_state_store": store}
    console.track(context)  # pre_execute
    with pytest.raises(TaskDeferred):
        op().execute(context)  # type: ignore[arg-type]
    assert reads == []
    assert "dws_requests" in store.values  # kept for a later try
    later = TI()
    later.try_number = 2
    store = CountingStore(
        {"dws_requests": stored_records(store.values["dws_requests"])}
    )  # try 1 ended, not deferred
    with pytest.raises(TaskDeferred):
        op().execute({"ti": later, "task_state_store": store})  # type: ignore[typeddict-item]
    assert "dws_requests" in reads  # a later try reads what the earlier ones left


def test_a_deferral_and_its_resume_call_the_task_state_store_once_each() -> None:
    """Issue 36: each store call is a call to the API server. The deferral writes the record and the
    request it waits on in one call; the resume reads nothing back (the records travel in the
    event) and its final write drops the wait, so a later try does not take it as abandoned."""
    from airflow_provider_dws import console

    calls: list[str] = []

    class CountingStore(Store):
        def get(self, key: str) -> Any:
            calls.append(f"get {key}")
            return super().get(key)

        def set(self, key: str, value: Any) -> None:
            calls.append(f"set {key}")
            super().set(key, value)

        def delete(self, key: str) -> None:
            calls.append(f"delete {key}")
            super().delete(key)

    store = CountingStore({})
    ti = TI()
    context = {"ti": ti, "task_state_store": store}
    console.track(context)
    with pytest.raises(TaskDeferred) as deferred:
        op().execute(context)  # type: ignore[arg-type]
    assert calls == ["set dws_requests"]
    trig = deferred.value.trigger
    assert stored_waiting(store.values[XCOM_KEY]) == {"request": trig.request_name, "try": 1}

    calls.clear()
    done = status(7, Phase.SUCCEEDED, **{RESULT: {"name": NAME.format(7), "state": "JOB_STATE_SUCCEEDED"}})
    resume = {**trig.resume, submit.ANNOUNCED: True}
    resumed = TI()
    context = {"ti": resumed, "task_state_store": store}
    console.track(context)
    op().attempt_loop().complete(context, done.to_event() | {"resume": resume}, {})  # type: ignore[arg-type]
    assert calls == ["set dws_requests"]
    assert stored_waiting(store.values[XCOM_KEY]) is None
    [record] = read_records(stored_records(store.values[XCOM_KEY]))
    assert (record.request_name, record.phase, record.outcome) == (NAME.format(7), "succeeded", "succeeded")
    assert read_records(resumed.xcom[XCOM_KEY]) == [record]


def test_the_trigger_renames_the_carried_record_without_reading_it_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each read is a call to the API server: the records the deferral carried are what the XCom
    holds (nothing else writes it while the task is deferred), so the rename writes them as is."""
    from airflow.sdk.execution_time import xcom

    written: dict[str, Any] = {}

    def no_read(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the trigger read the XCom back")

    monkeypatch.setattr(xcom.XCom, "get_one", no_read)
    monkeypatch.setattr(xcom.XCom, "set", lambda key, value, **where: written.__setitem__(key, value))
    pending = pending_name(IDENTITY)
    carried = [
        {
            "api": "vertex_ai",
            "kind": "k",
            "project": "p",
            "location": "us-central1",
            "request_name": pending,
            "phase": "waiting",
        }
    ]
    announce = {"name_key": "job_name"}
    assert submit.announced(TI(), pending, status(7, Phase.WAITING), announce, carried)
    [record] = read_records(written[XCOM_KEY])
    assert (record.request_name, written["job_name"]) == (NAME.format(7), NAME.format(7))


def test_the_link_of_a_made_request_fills_its_location_id_and_parent() -> None:
    vertex = {"link": "https://c/vertex-ai/locations/{location}/training/{id}"}
    assert submit.link_of(NAME.format(7), vertex) == "https://c/vertex-ai/locations/us-central1/training/7"
    mig = {"link": "https://c/compute/instanceGroups/details/{location}/{parent}?project=p"}
    name = "projects/p/zones/us-central1-a/instanceGroupManagers/dws-t-0a/resizeRequests/dws-t-0a-t1-a1"
    assert (
        submit.link_of(name, mig)
        == "https://c/compute/instanceGroups/details/us-central1-a/dws-t-0a?project=p"
    )
    kube = {"link": "https://c/kubernetes/{location}/{id}", "location": "us-central1"}
    assert submit.link_of("dws-t-0a-t1-a1", kube) == "https://c/kubernetes/us-central1/dws-t-0a-t1-a1"
    assert submit.link_of(pending_name(IDENTITY), mig) is None


@pytest.mark.parametrize("stopped", [None, "its block has ended"])
def test_an_adapter_may_forbid_a_capacity_retry(monkeypatch: pytest.MonkeyPatch, stopped: str | None) -> None:
    """``capacity_retry`` retries an attempt that got no capacity unless the adapter says why not
    (a consumer whose calendar block ended: ``ReservedSteps.no_retry``)."""
    from airflow_provider_dws.exceptions import CapacityNotObtainedError

    monkeypatch.setattr(VertexFlexStartAdapter, "no_retry", lambda self, status: stopped)
    monkeypatch.setattr(VertexFlexStartAdapter, "release_failed", lambda self, status, placement: None)
    missed = replace(
        status(7, Phase.NOT_OBTAINED),
        outcome=Outcome(Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, "no capacity"),
    )
    event = missed.to_event() | {"resume": {"attempt": 1, "pending": pending_name(IDENTITY)}}
    task = op(capacity_retry=1)
    if stopped is None:
        with pytest.raises(TaskDeferred):  # the second attempt is on its way
            task.attempt_loop().complete({"ti": TI()}, event, {})
    else:
        with pytest.raises(CapacityNotObtainedError):
            task.attempt_loop().complete({"ti": TI()}, event, {})

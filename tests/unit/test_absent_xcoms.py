"""No read of an XCom that may legitimately be absent: the task SDK's supervisor logs each one the API
server does not find as an error ("XCom not found") in the task's log, 18 of them in a healthy
``make demo``. A task's own request records come from its task state store, another task's through
the sequence read (every map index, an absence is an empty list); the console links Airflow stores
when a task ends come from what the task's run pushed (``console.track``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import TaskDeferred

from airflow_provider_dws import console, links
from airflow_provider_dws.console import LINKS_KEY, push_url
from airflow_provider_dws.links import BatchFlexStartJobLink, BatchJobLogsLink
from airflow_provider_dws.operators.tpu_release import DeleteTPUQueuedResourceOperator
from airflow_provider_dws.records import XCOM_KEY
from airflow_provider_dws.runtime import recording
from airflow_provider_dws.runtime.batch import batch_job_console_url
from airflow_provider_dws.runtime.tpu import TPU_SLICES
from airflow_provider_dws.scheduling.phases import Phase
from tests.unit.test_request_recording import (
    JOB,
    QR,
    SUBMITTED,
    TI,
    StateStore,
    records_of,
    status,
    stub,
    tpu,
    vertex,
)


@pytest.fixture(autouse=True)
def _worker_submits(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests pin the attempt loop's worker-side submission (every adapter that does not hand
    its request to the trigger, and ``deferrable=False``), with Vertex AI as the example adapter;
    its trigger-side submission is ``tests/unit/test_trigger_submission.py``'s."""
    from airflow_provider_dws.runtime.vertex_ai import VertexFlexStartAdapter

    monkeypatch.setattr(VertexFlexStartAdapter, "submits_in_trigger", False)


# -- the request records ------------------------------------------------------------------------------


def test_a_first_try_reads_no_xcom(monkeypatch: pytest.MonkeyPatch) -> None:
    """Airflow deleted the try's XComs when it began: there is nothing to read, and a read would log
    an error. The records the try starts from are the task state store's."""
    state = StateStore()
    op = vertex()
    stub(op, monkeypatch, [JOB.format(1)])
    ti = TI()
    with pytest.raises(TaskDeferred):
        op.attempt_loop().run({"ti": ti, "task_state_store": state})
    assert ti.pulls == []
    [record] = records_of(ti)
    assert (record.request_name, record.phase) == (JOB.format(1), "waiting")
    assert recording.stored_records(state[XCOM_KEY]) == ti.xcom[XCOM_KEY]


def test_a_resumed_run_reads_its_records_from_the_state_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """The XCom was written before the task deferred, and the store holds the same list: the resumed
    run reads the store, which also serves a resume after a wait that came before any record (an
    off-peak window, a calendar block not delivered yet), when the XCom does not exist."""
    xcoms: dict[tuple[str, str], Any] = {}
    state = StateStore()
    first = vertex()
    stub(first, monkeypatch, [JOB.format(1)])
    with pytest.raises(TaskDeferred) as deferred:
        first.attempt_loop().run({"ti": TI(xcoms), "task_state_store": state})
    resumed = vertex()
    stub(resumed, monkeypatch, [])
    ended = status(
        JOB.format(1),
        Phase.SUCCEEDED,
        started=SUBMITTED + timedelta(minutes=5),
        finished=SUBMITTED + timedelta(hours=1),
    )
    ti = TI(xcoms)
    resumed.complete_attempt(
        {"ti": ti, "task_state_store": state}, {**ended.to_event(), "resume": deferred.value.trigger.resume}
    )
    assert ti.pulls == []
    [record] = records_of(ti)  # the waiting record upserted, not a second one
    assert (record.request_name, record.phase, record.outcome) == (JOB.format(1), "succeeded", "succeeded")


def test_a_release_reads_its_setups_records_for_every_map_index_and_not_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The setup may have no records (it failed before its request existed): the sequence read says
    so with an empty list. The release's own XCom was deleted when its try began."""
    xcoms: dict[tuple[str, str], Any] = {}
    op = tpu()
    stub(op, monkeypatch, [])
    op.complete_attempt(
        {"ti": TI(xcoms, task_id="ask")}, status(QR, Phase.RUNNING, started=SUBMITTED).to_event()
    )
    release = DeleteTPUQueuedResourceOperator(
        task_id="release", zone="us-west4-a", setup_task_id="ask", project_id="my-project"
    )
    own = TI(xcoms, task_id="release")
    recording.record_release(release, {"ti": own}, TPU_SLICES, recording.Released([(QR, "ACTIVE")]))
    assert own.pulls == [{"key": XCOM_KEY, "task_ids": ["ask"], "map_indexes": "every"}]
    [released] = records_of(own)
    assert released.accelerator_count == 16  # the setup's record, found by its request's name


def test_records_of_every_map_index_are_read_and_each_request_keeps_its_own() -> None:
    class Mapped(TI):
        map_index = 1

        def xcom_pull(self, *, key: str, task_ids: Any, map_indexes: Any = "every") -> Any:
            assert isinstance(task_ids, list) and map_indexes == "every"
            other = [{**rec, "request_name": "other"} for rec in base]
            return [other, base, None]  # map indexes 0, 1 and one with no XCom

    op = tpu()
    xcoms: dict[tuple[str, str], Any] = {}
    with pytest.MonkeyPatch.context() as mp:
        stub(op, mp, [])
        op.complete_attempt({"ti": TI(xcoms, task_id="ask")}, status(QR, Phase.RUNNING).to_event())
    base = xcoms[("ask", XCOM_KEY)]
    names = [r.request_name for r in recording.pull_records({"ti": Mapped(task_id="release")}, "ask")]
    assert names == ["other", QR]


# -- the console links ------------------------------------------------------------------------------


class LinkTI:
    dag_id, task_id, run_id = "d", "infer", "manual__1"

    def __init__(self, map_index: int = -1, try_number: int = 1) -> None:
        self.map_index = map_index
        self.try_number = try_number
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


@pytest.fixture
def no_xcom_reads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """``XCom.get_value`` records each read: the tests expect none."""
    reads: list[Any] = []

    def get_value(**kwargs: Any) -> Any:
        reads.append(kwargs)
        return None

    monkeypatch.setattr(links.XCom, "get_value", staticmethod(get_value))
    monkeypatch.setattr(console, "_TRACKED", {})
    return reads


def test_a_link_never_pushed_is_empty_without_a_read(no_xcom_reads: list[Any]) -> None:
    """A task that failed before its request existed, or a release with no link to give."""
    ti, state = LinkTI(), StateStore()
    op = DeleteTPUQueuedResourceOperator(task_id="infer", zone="us-west4-a", setup_task_id="ask")
    op.pre_execute({"ti": ti, "task_state_store": state})  # what every DWS operator runs first
    assert BatchFlexStartJobLink().get_link(op, ti_key=ti) == ""  # type: ignore[arg-type]
    assert no_xcom_reads == []


def test_a_pushed_link_is_known_in_this_run_and_in_the_run_that_resumes_the_try(
    no_xcom_reads: list[Any],
) -> None:
    ti, state = LinkTI(map_index=4), StateStore()
    console.track({"ti": ti, "task_state_store": state})
    url = push_url({"ti": ti}, BatchFlexStartJobLink.key, batch_job_console_url("p", "us-central1", "job-1"))
    assert ti.pushed == {BatchFlexStartJobLink.key: url}
    assert BatchFlexStartJobLink().get_link(None, ti_key=ti) == url  # type: ignore[arg-type]
    assert state[LINKS_KEY] == {"try": 1, "urls": {BatchFlexStartJobLink.key: url}}
    # The task defers; it resumes in a new process, which knows only the store.
    console._TRACKED.clear()
    console.track({"ti": LinkTI(map_index=4), "task_state_store": state})
    assert BatchFlexStartJobLink().get_link(None, ti_key=LinkTI(map_index=4)) == url  # type: ignore[arg-type]
    assert BatchJobLogsLink().get_link(None, ti_key=LinkTI(map_index=4)) == ""  # type: ignore[arg-type]
    # Another map index, and the next try (its XComs deleted when it began), have none of it.
    console.track({"ti": LinkTI(map_index=5), "task_state_store": StateStore()})
    assert BatchFlexStartJobLink().get_link(None, ti_key=LinkTI(map_index=5)) == ""  # type: ignore[arg-type]
    console.track({"ti": LinkTI(map_index=4, try_number=2), "task_state_store": state})
    assert BatchFlexStartJobLink().get_link(None, ti_key=LinkTI(map_index=4)) == ""  # type: ignore[arg-type]
    assert no_xcom_reads == []


def test_a_task_instance_this_process_did_not_run_is_read_from_its_xcom(no_xcom_reads: list[Any]) -> None:
    """Without a task state store (or for a caller outside the task's run) the XCom is read, as before."""
    ti = LinkTI()
    console.track({"ti": ti})
    assert BatchFlexStartJobLink().get_link(None, ti_key=ti) == ""  # type: ignore[arg-type]
    assert [r["key"] for r in no_xcom_reads] == [BatchFlexStartJobLink.key]


class ServerContext:
    """What the API server tells a task run when it starts it (``next_method``: a resume)."""

    def __init__(self, next_method: str | None) -> None:
        self.next_method = next_method


def test_without_a_store_a_tries_first_run_reads_no_link_it_did_not_push(no_xcom_reads: list[Any]) -> None:
    """Airflow 3.1, 3.2 (no task state store): a try's first run starts with its XComs deleted, so
    a link it did not push is empty without a read; a resumed run still reads the XCom."""
    first = LinkTI()
    first._ti_context_from_server = ServerContext(None)  # type: ignore[attr-defined]
    console.track({"ti": first})
    assert BatchFlexStartJobLink().get_link(None, ti_key=first) == ""  # type: ignore[arg-type]
    url = push_url({"ti": first}, BatchFlexStartJobLink.key, "https://console.cloud.google.com/batch/x")
    assert BatchFlexStartJobLink().get_link(None, ti_key=first) == url  # type: ignore[arg-type]
    assert no_xcom_reads == []
    resumed = LinkTI()
    resumed._ti_context_from_server = ServerContext("resume_attempt")  # type: ignore[attr-defined]
    console.track({"ti": resumed})
    BatchJobLogsLink().get_link(None, ti_key=resumed)  # type: ignore[arg-type]
    assert [r["key"] for r in no_xcom_reads] == [BatchJobLogsLink.key]


def test_without_a_store_a_tries_first_run_reads_no_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """The records of a try's first run start empty where no store keeps earlier ones (its XComs
    were deleted when it began): no read of the absent ``dws_requests`` XCom."""
    op = vertex()
    stub(op, monkeypatch, [JOB.format(1)])
    ti = TI()
    ti.try_number = 2
    ti._ti_context_from_server = ServerContext(None)  # type: ignore[attr-defined]
    with pytest.raises(TaskDeferred):
        op.attempt_loop().run({"ti": ti})
    assert [p for p in ti.pulls if p["key"] == XCOM_KEY] == []
    assert [r.request_name for r in records_of(ti)] == [JOB.format(1)]

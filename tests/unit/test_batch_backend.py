"""Cloud Batch: the state table, the classification by status events, the job ids and request ids,
and the backend's calls against a fake client that answers with real ``batch_v1`` messages."""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud.batch_v1 import (
    CancelJobRequest,
    CreateJobRequest,
    Job,
    JobStatus,
    ListJobsRequest,
    ListJobsResponse,
    StatusEvent,
)
from google.cloud.batch_v1.services.batch_service import pagers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_dws import errors
from airflow_provider_dws.backends import batch
from airflow_provider_dws.backends.base import RESULT, RequestBackend
from airflow_provider_dws.backends.batch import (
    BATCH_JOB_STATES,
    BatchJobBackend,
    classify_batch_job,
    job_status,
)
from airflow_provider_dws.registry import BACKENDS, backend_from_spec
from airflow_provider_dws.scheduling.identity import RequestIdentity, parse_attempt_name
from airflow_provider_dws.scheduling.phases import FailureKind, Phase

PARENT = "projects/p/locations/us-central1"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
IDENTITY = RequestIdentity("batch_dag", "infer", "manual__2026-03-01", 3, attempt=2, try_number=4)
State = JobStatus.State


def event(text: str, minutes: float, **fields: Any) -> StatusEvent:
    return StatusEvent(
        description=text, event_time=T0 + timedelta(minutes=minutes), type_="STATUS_CHANGED", **fields
    )


def job(
    job_id: str = "j-t1-a1",
    state: Any = State.QUEUED,
    events: list[StatusEvent] | None = None,
    counts: dict[str, int] | None = None,
    run_duration: timedelta | None = None,
    labels: dict[str, str] | None = None,
) -> Job:
    status = JobStatus(state=state, status_events=events or [])
    if counts:
        status.task_groups = {"group0": JobStatus.TaskGroupStatus(counts=counts)}
    if run_duration:
        status.run_duration = run_duration
    return Job(
        name=f"{PARENT}/jobs/{job_id}",
        uid=f"{job_id}-0123abcd",
        labels=labels or {"dws_attempt": job_id[-1], "dws_max_wait": "7200"},
        status=status,
        create_time=T0,
        update_time=T0 + timedelta(hours=1),
        task_groups=[{"task_count": 16, "task_spec": {"runnables": [{"script": {"text": "echo"}}]}}],
        allocation_policy={
            "instances": [
                {
                    "policy": {
                        "machine_type": "g2-standard-8",
                        "accelerators": [{"type_": "nvidia-l4", "count": 1}],
                    }
                }
            ]
        },
    )


# -- the state table -------------------------------------------------------------------------------


def test_every_batch_state_has_a_phase_and_the_live_ones_come_from_the_table() -> None:
    assert set(BATCH_JOB_STATES.phases) == set(State.__members__)
    assert BATCH_JOB_STATES.live_states() == ("STATE_UNSPECIFIED", "QUEUED", "SCHEDULED", "RUNNING")
    assert BATCH_JOB_STATES.live_states() == batch.LIVE_STATES
    for state, phase in {
        "QUEUED": Phase.WAITING,
        "SCHEDULED": Phase.WAITING,
        "RUNNING": Phase.RUNNING,
        "SUCCEEDED": Phase.SUCCEEDED,
        "CANCELLATION_IN_PROGRESS": Phase.CANCELLED,
        "CANCELLED": Phase.CANCELLED,
        "DELETION_IN_PROGRESS": Phase.CANCELLED,
    }.items():
        assert BATCH_JOB_STATES.classify(state).phase is phase, state
    assert BATCH_JOB_STATES.phase("A_STATE_FROM_THE_FUTURE") is Phase.WAITING


CAPACITY_EVENTS = [
    "Job state is set from SCHEDULED to FAILED for job projects/p/locations/r/jobs/j: "
    "ZONE_RESOURCE_POOL_EXHAUSTED: resources are unavailable in us-central1-a",
    "Job failed: the requested resources are not available",
    "Job was queued too long and was terminated",
    "max wait duration exceeded before the VMs could be provisioned",
    "Insufficient capacity for nvidia-l4 in us-central1",
]
BAD_REQUEST_EVENTS = [
    "Job state is set from QUEUED to FAILED: Invalid value for field machine_type",
    "PERMISSION_DENIED: the service account cannot create instances",
    "Subnetwork projects/p/regions/r/subnetworks/s was not found",
    "Quota 'NVIDIA_L4_GPUS' exceeded. Limit: 0.0 in region us-central1",
]


@pytest.mark.parametrize("text", CAPACITY_EVENTS)
def test_failed_before_running_with_a_resource_event_is_capacity_not_obtained(text: str) -> None:
    outcome = classify_batch_job(
        "FAILED", started=False, events=["Job state is set from QUEUED to SCHEDULED", text]
    )
    assert (outcome.phase, outcome.failure, outcome.message) == (
        Phase.NOT_OBTAINED,
        FailureKind.CAPACITY_NOT_OBTAINED,
        text,
    )


@pytest.mark.parametrize("text", BAD_REQUEST_EVENTS)
def test_failed_before_running_with_a_refusal_event_is_a_bad_request(text: str) -> None:
    outcome = classify_batch_job("FAILED", started=False, events=[text])
    assert (outcome.phase, outcome.failure, outcome.message) == (Phase.FAILED, FailureKind.BAD_REQUEST, text)


def test_failed_after_running_is_the_workload_whatever_the_events_say() -> None:
    for text in CAPACITY_EVENTS + BAD_REQUEST_EVENTS:
        outcome = classify_batch_job("FAILED", started=True, events=[text])
        assert (outcome.phase, outcome.failure) == (Phase.FAILED, FailureKind.WORKLOAD_FAILED)


def test_failed_before_running_without_a_reason_is_capacity_not_obtained() -> None:
    outcome = classify_batch_job("FAILED", started=False, events=["Job state is set from QUEUED to FAILED"])
    assert outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED


def test_a_real_job_is_classified_by_its_events_task_executions_and_counts() -> None:
    queued = event("Job state is set from QUEUED to SCHEDULED for job j", 1)
    stockout = event("Job state is set from SCHEDULED to FAILED: ZONE_RESOURCE_POOL_EXHAUSTED", 30)
    # Unstarted: the FAILED task count alone does not mean a task ran.
    never = job_status(job(state=State.FAILED, events=[queued, stockout], counts={"FAILED": 16}))
    assert never.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED
    assert never.timings.started is None and never.timings.finished == T0 + timedelta(minutes=30)
    assert never.timings.wait_seconds == 1800 and never.timings.run_seconds == 0
    # Ran: a task execution (its exit code) in an event.
    crashed = event("Task failed", 50, task_execution={"exit_code": 3})
    ran = job_status(job(state=State.FAILED, events=[queued, stockout, crashed]))
    assert ran.outcome.failure is FailureKind.WORKLOAD_FAILED
    # Ran: tasks counted RUNNING or SUCCEEDED.
    counted = job_status(
        job(state=State.FAILED, events=[queued, stockout], counts={"SUCCEEDED": 15, "FAILED": 1})
    )
    assert counted.outcome.failure is FailureKind.WORKLOAD_FAILED


def test_timings_come_from_the_running_event_and_the_last_event() -> None:
    events = [
        event("Job state is set from QUEUED to SCHEDULED for job j", 2),
        event("Job state is set from SCHEDULED to RUNNING for job j", 20),
        event("Job state is set from RUNNING to SUCCEEDED for job j", 80),
    ]
    status = job_status(job(state=State.SUCCEEDED, events=events, counts={"SUCCEEDED": 16}))
    assert status.phase is Phase.SUCCEEDED and status.outcome.failure is None
    assert (status.timings.wait_seconds, status.timings.run_seconds) == (1200, 3600)
    result = status.details.pop(RESULT)  # what the task returns, read with the final status
    assert status.details == {
        "region": "us-central1",
        "job_id": "j-t1-a1",
        "uid": "j-t1-a1-0123abcd",
        "max_wait_seconds": 7200.0,
        "attempt": 1,
        "try": None,  # the job carries no try label
        "task_counts": {"SUCCEEDED": 16},
    }
    assert status.description == "16 tasks on g2-standard-8 (1 x nvidia-l4 each) in us-central1"
    assert (result["state"], result["job_id"], result["task_counts"]) == (
        "SUCCEEDED",
        "j-t1-a1",
        {"SUCCEEDED": 16},
    )
    assert result["run_seconds"] == 3600 and result["description"] == status.description
    # Without a RUNNING event, the run duration times the start.
    quiet = job_status(job(state=State.SUCCEEDED, events=[events[2]], run_duration=timedelta(minutes=45)))
    assert quiet.timings.run_seconds == 45 * 60


# -- identity --------------------------------------------------------------------------------------

texts = st.text(st.characters(codec="utf-8", exclude_characters="\x1f"), min_size=1, max_size=200)
identities = st.builds(
    RequestIdentity, texts, texts, texts, st.integers(-1, 10000), st.integers(1, 99), st.integers(1, 999)
)
JOB_ID = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(identities)
def test_job_ids_are_valid_deterministic_and_carry_the_attempt(identity: RequestIdentity) -> None:
    job_id = identity.batch_job_id()
    assert JOB_ID.fullmatch(job_id), job_id
    assert job_id == RequestIdentity(**vars(identity)).batch_job_id()
    assert parse_attempt_name(job_id)[1:] == (identity.try_number, identity.attempt)  # type: ignore[index]
    request_id = identity.request_uuid()
    assert uuid.UUID(request_id).int != 0 and request_id == RequestIdentity(**vars(identity)).request_uuid()


def test_each_attempt_and_try_has_its_own_job_id_and_request_id() -> None:
    ids = {
        (IDENTITY.with_attempt(a).batch_job_id(), IDENTITY.with_attempt(a).request_uuid()) for a in (1, 2, 3)
    }
    assert len({i for i, _ in ids}) == len({r for _, r in ids}) == 3
    assert IDENTITY.batch_job_id().endswith("-t4-a2")


# -- the backend, against a fake client ------------------------------------------------------------


class FakeBatchClient:
    """What the backend calls of a ``BatchServiceClient``, answering with real messages and the
    client's own pagers; a list serves ``page_size`` jobs per page and records every request."""

    def __init__(self, jobs: list[Job], create_error: Exception | None = None) -> None:
        self.jobs = {j.name: j for j in jobs}
        self.create_error = create_error
        self.requests: list[Any] = []

    def _page(self, request: ListJobsRequest) -> ListJobsResponse:
        # A copy: the pager sets the next page token on the request it was given.
        self.requests.append(ListJobsRequest.deserialize(ListJobsRequest.serialize(request)))
        names = sorted(self.jobs)
        start = int(request.page_token or 0)
        end = start + request.page_size
        return ListJobsResponse(
            jobs=[self.jobs[n] for n in names[start:end]],
            next_page_token=str(end) if end < len(names) else "",
        )

    def list_jobs(self, request: ListJobsRequest, timeout: Any = None) -> pagers.ListJobsPager:
        assert timeout == 60.0
        return pagers.ListJobsPager(lambda r, **_: self._page(r), request, self._page(request))

    def get_job(self, name: str, timeout: Any = None) -> Job:
        self.requests.append(("get", name))
        if name not in self.jobs:
            raise gexc.NotFound(name)
        return self.jobs[name]

    def create_job(self, request: CreateJobRequest, timeout: Any = None) -> Job:
        self.requests.append(request)
        if self.create_error is not None:
            error, self.create_error = self.create_error, None
            raise error
        if request.job_id and f"{request.parent}/jobs/{request.job_id}" in self.jobs:
            raise gexc.AlreadyExists(request.job_id)
        made = Job(request.job)
        made.name = f"{request.parent}/jobs/{request.job_id}"
        made.create_time = T0
        made.status = JobStatus(state=State.QUEUED)
        self.jobs[made.name] = made
        return made

    def cancel_job(self, request: CancelJobRequest, timeout: Any = None) -> Any:
        self.requests.append(request)
        target = self.jobs.get(request.name)
        if target is None:
            raise gexc.NotFound(request.name)
        if BATCH_JOB_STATES.phase(State(target.status.state).name).terminal:
            raise gexc.FailedPrecondition("job already ended")
        return object()


def backend_with(client: FakeBatchClient) -> BatchJobBackend:
    backend = BatchJobBackend("p", "us-central1")
    backend._client = lambda: client  # type: ignore[method-assign]
    return backend


def test_the_backend_is_registered_and_rebuilt_from_its_spec() -> None:
    backend = BatchJobBackend("p", "us-central1", "my_gcp", ["sa@p.iam.gserviceaccount.com"])
    assert isinstance(backend, RequestBackend)
    assert BACKENDS[backend.kind] == "airflow_provider_dws.backends.batch:BatchJobBackend"
    assert backend.spec() == {
        "project_id": "p",
        "region": "us-central1",
        "gcp_conn_id": "my_gcp",
        "impersonation_chain": ["sa@p.iam.gserviceaccount.com"],
    }
    assert backend_from_spec("batch_job", backend.spec()).spec() == backend.spec()  # type: ignore[attr-defined]


def test_find_is_one_paged_list_on_the_identity_label(monkeypatch: pytest.MonkeyPatch) -> None:
    client = FakeBatchClient([job(f"j-t1-a{i}") for i in range(1, 6)])
    backend = backend_with(client)
    monkeypatch.setattr(batch, "LIST_PAGE_SIZE", 2)
    found = backend.find(IDENTITY)
    assert [s.details["job_id"] for s in found] == [f"j-t1-a{i}" for i in range(1, 6)]
    assert [(r.filter, r.page_token) for r in client.requests] == [
        (f'labels.dws_key="{IDENTITY.key}"', ""),
        (f'labels.dws_key="{IDENTITY.key}"', "2"),
        (f'labels.dws_key="{IDENTITY.key}"', "4"),
    ]


def test_submit_names_the_job_sends_the_request_id_and_adopts_on_already_exists() -> None:
    client = FakeBatchClient([])
    backend = backend_with(client)
    job_id = IDENTITY.batch_job_id()
    status, created = backend.submit(Job(labels={"a": "b"}), IDENTITY, job_id)
    assert created and status.name == f"{PARENT}/jobs/{job_id}" and status.phase is Phase.WAITING
    (request,) = client.requests
    assert (request.parent, request.job_id, request.request_id) == (PARENT, job_id, IDENTITY.request_uuid())
    again, created = backend.submit(Job(), IDENTITY, job_id)
    assert not created and again.name == status.name and len(client.jobs) == 1


def test_a_create_whose_reply_was_lost_is_adopted_not_made_twice() -> None:
    client = FakeBatchClient([])
    backend = backend_with(client)
    job_id = IDENTITY.batch_job_id()
    real_create = client.create_job

    def create_then_drop_the_reply(request: CreateJobRequest, timeout: Any = None) -> Job:
        real_create(request, timeout)
        client.create_job = real_create  # type: ignore[method-assign]
        raise gexc.ServiceUnavailable("connection reset")

    client.create_job = create_then_drop_the_reply  # type: ignore[method-assign]
    status, created = backend.submit(Job(), IDENTITY, job_id)
    assert not created and status.name.endswith(job_id) and len(client.jobs) == 1


def test_release_cancels_and_an_ended_or_gone_job_is_fine() -> None:
    live, ended = job("live-t1-a1"), job("ended-t1-a1", State.SUCCEEDED)
    client = FakeBatchClient([live, ended])
    backend = backend_with(client)
    assert backend.release(live.name) is True
    assert backend.release(ended.name) is False
    assert backend.release(f"{PARENT}/jobs/gone") is False
    cancels = [r for r in client.requests if isinstance(r, CancelJobRequest)]
    assert [c.name for c in cancels] == [live.name, ended.name, f"{PARENT}/jobs/gone"]
    assert uuid.UUID(cancels[0].request_id)  # a repeated cancel is answered once


def test_a_bad_job_is_an_invalid_request_error() -> None:
    client = FakeBatchClient([], create_error=gexc.InvalidArgument("machine type g2-standard-5 not found"))
    with pytest.raises(errors.InvalidRequestError, match="g2-standard-5"):
        backend_with(client).submit(Job(), IDENTITY, IDENTITY.batch_job_id())


class FakeAsyncBatchClient:
    """The async half: ``list_jobs`` answers with the client's own async pager."""

    def __init__(self, sync: FakeBatchClient) -> None:
        self.sync = sync

    async def list_jobs(self, request: ListJobsRequest, timeout: Any = None) -> pagers.ListJobsAsyncPager:
        async def page(r: ListJobsRequest, **_: Any) -> ListJobsResponse:
            return self.sync._page(r)

        return pagers.ListJobsAsyncPager(page, request, self.sync._page(request))

    async def get_job(self, name: str, timeout: Any = None) -> Job:
        return self.sync.get_job(name, timeout)

    async def cancel_job(self, request: CancelJobRequest, timeout: Any = None) -> Any:
        return self.sync.cancel_job(request, timeout)


def test_alist_live_is_one_paged_list_filtered_on_the_labels_and_live_states(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs = [job(f"w{i}-t1-a1", State.QUEUED) for i in range(3)] + [job("r-t1-a1", State.RUNNING)]
    sync = FakeBatchClient(jobs)
    backend = BatchJobBackend("p", "us-central1")

    class Hook:
        async def get_batch_client(self) -> Any:
            return FakeAsyncBatchClient(sync)

    backend._async_hook = Hook()  # type: ignore[assignment]
    monkeypatch.setattr(batch, "LIST_PAGE_SIZE", 3)
    live = asyncio.run(backend.alist_live())
    only = asyncio.run(backend.alist_live(only={jobs[3].name}))
    released = asyncio.run(backend.arelease(jobs[0].name))
    assert sorted(live) == sorted(j.name for j in jobs)
    assert list(only) == [jobs[3].name] and only[jobs[3].name].phase is Phase.RUNNING
    expected = (
        'labels.dws_managed="true" AND (status.state="STATE_UNSPECIFIED" OR status.state="QUEUED" '
        'OR status.state="SCHEDULED" OR status.state="RUNNING")'
    )
    lists = [r for r in sync.requests if isinstance(r, ListJobsRequest)]
    assert {r.filter for r in lists} == {expected} and expected == batch.LIVE_FILTER
    assert [r.page_token for r in lists[:2]] == ["", "3"]  # four jobs: two pages per list
    assert released is True

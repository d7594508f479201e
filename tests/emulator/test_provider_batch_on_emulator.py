"""Ring 2: the provider's Cloud Batch backend, adapter, trigger and operator against a live
dws-emulator, through the unmodified google-cloud-batch clients (sync and async); nothing of the
provider is mocked.

Each test runs a private in-process emulator whose clock is a :class:`FakeClock`: every RPC ticks
the model first, so a transition that is due happens on the next call, and time passes only when
the test moves it (QUEUED for two days, a run of ten minutes, a max wait that has passed). The
waits the tests do make are for counted events (poll rounds), never for a span of wall time.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import grpc
import pytest
from google.cloud import batch_v1
from google.cloud.batch_v1.services.batch_service.transports import BatchServiceGrpcTransport

from airflow_provider_dws.backends import batch as batch_backend
from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.backends.batch import LIVE_FILTER, BatchJobBackend
from airflow_provider_dws.exceptions import CapacityNotObtainedError, WorkloadFailedError
from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator
from airflow_provider_dws.runtime.loop import AttemptLoop
from airflow_provider_dws.scheduling.identity import LABEL_MANAGED, RequestIdentity
from airflow_provider_dws.scheduling.phases import FailureKind, Phase
from airflow_provider_dws.scheduling.policies import Placement
from airflow_provider_dws.triggers import poller
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger, first_event
from dws_emulator.batch.state import (
    CANCEL_SECONDS,
    QUEUED_LIMIT_SECONDS,
    SCHEDULE_SECONDS,
)
from dws_emulator.testing import FakeClock, InProcessEmulator

pytestmark = pytest.mark.emulator

PROJECT = "emu-project"
REGION = "us-central1"
L4 = f"{REGION}/NVIDIA_L4"
PARENT = f"projects/{PROJECT}/locations/{REGION}"
RUN_SECONDS = 600.0
_runs = itertools.count()


# -- helpers -----------------------------------------------------------------------------------
async def until(predicate: Callable[[], Any], what: str, timeout: float = 60.0) -> None:
    """Wait in the event loop until ``predicate()`` holds; fail after a generous ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"timed out after {timeout:g}s waiting for {what}"
        await asyncio.sleep(0.02)


@contextlib.contextmanager
def ticking(clock: FakeClock, step: float = 0.1) -> Iterator[None]:
    """Move the emulator's clock ``step`` seconds every few milliseconds while the body runs: for
    waits whose end the test does not drive call by call (an operation's result, a worker's wait)."""
    stop = threading.Event()

    def advance() -> None:
        while not stop.wait(0.01):
            clock.advance(step)

    thread = threading.Thread(target=advance, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class FakeTI:
    """Just enough of a task instance for ``execute``: identity fields and XCom push."""

    def __init__(self, task_id: str) -> None:
        self.dag_id = "batch_on_emulator"
        self.task_id = task_id
        self.run_id = f"manual__{next(_runs)}_{time.monotonic_ns()}"
        self.map_index = -1
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def identity(task_id: str = "train", **kwargs: Any) -> RequestIdentity:
    return RequestIdentity("batch_on_emulator", task_id, f"run{next(_runs)}_{time.monotonic_ns()}", **kwargs)


def operator(task_id: str = "train", exit_code: int = 0, **kwargs: Any) -> CreateBatchFlexStartJobOperator:
    """A one-task Flex Start job on one ``g2-standard-8`` (1 x nvidia-l4) that runs RUN_SECONDS."""
    params: dict[str, Any] = {
        "project_id": PROJECT,
        "region": REGION,
        "image_uri": "us-docker.pkg.dev/p/r/train:1",
        "machine_type": "g2-standard-8",
        "environment": {
            "DWS_EMULATOR_RUN_SECONDS": str(RUN_SECONDS),
            "DWS_EMULATOR_EXIT_CODE": str(exit_code),
        },
        "max_wait": timedelta(hours=1),
        "poll_interval": 0.05,
        "deferrable": False,
    }
    params.update(kwargs)
    return CreateBatchFlexStartJobOperator(task_id=task_id, **params)


def submit(
    backend: BatchJobBackend, who: RequestIdentity, op: CreateBatchFlexStartJobOperator | None = None
) -> Any:
    job, created = backend.submit((op or operator()).adapter().build(who), who, who.batch_job_id())
    assert created
    return job


def raw_client(emulator: InProcessEmulator) -> batch_v1.BatchServiceClient:
    """The unmodified client on its own channel, for what the provider never does (no request_id,
    another provisioning model)."""
    return batch_v1.BatchServiceClient(
        transport=BatchServiceGrpcTransport(channel=grpc.insecure_channel(emulator.address))
    )


def batch_records(emulator: InProcessEmulator) -> list[dict[str, Any]]:
    return [r for r in emulator.control.requests() if r["kind"] == "BatchJob"]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def emulator_env(monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any, clock: FakeClock) -> Any:
    def start(capacity: dict[str, int] | None = None) -> InProcessEmulator:
        emulator: InProcessEmulator = dws_emulator_server_factory(capacity or {L4: 0}, clock=clock)
        monkeypatch.setenv("DWS_EMULATOR_HOST", emulator.address)
        return emulator

    return start


# -- submit, adopt, find -------------------------------------------------------------------------
def test_submit_creates_a_flex_start_job_named_and_labelled_by_the_identity(emulator_env: Any) -> None:
    emulator = emulator_env()
    backend = BatchJobBackend(PROJECT, REGION)
    who = identity()
    job = submit(backend, who)
    assert job.name == f"{PARENT}/jobs/{who.batch_job_id()}"
    assert job.state == "QUEUED" and job.phase is Phase.WAITING
    assert job.details["job_id"] == who.batch_job_id() and job.details["attempt"] == 1
    assert job.details["max_wait_seconds"] == 3600
    assert job.description == "1 task on g2-standard-8 (1 x nvidia-l4 each) in us-central1"
    # What the emulator stored: FLEX_START on the policy, the identity's labels, the max wait.
    stored = raw_client(emulator).get_job(name=job.name)
    policy = stored.allocation_policy.instances[0].policy
    assert policy.provisioning_model == batch_v1.AllocationPolicy.ProvisioningModel.FLEX_START
    assert policy.machine_type == "g2-standard-8"
    assert [(a.type_, a.count) for a in policy.accelerators] == [("nvidia-l4", 1)]
    assert dict(stored.labels) == {**who.labels(), "dws_max_wait": "3600"}
    [record] = batch_records(emulator)
    assert record["strategy"] == "FLEX_START"
    assert record["pool"] == L4 and record["accelerator_count"] == 1


def test_a_create_whose_reply_was_lost_is_adopted_not_duplicated(emulator_env: Any) -> None:
    """DEADLINE_EXCEEDED on CreateJob is answered after the job was made (the unknown outcome):
    the backend's retry looks it up first and adopts it."""
    emulator = emulator_env()
    emulator.control.set_faults(["CreateJob=DEADLINE_EXCEEDEDx1"])
    backend = BatchJobBackend(PROJECT, REGION)
    who = identity()
    job, created = backend.submit(operator().adapter().build(who), who, who.batch_job_id())
    assert not created
    assert job.name == backend.name_of(who.batch_job_id()) and job.phase is Phase.WAITING
    assert emulator.calls("CreateJob") == 1  # the lookup found it: no second create was sent
    assert [r["name"] for r in batch_records(emulator)] == [job.name]


def test_a_second_submit_of_the_same_identity_replays_its_request_id(emulator_env: Any) -> None:
    """Another worker submits the same attempt again (the first one's reply never reached it): the
    create carries the same request_id, and the API answers it with the job the first one made.

    A replayed create is indistinguishable from the first on the wire, so ``created`` is True for
    both; what matters is that there is one job.
    """
    emulator = emulator_env()
    who = identity()
    first = submit(BatchJobBackend(PROJECT, REGION), who)
    again, _ = BatchJobBackend(PROJECT, REGION).submit(
        operator().adapter().build(who), who, who.batch_job_id()
    )
    assert again.name == first.name and again.details["uid"] == first.details["uid"]
    assert emulator.calls("CreateJob") == 2
    assert [r["name"] for r in batch_records(emulator)] == [first.name]


def test_already_exists_without_the_request_id_is_adoption(emulator_env: Any) -> None:
    """The job of this attempt was made without the provider's request_id (an older provider, or
    after the API forgot it: it keeps them >= 60 min): ALREADY_EXISTS, and the backend adopts."""
    emulator = emulator_env()
    who = identity()
    made = raw_client(emulator).create_job(
        parent=PARENT, job_id=who.batch_job_id(), job=operator().adapter().build(who)
    )
    backend = BatchJobBackend(PROJECT, REGION)
    job, created = backend.submit(operator().adapter().build(who), who, who.batch_job_id())
    assert not created
    assert job.name == made.name and job.details["uid"] == made.uid
    assert len(batch_records(emulator)) == 1


def test_find_finds_every_attempt_and_try_of_the_identity_and_nothing_else(emulator_env: Any) -> None:
    emulator_env()
    backend = BatchJobBackend(PROJECT, REGION)
    who = identity()
    mine = [
        submit(backend, who),
        submit(backend, who.with_attempt(2)),
        submit(backend, RequestIdentity(who.dag_id, who.task_id, who.run_id, try_number=2)),
    ]
    submit(backend, identity())  # another task instance
    backend.release(mine[0].name)  # an ended attempt is still one of them
    found = backend.find(who)
    assert sorted(s.name for s in found) == sorted(j.name for j in mine)
    assert {s.details["attempt"] for s in found} == {1, 2}
    assert len({s.name for s in found}) == 3


def test_the_adapter_reattaches_to_the_live_attempt(emulator_env: Any) -> None:
    emulator = emulator_env()
    ti = FakeTI("train")
    op = operator(ti.task_id)
    adapter = op.adapter()
    who = RequestIdentity(ti.dag_id, ti.task_id, ti.run_id)
    job = adapter.submit({"ti": ti}, who, Placement(location=REGION), op.max_wait)
    found = op.adapter().find({"ti": FakeTI("train")}, who)
    assert found is not None and found.status.name == job.name and found.attempt == 1
    assert ti.xcom["job_name"] == job.name
    assert len(batch_records(emulator)) == 1


# -- the shared poller's list --------------------------------------------------------------------
def test_the_live_filter_returns_exactly_the_live_managed_jobs_across_pages(
    emulator_env: Any, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    emulator = emulator_env({L4: 2})
    monkeypatch.setattr(batch_backend, "LIST_PAGE_SIZE", 3)
    expected_filter = (
        f'labels.{LABEL_MANAGED}="true" AND (status.state="STATE_UNSPECIFIED" OR status.state="QUEUED" '
        'OR status.state="SCHEDULED" OR status.state="RUNNING")'
    )
    assert expected_filter == batch_backend.LIVE_FILTER
    backend = BatchJobBackend(PROJECT, REGION)
    # Two take the pool's two L4s (a job gets its GPUs on the tick after its create): one keeps
    # RUNNING, the other runs 1 s and frees its L4 for a later one, which stays SCHEDULED. One is
    # cancelled while it waits for a GPU.
    running = submit(backend, identity("running")).name
    one_second = operator(environment={"DWS_EMULATOR_RUN_SECONDS": "1"})
    succeeded = submit(backend, identity("succeeded"), one_second).name
    assert backend.get_status(succeeded).state == "SCHEDULED"  # type: ignore[union-attr]
    cancelled = submit(backend, identity("cancelled")).name
    backend.release(cancelled)
    clock.advance(max(SCHEDULE_SECONDS, CANCEL_SECONDS))
    assert backend.get_status(succeeded).state == "RUNNING"  # type: ignore[union-attr]
    clock.advance(1)
    assert backend.get_status(succeeded).state == "SUCCEEDED"  # type: ignore[union-attr]
    scheduled = submit(backend, identity("scheduled")).name  # the freed L4: SCHEDULED (no more time passes)
    queued = [submit(backend, identity(f"queued{i}")).name for i in range(7)]  # no GPU left
    # A job of the same labels but not the provider's (no dws_managed) is not followed.
    unmanaged_job = operator().adapter().build(identity("unmanaged"))
    del unmanaged_job.labels[LABEL_MANAGED]
    raw_client(emulator).create_job(parent=PARENT, job_id="someone-elses", job=unmanaged_job)
    states = {name: backend.get_status(name).state for name in (running, succeeded, scheduled, cancelled)}  # type: ignore[union-attr]
    assert states == {
        running: "RUNNING",
        succeeded: "SUCCEEDED",
        scheduled: "SCHEDULED",
        cancelled: "CANCELLED",
    }
    live = {running, scheduled, *queued}
    pages_before = emulator.calls("ListJobs")

    # The list of ended jobs (how the shared poller learns of many that ended together): only the
    # ended ones asked for, the provider's, created since the time given.
    first_created = backend.get_status(running).timings.submitted  # type: ignore[union-attr]
    assert first_created is not None
    wanted = {running, succeeded, cancelled, queued[0], f"{PARENT}/jobs/gone"}

    async def lists() -> tuple[dict[str, RequestStatus], ...]:
        # In one event loop, as in the triggerer (the async clients are bound to their loop).
        return (
            await backend.alist_live(),
            await backend.alist_live(only={queued[0], succeeded}),
            await backend.alist_ended(wanted, first_created, 500),
            await backend.alist_ended(wanted, first_created + timedelta(seconds=1), 500),
        )

    listed, only, found, later = asyncio.run(lists())
    assert set(listed) == live  # 9 live jobs: 3 pages of 3, for each of the two lists ...
    assert emulator.calls("ListJobs") - pages_before == 6 + 2  # ... and a page per list of ended jobs
    assert listed[running].phase is Phase.RUNNING
    assert {listed[name].phase for name in (scheduled, *queued)} == {Phase.WAITING}
    assert listed[scheduled].state == "SCHEDULED"
    # ``only``: just the names asked for (an ended one is not listed), still from the paged list.
    assert set(only) == {queued[0]}
    # The sync list with the same filter (what the shared poller sends) agrees.
    assert {job.name for job in backend.list_jobs(LIVE_FILTER)} == live

    assert set(found) == {succeeded, cancelled}
    assert (found[succeeded].phase, found[cancelled].phase) == (Phase.SUCCEEDED, Phase.CANCELLED)
    assert later == {}  # all were created before that


# -- status and classification -------------------------------------------------------------------
def test_a_job_waits_queued_and_scheduled_then_runs_and_succeeds(emulator_env: Any, clock: FakeClock) -> None:
    emulator = emulator_env()
    backend = BatchJobBackend(PROJECT, REGION)
    job = submit(backend, identity())
    clock.advance(30)  # 30 s in the queue
    queued = backend.get_status(job.name)
    assert queued is not None and (queued.state, queued.phase) == ("QUEUED", Phase.WAITING)
    emulator.control.set_capacity({L4: 1})
    scheduled = backend.get_status(job.name)
    assert scheduled is not None and (scheduled.state, scheduled.phase) == ("SCHEDULED", Phase.WAITING)
    assert scheduled.timings.started is None
    clock.advance(SCHEDULE_SECONDS)
    running = backend.get_status(job.name)
    assert running is not None and (running.state, running.phase) == ("RUNNING", Phase.RUNNING)
    assert running.timings.wait_seconds == pytest.approx(30 + SCHEDULE_SECONDS, abs=1e-3)
    clock.advance(RUN_SECONDS + 1)
    done = backend.get_status(job.name)
    assert done is not None and (done.state, done.phase) == ("SUCCEEDED", Phase.SUCCEEDED)
    assert done.outcome.failure is None
    # The emulator ends it on the first tick past its run: the run is what it recorded.
    assert done.timings.run_seconds == pytest.approx(RUN_SECONDS + 1, abs=1e-3)
    assert done.details["task_counts"] == {"SUCCEEDED": 1}
    [record] = batch_records(emulator)
    assert record["state"] == "SUCCEEDED"


def test_failed_after_running_is_a_workload_failure(emulator_env: Any, clock: FakeClock) -> None:
    emulator_env({L4: 1})
    backend = BatchJobBackend(PROJECT, REGION)
    op = operator(exit_code=3)
    job = submit(backend, identity(), op)
    assert backend.get_status(job.name).state == "SCHEDULED"  # type: ignore[union-attr]
    clock.advance(SCHEDULE_SECONDS)
    assert backend.get_status(job.name).phase is Phase.RUNNING  # type: ignore[union-attr]
    clock.advance(RUN_SECONDS)
    failed = backend.get_status(job.name)
    assert failed is not None and failed.state == "FAILED"
    assert failed.phase is Phase.FAILED and failed.outcome.failure is FailureKind.WORKLOAD_FAILED
    assert "exit code 3" in failed.outcome.message
    error = op.adapter().error(failed, Placement(location=REGION), op.max_wait)
    assert isinstance(error, WorkloadFailedError)
    assert "1 of 1 tasks failed" in str(error)


def test_a_standard_job_stocked_out_failed_before_running_is_capacity_not_obtained(
    emulator_env: Any,
) -> None:
    emulator = emulator_env()
    backend = BatchJobBackend(PROJECT, REGION)
    who = identity()
    job = operator().adapter().build(who)
    policy = job.allocation_policy.instances[0].policy
    policy.provisioning_model = batch_v1.AllocationPolicy.ProvisioningModel.STANDARD  # type: ignore[assignment]
    made = raw_client(emulator).create_job(parent=PARENT, job_id=who.batch_job_id(), job=job)
    status = backend.get_status(made.name)  # the next tick: no L4 free, FAILED
    assert status is not None and status.state == "FAILED"
    assert status.phase is Phase.NOT_OBTAINED
    assert status.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED
    assert status.timings.started is None and status.timings.run_seconds == 0.0


def test_a_flex_start_job_queued_for_two_days_is_capacity_not_obtained(
    emulator_env: Any, clock: FakeClock
) -> None:
    emulator = emulator_env()
    backend = BatchJobBackend(PROJECT, REGION)
    op = operator()
    job = submit(backend, identity(), op)
    clock.advance(QUEUED_LIMIT_SECONDS - 1)
    assert backend.get_status(job.name).phase is Phase.WAITING  # type: ignore[union-attr]
    clock.advance(1)
    expired = backend.get_status(job.name)
    assert expired is not None and expired.state == "FAILED"
    assert expired.phase is Phase.NOT_OBTAINED
    assert expired.outcome.failure is FailureKind.CAPACITY_NOT_OBTAINED
    assert expired.details["task_counts"] == {"UNEXECUTED": 1}
    assert expired.timings.wait_seconds == pytest.approx(QUEUED_LIMIT_SECONDS, abs=1e-3)
    error = op.adapter().error(expired, Placement(location=REGION), op.max_wait)
    assert isinstance(error, CapacityNotObtainedError)
    assert emulator.control.capacity()[L4]["in_use"] == 0


def test_release_of_a_waiting_job_is_idempotent_and_of_an_ended_job_fine(
    emulator_env: Any, clock: FakeClock
) -> None:
    emulator = emulator_env()
    backend = BatchJobBackend(PROJECT, REGION)
    job = submit(backend, identity())
    assert backend.release(job.name) is True
    cancelling = backend.get_status(job.name)
    assert cancelling is not None and cancelling.state == "CANCELLATION_IN_PROGRESS"
    assert cancelling.phase is Phase.CANCELLED
    # Twice: the same request_id, answered with the first cancel's operation (nothing done twice).
    assert backend.release(job.name) is True
    asyncio.run(BatchJobBackend(PROJECT, REGION).arelease(job.name))  # from an event loop too
    clock.advance(CANCEL_SECONDS)
    cancelled = backend.get_status(job.name)
    assert cancelled is not None and cancelled.state == "CANCELLED"
    assert cancelled.outcome.failure is FailureKind.CANCELLED
    backend.release(job.name)  # of a cancelled job: no error
    [record] = batch_records(emulator)
    assert record["state"] == "CANCELLED"
    # A job that ended by itself: nothing to cancel.
    emulator.control.set_capacity({L4: 1})
    done = submit(backend, identity(), operator(environment={"DWS_EMULATOR_RUN_SECONDS": "1"}))
    assert backend.get_status(done.name).state == "SCHEDULED"  # type: ignore[union-attr]
    clock.advance(SCHEDULE_SECONDS)
    assert backend.get_status(done.name).state == "RUNNING"  # type: ignore[union-attr]
    clock.advance(1)
    assert backend.get_status(done.name).state == "SUCCEEDED"  # type: ignore[union-attr]
    assert backend.release(done.name) is False
    assert asyncio.run(BatchJobBackend(PROJECT, REGION).arelease(done.name)) is False
    assert backend.get_status(done.name).state == "SUCCEEDED"  # type: ignore[union-attr]
    # A job that is gone: nothing to cancel either.
    assert backend.release(backend.name_of("dws-never-made-t1-a1")) is False


def test_release_with_wait_returns_once_the_cancel_is_done(emulator_env: Any, clock: FakeClock) -> None:
    emulator = emulator_env({L4: 1})
    backend = BatchJobBackend(PROJECT, REGION)
    job = submit(backend, identity())
    assert backend.get_status(job.name).state == "SCHEDULED"  # type: ignore[union-attr]
    assert emulator.control.capacity()[L4]["in_use"] == 1
    with ticking(clock):  # the cancel's operation is done when the job is CANCELLED
        assert backend.release(job.name, wait=True) is True
    assert backend.get_status(job.name).state == "CANCELLED"  # type: ignore[union-attr]
    assert emulator.control.capacity()[L4]["in_use"] == 0


# -- the trigger, through the shared poller ------------------------------------------------------
def test_trigger_built_by_the_adapter_fires_success_when_the_job_ends(
    emulator_env: Any, clock: FakeClock
) -> None:
    emulator = emulator_env()
    ti = FakeTI("train")
    op = operator(ti.task_id)
    adapter = op.adapter()
    who = RequestIdentity(ti.dag_id, ti.task_id, ti.run_id)
    placement = Placement(location=REGION)
    job = adapter.submit({"ti": ti}, who, placement, op.max_wait)
    trigger = AttemptLoop(adapter.op, adapter).trigger(job, placement, op.max_wait, resume={})
    # Rebuilt from serialize(), as the triggerer does.
    trigger = CapacityRequestTrigger(**trigger.serialize()[1])
    assert trigger.kind == "batch_job" and trigger.target == "end"

    async def scenario() -> dict[str, Any]:
        task = asyncio.ensure_future(first_event(trigger))
        lists = emulator.calls("ListJobs")
        await until(lambda: emulator.calls("ListJobs") >= lists + 3, "three polls of the queued job")
        assert not task.done()
        shared = poller.shared_poller("batch_job", trigger.backend_spec)
        assert len(shared) == 1  # the wait follows the shared poller's list
        clock.advance(20)  # 20 s in the queue
        await asyncio.to_thread(emulator.control.set_capacity, {L4: 1})
        rec = emulator.server.state.batch.jobs[job.name]
        clock.advance(SCHEDULE_SECONDS)
        await until(lambda: rec.started_at is not None, "the job to start")
        assert not task.done()
        clock.advance(RUN_SECONDS + 1)
        return await asyncio.wait_for(task, 60)

    event = asyncio.run(scenario())
    assert event["phase"] == "succeeded" and event["state"] == "SUCCEEDED"
    assert event["name"] == job.name and event["failure"] is None
    assert event["timings"]["wait_seconds"] == pytest.approx(20 + SCHEDULE_SECONDS, abs=1e-3)
    assert event["timings"]["run_seconds"] == pytest.approx(RUN_SECONDS + 1, abs=1e-3)
    result = adapter.result({"ti": ti}, adapter_status := adapter.backend().get_status(job.name))  # type: ignore[arg-type]
    assert adapter_status is not None and result["state"] == "SUCCEEDED"
    assert result["task_counts"] == {"SUCCEEDED": 1}


def test_trigger_cancels_the_job_when_max_wait_passes_without_capacity(
    emulator_env: Any, clock: FakeClock
) -> None:
    """Cloud Batch has no max wait: the provider gives up at submit time + max wait, cancels the
    job, and reports capacity not obtained. The emulator's clock puts the submission an hour ago,
    so the 10-minute max wait has passed on the triggerer's own clock too."""
    clock.advance(-3600)
    emulator = emulator_env()
    ti = FakeTI("train")
    op = operator(ti.task_id, max_wait=timedelta(minutes=10))
    adapter = op.adapter()
    who = RequestIdentity(ti.dag_id, ti.task_id, ti.run_id)
    placement = Placement(location=REGION)
    job = adapter.submit({"ti": ti}, who, placement, op.max_wait)
    trigger = AttemptLoop(adapter.op, adapter).trigger(job, placement, op.max_wait, resume={})

    event = asyncio.run(asyncio.wait_for(first_event(trigger), 60))
    assert event["phase"] == "not_obtained"
    assert event["failure"] == FailureKind.CAPACITY_NOT_OBTAINED.value
    assert "provider cancelled" in event["message"]
    clock.advance(CANCEL_SECONDS)
    [record] = batch_records(emulator)
    assert record["state"] == "CANCELLED" and record["start_time"] is None
    assert [step["state"] for step in record["history"]] == [
        "QUEUED",
        "CANCELLATION_IN_PROGRESS",
        "CANCELLED",
    ]
    assert not [r for r in batch_records(emulator) if r["state"] in ("QUEUED", "SCHEDULED")]
    assert emulator.control.capacity()[L4]["queued"] == 0


# -- the operator, end to end in the worker ------------------------------------------------------
def test_non_deferrable_operator_raises_capacity_not_obtained_and_leaves_nothing_queued(
    emulator_env: Any, clock: FakeClock
) -> None:
    clock.advance(-3600)  # see the trigger test: the max wait has passed at the first read
    emulator = emulator_env()
    op = operator("nd_no_capacity", max_wait=timedelta(minutes=10))
    with pytest.raises(CapacityNotObtainedError, match="no capacity within max wait 0:10:00 in us-central1"):
        op.execute({"ti": FakeTI(op.task_id)})
    clock.advance(CANCEL_SECONDS)
    [record] = batch_records(emulator)
    assert record["state"] == "CANCELLED" and record["start_time"] is None


def test_non_deferrable_operator_runs_the_job_and_returns_its_summary(
    emulator_env: Any, clock: FakeClock
) -> None:
    emulator = emulator_env({L4: 1})
    ti = FakeTI("nd_success")
    op = operator(ti.task_id, environment={"DWS_EMULATOR_RUN_SECONDS": "0"})

    with ticking(clock):  # the emulator's time moves while the worker waits
        result = op.execute({"ti": ti})
    assert result["state"] == "SUCCEEDED" and result["task_counts"] == {"SUCCEEDED": 1}
    assert result["job_id"] == RequestIdentity(ti.dag_id, ti.task_id, ti.run_id).batch_job_id()
    assert ti.xcom["job_name"] == result["name"]
    [record] = batch_records(emulator)
    assert record["state"] == "SUCCEEDED"


# -- what the operator accepts is what the API accepts -------------------------------------------
def _whole_job(
    instances: list[dict[str, Any]] | None = None, groups: int = 1, **policy: Any
) -> dict[str, Any]:
    group = {
        "task_count": 2,
        "task_spec": {
            "runnables": [{"container": {"image_uri": "busybox"}}],
            "environment": {"variables": {"DWS_EMULATOR_RUN_SECONDS": "1"}},
        },
    }
    policy = {"machine_type": "g2-standard-8", **policy}
    return {
        "task_groups": [group] * groups,
        "allocation_policy": {"instances": instances or [{"policy": policy}]},
    }


WHOLE_JOBS = {
    "g2 with its own GPU": _whole_job(),
    "g2 with its GPU spelled out": _whole_job(accelerators=[{"type_": "nvidia-l4", "count": 1}]),
    "a3 with 8 H100": _whole_job(machine_type="a3-highgpu-8g"),
    "FLEX_START already set": _whole_job(provisioning_model="FLEX_START"),
    "g2 with the wrong GPU count": _whole_job(accelerators=[{"type_": "nvidia-l4", "count": 2}]),
    "no GPU": _whole_job(machine_type="n1-standard-8"),
    "two instance policies": _whole_job(
        instances=[
            {"policy": {"machine_type": "g2-standard-8"}},
            {"policy": {"machine_type": "g2-standard-4"}},
        ]
    ),
    "n1 with a T4": _whole_job(
        machine_type="n1-standard-8", accelerators=[{"type_": "nvidia-tesla-t4", "count": 2}]
    ),
    "n1 with a V100 (no flex-start VMs)": _whole_job(
        machine_type="n1-standard-8", accelerators=[{"type_": "nvidia-tesla-v100", "count": 1}]
    ),
    "two task groups": _whole_job(groups=2),
    "an instance template": _whole_job(
        instances=[{"instance_template": "projects/p/global/instanceTemplates/t"}]
    ),
}


@pytest.mark.parametrize("case", list(WHOLE_JOBS))
def test_a_whole_job_the_operator_accepts_is_one_the_api_accepts(emulator_env: Any, case: str) -> None:
    """The operator's checks and the API (as the emulator models it) agree on which whole jobs are
    Flex Start Batch jobs: a job refused only once it reaches the API fails a task at run time
    instead of a DAG file at parse time. A job the operator refuses is sent as the operator would
    have sent it (FLEX_START on every instance policy)."""
    from google.api_core import exceptions
    from google.cloud.batch_v1 import Job

    # Pools of every GPU the cases use, so a refusal is about the job, not the region.
    gpus = ("NVIDIA_L4", "NVIDIA_H100_80GB", "NVIDIA_TESLA_T4", "NVIDIA_TESLA_V100")
    emulator = emulator_env({f"{REGION}/{gpu}": 8 for gpu in gpus})
    who = identity()
    try:
        op = operator(job=WHOLE_JOBS[case], image_uri=None, machine_type=None, environment=None)
        op.check_parameters(rendered=True)
        job = op.adapter().build(who)
    except ValueError:
        accepted = False
        data = copy.deepcopy(WHOLE_JOBS[case])
        for instance in data["allocation_policy"]["instances"]:
            if "policy" in instance:
                instance["policy"]["provisioning_model"] = "FLEX_START"
        job = Job(data)
    else:
        accepted = True
    try:
        raw_client(emulator).create_job(parent=PARENT, job_id=who.batch_job_id(), job=job)
    except exceptions.InvalidArgument:
        api_accepts = False
    else:
        api_accepts = True
    assert (accepted, api_accepts) in ((True, True), (False, False)), case

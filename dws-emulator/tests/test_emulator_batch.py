"""Cloud Batch in the emulator, through the unmodified google-cloud-batch clients (sync and async).

Each test runs a private in-process emulator with a ``FakeClock``: every call ticks the model, so
a transition that is due happens on the next call, and time passes only when the test says so.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import grpc
import pytest
from google.api_core import exceptions
from google.cloud import batch_v1
from google.cloud.batch_v1.services.batch_service.transports import (
    BatchServiceGrpcAsyncIOTransport,
    BatchServiceGrpcTransport,
)

from dws_emulator.batch.state import QUEUED_LIMIT_SECONDS, SCHEDULE_SECONDS
from dws_emulator.facts import VERTEX_NAME
from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator

State = batch_v1.JobStatus.State
Model = batch_v1.AllocationPolicy.ProvisioningModel
L4 = "us-central1/NVIDIA_L4"
H100 = "us-central1/NVIDIA_H100_80GB"
PARENT = "projects/batch-test/locations/us-central1"
SERVICE = "google.cloud.batch.v1.BatchService"


def sync_client(address: str) -> batch_v1.BatchServiceClient:
    return batch_v1.BatchServiceClient(
        transport=BatchServiceGrpcTransport(channel=grpc.insecure_channel(address))
    )


def make_job(
    model: str = "FLEX_START",
    accelerator: str | None = "nvidia-l4",
    count: int = 1,
    machine: str | None = None,
    task_count: int = 1,
    parallelism: int = 0,
    run_seconds: float = 10,
    exit_code: int = 0,
    labels: dict[str, str] | None = None,
) -> batch_v1.Job:
    if machine is None:  # the G2 machine that comes with ``count`` L4s
        machine = {1: "g2-standard-4", 2: "g2-standard-24"}.get(count, "g2-standard-48")
    policy = batch_v1.AllocationPolicy.InstancePolicy(machine_type=machine, provisioning_model=model)
    if accelerator:
        policy.accelerators = [batch_v1.AllocationPolicy.Accelerator(type_=accelerator, count=count)]
    runnable = batch_v1.Runnable(
        container=batch_v1.Runnable.Container(image_uri="busybox"),
        environment=batch_v1.Environment(variables={"DWS_EMULATOR_EXIT_CODE": str(exit_code)}),
    )
    return batch_v1.Job(
        task_groups=[
            batch_v1.TaskGroup(
                task_count=task_count,
                parallelism=parallelism,
                task_spec=batch_v1.TaskSpec(
                    runnables=[runnable],
                    environment=batch_v1.Environment(
                        variables={"DWS_EMULATOR_RUN_SECONDS": str(run_seconds)}
                    ),
                ),
            )
        ],
        allocation_policy=batch_v1.AllocationPolicy(
            instances=[batch_v1.AllocationPolicy.InstancePolicyOrTemplate(policy=policy)]
        ),
        labels=labels or {},
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def emulator(dws_emulator_server_factory, clock):
    return dws_emulator_server_factory({L4: 2, H100: 8}, clock=clock)


@pytest.fixture
def client(emulator) -> batch_v1.BatchServiceClient:
    return sync_client(emulator.address)


def create(client, job_id: str, job: batch_v1.Job | None = None, request_id: str = "") -> batch_v1.Job:
    request = batch_v1.CreateJobRequest(
        parent=PARENT, job_id=job_id, job=job or make_job(), request_id=request_id
    )
    return client.create_job(request=request)


def state_of(client, job: batch_v1.Job) -> State:
    return client.get_job(name=job.name).status.state


def descriptions(job: batch_v1.Job) -> list[str]:
    return [event.description for event in job.status.status_events]


# --- create and identity -------------------------------------------------------------------
def test_flex_start_job_runs_to_succeeded_with_events_counts_and_run_duration(
    client, emulator, clock
) -> None:
    job = create(client, "train", make_job(task_count=4, parallelism=2, count=1))
    assert job.name == f"{PARENT}/jobs/train"
    assert job.uid and job.create_time
    assert job.status.state == State.QUEUED
    assert job.task_groups[0].name == f"{job.name}/taskGroups/group0"
    # 2 VMs at once (parallelism 2, one task per node) x 1 L4: the whole pool.
    assert state_of(client, job) == State.SCHEDULED
    assert emulator.control.capacity()[L4]["in_use"] == 2
    clock.advance(SCHEDULE_SECONDS)
    running = client.get_job(name=job.name)
    assert running.status.state == State.RUNNING
    assert dict(running.status.task_groups["group0"].counts) == {"RUNNING": 2, "PENDING": 2}
    clock.advance(10)
    done = client.get_job(name=job.name)
    assert done.status.state == State.SUCCEEDED
    assert done.status.run_duration == timedelta(seconds=10)
    assert dict(done.status.task_groups["group0"].counts) == {"SUCCEEDED": 4}
    assert descriptions(done) == [
        f"Job state is set from QUEUED to SCHEDULED for job {job.name}.",
        f"Job state is set from SCHEDULED to RUNNING for job {job.name}.",
        f"Job state is set from RUNNING to SUCCEEDED for job {job.name}.",
    ]
    assert {e.type_ for e in done.status.status_events} == {"STATUS_CHANGED"}
    assert emulator.control.capacity()[L4]["in_use"] == 0
    [record] = [r for r in emulator.control.requests() if r["kind"] == "BatchJob"]
    assert record["pool"] == L4 and record["accelerator_count"] == 2 and record["vms"] == 2
    assert [h["state"] for h in record["history"]] == ["QUEUED", "SCHEDULED", "RUNNING", "SUCCEEDED"]


def test_nonzero_exit_code_fails_after_the_run(client, clock) -> None:
    job = create(client, "crash", make_job(exit_code=3))
    assert state_of(client, job) == State.SCHEDULED
    clock.advance(SCHEDULE_SECONDS)
    assert state_of(client, job) == State.RUNNING
    clock.advance(10)
    failed = client.get_job(name=job.name)
    assert failed.status.state == State.FAILED
    assert "with exit code 3" in descriptions(failed)[-1]
    assert dict(failed.status.task_groups["group0"].counts) == {"FAILED": 1}


def test_duplicate_job_id_is_already_exists_and_request_id_replays(client, emulator) -> None:
    first = create(client, "dup")
    with pytest.raises(exceptions.AlreadyExists, match="dup already exists"):
        create(client, "dup")
    token = str(uuid.uuid4())
    made = create(client, "once", request_id=token)
    again = create(client, "once", request_id=token)  # a retried call whose answer was lost
    assert again.name == made.name and again.uid == made.uid
    names = [r["name"] for r in emulator.control.requests() if r["kind"] == "BatchJob"]
    assert names == [first.name, made.name]
    with pytest.raises(exceptions.InvalidArgument, match="'request_id'"):
        create(client, "bad-token", request_id="not-a-uuid")


def test_a_job_id_is_generated_when_none_is_given(client) -> None:
    job = client.create_job(parent=PARENT, job=make_job())
    assert job.name.startswith(f"{PARENT}/jobs/job-")


# --- capacity ------------------------------------------------------------------------------
def test_flex_start_jobs_queue_in_fifo_order_and_a_cancel_hands_the_gpus_on(client, emulator) -> None:
    big = create(client, "big", make_job(count=2))  # the whole L4 pool
    small = create(client, "small", make_job(count=1))
    later = create(client, "later", make_job(count=1))
    assert state_of(client, big) == State.SCHEDULED
    assert state_of(client, small) == State.QUEUED
    assert emulator.control.capacity()[L4] == {"total": 2, "in_use": 2, "free": 0, "queued": 2}
    operation = client.cancel_job(name=big.name)
    assert state_of(client, big) == State.CANCELLATION_IN_PROGRESS
    assert state_of(client, small) == State.SCHEDULED and state_of(client, later) == State.SCHEDULED
    emulator.clock.advance(1)
    operation.result(timeout=30)
    cancelled = client.get_job(name=big.name)
    assert cancelled.status.state == State.CANCELLED
    assert descriptions(cancelled)[-2:] == [
        f"Job state is set from SCHEDULED to CANCELLATION_IN_PROGRESS for job {big.name}.",
        f"Job state is set from CANCELLATION_IN_PROGRESS to CANCELLED for job {big.name}.",
    ]


def test_a_queued_job_leaves_the_queue_when_cancelled(client, emulator) -> None:
    create(client, "holder", make_job(count=2))
    waiting = create(client, "waiting", make_job(count=2))
    assert emulator.control.capacity()[L4]["queued"] == 1
    client.cancel_job(name=waiting.name)
    assert emulator.control.capacity()[L4]["queued"] == 0
    emulator.clock.advance(1)
    done = client.get_job(name=waiting.name)
    assert done.status.state == State.CANCELLED
    assert dict(done.status.task_groups["group0"].counts) == {"UNEXECUTED": 1}
    with pytest.raises(exceptions.FailedPrecondition, match="cannot be cancelled"):
        client.cancel_job(name=waiting.name)


def test_flex_start_job_queued_for_two_days_fails_on_its_own(client, emulator, clock) -> None:
    create(client, "holder", make_job(count=2, run_seconds=10 * 86400))
    waiting = create(client, "waiting", make_job(count=1))
    clock.advance(QUEUED_LIMIT_SECONDS - 1)
    assert state_of(client, waiting) == State.QUEUED
    clock.advance(1)
    failed = client.get_job(name=waiting.name)
    assert failed.status.state == State.FAILED
    assert descriptions(failed)[-1].startswith(
        f"Job state is set from QUEUED to FAILED for job {waiting.name}."
    )
    assert "QUEUED for more than 2 days" in descriptions(failed)[-1]
    assert emulator.control.capacity()[L4]["queued"] == 0
    record = next(r for r in emulator.control.requests() if r["name"] == waiting.name)
    assert record["error"]["code"] == 8  # RESOURCE_EXHAUSTED


@pytest.mark.parametrize("model", ["STANDARD", "SPOT"])
def test_on_demand_job_starts_at_once_or_fails_on_a_stock_out(client, emulator, model) -> None:
    first = create(client, "first", make_job(model=model, count=2))
    second = create(client, "second", make_job(model=model, count=1))
    assert state_of(client, first) == State.SCHEDULED
    failed = client.get_job(name=second.name)
    assert failed.status.state == State.FAILED
    assert "CODE_GCE_ZONE_RESOURCE_POOL_EXHAUSTED" in descriptions(failed)[-1]
    assert "1 VM(s) x 1 NVIDIA_L4" in descriptions(failed)[-1]
    assert emulator.control.capacity()[L4] == {"total": 2, "in_use": 2, "free": 0, "queued": 0}


def test_machine_type_gpus_and_h100_pool(client, emulator) -> None:
    job = create(client, "h100", make_job(accelerator=None, machine="a3-highgpu-8g"))
    assert state_of(client, job) == State.SCHEDULED
    assert emulator.control.capacity()[H100]["in_use"] == 8


def test_cpu_only_job_runs_without_a_pool(client, clock) -> None:
    job = create(client, "cpu", make_job(model="STANDARD", accelerator=None, machine="e2-standard-4"))
    assert state_of(client, job) == State.SCHEDULED
    clock.advance(SCHEDULE_SECONDS)
    assert state_of(client, job) == State.RUNNING


# --- delete --------------------------------------------------------------------------------
def test_delete_goes_through_deletion_in_progress_then_not_found(client, emulator, clock) -> None:
    job = create(client, "doomed", make_job(count=2))
    assert state_of(client, job) == State.SCHEDULED
    token = str(uuid.uuid4())
    operation = client.delete_job(request=batch_v1.DeleteJobRequest(name=job.name, request_id=token))
    replayed = client.delete_job(request=batch_v1.DeleteJobRequest(name=job.name, request_id=token))
    assert replayed.operation.name == operation.operation.name
    assert state_of(client, job) == State.DELETION_IN_PROGRESS
    assert emulator.control.capacity()[L4]["in_use"] == 0
    with pytest.raises(exceptions.FailedPrecondition, match="already being deleted"):
        client.delete_job(name=job.name)
    clock.advance(1)
    operation.result(timeout=30)
    with pytest.raises(exceptions.NotFound):
        client.get_job(name=job.name)
    record = next(r for r in emulator.control.requests() if r["name"] == job.name)
    assert record["deleted"] and record["history"][-1]["state"] == "DELETED"
    recreated = create(client, "doomed")  # the id is free again
    assert recreated.status.state == State.QUEUED


# --- list ----------------------------------------------------------------------------------
def test_list_filters_orders_and_pages(client, clock) -> None:
    for i, team in enumerate(["ml", "data", "ml", "ml", "data"]):
        create(client, f"job-{i}", make_job(count=2, labels={"team": team}, run_seconds=60))
        client.get_job(name=f"{PARENT}/jobs/job-{i}")
        clock.advance(1)  # distinct create times
    # job-0 holds the pool (RUNNING by now); the rest stay QUEUED behind it.

    def names(**kwargs) -> list[str]:
        return [job.name.rsplit("/", 1)[1] for job in client.list_jobs(request={"parent": PARENT, **kwargs})]

    assert names() == [f"job-{i}" for i in range(5)]
    assert names(filter='labels.team="ml"') == ["job-0", "job-2", "job-3"]
    assert names(filter='status.state="QUEUED"') == ["job-1", "job-2", "job-3", "job-4"]
    assert names(filter='labels.team="ml" AND status.state="QUEUED"') == ["job-2", "job-3"]
    assert names(filter='status.state="RUNNING" OR labels.team="data"') == ["job-0", "job-1", "job-4"]
    assert names(order_by="create_time desc") == [f"job-{i}" for i in reversed(range(5))]
    assert names(order_by="name desc")[:2] == ["job-4", "job-3"]
    pages = list(client.list_jobs(request={"parent": PARENT, "page_size": 2}).pages)
    assert [len(page.jobs) for page in pages] == [2, 2, 1]
    with pytest.raises(exceptions.InvalidArgument, match="'filter'"):
        names(filter='status.state="WAITING"')
    with pytest.raises(exceptions.InvalidArgument, match="'order_by'"):
        names(order_by="priority")


# --- tasks ---------------------------------------------------------------------------------
def test_list_tasks_and_get_task(client, clock) -> None:
    job = create(client, "tasks", make_job(task_count=3, parallelism=1))
    assert state_of(client, job) == State.SCHEDULED
    clock.advance(SCHEDULE_SECONDS)
    assert state_of(client, job) == State.RUNNING
    group = f"{job.name}/taskGroups/group0"
    tasks = list(client.list_tasks(parent=group))
    assert [t.name for t in tasks] == [f"{group}/tasks/{i}" for i in range(3)]
    assert [t.status.state.name for t in tasks] == ["RUNNING", "PENDING", "PENDING"]
    running = list(client.list_tasks(request={"parent": group, "filter": 'status.state="RUNNING"'}))
    assert [t.name for t in running] == [f"{group}/tasks/0"]
    assert client.get_task(name=f"{group}/tasks/2").status.state.name == "PENDING"
    pages = list(client.list_tasks(request={"parent": group, "page_size": 2}).pages)
    assert [len(p.tasks) for p in pages] == [2, 1]
    with pytest.raises(exceptions.NotFound):
        client.get_task(name=f"{group}/tasks/3")
    with pytest.raises(exceptions.NotFound):
        list(client.list_tasks(parent=f"{job.name}/taskGroups/group1"))


# --- validation ----------------------------------------------------------------------------
def _without_runnables() -> batch_v1.Job:
    job = make_job()
    job.task_groups[0].task_spec.runnables = []
    return job


def _two_instances() -> batch_v1.Job:
    job = make_job()
    job.allocation_policy.instances = [job.allocation_policy.instances[0]] * 2
    return job


def _template() -> batch_v1.Job:
    job = make_job()
    job.allocation_policy.instances = [
        batch_v1.AllocationPolicy.InstancePolicyOrTemplate(instance_template="t")
    ]
    return job


@pytest.mark.parametrize(
    ("parent", "job_id", "job", "field"),
    [
        ("projects/p", "ok", make_job(), "'parent'"),
        (PARENT, "Bad_Id", make_job(), "'job_id'"),
        (PARENT, "ends-", make_job(), "'job_id'"),
        (PARENT, "ok", make_job(task_count=-1), "'job.task_groups[0].task_count'"),
        (PARENT, "ok", make_job(parallelism=-2), "'job.task_groups[0].parallelism'"),
        (PARENT, "ok", _without_runnables(), "'job.task_groups[0].task_spec.runnables'"),
        (PARENT, "ok", _two_instances(), "'job.allocation_policy.instances': FLEX_START cannot be combined"),
        (PARENT, "ok", _template(), "'job.allocation_policy.instances[0].instance_template'"),
        (
            PARENT,
            "ok",
            make_job(accelerator="nvidia-l5"),
            "'job.allocation_policy.instances[0].policy.accelerators[0].type'",
        ),
        (
            PARENT,
            "ok",
            make_job(accelerator="nvidia-tesla-t4", machine="n1-standard-8"),
            "NVIDIA_TESLA_T4 is not available in us-central1",
        ),
        (
            PARENT,
            "ok",
            make_job(accelerator="nvidia-tesla-v100", machine="n1-standard-8"),
            "nvidia-tesla-v100 cannot be obtained with FLEX_START",
        ),
        (PARENT, "ok", make_job(accelerator=None, machine="e2-standard-4"), "FLEX_START needs GPUs"),
        (PARENT, "ok", make_job(labels={"Team": "x"}), "'job.labels'"),
    ],
)
def test_invalid_requests_name_the_field(client, parent, job_id, job, field) -> None:
    with pytest.raises(exceptions.InvalidArgument) as info:
        client.create_job(parent=parent, job_id=job_id, job=job)
    assert field in info.value.message


def test_accelerator_table_covers_every_vertex_pool_of_the_default_inventory() -> None:
    from dws_emulator import DEFAULT_CAPACITY

    gpu_pools = {key.split("/")[1] for key in DEFAULT_CAPACITY if key.split("/")[1].startswith("NVIDIA_")}
    assert gpu_pools <= set(VERTEX_NAME.values())


# --- async client, counters and faults -----------------------------------------------------
def test_async_client_drives_the_same_life_cycle(emulator, clock) -> None:
    async def scenario() -> None:
        channel = grpc.aio.insecure_channel(emulator.address)
        client = batch_v1.BatchServiceAsyncClient(transport=BatchServiceGrpcAsyncIOTransport(channel=channel))
        job = await client.create_job(parent=PARENT, job_id="async", job=make_job(run_seconds=1))
        assert (await client.get_job(name=job.name)).status.state == State.SCHEDULED
        clock.advance(SCHEDULE_SECONDS)
        assert (await client.get_job(name=job.name)).status.state == State.RUNNING
        clock.advance(1)
        assert (await client.get_job(name=job.name)).status.state == State.SUCCEEDED
        listed = [j.name async for j in await client.list_jobs(parent=PARENT)]
        assert listed == [job.name]
        operation = await client.delete_job(name=job.name)
        clock.advance(1)
        await operation.result(timeout=30)
        with pytest.raises(exceptions.NotFound):
            await client.get_job(name=job.name)
        await channel.close()

    asyncio.run(scenario())


def test_batch_methods_are_counted_and_can_be_faulted(client, emulator) -> None:
    emulator.control.reset_stats()
    emulator.control.set_faults(["GetJob=UNAVAILABLEx1"])
    job = create(client, "faulted")
    with pytest.raises(exceptions.ServiceUnavailable):
        client.get_job(name=job.name, retry=None)
    assert client.get_job(name=job.name).name == job.name
    calls = emulator.control.stats()["calls"]
    assert calls[f"{SERVICE}/CreateJob"] == 1 and calls[f"{SERVICE}/GetJob"] == 2
    assert emulator.control.faults()["injected"] == {f"{SERVICE}/GetJob": {"UNAVAILABLE": 1}}


def test_cli_lists_batch_jobs_and_sets_their_pool(client, emulator, capsys) -> None:
    from dws_emulator.cli import main

    create(client, "shown", make_job(count=2, labels={"team": "ml"}))
    assert main(["capacity", "--port", str(emulator.port), "us-central1/NVIDIA_L4=4"]) == 0
    assert main(["requests", "--port", str(emulator.port)]) == 0
    out = capsys.readouterr().out
    assert "shown" in out and "FLEX_START" in out and "2 x NVIDIA_L4" in out and "team=ml" in out
    assert f"BatchJob {PARENT}/jobs/shown" in out
    assert emulator.control.capacity()[L4]["total"] == 4


def test_cancel_replays_its_request_id_and_its_operation_ends_if_the_job_is_deleted(
    client, emulator, clock
) -> None:
    job = create(client, "cut-short", make_job(count=2))
    assert state_of(client, job) == State.SCHEDULED
    token = str(uuid.uuid4())
    cancel = client.cancel_job(request=batch_v1.CancelJobRequest(name=job.name, request_id=token))
    again = client.cancel_job(request=batch_v1.CancelJobRequest(name=job.name, request_id=token))
    assert again.operation.name == cancel.operation.name
    client.delete_job(name=job.name)  # before the cancellation finished
    clock.advance(1)
    cancel.result(timeout=30)
    assert emulator.server.state.operation_done(cancel.operation.name)
    with pytest.raises(exceptions.NotFound):
        client.get_job(name=job.name)

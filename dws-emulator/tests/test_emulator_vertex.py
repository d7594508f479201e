"""The emulator through the real google-cloud-aiplatform clients (sync and async) over gRPC.

The emulator runs in this process (``dws_emulator_server``; a ``FakeClock`` where the test is
about time), except where the point is the ``dws-emulator`` CLI and its log.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone

import grpc
import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1 import JobServiceAsyncClient, JobServiceClient, types
from google.cloud.aiplatform_v1.services.job_service.transports import (
    JobServiceGrpcAsyncIOTransport,
    JobServiceGrpcTransport,
)
from google.protobuf import empty_pb2

from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator

State = types.JobState
H100 = "us-central1/NVIDIA_H100_80GB"
_projects = itertools.count()


def fresh_parent(location: str = "us-central1") -> str:
    """A project of its own, so listings on the shared emulator only see this test's jobs."""
    return f"projects/test-{next(_projects)}-{time.monotonic_ns()}/locations/{location}"


def sync_client(address: str) -> JobServiceClient:
    return JobServiceClient(transport=JobServiceGrpcTransport(channel=grpc.insecure_channel(address)))


def async_client(address: str) -> JobServiceAsyncClient:
    return JobServiceAsyncClient(
        transport=JobServiceGrpcAsyncIOTransport(channel=grpc.aio.insecure_channel(address))
    )


def make_job(
    display_name: str = "job",
    *,
    strategy: str | None = "FLEX_START",
    accelerator: str | None = "NVIDIA_H100_80GB",
    accelerator_count: int = 8,
    replicas: int = 1,
    run_seconds: float = 0.3,
    exit_code: int | None = None,
    max_wait: float | None = None,
    timeout: float | None = None,
    labels: dict[str, str] | None = None,
) -> types.CustomJob:
    env = [types.EnvVar(name="DWS_EMULATOR_RUN_SECONDS", value=str(run_seconds))]
    if exit_code is not None:
        env.append(types.EnvVar(name="DWS_EMULATOR_EXIT_CODE", value=str(exit_code)))
    machine = types.MachineSpec(machine_type="a3-highgpu-8g")
    if accelerator:
        machine.accelerator_type = accelerator
        machine.accelerator_count = accelerator_count
    scheduling = types.Scheduling()
    if strategy:
        scheduling.strategy = strategy
    if max_wait is not None:
        scheduling.max_wait_duration = timedelta(seconds=max_wait)
    if timeout is not None:
        scheduling.timeout = timedelta(seconds=timeout)
    return types.CustomJob(
        display_name=display_name,
        labels=labels or {},
        job_spec=types.CustomJobSpec(
            worker_pool_specs=[
                types.WorkerPoolSpec(
                    replica_count=replicas,
                    machine_spec=machine,
                    container_spec=types.ContainerSpec(image_uri="us-docker.pkg.dev/p/r/train:1", env=env),
                )
            ],
            scheduling=scheduling,
        ),
    )


def wait_for(
    client: JobServiceClient, name: str, states: Iterable[State], timeout: float = 10.0
) -> types.CustomJob:
    wanted = set(states)
    deadline = time.monotonic() + timeout
    while True:
        job = client.get_custom_job(name=name)
        if job.state in wanted:
            return job
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{name} is {job.state.name}, expected one of {sorted(s.name for s in wanted)}"
            )
        time.sleep(0.05)


TERMINAL = (State.JOB_STATE_SUCCEEDED, State.JOB_STATE_FAILED, State.JOB_STATE_CANCELLED)


# --- create / get / life cycle ------------------------------------------------------------
def test_flex_job_life_cycle(dws_emulator_server) -> None:
    client = sync_client(dws_emulator_server.address)
    parent = fresh_parent()
    created = client.create_custom_job(
        parent=parent, custom_job=make_job("train", labels={"team": "ml"}, run_seconds=0.3)
    )
    assert created.name.startswith(f"{parent}/customJobs/")
    assert created.name.rsplit("/", 1)[1].isdigit()
    assert created.display_name == "train"
    assert dict(created.labels) == {"team": "ml"}
    assert created.state == State.JOB_STATE_QUEUED
    assert created.create_time
    assert "start_time" not in created

    running = wait_for(client, created.name, [State.JOB_STATE_RUNNING, State.JOB_STATE_SUCCEEDED])
    assert running.start_time >= created.create_time
    done = wait_for(client, created.name, [State.JOB_STATE_SUCCEEDED])
    assert done.end_time - done.start_time >= timedelta(seconds=0.25)
    assert done.update_time >= done.end_time
    assert not done.error.message

    record = next(r for r in dws_emulator_server.control.requests() if r["name"] == created.name)
    assert [h["state"] for h in record["history"]] == [
        "JOB_STATE_QUEUED",
        "JOB_STATE_PENDING",
        "JOB_STATE_RUNNING",
        "JOB_STATE_SUCCEEDED",
    ]
    assert record["kind"] == "CustomJob"
    assert record["strategy"] == "FLEX_START"
    assert (record["accelerator_type"], record["accelerator_count"]) == ("NVIDIA_H100_80GB", 8)


def test_standard_job_and_job_without_accelerator_run_at_once(dws_emulator_server) -> None:
    client = sync_client(dws_emulator_server.address)
    parent = fresh_parent()
    standard = client.create_custom_job(
        parent=parent,
        custom_job=make_job("std", strategy="STANDARD", accelerator="NVIDIA_L4", accelerator_count=1),
    )
    assert standard.state == State.JOB_STATE_PENDING
    cpu = client.create_custom_job(parent=parent, custom_job=make_job("cpu", strategy=None, accelerator=None))
    for name in (standard.name, cpu.name):
        assert wait_for(client, name, [State.JOB_STATE_SUCCEEDED]).start_time


def test_nonzero_exit_code_fails_after_start(dws_emulator_server) -> None:
    client = sync_client(dws_emulator_server.address)
    job = client.create_custom_job(
        parent=fresh_parent(), custom_job=make_job("crash", exit_code=3, accelerator_count=1)
    )
    failed = wait_for(client, job.name, TERMINAL)
    assert failed.state == State.JOB_STATE_FAILED
    assert failed.start_time and failed.end_time
    assert failed.error.code == 13
    assert "The replica workerpool0-0 exited with a non-zero status of 3." in failed.error.message


def test_scheduling_timeout_fails_the_job(dws_emulator_server_factory) -> None:
    clock = FakeClock()
    emulator = dws_emulator_server_factory({H100: 8}, clock=clock)
    client = sync_client(emulator.address)
    job = client.create_custom_job(
        parent=fresh_parent(), custom_job=make_job("slow", run_seconds=30, timeout=0.3, accelerator_count=1)
    )
    wait_for(client, job.name, [State.JOB_STATE_RUNNING])
    clock.advance(0.3)  # its timeout, not its 30 s run, ends it
    failed = wait_for(client, job.name, TERMINAL)
    assert failed.state == State.JOB_STATE_FAILED
    assert "scheduling.timeout of 0.3s" in failed.error.message
    assert (failed.end_time - failed.start_time).total_seconds() == pytest.approx(0.3, abs=1e-3)


def test_unknown_names_and_unimplemented_methods(dws_emulator_server) -> None:
    client = sync_client(dws_emulator_server.address)
    missing = "projects/p/locations/us-central1/customJobs/123"
    with pytest.raises(exceptions.NotFound, match="does not exist"):
        client.get_custom_job(name=missing)
    with pytest.raises(exceptions.NotFound):
        client.cancel_custom_job(name=missing)
    with pytest.raises(exceptions.NotFound):
        client.delete_custom_job(name=missing)
    with pytest.raises(exceptions.InvalidArgument, match="Invalid CustomJob name"):
        client.get_custom_job(name="projects/p/customJobs/1")
    with pytest.raises(exceptions.MethodNotImplemented):
        client.get_batch_prediction_job(name="projects/p/locations/us-central1/batchPredictionJobs/1")


# --- list -----------------------------------------------------------------------------------
def test_list_filters(dws_emulator_server) -> None:
    client = sync_client(dws_emulator_server.address)
    parent = fresh_parent()

    def create(name: str, labels: dict[str, str], **kwargs) -> str:
        kwargs.setdefault("accelerator_count", 1)
        return client.create_custom_job(
            parent=parent, custom_job=make_job(name, labels=labels, **kwargs)
        ).name

    ok = create("etl_daily", {"team": "data", "key-with-dash": "v"}, run_seconds=0)
    bad = create("etl_hourly", {"team": "ml"}, run_seconds=0, exit_code=1)
    long = create("train_big", {"owner": "me"}, run_seconds=60)
    wait_for(client, ok, [State.JOB_STATE_SUCCEEDED])
    wait_for(client, bad, [State.JOB_STATE_FAILED])
    wait_for(client, long, [State.JOB_STATE_RUNNING])

    def names(filter_text: str) -> set[str]:
        return {j.name for j in client.list_custom_jobs(request={"parent": parent, "filter": filter_text})}

    assert names("") == {ok, bad, long}
    assert names('state="JOB_STATE_RUNNING"') == {long}
    assert names("state!=JOB_STATE_RUNNING") == {ok, bad}
    assert names('display_name="etl_daily"') == {ok}
    assert names('display_name!="etl_daily"') == {bad, long}
    assert names('display_name:"etl_*"') == {ok, bad}
    assert names('labels.team="data"') == {ok}
    assert names("labels.team:*") == {ok, bad}
    assert names("labels:owner") == {long}
    assert names('labels."key-with-dash"="v"') == {ok}
    assert names('state="JOB_STATE_SUCCEEDED" OR state="JOB_STATE_FAILED"') == {ok, bad}
    assert names('labels.team:* AND NOT state="JOB_STATE_FAILED"') == {ok}
    assert names('NOT (display_name:"etl_*" OR labels.owner="me")') == set()
    assert names('(state="JOB_STATE_RUNNING" OR labels.team="ml") AND display_name:"*big"') == {long}
    assert names('-labels.team:* display_name:"train*"') == {long}  # "-" negates, juxtaposition ANDs
    future = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    assert names(f'create_time<"{future}"') == {ok, bad, long}
    assert names(f'create_time>"{future}"') == set()

    client.cancel_custom_job(name=long)
    for malformed, message in [
        ('state="JOB_STATE_RUNNING" AND', "expected a field name"),
        ('(state="JOB_STATE_RUNNING"', "expected ')'"),
        ('state="RUNNING_ISH"', "unknown job state"),
        ('colour="red"', "unsupported filter field 'colour'"),
        ('display_name="unterminated', "unterminated string"),
        ("state", "expected a comparison operator"),
        ('create_time>"yesterday"', "not an RFC 3339 timestamp"),
    ]:
        with pytest.raises(exceptions.InvalidArgument, match="Invalid filter") as info:
            list(client.list_custom_jobs(request={"parent": parent, "filter": malformed}))
        assert message in info.value.message


def test_list_pagination_newest_first(dws_emulator_server) -> None:
    client = sync_client(dws_emulator_server.address)
    parent = fresh_parent()
    created = [
        client.create_custom_job(parent=parent, custom_job=make_job(f"job-{i}", accelerator=None)).name
        for i in range(7)
    ]
    pager = client.list_custom_jobs(request={"parent": parent, "page_size": 3})
    pages = [[j.name for j in page.custom_jobs] for page in pager.pages]
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [n for p in pages for n in p] == created[::-1]
    # Other projects and locations are not listed.
    assert list(client.list_custom_jobs(parent=parent.replace("us-central1", "us-east4"))) == []
    with pytest.raises(exceptions.InvalidArgument, match="page_token"):
        client.list_custom_jobs(request={"parent": parent, "page_token": "garbage"})
    with pytest.raises(exceptions.InvalidArgument, match="Invalid parent"):
        client.list_custom_jobs(parent="projects/p")


# --- cancel / delete --------------------------------------------------------------------------
def test_cancel_and_delete(dws_emulator_server_factory) -> None:
    emulator = dws_emulator_server_factory({H100: 8})
    client = sync_client(emulator.address)
    parent = fresh_parent()
    job = client.create_custom_job(parent=parent, custom_job=make_job("victim", run_seconds=60))
    wait_for(client, job.name, [State.JOB_STATE_RUNNING])
    assert emulator.control.capacity()[H100]["in_use"] == 8

    with pytest.raises(exceptions.FailedPrecondition, match="only jobs in a final state"):
        client.delete_custom_job(name=job.name)

    assert client.cancel_custom_job(name=job.name) is None
    assert client.get_custom_job(name=job.name).state in (
        State.JOB_STATE_CANCELLING,
        State.JOB_STATE_CANCELLED,
    )
    cancelled = wait_for(client, job.name, [State.JOB_STATE_CANCELLED])
    assert cancelled.end_time
    assert emulator.control.capacity()[H100]["in_use"] == 0
    with pytest.raises(exceptions.FailedPrecondition, match="JOB_STATE_CANCELLED"):
        client.cancel_custom_job(name=job.name)

    operation = client.delete_custom_job(name=job.name)
    assert operation.operation.name.startswith(f"{job.name}/operations/")
    assert operation.result(timeout=10) == empty_pb2.Empty()
    assert operation.metadata.generic_metadata.create_time
    with pytest.raises(exceptions.NotFound):
        client.get_custom_job(name=job.name)
    assert list(client.list_custom_jobs(parent=parent)) == []

    # A queued job leaves the queue on cancel.
    emulator.control.set_capacity({H100: 0})
    queued = client.create_custom_job(parent=parent, custom_job=make_job("queued"))
    wait_for(client, queued.name, [State.JOB_STATE_PENDING])
    assert emulator.control.capacity()[H100]["queued"] == 1
    client.cancel_custom_job(name=queued.name)
    wait_for(client, queued.name, [State.JOB_STATE_CANCELLED])
    assert emulator.control.capacity()[H100]["queued"] == 0

    records = {r["name"]: r for r in emulator.control.requests()}
    assert len(records) == 2
    assert records[job.name]["deleted"] is True
    assert records[job.name]["history"][-1]["state"] == "DELETED"
    assert records[queued.name]["deleted"] is False
    assert "JOB_STATE_CANCELLING" in [h["state"] for h in records[queued.name]["history"]]


def test_async_client(dws_emulator_server) -> None:
    parent = fresh_parent()

    async def scenario() -> None:
        client = async_client(dws_emulator_server.address)
        job = await client.create_custom_job(
            parent=parent, custom_job=make_job("async", run_seconds=60, accelerator_count=1)
        )
        assert job.state == State.JOB_STATE_QUEUED
        got = await client.get_custom_job(name=job.name)
        assert got.name == job.name
        pager = await client.list_custom_jobs(request={"parent": parent, "filter": 'display_name="async"'})
        assert [j.name async for j in pager] == [job.name]
        await client.cancel_custom_job(name=job.name)
        for _ in range(100):
            if (await client.get_custom_job(name=job.name)).state == State.JOB_STATE_CANCELLED:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("not cancelled")
        operation = await client.delete_custom_job(name=job.name)
        assert await operation.result() == empty_pb2.Empty()
        with pytest.raises(exceptions.NotFound):
            await client.get_custom_job(name=job.name)
        with pytest.raises(exceptions.InvalidArgument, match="display_name"):
            await client.create_custom_job(parent=parent, custom_job=make_job(""))

    asyncio.run(scenario())


# --- capacity ---------------------------------------------------------------------------------
def test_queued_flex_job_starts_when_capacity_is_added(dws_emulator_server_factory) -> None:
    clock = FakeClock()
    emulator = dws_emulator_server_factory({H100: 0}, clock=clock)
    client = sync_client(emulator.address)
    job = client.create_custom_job(parent=fresh_parent(), custom_job=make_job("waits", max_wait=0))
    pending = wait_for(client, job.name, [State.JOB_STATE_PENDING])
    clock.advance(7 * 24 * 3600)  # a week in the queue: without a max wait it still waits
    assert client.get_custom_job(name=job.name).state == State.JOB_STATE_PENDING
    assert "start_time" not in pending
    assert emulator.control.capacity()[H100] == {"total": 0, "in_use": 0, "free": 0, "queued": 1}

    inventory = emulator.control.set_capacity({H100: 8})
    assert inventory[H100]["total"] == 8
    running = wait_for(client, job.name, [State.JOB_STATE_RUNNING])
    assert running.start_time
    clock.advance(0.3)  # its run time
    wait_for(client, job.name, [State.JOB_STATE_SUCCEEDED])
    assert emulator.control.capacity()[H100]["in_use"] == 0


def test_max_wait_expires_into_resource_exhausted(dws_emulator_server_factory) -> None:
    clock = FakeClock()
    emulator = dws_emulator_server_factory({H100: 0}, clock=clock)
    client = sync_client(emulator.address)
    job = client.create_custom_job(parent=fresh_parent(), custom_job=make_job("gives-up", max_wait=1))
    wait_for(client, job.name, [State.JOB_STATE_PENDING])
    clock.advance(0.9)
    assert client.get_custom_job(name=job.name).state == State.JOB_STATE_PENDING
    clock.advance(0.1)  # the max wait has passed
    failed = client.get_custom_job(name=job.name)
    assert failed.state == State.JOB_STATE_FAILED
    assert "start_time" not in failed
    assert failed.error.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0] == 8
    assert (
        "The requested resources (8 x NVIDIA_H100_80GB in us-central1) were not available "
        "within the max wait duration of 1s." in failed.error.message
    )
    # Exactly its max wait by the emulator's clock (timestamps round to well under a millisecond).
    assert (failed.end_time - failed.create_time).total_seconds() == pytest.approx(1.0, abs=1e-3)
    assert emulator.control.capacity()[H100]["queued"] == 0


def test_two_jobs_compete_for_one_pool(dws_emulator_server_factory) -> None:
    emulator = dws_emulator_server_factory({H100: 8})
    client = sync_client(emulator.address)
    parent = fresh_parent()
    first = client.create_custom_job(parent=parent, custom_job=make_job("first", run_seconds=1.0)).name
    second = client.create_custom_job(parent=parent, custom_job=make_job("second", run_seconds=0.3)).name
    wait_for(client, first, [State.JOB_STATE_RUNNING])
    assert client.get_custom_job(name=second).state == State.JOB_STATE_PENDING
    assert emulator.control.capacity()[H100] == {"total": 8, "in_use": 8, "free": 0, "queued": 1}
    a = wait_for(client, first, [State.JOB_STATE_SUCCEEDED])
    b = wait_for(client, second, [State.JOB_STATE_SUCCEEDED])
    assert b.start_time >= a.end_time


def test_standard_stock_out(dws_emulator_server_factory) -> None:
    emulator = dws_emulator_server_factory({H100: 4})
    client = sync_client(emulator.address)
    job = client.create_custom_job(
        parent=fresh_parent(), custom_job=make_job("on-demand", strategy="STANDARD", accelerator_count=8)
    )
    assert job.state == State.JOB_STATE_FAILED
    assert job.error.code == 8
    assert "Resources are insufficient in region: us-central1" in job.error.message
    assert "start_time" not in job
    spot = client.create_custom_job(
        parent=fresh_parent(), custom_job=make_job("spot", strategy="SPOT", accelerator_count=4)
    )
    assert spot.state == State.JOB_STATE_PENDING
    assert emulator.control.capacity()[H100]["in_use"] == 4


# --- validation -------------------------------------------------------------------------------
def _job_without_worker_pools() -> types.CustomJob:
    job = make_job()
    del job.job_spec.worker_pool_specs[:]
    return job


def _job_without_container() -> types.CustomJob:
    job = make_job()
    job.job_spec.worker_pool_specs[0].container_spec = None
    return job


def _job_with_mixed_machines() -> types.CustomJob:
    job = make_job()
    other = types.WorkerPoolSpec(job.job_spec.worker_pool_specs[0])
    other.machine_spec.accelerator_count = 4
    job.job_spec.worker_pool_specs.append(other)
    return job


def _unknown_accelerator() -> types.CustomJob:
    job = make_job()
    types.CustomJob.pb(job).job_spec.worker_pool_specs[0].machine_spec.accelerator_type = 9999
    return job


INVALID = [
    (
        "display_name",
        lambda: make_job(""),
        "Field: custom_job.display_name; Message: Required field is not set.",
    ),
    ("no worker pools", _job_without_worker_pools, "Field: custom_job.job_spec.worker_pool_specs; Message"),
    (
        "no container",
        _job_without_container,
        "custom_job.job_spec.worker_pool_specs[0]; Message: One of container_spec or python_package_spec",
    ),
    ("replica count", lambda: make_job(replicas=0), "worker_pool_specs[0].replica_count"),
    (
        "unspecified accelerator",
        lambda: make_job(accelerator="ACCELERATOR_TYPE_UNSPECIFIED"),
        "machine_spec.accelerator_type; Message: A valid accelerator type is required",
    ),
    (
        "unknown accelerator",
        _unknown_accelerator,
        "A valid accelerator type is required when accelerator_count is 8, got 9999",
    ),
    (
        "accelerator not in location",
        lambda: make_job(accelerator="NVIDIA_TESLA_T4"),
        "Accelerator type NVIDIA_TESLA_T4 is not available in us-central1.",
    ),
    (
        "flex timeout over 7 days",
        lambda: make_job(timeout=8 * 24 * 3600),
        "custom_job.job_spec.scheduling.timeout; Message: Must be at most 7 days",
    ),
    ("negative timeout", lambda: make_job(timeout=-1), "scheduling.timeout; Message: Must not be negative."),
    (
        "negative max wait",
        lambda: make_job(max_wait=-5),
        "scheduling.max_wait_duration; Message: Must not be negative.",
    ),
    (
        "mixed machine specs",
        _job_with_mixed_machines,
        "worker_pool_specs[1].machine_spec; Message: All worker pools must use the same machine_spec",
    ),
    ("label key uppercase", lambda: make_job(labels={"Team": "x"}), "Label key 'Team' is invalid"),
    ("label key digit", lambda: make_job(labels={"1team": "x"}), "Label key '1team' is invalid"),
    ("label key too long", lambda: make_job(labels={"k" * 64: "x"}), "is invalid"),
    (
        "label value",
        lambda: make_job(labels={"team": "Data Science"}),
        "Label value 'Data Science' for key 'team'",
    ),
    ("label value too long", lambda: make_job(labels={"team": "v" * 64}), "for key 'team' is invalid"),
]


@pytest.mark.parametrize(("case", "build", "message"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_requests(dws_emulator_server, case, build, message) -> None:
    client = sync_client(dws_emulator_server.address)
    with pytest.raises(exceptions.InvalidArgument) as info:
        client.create_custom_job(parent=fresh_parent(), custom_job=build())
    assert message in info.value.message


def test_invalid_parent_and_location_without_pool(dws_emulator_server) -> None:
    client = sync_client(dws_emulator_server.address)
    with pytest.raises(exceptions.InvalidArgument, match="Invalid parent"):
        client.create_custom_job(parent="projects/p", custom_job=make_job())
    with pytest.raises(
        exceptions.InvalidArgument, match=re.escape("is not available in us-east1. Available in: us-central1")
    ):
        client.create_custom_job(parent=fresh_parent("us-east1"), custom_job=make_job())


# --- control API and CLI --------------------------------------------------------------------
def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dws_emulator", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_requests_and_capacity(dws_emulator_factory) -> None:
    emulator = dws_emulator_factory({H100: 0, "us-east4/NVIDIA_H100_80GB": 8}, seed=7)
    client = sync_client(emulator.address)
    parent = fresh_parent()
    job = client.create_custom_job(parent=parent, custom_job=make_job("cli-job", labels={"run": "r1"}))
    wait_for(client, job.name, [State.JOB_STATE_PENDING])
    port = str(emulator.port)

    result = run_cli("requests", "--port", port, "--json")
    assert result.returncode == 0, result.stderr
    [record] = json.loads(result.stdout)
    assert record["name"] == job.name
    assert record["display_name"] == "cli-job"
    assert record["labels"] == {"run": "r1"}
    assert record["location"] == "us-central1"
    assert record["state"] == "JOB_STATE_PENDING"
    assert record["error"] is None
    assert [h["state"] for h in record["history"]] == ["JOB_STATE_QUEUED", "JOB_STATE_PENDING"]
    assert datetime.fromisoformat(record["history"][0]["time"].replace("Z", "+00:00"))

    table = run_cli("requests", "--port", port)
    assert "cli-job" in table.stdout and "PENDING" in table.stdout and "8 x NVIDIA_H100_80GB" in table.stdout

    shown = run_cli("capacity", "--port", port, "--json")
    assert json.loads(shown.stdout)[H100] == {"total": 0, "in_use": 0, "free": 0, "queued": 1}

    updated = run_cli("capacity", "--port", port, "--json", f"{H100}=8")
    assert updated.returncode == 0, updated.stderr
    assert json.loads(updated.stdout)[H100]["total"] == 8
    wait_for(client, job.name, [State.JOB_STATE_RUNNING, State.JOB_STATE_SUCCEEDED])

    text = run_cli("capacity", "--port", port)
    assert "POOL" in text.stdout and "us-east4/NVIDIA_H100_80GB" in text.stdout

    bad = run_cli("capacity", "--port", port, "nonsense")
    assert bad.returncode == 2 and "LOCATION/ACCELERATOR=COUNT" in bad.stderr

    with pytest.raises(grpc.RpcError) as info:
        emulator.control.set_capacity({H100: -1})
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    # Logs name the state changes in plain words.
    assert "QUEUED -> PENDING" in emulator.logs()


def test_default_inventory_and_seeded_ids(dws_emulator_server, dws_emulator_server_factory) -> None:
    from dws_emulator import DEFAULT_CAPACITY

    inventory = dws_emulator_server.control.capacity()
    assert {k: v["total"] for k, v in inventory.items()} == DEFAULT_CAPACITY

    def first_id(emulator) -> str:
        job = sync_client(emulator.address).create_custom_job(
            parent=fresh_parent(), custom_job=make_job(accelerator=None)
        )
        return job.name.rsplit("/", 1)[1]

    a, b = dws_emulator_server_factory({H100: 1}, seed=42), dws_emulator_server_factory({H100: 1}, seed=42)
    assert first_id(a) == first_id(b)


def test_serve_refuses_non_loopback_host() -> None:
    result = run_cli("serve", "--host", "0.0.0.0", "--port", "0")
    assert result.returncode == 2
    assert "only binds to loopback" in result.stderr


def test_operations_service(dws_emulator_server) -> None:
    from google.longrunning import operations_pb2

    client = sync_client(dws_emulator_server.address)
    parent = fresh_parent()
    job = client.create_custom_job(parent=parent, custom_job=make_job("op", accelerator=None, run_seconds=0))
    wait_for(client, job.name, [State.JOB_STATE_SUCCEEDED])
    name = client.delete_custom_job(name=job.name).operation.name

    channel = grpc.insecure_channel(dws_emulator_server.address)
    wait = channel.unary_unary(
        "/google.longrunning.Operations/WaitOperation",
        request_serializer=operations_pb2.WaitOperationRequest.SerializeToString,
        response_deserializer=operations_pb2.Operation.FromString,
    )
    assert wait(operations_pb2.WaitOperationRequest(name=name), timeout=10).done

    operations = client.transport.operations_client
    assert [op.name for op in operations.list_operations(job.name, filter_="")] == [name]
    assert operations.get_operation(name).done
    operations.cancel_operation(name)
    operations.delete_operation(name)
    with pytest.raises(exceptions.NotFound):
        operations.get_operation(name)
    channel.close()

"""Call counters: every JobService, Tpu and Operations call counted by method, faulted ones too.

The emulator runs in this process, except for the ``dws-emulator stats`` CLI test.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from datetime import datetime
from typing import Any

import grpc
import pytest
from google.api_core import exceptions, operations_v1
from google.cloud.aiplatform_v1 import JobServiceAsyncClient, JobServiceClient, types
from google.cloud.aiplatform_v1.services.job_service.transports import (
    JobServiceGrpcAsyncIOTransport,
    JobServiceGrpcTransport,
)
from google.cloud.tpu_v2 import TpuClient
from google.cloud.tpu_v2.services.tpu.transports import TpuGrpcTransport

from dws_emulator.core.stats import RequestStats

pytestmark = pytest.mark.emulator

JOBS = "google.cloud.aiplatform.v1.JobService"
TPU = "google.cloud.tpu.v2.Tpu"
OPS = "google.longrunning.Operations"
PARENT = "projects/stats/locations/us-central1"


def job_client(address: str) -> JobServiceClient:
    return JobServiceClient(transport=JobServiceGrpcTransport(channel=grpc.insecure_channel(address)))


def make_job() -> types.CustomJob:
    """A Flex Start job for 8 H100s; with an empty pool it waits."""
    return types.CustomJob(
        display_name="counted",
        job_spec=types.CustomJobSpec(
            scheduling=types.Scheduling(strategy=types.Scheduling.Strategy.FLEX_START),
            worker_pool_specs=[
                types.WorkerPoolSpec(
                    replica_count=1,
                    machine_spec=types.MachineSpec(
                        machine_type="a3-highgpu-8g", accelerator_type="NVIDIA_H100_80GB", accelerator_count=8
                    ),
                    container_spec=types.ContainerSpec(image_uri="us-docker.pkg.dev/p/r/train:1"),
                )
            ],
        ),
    )


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dws_emulator", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_counts_every_emulated_call_per_method_and_never_control_calls(
    dws_emulator_server_factory: Any,
) -> None:
    emulator = dws_emulator_server_factory({"us-central1/NVIDIA_H100_80GB": 0, "us-west4-a/v5litepod": 0})
    fresh = emulator.control.stats()
    assert fresh["calls"] == {}
    assert fresh["total"] == 0
    assert parse_time(fresh["since"]) <= parse_time(fresh["until"])

    channel = grpc.insecure_channel(emulator.address)
    jobs = JobServiceClient(transport=JobServiceGrpcTransport(channel=channel))
    job = jobs.create_custom_job(parent=PARENT, custom_job=make_job())
    for _ in range(3):
        jobs.get_custom_job(name=job.name)
    list(jobs.list_custom_jobs(parent=PARENT))
    jobs.cancel_custom_job(name=job.name)
    with pytest.raises(exceptions.NotFound):  # an error answer is still a call received
        jobs.get_custom_job(name=f"{PARENT}/customJobs/1", retry=None)
    with pytest.raises(exceptions.MethodNotImplemented):  # so is a method the emulator lacks
        jobs.get_hyperparameter_tuning_job(name=f"{PARENT}/hyperparameterTuningJobs/1", retry=None)

    async def read_async() -> None:
        client = JobServiceAsyncClient(
            transport=JobServiceGrpcAsyncIOTransport(channel=grpc.aio.insecure_channel(emulator.address))
        )
        await client.get_custom_job(name=job.name)
        await client.get_custom_job(name=job.name)

    asyncio.run(read_async())

    tpu = TpuClient(transport=TpuGrpcTransport(channel=channel))
    list(tpu.list_queued_resources(parent="projects/stats/locations/us-west4-a"))
    with pytest.raises(exceptions.NotFound):
        operations_v1.OperationsClient(channel).get_operation("projects/stats/locations/x/operations/1")

    # Control calls (these reads included) are not counted.
    emulator.control.requests()
    emulator.control.capacity()
    stats = emulator.control.stats()
    assert stats["calls"] == {
        f"{JOBS}/CancelCustomJob": 1,
        f"{JOBS}/CreateCustomJob": 1,
        f"{JOBS}/GetCustomJob": 6,
        f"{JOBS}/GetHyperparameterTuningJob": 1,
        f"{JOBS}/ListCustomJobs": 1,
        f"{OPS}/GetOperation": 1,
        f"{TPU}/ListQueuedResources": 1,
    }
    assert stats["total"] == 12
    assert stats["since"] == fresh["since"]
    assert emulator.control.stats()["calls"] == stats["calls"]


def test_faulted_calls_are_counted_before_the_fault(dws_emulator_server_factory: Any) -> None:
    emulator = dws_emulator_server_factory(
        {"us-central1/NVIDIA_H100_80GB": 0},
        faults=["GetCustomJob=UNAVAILABLE@0.5", "ListCustomJobs=latency:0.05"],
        seed=3,
    )
    jobs = job_client(emulator.address)
    job = jobs.create_custom_job(parent=PARENT, custom_job=make_job())
    failed = 0
    for _ in range(40):
        try:
            jobs.get_custom_job(name=job.name, retry=None)
        except exceptions.ServiceUnavailable:
            failed += 1
    list(jobs.list_custom_jobs(parent=PARENT))
    assert 0 < failed < 40

    injected = emulator.control.faults()["injected"]
    assert injected[f"{JOBS}/GetCustomJob"] == {"UNAVAILABLE": failed}
    stats = emulator.control.stats()
    assert stats["calls"] == {
        f"{JOBS}/CreateCustomJob": 1,
        f"{JOBS}/GetCustomJob": 40,
        f"{JOBS}/ListCustomJobs": 1,
    }
    assert stats["total"] == 42


def test_reset_returns_the_counts_and_starts_from_zero(dws_emulator_server_factory: Any) -> None:
    emulator = dws_emulator_server_factory({"us-central1/NVIDIA_H100_80GB": 0})
    jobs = job_client(emulator.address)
    job = jobs.create_custom_job(parent=PARENT, custom_job=make_job())
    jobs.get_custom_job(name=job.name)
    before = emulator.control.stats()

    reset = emulator.control.reset_stats()
    assert reset["calls"] == {f"{JOBS}/CreateCustomJob": 1, f"{JOBS}/GetCustomJob": 1}
    assert reset["total"] == 2
    assert reset["since"] == before["since"]

    after = emulator.control.stats()
    assert after == {**after, "calls": {}, "total": 0, "since": reset["until"]}
    assert parse_time(after["since"]) >= parse_time(before["until"])

    jobs.get_custom_job(name=job.name)
    assert emulator.control.stats()["calls"] == {f"{JOBS}/GetCustomJob": 1}


def test_concurrent_calls_are_all_counted_and_survive_an_outage(dws_emulator_server_factory: Any) -> None:
    emulator = dws_emulator_server_factory({"us-central1/NVIDIA_H100_80GB": 0})
    jobs = job_client(emulator.address)
    job = jobs.create_custom_job(parent=PARENT, custom_job=make_job())
    emulator.control.reset_stats()

    def poll() -> None:
        client = job_client(emulator.address)
        for _ in range(50):
            client.get_custom_job(name=job.name)

    threads = [threading.Thread(target=poll) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert emulator.control.stats()["calls"] == {f"{JOBS}/GetCustomJob": 400}

    emulator.control.outage(0.5)
    deadline = time.monotonic() + 30
    cut = early = 0
    seen: list[str] = []
    while True:  # refused while the listener is down (never counted), then answered again
        try:
            jobs.get_custom_job(name=job.name, retry=None)
            if not emulator.server.in_outage:
                break
            # Answered (and counted) before the listener closed: a loaded machine may start the
            # outage's thread after a call or two.
            early += 1
        except exceptions.Cancelled:
            # In flight as the listener closed: it may have been counted on arrival.
            cut += 1
        except exceptions.ServiceUnavailable as err:
            # Refused while the listener is down is never counted; a call that had arrived when the
            # connection closed (a slow machine) may come back UNAVAILABLE too, and may be counted.
            if not any(word in str(err).lower() for word in ("connect", "refused")):
                cut += 1
            seen.append(str(err))
        assert time.monotonic() < deadline, "the emulator did not come back after the outage"
        time.sleep(0.05)
    calls = emulator.control.stats()["calls"]
    assert set(calls) == {f"{JOBS}/GetCustomJob"}
    assert 401 + early <= calls[f"{JOBS}/GetCustomJob"] <= 401 + early + cut, (calls, early, cut, seen)


def test_cli_stats_table_json_and_reset(dws_emulator_factory: Any) -> None:
    emulator = dws_emulator_factory({"us-central1/NVIDIA_H100_80GB": 0})
    port = str(emulator.port)
    empty = run_cli("stats", "--port", port)
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout.startswith("total 0 calls from ")

    jobs = job_client(emulator.address)
    job = jobs.create_custom_job(parent=PARENT, custom_job=make_job())
    jobs.get_custom_job(name=job.name)
    jobs.get_custom_job(name=job.name)

    table = run_cli("stats", "--port", port)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["METHOD", "CALLS"]
    assert lines[1].split() == [f"{JOBS}/CreateCustomJob", "1"]
    assert lines[2].split() == [f"{JOBS}/GetCustomJob", "2"]
    assert lines[-1].startswith("total 3 calls from ")

    shown = run_cli("stats", "--port", port, "--json")
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert report["calls"] == {f"{JOBS}/CreateCustomJob": 1, f"{JOBS}/GetCustomJob": 2}
    assert report["total"] == 3

    reset = run_cli("stats", "--port", port, "--reset", "--json")
    assert reset.returncode == 0, reset.stderr
    assert json.loads(reset.stdout)["total"] == 3
    after_reset = run_cli("stats", "--port", port, "--reset")
    assert after_reset.stdout.splitlines() == [after_reset.stdout.splitlines()[0], "counters reset"]
    assert after_reset.stdout.startswith("total 0 calls from ")
    assert emulator.control.stats()["total"] == 0


def test_request_stats_reset_is_atomic_with_the_read() -> None:
    now = [100.0]
    stats = RequestStats(clock=lambda: now[0])
    stats.count(f"{JOBS}/GetCustomJob")
    stats.count(f"{JOBS}/GetCustomJob")
    now[0] = 160.0
    first = stats.reset()
    assert first["calls"] == {f"{JOBS}/GetCustomJob": 2}
    assert (parse_time(first["until"]) - parse_time(first["since"])).total_seconds() == 60
    stats.count(f"{TPU}/GetQueuedResource")
    second = stats.snapshot()
    assert second["since"] == first["until"]
    assert second["calls"] == {f"{TPU}/GetQueuedResource": 1}
    assert second["total"] == 1

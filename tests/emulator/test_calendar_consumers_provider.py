"""Ring 2: the provider's workloads on a calendar block, against a live dws-emulator, through the
unmodified Vertex AI, Cloud Batch, Compute Engine and Cloud TPU clients: each of the four consumers
runs on a delivered block; one started before the delivery waits for it (in the worker, and deferred
on the shared trigger) and then runs; one whose block ends fails as capacity revoked; the release
counts the hours they used. Nothing of the provider is mocked."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.exceptions import TaskDeferred
from airflow.sdk import DAG

from airflow_provider_dws.exceptions import CapacityRevokedError
from airflow_provider_dws.operators.batch import CreateBatchReservedJobOperator
from airflow_provider_dws.operators.calendar import (
    ReleaseCalendarBlockOperator,
    ReserveCalendarBlockOperator,
    WaitForCalendarBlockOperator,
)
from airflow_provider_dws.operators.compute import CreateComputeReservedVMsOperator
from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIReservedJobOperator
from airflow_provider_dws.triggers.capacity_request import first_event
from dws_emulator.testing import wait_until
from tests.emulator.test_calendar_provider_on_emulator import PROJECT, ZONE, Run, emulator  # noqa: F401

pytestmark = pytest.mark.emulator

TPU_ZONE = "us-east5-a"


def pool(run_seconds: float) -> dict[str, Any]:
    return {
        "machine_spec": {
            "machine_type": "a3-highgpu-8g",
            "accelerator_type": "NVIDIA_H100_80GB",
            "accelerator_count": 8,
        },
        "replica_count": 1,
        "container_spec": {
            "image_uri": "img:1",
            "env": [{"name": "DWS_EMULATOR_RUN_SECONDS", "value": str(run_seconds)}],
        },
    }


def block_dag(start_in: float = 10.0, run_seconds: float = 0.5, **consumer: Any) -> dict[str, Any]:
    """A 1-day block of 2 x a3-highgpu-8g (and one of 8 TPU v6e chips) starting in ``start_in`` s,
    its wait, its consumers and its release.

    Both blocks must be booked and approved before their start, or the emulator declines them as
    Compute Engine does: a few seconds is too short for a niced process on a busy machine.
    """
    start = datetime.now(timezone.utc) + timedelta(seconds=start_in)
    common: dict[str, Any] = {"project_id": PROJECT, "poll_interval": 0.2, "deferrable": False}
    with DAG("calendar_dag", schedule=None):
        tasks: dict[str, Any] = {
            "reserve": ReserveCalendarBlockOperator(
                task_id="reserve",
                zone=ZONE,
                start_time=start,
                duration=timedelta(days=1),
                machine_type="a3-highgpu-8g",
                vm_count=2,
                **common,
            ),
            "wait": WaitForCalendarBlockOperator(task_id="wait", reserve_task_id="reserve", **common),
            "train": CreateVertexAIReservedJobOperator(
                task_id="train",
                block_task_id=consumer.pop("train_block", "wait"),
                worker_pool_specs=[pool(run_seconds)],
                max_run=timedelta(hours=1),
                **common,
            ),
            "shard": CreateBatchReservedJobOperator(
                task_id="shard",
                block_task_id="wait",
                image_uri="img:1",
                machine_type="a3-highgpu-8g",
                environment={"DWS_EMULATOR_RUN_SECONDS": str(run_seconds)},
                **common,
            ),
            "vms": CreateComputeReservedVMsOperator(
                task_id="vms", block_task_id="wait", machine_type="a3-highgpu-8g", resize_by=1, **common
            ),
            "reserve_tpu": ReserveCalendarBlockOperator(
                task_id="reserve_tpu",
                zone=TPU_ZONE,
                start_time=start,
                duration=timedelta(days=1),
                tpu_version="v6e",
                chip_count=8,
                **common,
            ),
            "evaluate": CreateTPUQueuedResourceOperator(
                task_id="evaluate",
                block_task_id="reserve_tpu",
                accelerator_type="v6e-8",
                runtime_version="v2-alpha-tpuv6e",
                **common,
            ),
            "release": ReleaseCalendarBlockOperator(
                task_id="release", project_id=PROJECT, setup_task_id="reserve"
            ),
        }
    return tasks


def kinds(emu: Any, kind: str) -> list[dict[str, Any]]:
    return [r for r in emu.control.requests() if r["kind"] == kind]


def test_each_consumer_runs_on_the_delivered_block_and_the_release_counts_them(
    emulator: Callable[..., Any],  # noqa: F811
) -> None:
    # No Flex Start capacity anywhere: what runs, runs on the block.
    emu = emulator()
    emu.control.set_capacity({"us-central1/NVIDIA_H100_80GB": 0})
    tasks, run = block_dag(), Run()
    booked = run.execute(tasks["reserve"])
    run.execute(tasks["reserve_tpu"])  # another block, of TPU chips, at the same time
    delivered = run.execute(tasks["wait"])
    [reservation] = delivered["reservations"]
    assert reservation == f"projects/{PROJECT}/zones/{ZONE}/reservations/{booked['reservation_name']}"

    job = run.execute(tasks["train"])
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    spec = job["job_spec"]["worker_pool_specs"][0]["machine_spec"]["reservation_affinity"]
    assert spec["values"] == [reservation] and spec["reservation_affinity_type"] == "SPECIFIC_RESERVATION"
    [vertex_job] = kinds(emu, "CustomJob")
    assert vertex_job["reservation"] == reservation

    shard = run.execute(tasks["shard"])
    assert shard["state"] == "SUCCEEDED"
    [batch_job] = kinds(emu, "BatchJob")
    assert batch_job["reservation"] == reservation and batch_job["pool"].endswith(
        "@" + booked["reservation_name"]
    )

    vms = run.execute(tasks["vms"])
    assert len(vms["instances"]) == 1 and vms["zones"] == [ZONE] and vms["run_duration_seconds"] is None
    [resize] = kinds(emu, "ResizeRequest")
    assert resize["strategy"] == "RESERVATION_BOUND" and resize["reservation"] == reservation

    slice_ = run.execute(tasks["evaluate"])
    assert slice_["zone"] == TPU_ZONE and slice_["chips"] == 8
    [qr] = kinds(emu, "QueuedResource")
    assert qr["reservation"].endswith("/reservations/" + run.store[("reserve_tpu", "return_value")]["name"])

    for task_id in ("train", "shard", "vms"):
        [record] = run.records(task_id)
        assert (record.reservation, record.pricing_model) == (reservation, "reservation"), task_id
    [tpu_record] = run.records("evaluate")
    assert tpu_record.pricing_model == "reservation" and tpu_record.reservation

    out = run.execute(tasks["release"])
    [usage] = out["usage"]
    # The job, the Batch job and the VMs ran on the block (the TPU slice is another block's).
    assert usage["workloads"] == 3 and usage["used_hours"] > 0


def test_a_consumer_started_before_the_delivery_waits_for_it_then_runs(
    emulator: Callable[..., Any],  # noqa: F811
) -> None:
    emu = emulator()
    emu.control.set_capacity({"us-central1/NVIDIA_H100_80GB": 0})
    # Later than the default: the consumer, too, starts before the delivery.
    tasks, run = block_dag(start_in=12.0, train_block="reserve"), Run()
    booked = run.execute(tasks["reserve"])
    assert booked["procurement_status"] != "FULFILLED"
    # Nothing is submitted before the delivery: the task waits on the block in this worker.
    job = run.execute(tasks["train"])
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    [vertex_job] = kinds(emu, "CustomJob")
    assert datetime.fromisoformat(vertex_job["create_time"]) >= datetime.fromisoformat(booked["start_time"])


def test_a_deferred_consumer_waits_on_the_block_through_the_shared_trigger(
    emulator: Callable[..., Any],  # noqa: F811
) -> None:
    emu = emulator()
    # Later than the default: the consumer, too, defers before the delivery.
    tasks, run = block_dag(start_in=12.0, train_block="reserve"), Run()
    run.execute(tasks["reserve"])
    train = tasks["train"]
    train.deferrable = True
    context = run.context("train")
    with pytest.raises(TaskDeferred) as deferred:
        train.execute(context)
    trigger = deferred.value.trigger
    assert deferred.value.method_name == "block_delivered"
    assert (trigger.kind, trigger.target, trigger.cancel_on_kill) == (
        "compute_future_reservation",
        "running",
        False,
    )
    assert not kinds(emu, "CustomJob")
    event = asyncio.run(first_event(trigger))
    assert event["phase"] == "running"
    # Resumed (a new process: nothing in memory), it submits on the delivered block and defers on the job.
    with pytest.raises(TaskDeferred) as on_job:
        tasks["train"].__class__.block_delivered(_fresh(tasks["train"]), context, event)
    assert on_job.value.method_name == "complete_attempt"
    assert len(kinds(emu, "CustomJob")) == 1


def _fresh(task: Any) -> Any:
    """The task as a resumed process has it: its parameters, nothing found yet."""
    import copy

    fresh = copy.copy(task)
    fresh.__dict__.pop("_dws_loop", None)
    fresh.__dict__.pop("_dws_adapter", None)
    fresh._block = None
    return fresh


@pytest.mark.parametrize(
    ("task_id", "kind", "running"),
    [("train", "CustomJob", "JOB_STATE_RUNNING"), ("shard", "BatchJob", "RUNNING")],
)
def test_a_consumer_whose_block_ends_fails_as_capacity_revoked(
    emulator: Callable[..., Any],  # noqa: F811
    task_id: str,
    kind: str,
    running: str,
) -> None:
    emu = emulator()
    tasks, run = block_dag(run_seconds=3600), Run()
    booked = run.execute(tasks["reserve"])
    run.execute(tasks["wait"])
    errors: list[BaseException] = []
    context = run.context(task_id)

    def train() -> None:
        try:
            tasks[task_id].execute(context)
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=train, daemon=True)
    thread.start()
    wait_until(
        lambda: [j for j in kinds(emu, kind) if j["state"] == running] or None,
        what="the job running on the block",
    )
    emu.control.end_future_reservation(booked["future_reservation"])
    thread.join(120)
    assert not thread.is_alive()
    [error] = errors
    assert isinstance(error, CapacityRevokedError), error
    assert "capacity revoked" in str(error) and booked["end_time"] in str(error)
    [record] = run.records(task_id)
    assert record.outcome == "preempted" and record.reservation

"""A workload on a calendar block whose region (or zone) cannot hold the block's reservation is refused
when the DAG is parsed, when both are literal (issue 27, section 3).

The reservation's zone is known at parse time from ``reservation`` or from the DAG's own block tasks
(a WaitFor task's future reservation, a Reserve task's zone, a Find task's zones); a templated value
is left to the run, where the block is found and the same rule applies.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_provider_dws.operators.batch import CreateBatchReservedJobOperator
from airflow_provider_dws.operators.calendar import (
    FindCalendarBlockOperator,
    ReserveCalendarBlockOperator,
    WaitForCalendarBlockOperator,
)
from airflow_provider_dws.operators.compute import CreateComputeReservedVMsOperator
from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIReservedJobOperator

EUROPE = "projects/p/zones/europe-west4-a/reservations/r"
POOL = {
    "machine_spec": {
        "machine_type": "a3-highgpu-8g",
        "accelerator_type": "NVIDIA_H100_80GB",
        "accelerator_count": 8,
    },
    "replica_count": 1,
    "container_spec": {"image_uri": "i:1"},
}


def batch(**kw: Any) -> CreateBatchReservedJobOperator:
    args = {"task_id": "train", "image_uri": "i:1", "machine_type": "a3-highgpu-8g", **kw}
    return CreateBatchReservedJobOperator(**args)


def refused(text: str) -> Any:
    """``pytest.raises`` for a parse-time error whose message starts with ``text``."""
    return pytest.raises(ValueError, match=f"^{re.escape(text)}")


def test_a_region_that_cannot_hold_the_named_reservation_is_refused() -> None:
    with DAG("loc", schedule=None, start_date=datetime(2026, 1, 1)), pytest.raises(ValueError) as err:
        batch(region="us-central1", reservation=EUROPE)
    assert str(err.value) == (
        "CreateBatchReservedJobOperator 'train': region 'us-central1' cannot hold the block's reservation, "
        f"which is in zone 'europe-west4-a' (reservation '{EUROPE}'): a workload runs where its reservation "
        "is; leave region out to follow it, or give 'europe-west4'"
    )


def test_every_consumer_is_held_to_it() -> None:
    with DAG("loc", schedule=None, start_date=datetime(2026, 1, 1)):
        with refused("CreateVertexAIReservedJobOperator 'train': region 'us-central1' cannot hold"):
            CreateVertexAIReservedJobOperator(
                task_id="train", region="us-central1", reservation=EUROPE, worker_pool_specs=[POOL]
            )
        with refused("CreateComputeReservedVMsOperator 'vms': zone 'europe-west4-b' cannot hold"):
            CreateComputeReservedVMsOperator(
                task_id="vms",
                zone="europe-west4-b",
                reservation=EUROPE,
                resize_by=1,
                machine_type="a3-highgpu-8g",
            )
        with refused("CreateTPUQueuedResourceOperator 'tpu': zone 'us-west4-a' cannot hold"):
            CreateTPUQueuedResourceOperator(
                task_id="tpu",
                zone="us-west4-a",
                reservation="projects/p/locations/europe-west4-a/reservations/r",
                accelerator_type="v6e-8",
                runtime_version="v2-alpha-tpuv6e",
            )


def test_the_same_region_or_none_is_accepted() -> None:
    with DAG("loc", schedule=None, start_date=datetime(2026, 1, 1)):
        assert batch(task_id="same", region="europe-west4", reservation=EUROPE).region == "europe-west4"
        assert (
            CreateBatchReservedJobOperator(
                task_id="default", image_uri="i:1", machine_type="a3-highgpu-8g", reservation=EUROPE
            ).region
            is None
        )


def test_templated_values_are_left_to_the_run() -> None:
    with DAG("loc", schedule=None, start_date=datetime(2026, 1, 1)):
        assert batch(region="{{ params.region }}", reservation=EUROPE)
        assert CreateBatchReservedJobOperator(
            task_id="t2",
            image_uri="i:1",
            machine_type="a3-highgpu-8g",
            region="us-central1",
            reservation="{{ ti.xcom_pull('wait')['reservations'][0] }}",
        )


def test_the_zone_of_the_dags_reserve_task_counts() -> None:
    with DAG("loc", schedule=None, start_date=datetime(2026, 1, 1)):
        ReserveCalendarBlockOperator(
            task_id="reserve",
            zone="europe-west4-a",
            start_time="2030-01-01T00:00:00Z",
            duration=timedelta(days=2),
            machine_type="a3-highgpu-8g",
            vm_count=1,
        )
        WaitForCalendarBlockOperator(task_id="wait", reserve_task_id="reserve")
        with refused(
            "CreateBatchReservedJobOperator 'train': region 'us-central1' cannot hold the block's reservation, "
            "which is in zone 'europe-west4-a' (task 'reserve')"
        ):
            batch(region="us-central1", block_task_id="wait")
        assert batch(task_id="ok", region="europe-west4", block_task_id="wait").region == "europe-west4"


def test_the_zones_of_the_dags_find_task_count() -> None:
    with DAG("loc", schedule=None, start_date=datetime(2026, 1, 1)):
        FindCalendarBlockOperator(
            task_id="find",
            zones=["europe-west4-a", "europe-west4-b"],
            duration=timedelta(days=2),
            latest_start=timedelta(days=20),
            machine_type="a3-highgpu-8g",
            vm_count=1,
        )
        ReserveCalendarBlockOperator(task_id="reserve", find_task_id="find")
        with refused(
            "CreateComputeReservedVMsOperator 'vms': zone 'us-east4-a' cannot hold the block's reservation, "
            "which is in one of the zones ['europe-west4-a', 'europe-west4-b'] (task 'find')"
        ):
            CreateComputeReservedVMsOperator(
                task_id="vms",
                zone="us-east4-a",
                block_task_id="reserve",
                resize_by=1,
                machine_type="a3-highgpu-8g",
            )
        assert CreateComputeReservedVMsOperator(
            task_id="vms2",
            zone="europe-west4-b",
            block_task_id="reserve",
            resize_by=1,
            machine_type="a3-highgpu-8g",
        )

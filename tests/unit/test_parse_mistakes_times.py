"""Relative times no clock can make right are refused when the DAG is parsed (issue 27, section 3).

A ``timedelta`` start counts from when the task runs, so a calendar start past calendar mode's horizon
for the block's accelerators (GPU and H4D VMs 60 days, TPUs 120), one at that very moment, or an
earliest start after the latest, is wrong whenever the task runs. Each test builds the operator inside
a DAG, as a DAG file does, and reads the message its author would read.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_provider_dws import facts
from airflow_provider_dws.operators.calendar import FindCalendarBlockOperator, ReserveCalendarBlockOperator

GPU = {"machine_type": "a3-highgpu-8g", "vm_count": 2}
TPU = {"tpu_version": "v6e", "chip_count": 32}


def find(**kw: Any) -> FindCalendarBlockOperator:
    args: dict[str, Any] = {
        "task_id": "find_block",
        "zones": ["us-central1-a"],
        "duration": timedelta(days=7),
        "latest_start": timedelta(weeks=4),
        **GPU,
        **kw,
    }
    with DAG("times", schedule=None, start_date=datetime(2026, 1, 1)):
        return FindCalendarBlockOperator(**args)


def reserve(**kw: Any) -> ReserveCalendarBlockOperator:
    args: dict[str, Any] = {"task_id": "reserve_block", "zone": "us-central1-a", "duration": 86400, **kw}
    with DAG("times", schedule=None, start_date=datetime(2026, 1, 1)):
        return ReserveCalendarBlockOperator(**args)


def test_a_gpu_search_range_past_the_60_day_horizon_is_refused() -> None:
    with pytest.raises(ValueError) as err:
        find(latest_start=timedelta(days=90))
    assert str(err.value) == (
        "FindCalendarBlockOperator 'find_block': latest_start 90 days from when the task runs is beyond "
        "what calendar mode books for a3-highgpu-8g VMs (60 days ahead), whenever it runs; give at most "
        "timedelta(days=60)"
    )


def test_the_horizon_is_the_accelerator_familys() -> None:
    find(latest_start=timedelta(days=100), **{"machine_type": None, "vm_count": None, **TPU})  # TPUs: 120
    with pytest.raises(ValueError, match=r"for TPU v6e \(120 days ahead\).*timedelta\(days=120\)"):
        find(latest_start=timedelta(days=121), **{"machine_type": None, "vm_count": None, **TPU})
    with pytest.raises(ValueError, match=r"for h4d-highmem-192 VMs \(60 days ahead\)"):
        find(latest_start=timedelta(days=61), machine_type="h4d-highmem-192", vm_count=4)


def test_the_horizon_edge_is_accepted() -> None:
    assert find(latest_start=facts.CALENDAR_GPU_HORIZON).latest_start == timedelta(days=60)


def test_an_earliest_start_past_the_horizon_is_refused_too() -> None:
    with pytest.raises(ValueError, match=r"'find_block': earliest_start 75 days from when the task runs"):
        find(earliest_start=timedelta(days=75), latest_start=datetime(2030, 1, 1, tzinfo=timezone.utc))


def test_an_earliest_start_after_the_latest_is_refused() -> None:
    with pytest.raises(ValueError) as err:
        find(earliest_start=timedelta(days=10), latest_start=timedelta(days=3))
    assert str(err.value) == (
        "FindCalendarBlockOperator 'find_block': earliest_start 10 days is after latest_start 3 days (both "
        "count from when the task runs): no block can start between them; swap them or widen the range"
    )


def test_absolute_bounds_out_of_order_are_refused() -> None:
    late = datetime(2030, 3, 1, tzinfo=timezone.utc)
    with pytest.raises(ValueError, match=r"earliest_start 2030-03-01T00:00:00\+00:00 is after latest_start"):
        find(earliest_start=late, latest_start="2030-02-01T00:00:00Z")


def test_a_relative_and_an_absolute_bound_wait_for_the_clock() -> None:
    # Whether now + 10 days is after 2030-01-01 depends on when the task runs: not a parse error.
    op = find(earliest_start=timedelta(days=10), latest_start=datetime(2030, 1, 1, tzinfo=timezone.utc))
    assert op.earliest_start == timedelta(days=10)


def test_a_latest_start_of_now_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'find_block': latest_start timedelta\(0\) is the moment the task"):
        find(latest_start=timedelta(0))


def test_a_relative_reserve_start_past_the_horizon_is_refused() -> None:
    with pytest.raises(ValueError) as err:
        reserve(start_time=timedelta(days=70), **GPU)
    assert str(err.value) == (
        "ReserveCalendarBlockOperator 'reserve_block': start_time 70 days from when the task runs is "
        "beyond what calendar mode books for a3-highgpu-8g VMs (60 days ahead), whenever it runs; give at "
        "most timedelta(days=60)"
    )
    assert reserve(start_time=timedelta(days=70), **TPU).start_time == timedelta(days=70)


def test_a_templated_start_is_checked_after_rendering_only() -> None:
    op = find(latest_start="{{ params.latest }}")
    assert op.latest_start == "{{ params.latest }}"

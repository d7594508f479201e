"""System test: calendar mode. Ask the advice for a block of 1 x a3-highgpu-8g for one day; on the
emulator (or with ``SYSTEM_TESTS_DWS_CALENDAR_RESERVE=1``) book it, wait for its approval, and
try to release it before it starts.

A real calendar block is billed for its whole length once delivered, the smallest GPU block is a
day of eight H100s, and Compute Engine may refuse to give an approved block back (the emulator
refuses, as docs/real-project.md explains): so against a real project this test only asks the
advice, which is free, unless booking is asked for explicitly, knowing the block may be billed.
"""

from __future__ import annotations

import os
from datetime import timedelta

from airflow.sdk import task
from system_common import ON_EMULATOR, POLL_INTERVAL, PROJECT_ID, sweep, system_dag, watch

from airflow_provider_dws.operators.calendar import (
    FindCalendarBlockOperator,
    ReleaseCalendarBlockOperator,
    ReserveCalendarBlockOperator,
)

BOOK = ON_EMULATOR or os.environ.get("SYSTEM_TESTS_DWS_CALENDAR_RESERVE") == "1"
#: On the emulator a block may start this soon (it approves in a second, and an approved block can
#: be cancelled until shortly before its start); a real one days ahead.
EARLIEST_START = timedelta(minutes=10) if ON_EMULATOR else timedelta(days=3)

with system_dag("dws_system_calendar") as dag:
    find_block = FindCalendarBlockOperator(
        task_id="find_block",
        project_id=PROJECT_ID,
        zones=["us-central1-a", "us-east4-b"],
        machine_type="a3-highgpu-8g",
        vm_count=1,
        duration=timedelta(days=1),
        earliest_start=EARLIEST_START,
        latest_start=timedelta(weeks=4),
    )

    @task
    def check_advice(block: dict) -> None:
        """The advice named a zone and a start."""
        assert block["zone"] and block["start_time"], block
        print(f"DWS SYSTEM TEST: advice {block['zone']} from {block['start_time']}")

    advised = check_advice(find_block.output)
    if BOOK:
        reserve_block = ReserveCalendarBlockOperator(
            task_id="reserve_block",
            project_id=PROJECT_ID,
            find_task_id="find_block",
            poll_interval=POLL_INTERVAL,
            deferrable=True,
        )
        release_block = ReleaseCalendarBlockOperator(
            task_id="release_block", project_id=PROJECT_ID, setup_task_id="reserve_block"
        )
        advised >> reserve_block >> release_block.as_teardown(setups=reserve_block)
        release_block >> sweep(["reserve_block"])
    watch(dag)

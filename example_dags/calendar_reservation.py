"""Calendar mode: book 8 x a3-highgpu-8g (64 H100s) for 7 days, train on them, evaluate on a TPU block of
the same week, and give both back at the end.

Calendar mode is for long, predictable work that must not wait nor be interrupted: the block is
booked ahead like a hotel room, delivered at its start as a reservation only this DAG's workloads
use, and deleted with everything on it at its end. (Flex Start, the other examples, is for short
work that can wait for capacity.)

* ``find_block`` asks Compute Engine's calendar-mode advice for the earliest 7-day block of 8 VMs
  starting in the next 4 weeks in us-central1-a or us-east4-b; the choice and the alternatives go
  to the log and XCom.
* ``reserve_block`` books it (a future reservation, named from the task instance: a retry adopts
  it, never books twice) and defers until it is approved; ``reserve_tpu_block`` books 8 TPU v5e
  chips in us-west4-a for the same week (its own zone and shape, the start and length the Find task
  chose). A reserve task that runs after the chosen block has started (a busy scheduler) asks the
  advice again, once, as ``find_block`` would ask it then, and books that block; it fails only if
  that one has started too.
* ``wait_for_block`` defers until the GPU block is delivered (one shared list of the zone per
  interval, however far the start) and emits an asset event with its reservation.
* ``train`` runs a Vertex AI custom job on the block's reservation
  (``machine_spec.reservation_affinity``), refused up front if its ``max_run`` would outlast the block.
* ``evaluate_on_tpu`` asks for a TPU slice on the TPU block (started before that block's delivery
  it would wait for it, deferred); ``evaluate`` uses it; ``release_tpu`` deletes the slice.
* ``release_block`` and ``release_tpu_block`` are teardowns: each gives its block back early (or
  cancels it if it never came) and logs what it cost: the accelerator-hours reserved and how many
  the workloads used.

Run it locally against the bundled emulator with ``make demo``. The ``DWS_EXAMPLE_*`` variables exist
only so the demo and the tests can run it in seconds: ``DWS_EXAMPLE_CALENDAR_EARLIEST_START_SECONDS``
(the demo: 45, ``make ui``: 120) lets the blocks start that soon after ``find_block`` runs (without
it the emulator's advice offers a start 5 s after the request, sooner than a reserve task may run),
``DWS_EXAMPLE_POLL_INTERVAL`` polls every second; the emulator delivers a block one second after
its start by default (``dws-emulator serve --calendar-*``). A real DAG would write its values
directly, and book days ahead: the lead is only there for the demo's speed.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_provider_dws.operators.calendar import (
    FindCalendarBlockOperator,
    ReleaseCalendarBlockOperator,
    ReserveCalendarBlockOperator,
    WaitForCalendarBlockOperator,
)
from airflow_provider_dws.operators.tpu import (
    CreateTPUQueuedResourceOperator,
    DeleteTPUQueuedResourceOperator,
)
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIReservedJobOperator

PROJECT_ID = os.environ.get("DWS_EXAMPLE_PROJECT", "my-gcp-project")
VMS = int(os.environ.get("DWS_EXAMPLE_CALENDAR_VMS", 8))
TPU_ZONE = os.environ.get("DWS_EXAMPLE_CALENDAR_TPU_ZONE", "us-west4-a")
_EARLIEST = os.environ.get("DWS_EXAMPLE_CALENDAR_EARLIEST_START_SECONDS")
EARLIEST_START = timedelta(seconds=int(_EARLIEST)) if _EARLIEST else None
POLL_INTERVAL = float(os.environ.get("DWS_EXAMPLE_POLL_INTERVAL", 300))
WEEK = timedelta(days=7)

with DAG(
    dag_id="dws_calendar_reservation",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["dws", "calendar", "example"],
    params={"run_seconds": 2},
) as dag:
    find_block = FindCalendarBlockOperator(
        task_id="find_block",
        project_id=PROJECT_ID,
        zones=["us-central1-a", "us-east4-b"],  # in order of preference
        machine_type="a3-highgpu-8g",  # 8 x NVIDIA H100 80GB each
        vm_count=VMS,
        duration=WEEK,
        earliest_start=EARLIEST_START,
        latest_start=timedelta(weeks=4),
    )
    reserve_block = ReserveCalendarBlockOperator(
        deferrable=True,  # wait for the approval in the triggerer, not in a worker slot
        task_id="reserve_block",
        project_id=PROJECT_ID,
        find_task_id="find_block",
        poll_interval=POLL_INTERVAL,
    )
    reserve_tpu_block = ReserveCalendarBlockOperator(
        deferrable=True,
        task_id="reserve_tpu_block",
        project_id=PROJECT_ID,
        find_task_id="find_block",  # the same week: its start (found again if it has passed)
        zone=TPU_ZONE,
        duration=WEEK,
        tpu_version="v5e",
        chip_count=8,
        poll_interval=POLL_INTERVAL,
    )
    wait_for_block = WaitForCalendarBlockOperator(
        deferrable=True,
        task_id="wait_for_block",
        project_id=PROJECT_ID,
        reserve_task_id="reserve_block",
        poll_interval=POLL_INTERVAL,
    )
    train = CreateVertexAIReservedJobOperator(
        deferrable=True,
        task_id="train",
        project_id=PROJECT_ID,
        block_task_id="wait_for_block",  # the region is the block's
        worker_pool_specs=[
            {
                "machine_spec": {
                    "machine_type": "a3-highgpu-8g",
                    "accelerator_type": "NVIDIA_H100_80GB",
                    "accelerator_count": 8,
                },
                "replica_count": VMS,  # the whole block
                "container_spec": {
                    "image_uri": "us-docker.pkg.dev/my-gcp-project/train/llm:latest",
                    "args": ["--epochs", "3"],
                    # Read by dws-emulator only (how long the fake workload runs).
                    "env": [{"name": "DWS_EMULATOR_RUN_SECONDS", "value": "{{ params.run_seconds }}"}],
                },
            }
        ],
        max_run=timedelta(days=6),  # must fit in what is left of the block
        labels={"team": "research", "pipeline": "calendar-train"},
        poll_interval=POLL_INTERVAL,
    )
    evaluate_on_tpu = CreateTPUQueuedResourceOperator(
        deferrable=True,
        task_id="evaluate_on_tpu",
        project_id=PROJECT_ID,
        block_task_id="reserve_tpu_block",  # its zone and reservation_name are the block's
        accelerator_type="v5litepod-8",
        runtime_version="v2-alpha-tpuv5-lite",
        poll_interval=POLL_INTERVAL,
    )

    @task
    def evaluate(job: dict, tpu: dict) -> str:
        """The evaluation: here it only prints what trained where and what it would evaluate on."""
        pools = job["job_spec"]["worker_pool_specs"]
        reservation = pools[0]["machine_spec"]["reservation_affinity"]["values"][0]
        print(
            f"DWS CALENDAR: {job['name']} {job['state']} on {reservation}; evaluating on "
            f"{tpu['queued_resource']} ({tpu['accelerator_type']}, {tpu['chips']} chips) in {tpu['zone']}"
        )
        return f"evaluated {job['display_name']} on {tpu['accelerator_type']}"

    release_tpu = DeleteTPUQueuedResourceOperator(
        task_id="release_tpu", project_id=PROJECT_ID, zone=TPU_ZONE, setup_task_id="evaluate_on_tpu"
    )
    release_block = ReleaseCalendarBlockOperator(
        task_id="release_block", project_id=PROJECT_ID, setup_task_id="reserve_block"
    )
    release_tpu_block = ReleaseCalendarBlockOperator(
        task_id="release_tpu_block", project_id=PROJECT_ID, setup_task_id="reserve_tpu_block"
    )

    evaluated = evaluate(train.output, evaluate_on_tpu.output)
    find_block >> [reserve_block, reserve_tpu_block]
    reserve_block >> wait_for_block >> train >> evaluate_on_tpu
    reserve_tpu_block >> evaluate_on_tpu
    evaluate_on_tpu >> evaluated >> release_tpu.as_teardown(setups=evaluate_on_tpu)
    evaluated >> release_block.as_teardown(setups=reserve_block)
    evaluated >> release_tpu_block.as_teardown(setups=reserve_tpu_block)
    release_tpu >> release_tpu_block  # the slice goes before its block

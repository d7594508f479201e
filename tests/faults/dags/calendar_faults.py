"""Airflow DAGs for the fault matrix: a calendar block reserved, delivered, used and released.

``ReserveCalendarBlockOperator`` with ``wait_for_delivery=True``: one task books one
a3-highgpu-8g for a day, starting ``params.lead_seconds`` after the DAG run started (the same start
for every try of the run, so a retry asks for the block its first try booked), and defers until
the emulator delivers it at that start; a work task reads the reservation and ends the block
(the emulator's control, as its end time would); the release, a teardown, deletes it. The zone
comes from ``params.zone``, so a scenario books in a calendar of its own:

* ``dws_fault_calendar_block``: the plain flow, for the triggerer row;
* ``dws_fault_calendar_kill_after_submit``: one retry, and on try 1 the task process SIGKILLs
  itself right after the future reservation was created, before the task defers.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task
from fault_twists import POLL_INTERVAL, killed_after_submit

from airflow_provider_dws.operators.calendar import ReleaseCalendarBlockOperator, ReserveCalendarBlockOperator
from airflow_provider_dws.runtime.calendar import CalendarReserveAdapter

#: The block starts this long after the run started: time for the fault before the delivery.
START = "{{ (dag_run.start_date + macros.timedelta(seconds=params.lead_seconds)).isoformat() }}"


KillWorkerAfterSubmit = killed_after_submit(
    ReserveCalendarBlockOperator, CalendarReserveAdapter, "KillWorkerAfterSubmit", "the future reservation"
)


def _flow(dag_id: str, operator: type[ReserveCalendarBlockOperator], doc: str, retries: int) -> DAG:
    with DAG(
        dag_id=dag_id,
        doc_md=doc,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        tags=["dws", "calendar", "fault-matrix"],
        params={"zone": "us-central1-a", "lead_seconds": 90},
    ) as dag:
        reserve = operator(
            deferrable=True,
            task_id="reserve_block",
            project_id="my-gcp-project",
            zone="{{ params.zone }}",
            start_time=START,
            duration=timedelta(days=1),
            machine_type="a3-highgpu-8g",
            vm_count=1,
            wait_for_delivery=True,
            poll_interval=POLL_INTERVAL,
            retries=retries,
            retry_delay=timedelta(seconds=2),
        )

        @task
        def work_on_block(block: dict) -> str:
            from dws_emulator.control import EmulatorControl

            print(f"DWS BLOCK: {block}")
            # A block lasts a day at least, and calendar mode gives none back before its end: the
            # emulator ends it now, as its end time would, so the release can delete it.
            with EmulatorControl(os.environ["DWS_EMULATOR_HOST"]) as control:
                control.end_future_reservation(block["future_reservation"])
            return str(block["future_reservation"])

        release = ReleaseCalendarBlockOperator(
            task_id="release_block", project_id="my-gcp-project", setup_task_id="reserve_block"
        )
        reserve >> work_on_block(reserve.output) >> release.as_teardown(setups=reserve)
    return dag


block = _flow("dws_fault_calendar_block", ReserveCalendarBlockOperator, "A calendar block, delivered.", 0)
kill_after_submit = _flow(
    "dws_fault_calendar_kill_after_submit",
    KillWorkerAfterSubmit,
    "The worker dies right after the future reservation was created; the retry must adopt it.",
    1,
)

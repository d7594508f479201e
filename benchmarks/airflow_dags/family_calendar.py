"""The benchmark's calendar-mode block family: ``dws_bench_family_calendar`` (see ``bench_family.py``)."""

from __future__ import annotations

from datetime import timedelta

from bench_family import POLL_INTERVAL, PROJECT, TASKS, family_dag

from airflow_provider_dws.operators.calendar import ReserveCalendarBlockOperator

with family_dag("calendar"):
    # Every block starts at the run's ``conf["start"]``: delivered at one moment, as the stock
    # tasks' DateTimeTrigger fires at one.
    ReserveCalendarBlockOperator.partial(
        task_id="reserve_block",
        project_id=PROJECT,
        zone="us-central1-b",
        start_time="{{ dag_run.conf['start'] }}",
        duration=timedelta(days=1),
        machine_type="a3-highgpu-8g",
        wait_for_delivery=True,
        poll_interval=POLL_INTERVAL,
        deferrable=True,
    ).expand(vm_count=[1] * TASKS)

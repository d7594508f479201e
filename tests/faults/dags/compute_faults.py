"""Airflow DAGs for the fault matrix: the Compute Engine example's flex-start VMs, with one twist each.

``CreateComputeFlexStartVMsOperator`` as in ``example_dags/compute_flex_start_vms.py`` (a
template and MIG made for the task, a3-highgpu-8g VMs, a work task, the release as a teardown),
but 2 VMs (16 H100s, what one scenario's pool holds) and the zone from ``params.zone``, so a
scenario asks in its own emulator pool and runs side by side with the others:

* ``dws_fault_compute_vms``: the plain flow, for the user-action, triggerer and outage rows;
* ``dws_fault_compute_kill_after_submit``: one retry, and on try 1 the task process SIGKILLs
  itself right after the resize request was created, before the task defers.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, task
from fault_twists import MAX_WAIT, POLL_INTERVAL, killed_after_submit

from airflow_provider_dws.operators.compute import CreateComputeFlexStartVMsOperator
from airflow_provider_dws.operators.compute_release import DeleteComputeFlexStartVMsOperator
from airflow_provider_dws.runtime.compute import ComputeFlexStartAdapter

VMS = 2


KillWorkerAfterSubmit = killed_after_submit(
    CreateComputeFlexStartVMsOperator, ComputeFlexStartAdapter, "KillWorkerAfterSubmit", "the resize request"
)


def _flow(dag_id: str, operator: type[CreateComputeFlexStartVMsOperator], doc: str, retries: int) -> DAG:
    with DAG(
        dag_id=dag_id,
        doc_md=doc,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        tags=["dws", "compute", "fault-matrix"],
        params={"zone": "us-central1-a", "run_seconds": 3},
    ) as dag:
        ask = operator(
            deferrable=True,
            task_id="ask_for_vms",
            project_id="my-gcp-project",
            zone="{{ params.zone }}",
            machine_type="a3-highgpu-8g",
            resize_by=VMS,
            max_run=timedelta(hours=6),
            max_wait=MAX_WAIT,
            poll_interval=POLL_INTERVAL,
            retries=retries,
            retry_delay=timedelta(seconds=2),
        )

        @task
        def work_on_hosts(vms: dict, params: dict | None = None) -> int:
            import time

            time.sleep(float((params or {}).get("run_seconds", 0)))
            return len(vms["instances"])

        release = DeleteComputeFlexStartVMsOperator(
            task_id="release_vms", project_id="my-gcp-project", setup_task_id="ask_for_vms"
        )
        ask >> work_on_hosts(ask.output) >> release.as_teardown(setups=ask)
    return dag


vms = _flow("dws_fault_compute_vms", CreateComputeFlexStartVMsOperator, "The Compute example's flow.", 0)
kill_after_submit = _flow(
    "dws_fault_compute_kill_after_submit",
    KillWorkerAfterSubmit,
    "The worker dies right after the resize request was created; the retry must adopt it.",
    1,
)

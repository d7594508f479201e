"""Airflow DAGs for the fault matrix: standalone flex-start VMs (no MIG), with one twist each.

``CreateComputeFlexStartInstancesOperator`` as in ``example_dags/compute_flex_start_instances.py``
(2 x a3-highgpu-8g, a work task, the release as a teardown), the zone from ``params.zone``, so a
scenario asks in its own emulator pool and runs side by side with the others:

* ``dws_fault_compute_instances``: the plain flow, for the user-action and triggerer rows;
* ``dws_fault_compute_instances_kill_after_submit``: one retry, and on try 1 the task process
  SIGKILLs itself right after its VMs were created, before the task defers.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, task
from fault_twists import POLL_INTERVAL, killed_after_submit

from airflow_provider_dws.operators.compute_instances import CreateComputeFlexStartInstancesOperator
from airflow_provider_dws.operators.compute_instances_release import DeleteComputeFlexStartInstancesOperator
from airflow_provider_dws.runtime.compute_instances import ComputeInstancesAdapter

VMS = 2

KillWorkerAfterSubmit = killed_after_submit(
    CreateComputeFlexStartInstancesOperator, ComputeInstancesAdapter, "KillWorkerAfterSubmit", "the VMs"
)


def _flow(
    dag_id: str, operator: type[CreateComputeFlexStartInstancesOperator], doc: str, retries: int
) -> DAG:
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
            count=VMS,
            max_run=timedelta(hours=6),
            max_wait=timedelta(hours=2),  # the API's longest: the scenarios decide when capacity comes
            poll_interval=POLL_INTERVAL,
            retries=retries,
            retry_delay=timedelta(seconds=2),
        )

        @task
        def work_on_hosts(vms: dict, params: dict | None = None) -> int:
            import time

            time.sleep(float((params or {}).get("run_seconds", 0)))
            return len(vms["instances"])

        release = DeleteComputeFlexStartInstancesOperator(
            task_id="release_vms", project_id="my-gcp-project", setup_task_id="ask_for_vms"
        )
        ask >> work_on_hosts(ask.output) >> release.as_teardown(setups=ask)
    return dag


vms = _flow(
    "dws_fault_compute_instances",
    CreateComputeFlexStartInstancesOperator,
    "The standalone VMs example's flow.",
    0,
)
kill_after_submit = _flow(
    "dws_fault_compute_instances_kill_after_submit",
    KillWorkerAfterSubmit,
    "The worker dies right after its VMs were created; the retry must adopt them.",
    1,
)

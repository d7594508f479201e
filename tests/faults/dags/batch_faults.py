"""Airflow DAGs for the fault matrix: the Batch example's inference task with one fault-specific twist.

``CreateBatchFlexStartJobOperator`` with the job shape, labels and limits of
``example_dags/batch_flex_start.py`` (16 shards, one L4 each). What differs:

* the region comes from ``params.region``, so the scenario asks in its own emulator pool and runs
  side by side with the others;
* ``dws_fault_batch_kill_after_submit`` has one retry, and SIGKILLs its own task process on try 1
  right after the create call returned, before the task defers (as ``dws_fault_kill_after_submit``
  does to the Vertex AI task in ``fault_scenarios.py``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG
from fault_twists import MAX_WAIT, POLL_INTERVAL, killed_after_submit

from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator
from airflow_provider_dws.runtime.batch import BatchFlexStartAdapter

SHARDS = 16


KillWorkerAfterSubmit = killed_after_submit(
    CreateBatchFlexStartJobOperator, BatchFlexStartAdapter, "KillWorkerAfterSubmit", "the job"
)


with DAG(
    dag_id="dws_fault_batch_kill_after_submit",
    doc_md="The worker dies right after the Batch create call returned; the retry must reattach.",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["dws", "batch", "fault-matrix"],
    params={"run_seconds": 5, "exit_code": 0, "region": "us-central1"},
) as kill_after_submit:
    KillWorkerAfterSubmit(
        deferrable=True,
        task_id="infer",
        project_id="my-gcp-project",
        region="{{ params.region }}",
        image_uri="us-docker.pkg.dev/my-gcp-project/inference/batch-infer:latest",
        commands=[
            "--input=gs://my-bucket/inputs/{{ dag_run.run_after | ds_nodash }}",
            "--output=gs://my-bucket/scores/{{ run_id }}",
            f"--shards={SHARDS}",
        ],
        task_count=SHARDS,
        parallelism=SHARDS,
        machine_type="g2-standard-8",
        accelerator_type="nvidia-l4",
        accelerator_count=1,
        max_wait=MAX_WAIT,
        max_run=timedelta(hours=3),
        environment={
            "DWS_EMULATOR_RUN_SECONDS": "{{ params.run_seconds }}",
            "DWS_EMULATOR_EXIT_CODE": "{{ params.exit_code }}",
        },
        labels={"team": "research", "pipeline": "batch-inference"},
        poll_interval=POLL_INTERVAL,
        retries=1,
        retry_delay=timedelta(seconds=2),
    )

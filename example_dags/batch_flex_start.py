"""Batch inference in 16 shards on L4 GPUs with DWS Flex Start: wait at most 2 hours for the VMs.

One Cloud Batch job of 16 tasks, each a ``g2-standard-8`` VM with its one NVIDIA L4, each task
scoring the shard ``BATCH_TASK_INDEX`` of the input. ``parallelism=16``: Flex Start starts a job
when all of the VMs it asks for at once can be created, and billing runs only while they exist, so
asking for every shard at once costs the same GPU-hours as 4 at a time but finishes in a quarter of
the time; a lower parallelism only helps when 16 L4s in one region are hard to get (then 4 is a
reasonable choice: 4 VMs are found sooner, and each runs 4 shards one after the other).

Cloud Batch has no max-wait setting: the provider cancels the job if its VMs are not there after
``max_wait`` and fails the task with ``CapacityNotObtainedError``. The report task reads the job
summary the inference task returned (task counts by state, wait and run times) from XCom.

A few ``DWS_EXAMPLE_*`` environment variables exist only so the demo and the test suite can run it
in seconds against the bundled emulator; a real DAG would write its values directly.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator

PROJECT_ID = os.environ.get("DWS_EXAMPLE_PROJECT", "my-gcp-project")
REGION = os.environ.get("DWS_EXAMPLE_REGION", "us-central1")
MAX_WAIT = timedelta(seconds=int(os.environ.get("DWS_EXAMPLE_MAX_WAIT_SECONDS", 2 * 3600)))
POLL_INTERVAL = float(os.environ.get("DWS_EXAMPLE_POLL_INTERVAL", 30))
SHARDS = 16

with DAG(
    dag_id="dws_batch_flex_start",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["dws", "batch", "example"],
    params={
        # Read by the dws-emulator only (how long each fake task runs and how it exits); the real
        # Cloud Batch passes them to the container like any other environment variable.
        "run_seconds": 5,
        "exit_code": 0,
    },
) as dag:
    infer = CreateBatchFlexStartJobOperator(
        deferrable=True,  # wait in the triggerer, not in a worker slot
        task_id="infer",
        project_id=PROJECT_ID,
        region=REGION,
        image_uri="us-docker.pkg.dev/my-gcp-project/inference/batch-infer:latest",
        # Batch sets BATCH_TASK_INDEX (0 to 15) in each task's environment: the image reads it to
        # pick its shard (container arguments are not expanded by a shell).
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
        max_run=timedelta(hours=3),  # per shard
        environment={
            "DWS_EMULATOR_RUN_SECONDS": "{{ params.run_seconds }}",
            "DWS_EMULATOR_EXIT_CODE": "{{ params.exit_code }}",
        },
        labels={"team": "research", "pipeline": "batch-inference"},
        poll_interval=POLL_INTERVAL,
    )

    @task
    def report(ti=None) -> dict:
        """Print the job's final state, its tasks by state, and how long it waited and ran."""
        job = ti.xcom_pull(task_ids="infer")
        wait_s = ti.xcom_pull(task_ids="infer", key="wait_seconds")
        run_s = ti.xcom_pull(task_ids="infer", key="run_seconds")
        summary = {
            "job": job["name"],
            "state": job["state"],
            "task_counts": job["task_counts"],
            "wait_seconds": wait_s,
            "run_seconds": run_s,
        }
        print(
            f"DWS RESULT: job {job['name']} {job['state']} ({job['task_counts']}); waited {wait_s or 0:.1f}s "
            f"for capacity, ran {run_s or 0:.1f}s"
        )
        return summary

    infer >> report()

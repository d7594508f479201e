"""Fine-tune on 8 x H100 with DWS Flex Start: wait at most 2 hours for capacity, run at most 6.

The training task gives its worker slot back while the job waits in the Dynamic Workload
Scheduler queue; the report task prints how long it waited and ran.

Run it locally against the bundled emulator with ``make demo``. A few ``DWS_EXAMPLE_*``
environment variables exist only so the demo and the test suite can run it in seconds; a real
DAG would write its values directly.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator

PROJECT_ID = os.environ.get("DWS_EXAMPLE_PROJECT", "my-gcp-project")
REGION = os.environ.get("DWS_EXAMPLE_REGION", "us-central1")
MAX_WAIT = timedelta(seconds=int(os.environ.get("DWS_EXAMPLE_MAX_WAIT_SECONDS", 2 * 3600)))
POLL_INTERVAL = float(os.environ.get("DWS_EXAMPLE_POLL_INTERVAL", 30))

with DAG(
    dag_id="dws_vertex_flex_start",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["dws", "vertex-ai", "example"],
    params={
        # Read by the dws-emulator only (how long the fake workload runs and how it exits); the
        # real Vertex AI passes them to the container like any other environment variable.
        "run_seconds": 5,
        "exit_code": 0,
    },
) as dag:
    fine_tune = CreateVertexAIFlexStartJobOperator(
        deferrable=True,  # wait in the triggerer, not in a worker slot
        task_id="fine_tune",
        project_id=PROJECT_ID,
        region=REGION,
        display_name="llm-fine-tune-{{ dag_run.run_after | ds_nodash }}",  # runs triggered without a logical date too
        worker_pool_specs=[
            {
                "machine_spec": {
                    "machine_type": "a3-highgpu-8g",
                    "accelerator_type": "NVIDIA_H100_80GB",
                    "accelerator_count": 8,
                },
                "replica_count": 1,
                "container_spec": {
                    "image_uri": "us-docker.pkg.dev/my-gcp-project/training/llm-finetune:latest",
                    "args": ["--epochs=3", "--output=gs://my-bucket/runs/{{ run_id }}"],
                    "env": [
                        {"name": "DWS_EMULATOR_RUN_SECONDS", "value": "{{ params.run_seconds }}"},
                        {"name": "DWS_EMULATOR_EXIT_CODE", "value": "{{ params.exit_code }}"},
                    ],
                },
            }
        ],
        max_wait=MAX_WAIT,
        max_run=timedelta(hours=6),
        labels={"team": "research", "pipeline": "fine-tune"},
        poll_interval=POLL_INTERVAL,
    )

    @task
    def report(ti=None) -> dict:
        """Print the job's final state and how long it waited for capacity and ran."""
        job = ti.xcom_pull(task_ids="fine_tune")
        wait_s = ti.xcom_pull(task_ids="fine_tune", key="wait_seconds")
        run_s = ti.xcom_pull(task_ids="fine_tune", key="run_seconds")
        summary = {"job": job["name"], "state": job["state"], "wait_seconds": wait_s, "run_seconds": run_s}
        print(
            f"DWS RESULT: job {job['name']} {job['state']}; waited {wait_s:.1f}s for capacity, ran {run_s:.1f}s"
        )
        return summary

    fine_tune >> report()

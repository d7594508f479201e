"""A nightly off-peak training pipeline: prepare >> Flex Start training >> evaluate.

The DAG runs once per off-peak window (``OffPeakTimetable``; the run's data interval is the
window). The training task only lets capacity arrive inside the window, must be done by two
hours after the window closes (the deadline), retries twice when DWS finds no capacity, and fails
over from us-central1 to us-east4 on the second attempt. Every decision is written to the task
log in plain words, and the ``dws_attempts`` XCom carries the attempt history.

Run it locally against the bundled emulator with ``make demo``-style settings: the
``DWS_EXAMPLE_*`` variables exist only so tests can shrink the window and the waits to seconds.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.scheduling.policies import CapacityRetry, Deadline, OffPeakWindow
from airflow_provider_dws.timetables.offpeak import OffPeakTimetable

PROJECT_ID = os.environ.get("DWS_EXAMPLE_PROJECT", "my-gcp-project")
NIGHTS = OffPeakWindow.parse(
    os.environ.get("DWS_EXAMPLE_TIMETABLE_WINDOW", "Mon-Fri 22:00-06:00 America/Chicago")
)
TRAIN_WINDOW = OffPeakWindow.parse(os.environ.get("DWS_EXAMPLE_WINDOW", str(NIGHTS)))
DEADLINE = (
    Deadline(at=datetime.fromisoformat(os.environ["DWS_EXAMPLE_DEADLINE"]))
    if os.environ.get("DWS_EXAMPLE_DEADLINE")
    else Deadline(after_data_interval_end=timedelta(hours=2))
)
MAX_WAIT = timedelta(seconds=int(os.environ.get("DWS_EXAMPLE_MAX_WAIT_SECONDS", 45 * 60)))
BACKOFF = timedelta(seconds=int(os.environ.get("DWS_EXAMPLE_BACKOFF_SECONDS", 5 * 60)))
POLL_INTERVAL = float(os.environ.get("DWS_EXAMPLE_POLL_INTERVAL", 30))

with DAG(
    dag_id="dws_offpeak_pipeline",
    schedule=OffPeakTimetable(NIGHTS),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["dws", "vertex-ai", "off-peak", "example"],
    params={"run_seconds": 5, "exit_code": 0},
) as dag:

    @task
    def prepare(data_interval_start=None, data_interval_end=None) -> str:
        """Stage the night's training data (here: only say which window it belongs to)."""
        print(f"preparing data for the off-peak window {data_interval_start} .. {data_interval_end}")
        return "gs://my-bucket/datasets/nightly"

    train = CreateVertexAIFlexStartJobOperator(
        deferrable=True,  # wait in the triggerer, not in a worker slot
        task_id="train",
        project_id=PROJECT_ID,
        region="us-central1",
        display_name="nightly-train-{{ dag_run.run_after | ds_nodash }}",
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
                    "args": ["--data={{ ti.xcom_pull(task_ids='prepare') }}"],
                    "env": [
                        {"name": "DWS_EMULATOR_RUN_SECONDS", "value": "{{ params.run_seconds }}"},
                        {"name": "DWS_EMULATOR_EXIT_CODE", "value": "{{ params.exit_code }}"},
                    ],
                },
            }
        ],
        max_wait=MAX_WAIT,
        max_run=timedelta(hours=6),
        window=TRAIN_WINDOW,
        deadline=DEADLINE,
        capacity_retry=CapacityRetry(attempts=3, backoff=BACKOFF, max_backoff=BACKOFF * 4),
        failover=["us-east4"],
        poll_interval=POLL_INTERVAL,
    )

    @task
    def evaluate(ti=None) -> dict:
        """Report the trained job and every capacity attempt it took."""
        job = ti.xcom_pull(task_ids="train")
        attempts = ti.xcom_pull(task_ids="train", key="dws_attempts") or []
        for attempt in attempts:
            print(f"ATTEMPT {attempt['number']} in {attempt['placement']['location']}: {attempt['outcome']}")
        print(f"EVALUATE: {job['name']} {job['state']} after {len(attempts)} attempt(s)")
        return {"job": job["name"], "attempts": len(attempts)}

    prepare() >> train >> evaluate()

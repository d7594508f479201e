"""System test: a Vertex AI custom job on Flex Start (1 x L4), waited for in the triggerer.

Setup: none (the job is the request). The job runs a container that ends at once; the sweep
cancels it if it is still queued or running when the run ends (a give-up, a failed wait), and
the watcher fails the run if any task failed.
"""

from __future__ import annotations

from airflow.sdk import task
from system_common import (
    EMULATOR_ENV,
    IMAGE,
    LABELS,
    MAX_RUN,
    MAX_WAIT,
    POLL_INTERVAL,
    PROJECT_ID,
    sweep,
    system_dag,
    watch,
)

from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator

REGION = "us-central1"

with system_dag("dws_system_vertex_ai") as dag:
    train = CreateVertexAIFlexStartJobOperator(
        task_id="train",
        project_id=PROJECT_ID,
        region=REGION,
        display_name="dws-system-test-{{ run_id | replace(':', '-') }}",
        worker_pool_specs=[
            {
                "machine_spec": {
                    "machine_type": "g2-standard-4",
                    "accelerator_type": "NVIDIA_L4",
                    "accelerator_count": 1,
                },
                "replica_count": 1,
                "container_spec": {
                    "image_uri": IMAGE,
                    "env": [{"name": k, "value": v} for k, v in EMULATOR_ENV.items()],
                },
            }
        ],
        max_wait=MAX_WAIT,
        max_run=MAX_RUN,
        labels=LABELS,
        poll_interval=POLL_INTERVAL,
        deferrable=True,
    )

    @task
    def check(job: dict) -> None:
        """The job ran to its end."""
        assert job["state"] == "JOB_STATE_SUCCEEDED", job
        print(f"DWS SYSTEM TEST: job {job['name']} {job['state']}")

    finished = check(train.output)
    [train, finished] >> sweep(["train"])
    watch(dag)

"""System test: a Cloud Batch job on Flex Start VMs (one task on g2-standard-4, 1 x L4).

The job is the request; the sweep deletes it if it is still queued or running when the run ends;
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

from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator

REGION = "us-central1"

with system_dag("dws_system_batch") as dag:
    job = CreateBatchFlexStartJobOperator(
        task_id="job",
        project_id=PROJECT_ID,
        region=REGION,
        image_uri=IMAGE,
        task_count=1,
        machine_type="g2-standard-4",
        accelerator_type="nvidia-l4",
        accelerator_count=1,
        max_wait=MAX_WAIT,
        max_run=MAX_RUN,
        environment=EMULATOR_ENV,
        labels=LABELS,
        poll_interval=POLL_INTERVAL,
        deferrable=True,
    )

    @task
    def check(result: dict) -> None:
        """The job's one task succeeded."""
        assert result["state"] == "SUCCEEDED", result
        print(f"DWS SYSTEM TEST: job {result['name']} {result['state']} {result['task_counts']}")

    finished = check(job.output)
    [job, finished] >> sweep(["job"])
    watch(dag)

"""System test: a Kueue Job of one pod on 1 x L4, admitted through Kueue's ProvisioningRequest
admission check, run to its end.

Against a real project it needs a cluster with Kueue and a LocalQueue backed by a
queued-provisioning L4 node pool: ``SYSTEM_TESTS_GKE_LOCATION``, ``SYSTEM_TESTS_GKE_CLUSTER`` and
``SYSTEM_TESTS_GKE_KUEUE_QUEUE`` (docs/system-tests.md). The Job is the request; the sweep deletes
it if it is still queued or running when the run ends; the watcher fails the run if any task
failed.
"""

from __future__ import annotations

import os

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

from airflow_provider_dws.operators.gke_kueue import CreateGKEQueuedJobOperator

LOCATION = os.environ.get("SYSTEM_TESTS_GKE_LOCATION") or "us-central1"
CLUSTER = os.environ.get("SYSTEM_TESTS_GKE_CLUSTER") or "training-cluster"
QUEUE = os.environ.get("SYSTEM_TESTS_GKE_KUEUE_QUEUE") or "dws-queue"

with system_dag("dws_system_kueue") as dag:
    job = CreateGKEQueuedJobOperator(
        task_id="job",
        project_id=PROJECT_ID,
        location=LOCATION,
        cluster_name=CLUSTER,
        namespace="default",
        queue_name=QUEUE,
        image=IMAGE,
        env_vars=EMULATOR_ENV,
        accelerator="nvidia-l4",
        gpus=1,
        parallelism=1,
        max_run=MAX_RUN,
        max_wait=MAX_WAIT,
        labels=LABELS,
        poll_interval=POLL_INTERVAL,
        deferrable=True,
    )

    @task
    def check(result: dict) -> None:
        """The Job's pod succeeded."""
        assert result["succeeded"] == 1 and not result["failed"], result
        print(f"DWS SYSTEM TEST: Job {result['name']} {result['status']}")

    finished = check(job.output)
    [job, finished] >> sweep(["job"])
    watch(dag)

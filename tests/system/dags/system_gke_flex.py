"""System test: a Job of one pod on one L4 node of a GKE flex-start node pool (no queued
provisioning), run to its end.

Against a real project it needs a cluster with a flex-start node pool of ``nvidia-l4``
(``--flex-start --num-nodes 0 --enable-autoscaling --location-policy ANY``):
``SYSTEM_TESTS_GKE_LOCATION`` and ``SYSTEM_TESTS_GKE_FLEX_CLUSTER`` (docs/system-tests.md). The Job
is the request; the sweep deletes it if it is still waiting or running when the run ends (its node
then scales down); the watcher fails the run if any task failed.
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

from airflow_provider_dws.operators.gke_flex import CreateGKEFlexStartJobOperator

LOCATION = os.environ.get("SYSTEM_TESTS_GKE_LOCATION") or "us-central1"
CLUSTER = os.environ.get("SYSTEM_TESTS_GKE_FLEX_CLUSTER") or "flex-cluster"

with system_dag("dws_system_gke_flex") as dag:
    job = CreateGKEFlexStartJobOperator(
        task_id="job",
        project_id=PROJECT_ID,
        location=LOCATION,
        cluster_name=CLUSTER,
        namespace="default",
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
        """The Job's pod succeeded on one flex-start node."""
        assert result["succeeded"] == 1 and not result["failed"] and len(result["nodes"]) == 1, result
        print(f"DWS SYSTEM TEST: Job {result['name']} {result['status']} on {result['nodes'][0]}")

    finished = check(job.output)
    [job, finished] >> sweep(["job"])
    watch(dag)

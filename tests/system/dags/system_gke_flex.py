"""System test: a Job of one pod on one L4 node of a GKE flex-start node pool (no queued
provisioning), handed over once its pod has its node (``wait_until_finished=False``), checked by a
later task, and deleted by the teardown ``release_job``.

Against a real project it needs a cluster with a flex-start node pool of ``nvidia-l4``
(``--flex-start --num-nodes 0 --enable-autoscaling --location-policy ANY``):
``SYSTEM_TESTS_GKE_LOCATION`` and ``SYSTEM_TESTS_GKE_FLEX_CLUSTER`` (docs/system-tests.md). The Job
is the request; the teardown deletes it while it runs (its node then scales down), the sweep
would delete it if the teardown had not; the watcher fails the run if any task failed.
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

from airflow_provider_dws.operators.gke_flex import (
    CreateGKEFlexStartJobOperator,
    DeleteGKEFlexStartJobOperator,
)

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
        # On the emulator the pod runs 10 minutes: the teardown, not its end, gives the node back.
        env_vars={**EMULATOR_ENV, "DWS_EMULATOR_RUN_SECONDS": "600"},
        accelerator="nvidia-l4",
        gpus=1,
        parallelism=1,
        max_run=MAX_RUN,
        max_wait=MAX_WAIT,
        labels=LABELS,
        poll_interval=POLL_INTERVAL,
        wait_until_finished=False,
        deferrable=True,
    )
    release = DeleteGKEFlexStartJobOperator(task_id="release_job", setup_task_id="job")

    @task
    def check(result: dict) -> None:
        """The Job's pod got its flex-start node and the Job was handed over (running, or already
        done on a real project whose image exits at once)."""
        assert result["status"] in ("Running", "Complete") and len(result["nodes"]) == 1, result
        assert not result["failed"], result
        print(f"DWS SYSTEM TEST: Job {result['name']} {result['status']} on {result['nodes'][0]}")

    finished = check(job.output)
    job >> finished >> release.as_teardown(setups=job)
    release >> sweep(["job"])
    watch(dag)

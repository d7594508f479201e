"""Evaluate a checkpoint on two L4 nodes of a GKE flex-start node pool, all of them or none.

A flex-start node pool (``gcloud container node-pools create ... --flex-start --max-run-duration
... --num-nodes 0 --enable-autoscaling --location-policy ANY``, no queued provisioning) gets a node
for each pending pod that selects it when Dynamic Workload Scheduler finds the capacity, one node at
a time. Nothing in GKE gives up on a pod that waits, or keeps a node from coming up for half a
workload: the operator does.

* ``evaluate`` creates a Job of 2 pods (4 x ``nvidia-l4`` each: one g2-standard-48 node per pod),
  named from the task instance so a retry adopts its own Job, with the ``cloud.google.com/gke-flex-start``
  node selector. It defers until both pods have a node, then until the Job ends. If both have no
  node by ``max_wait``, the Job is deleted with its pods (the node that came up for one of them
  scales down) and the task fails with ``CapacityNotObtainedError``, saying how many had one. A pod
  that fails fails the task with ``WorkloadFailedError``: the workload's failure, not capacity's.
* ``report`` prints how long the pods waited for their nodes, how long they ran, and where.

Run it locally against the bundled emulator with ``make demo``: the emulator's cluster has
flex-start node pools on the same capacity as every other API. The ``DWS_EXAMPLE_*`` variables
exist only so the demo and the tests can run it in seconds (a real DAG writes its values directly),
and ``DWS_EMULATOR_RUN_SECONDS`` / ``DWS_EMULATOR_EXIT_CODE`` in the pods' environment are read by
the emulator only (how long a pod runs and how it exits).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_provider_dws.operators.gke_flex import CreateGKEFlexStartJobOperator

PROJECT_ID = os.environ.get("DWS_EXAMPLE_PROJECT", "my-gcp-project")
LOCATION = os.environ.get("DWS_EXAMPLE_GKE_LOCATION", "us-central1")
CLUSTER = os.environ.get("DWS_EXAMPLE_GKE_CLUSTER", "training-cluster")
MAX_WAIT = timedelta(seconds=int(os.environ.get("DWS_EXAMPLE_MAX_WAIT_SECONDS", 3600)))
POLL_INTERVAL = float(os.environ.get("DWS_EXAMPLE_POLL_INTERVAL", 30))
PODS = 2

with DAG(
    dag_id="dws_gke_flex_start_job",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["dws", "gke", "flex-start", "example"],
    params={"run_seconds": 3, "exit_code": 0},
) as dag:
    evaluate = CreateGKEFlexStartJobOperator(
        deferrable=True,  # wait for the nodes and the run in the triggerer, not in a worker slot
        task_id="evaluate",
        project_id=PROJECT_ID,
        location=LOCATION,
        cluster_name=CLUSTER,
        namespace="default",
        image="us-docker.pkg.dev/my-gcp-project/eval/evaluate:latest",
        cmds=["python", "-m", "evaluate"],
        arguments=["--checkpoint=gs://my-bucket/checkpoints/{{ ds_nodash }}", f"--shards={PODS}"],
        env_vars={
            "DWS_EMULATOR_RUN_SECONDS": "{{ params.run_seconds }}",
            "DWS_EMULATOR_EXIT_CODE": "{{ params.exit_code }}",
        },
        accelerator="nvidia-l4",
        gpus=4,  # per pod: a g2-standard-48 node's four L4s
        parallelism=PODS,
        max_run=timedelta(hours=4),  # after the wait: activeDeadlineSeconds = max_wait + max_run
        max_wait=MAX_WAIT,
        labels={"team": "research"},
        poll_interval=POLL_INTERVAL,
    )

    @task
    def report(ti=None) -> dict:
        """Print how the Job ended, how long its pods waited for nodes and ran, and on which nodes."""
        job = ti.xcom_pull(task_ids="evaluate")
        print(
            f"DWS RESULT: Job {job['name']} {job['status']}: {job['succeeded']} pod(s) succeeded, "
            f"{job['failed']} failed on {len(job['nodes'])} node(s); waited {job['wait_seconds'] or 0:.1f}s "
            f"for nodes, ran {job['run_seconds'] or 0:.1f}s"
        )
        return job

    evaluate >> report()

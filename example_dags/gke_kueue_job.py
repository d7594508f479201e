"""Fine-tune on 4 L4 GPUs of a GKE queued-provisioning node pool through Kueue, without a worker slot.

With Kueue on GKE, a Job is submitted suspended to a LocalQueue whose ClusterQueue has a
ProvisioningRequest admission check (GKE's guide names the queue ``dws-local-queue``; this example
``dws-queue``). Kueue asks Dynamic Workload Scheduler for all the Job's nodes at once, and unsuspends
the Job when they are there.

* ``finetune`` creates that Job (4 pods of 1 x ``nvidia-l4`` each, run together), named from the
  task instance so a retry adopts its own Job instead of queueing a second one, and defers until the
  Job ends. ``max_run`` becomes the ProvisioningRequest's ``maxRunDurationSeconds`` (GKE removes the
  nodes then); Kueue has no max wait, so the provider deletes a Job still waiting at ``max_wait``
  (with its Workload and ProvisioningRequest) and the task fails with ``CapacityNotObtainedError``.
  A pod that fails fails the Job and the task (``WorkloadFailedError``): the workload's failure,
  for Airflow's retries, not a capacity problem.
* ``report`` prints how long the Job waited for admission and how long it ran.

Run it locally against the bundled emulator with ``make demo``: the emulator serves a Kubernetes API
with Kueue's objects and queued node pools. The ``DWS_EXAMPLE_*`` variables exist only so the demo
and the tests can run it in seconds (a real DAG writes its values directly), and
``DWS_EMULATOR_RUN_SECONDS`` / ``DWS_EMULATOR_EXIT_CODE`` in the pods' environment are read by the
emulator only (how long a pod runs and how it exits).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_provider_dws.operators.gke_kueue import CreateGKEQueuedJobOperator

PROJECT_ID = os.environ.get("DWS_EXAMPLE_PROJECT", "my-gcp-project")
LOCATION = os.environ.get("DWS_EXAMPLE_GKE_LOCATION", "us-central1")
CLUSTER = os.environ.get("DWS_EXAMPLE_GKE_CLUSTER", "training-cluster")
MAX_WAIT = timedelta(seconds=int(os.environ.get("DWS_EXAMPLE_MAX_WAIT_SECONDS", 12 * 3600)))
POLL_INTERVAL = float(os.environ.get("DWS_EXAMPLE_POLL_INTERVAL", 30))
WORKERS = 4

with DAG(
    dag_id="dws_gke_kueue_job",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["dws", "gke", "kueue", "example"],
    params={"run_seconds": 3, "exit_code": 0},
) as dag:
    finetune = CreateGKEQueuedJobOperator(
        deferrable=True,  # wait for admission and the run in the triggerer, not in a worker slot
        task_id="finetune",
        project_id=PROJECT_ID,
        location=LOCATION,
        cluster_name=CLUSTER,
        namespace="default",
        queue_name="dws-queue",
        image="us-docker.pkg.dev/my-gcp-project/training/finetune:latest",
        cmds=["python", "-m", "finetune"],
        arguments=["--data=gs://my-bucket/data/{{ ds_nodash }}", f"--workers={WORKERS}"],
        env_vars={
            "DWS_EMULATOR_RUN_SECONDS": "{{ params.run_seconds }}",
            "DWS_EMULATOR_EXIT_CODE": "{{ params.exit_code }}",
        },
        accelerator="nvidia-l4",
        gpus=1,  # per pod: an L4 node pool's g2-standard machines have 1 to 8
        parallelism=WORKERS,
        max_run=timedelta(hours=6),
        max_wait=MAX_WAIT,
        labels={"team": "research"},
        poll_interval=POLL_INTERVAL,
    )

    @task
    def report(ti=None) -> dict:
        """Print how the Job ended, how long it waited for admission and how long it ran."""
        job = ti.xcom_pull(task_ids="finetune")
        print(
            f"DWS RESULT: Job {job['name']} {job['status']}: {job['succeeded']} pod(s) succeeded, "
            f"{job['failed']} failed; waited {job['wait_seconds'] or 0:.1f}s for admission, "
            f"ran {job['run_seconds'] or 0:.1f}s"
        )
        return job

    finetune >> report()

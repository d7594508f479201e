"""Train on 2 nodes of 8 H100s each from a GKE queued-provisioning node pool, then give them back.

On GKE, a node pool created with ``--enable-queued-provisioning`` gets its GPU nodes only through a
ProvisioningRequest: Dynamic Workload Scheduler queues the request until every node of the pod set
can be created at once, then books them for the request's pods.

* ``request_nodes`` creates a PodTemplate (the pods' shape: 8 x ``nvidia-h100-80gb`` each) and a
  ProvisioningRequest for 2 of them, both named from the task instance (a retry adopts its own,
  never asks twice), and defers until the request is ``Provisioned``. The nodes may run 4 hours
  (``maxRunDurationSeconds``); if they are not there within ``max_wait`` the provider deletes the
  request and the task fails with ``CapacityNotObtainedError``. It returns the request's name and
  what the workload's pods must carry to land on its nodes: ``annotations``, ``node_selector`` and
  ``tolerations``.
* ``train`` runs the workload with cncf-kubernetes' own ``KubernetesJobOperator``: a Job of 2 pods,
  its ``annotations`` and ``node_selector`` templated from that XCom (its ``tolerations`` are not a
  templated field: the constant ``QUEUED_GPU_TOLERATIONS`` is the same list). It starts right after
  the request is Provisioned: the nodes are booked for a few minutes only (GKE's booking window),
  and pods that come later find them gone (``BookingExpired``). A failing pod fails the Job
  (``backoff_limit=0``), and the task: the workload's failure, not a capacity problem.
* ``release_nodes`` is a teardown: it deletes the request and its PodTemplate whatever happened, so
  the autoscaler removes the nodes as soon as the pods are gone.

Run it locally against the bundled emulator with ``make demo``. The emulator serves a Kubernetes API
with queued node pools; the ``DWS_EXAMPLE_*`` variables exist only so the demo and the tests can run
it in seconds (a real DAG writes its values directly), and ``DWS_EMULATOR_RUN_SECONDS`` /
``DWS_EMULATOR_EXIT_CODE`` in the pods' environment are read by the emulator only (how long a pod
runs and how it exits). ``DWS_EXAMPLE_KUBERNETES_CONN_ID`` names the cncf-kubernetes connection
of the cluster, for the ``train`` task; the provider's tasks find the cluster from ``location`` and
``cluster_name`` through the Google connection (or the same ``kubernetes_conn_id``).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator
from airflow.sdk import DAG, task
from kubernetes.client import models as k8s

from airflow_provider_dws.operators.gke import (
    QUEUED_GPU_TOLERATIONS,
    CreateGKEProvisioningRequestOperator,
    DeleteGKEProvisioningRequestOperator,
)

PROJECT_ID = os.environ.get("DWS_EXAMPLE_PROJECT", "my-gcp-project")
LOCATION = os.environ.get("DWS_EXAMPLE_GKE_LOCATION", "us-central1")
CLUSTER = os.environ.get("DWS_EXAMPLE_GKE_CLUSTER", "training-cluster")
KUBERNETES_CONN_ID = os.environ.get("DWS_EXAMPLE_KUBERNETES_CONN_ID", "kubernetes_default")
MAX_WAIT = timedelta(seconds=int(os.environ.get("DWS_EXAMPLE_MAX_WAIT_SECONDS", 6 * 3600)))
POLL_INTERVAL = float(os.environ.get("DWS_EXAMPLE_POLL_INTERVAL", 30))
NAMESPACE = "default"
PODS = 2
GPUS_PER_POD = 8
IMAGE = "us-docker.pkg.dev/my-gcp-project/training/trainer:latest"
H100 = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}

with DAG(
    dag_id="dws_gke_provisioning_request",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["dws", "gke", "example"],
    params={"run_seconds": 3, "exit_code": 0},
) as dag:
    request_nodes = CreateGKEProvisioningRequestOperator(
        deferrable=True,  # wait for the nodes in the triggerer, not in a worker slot
        task_id="request_nodes",
        project_id=PROJECT_ID,
        location=LOCATION,
        cluster_name=CLUSTER,
        namespace=NAMESPACE,
        # The pods' shape: what DWS must find for each of the 2 pods at once.
        pod_template={
            "spec": {
                "nodeSelector": H100,
                "containers": [
                    {
                        "name": "train",
                        "image": IMAGE,
                        "resources": {"limits": {"nvidia.com/gpu": str(GPUS_PER_POD)}},
                    }
                ],
                "restartPolicy": "Never",
            }
        },
        count=PODS,
        max_run=timedelta(hours=4),
        max_wait=MAX_WAIT,
        labels={"team": "research"},
        poll_interval=POLL_INTERVAL,
    )

    train = KubernetesJobOperator(
        task_id="train",
        kubernetes_conn_id=KUBERNETES_CONN_ID,
        namespace=NAMESPACE,
        name="train",
        image=IMAGE,
        cmds=["python", "-m", "trainer"],
        arguments=["--run={{ run_id }}", f"--workers={PODS}"],
        # What the request's nodes ask of their pods, from request_nodes' XCom (templated fields).
        annotations=request_nodes.output["annotations"],
        node_selector=request_nodes.output["node_selector"],
        tolerations=list(QUEUED_GPU_TOLERATIONS),
        container_resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": str(GPUS_PER_POD)}),
        env_vars={
            "DWS_EMULATOR_RUN_SECONDS": "{{ params.run_seconds }}",
            "DWS_EMULATOR_EXIT_CODE": "{{ params.exit_code }}",
        },
        parallelism=PODS,
        completions=PODS,
        backoff_limit=0,
        wait_until_job_complete=True,
        job_poll_interval=POLL_INTERVAL,
        get_logs=True,
    )

    release_nodes = DeleteGKEProvisioningRequestOperator(
        task_id="release_nodes", setup_task_id="request_nodes"
    )

    @task
    def report(ti=None) -> dict:
        """Print how long the request waited for its nodes and how the Job ended."""
        nodes = ti.xcom_pull(task_ids="request_nodes")
        job = ti.xcom_pull(task_ids="train", key="job")
        status = job["status"]
        print(
            f"DWS RESULT: request {nodes['name']} Provisioned {nodes['count']} x {nodes['gpus_per_pod']} "
            f"{nodes['accelerator']} after {nodes['wait_seconds'] or 0:.1f}s; Job {job['metadata']['name']} "
            f"succeeded {status.get('succeeded') or 0} failed {status.get('failed') or 0}"
        )
        return {
            "request": nodes["name"],
            "job": job["metadata"]["name"],
            "succeeded": status.get("succeeded"),
        }

    request_nodes >> train >> release_nodes.as_teardown(setups=request_nodes)
    train >> report()

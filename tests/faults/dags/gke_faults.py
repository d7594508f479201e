"""Airflow DAGs for the fault matrix: GKE queued provisioning, a ProvisioningRequest and a Kueue Job.

Both ask for one node of 8 H100s in the node pool ``params.node_pool``, which a scenario adds to the
emulated cluster in a region of its own (``NAME=nvidia-h100-80gb@REGION``), so its rows run side
by side with the others:

* ``dws_fault_gke_request``: ``CreateGKEProvisioningRequestOperator``, a work task that only reads
  the request's XCom (the pods' consume annotations), and the release as a teardown;
* ``dws_fault_gke_request_kill_after_submit``: the same with one retry, and on try 1 the task
  process SIGKILLs itself right after the ProvisioningRequest was created, before it defers;
* ``dws_fault_gke_kueue``: ``CreateGKEQueuedJobOperator``, one pod of 8 H100s on the Kueue queue
  ``dws-queue``, running ``params.run_seconds``;
* ``dws_fault_gke_kueue_kill_after_submit``: the same with one retry and the SIGKILL after the
  suspended Job was created;
* ``dws_fault_gke_flex``: ``CreateGKEFlexStartJobOperator``, one pod of 8 H100s on the flex-start
  node pool ``params.node_pool``, running ``params.run_seconds``;
* ``dws_fault_gke_flex_kill_after_submit``: the same with one retry and the SIGKILL after the Job
  was created.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, task
from fault_twists import MAX_WAIT, POLL_INTERVAL, killed_after_submit

from airflow_provider_dws.operators.gke import (
    QUEUED_GPU_TOLERATIONS,
    CreateGKEProvisioningRequestOperator,
    DeleteGKEProvisioningRequestOperator,
)
from airflow_provider_dws.operators.gke_flex import CreateGKEFlexStartJobOperator
from airflow_provider_dws.operators.gke_kueue import CreateGKEQueuedJobOperator
from airflow_provider_dws.runtime.gke import GKEProvisioningRequestAdapter
from airflow_provider_dws.runtime.gke_flex import FlexStartJobAdapter
from airflow_provider_dws.runtime.gke_kueue import KueueJobAdapter

NODE_POOL = "{{ params.node_pool }}"
#: One node of the node pool: 8 H100s, selected by the node pool's name (and its accelerator).
SELECTOR = {
    "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
    "cloud.google.com/gke-nodepool": NODE_POOL,
}
PARAMS = {"node_pool": "dws-nvidia-h100-80gb", "run_seconds": 3}


def _container(name: str) -> dict:
    return {
        "name": name,
        "image": "us-docker.pkg.dev/my-gcp-project/training/trainer:latest",
        "command": ["python", "-m", "trainer"],
        "resources": {"limits": {"nvidia.com/gpu": "8"}},
        "env": [{"name": "DWS_EMULATOR_RUN_SECONDS", "value": "{{ params.run_seconds }}"}],
    }


KillWorkerAfterRequest = killed_after_submit(
    CreateGKEProvisioningRequestOperator,
    GKEProvisioningRequestAdapter,
    "KillWorkerAfterRequest",
    "the ProvisioningRequest",
)


KillWorkerAfterJob = killed_after_submit(
    CreateGKEQueuedJobOperator, KueueJobAdapter, "KillWorkerAfterJob", "the suspended Job"
)


KillWorkerAfterFlexJob = killed_after_submit(
    CreateGKEFlexStartJobOperator, FlexStartJobAdapter, "KillWorkerAfterFlexJob", "the flex-start Job"
)


def _dag(dag_id: str, doc: str) -> DAG:
    return DAG(
        dag_id=dag_id,
        doc_md=doc,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        tags=["dws", "gke", "fault-matrix"],
        params=dict(PARAMS),
    )


def _request_flow(
    dag_id: str, operator: type[CreateGKEProvisioningRequestOperator], doc: str, retries: int
) -> DAG:
    with _dag(dag_id, doc) as dag:
        ask = operator(
            deferrable=True,
            task_id="request_nodes",
            location="us-central1",
            cluster_name="training-cluster",
            pod_template={
                "spec": {
                    "nodeSelector": SELECTOR,
                    "tolerations": [dict(t) for t in QUEUED_GPU_TOLERATIONS],
                    "containers": [_container("train")],
                }
            },
            count=1,
            max_run=timedelta(hours=2),
            max_wait=MAX_WAIT,
            poll_interval=POLL_INTERVAL,
            retries=retries,
            retry_delay=timedelta(seconds=2),
        )

        @task
        def work_on_nodes(nodes: dict) -> str:
            print(f"DWS NODES: {nodes['name']} annotations {nodes['annotations']}")
            return str(nodes["name"])

        release = DeleteGKEProvisioningRequestOperator(
            task_id="release_nodes",
            location="us-central1",
            cluster_name="training-cluster",
            setup_task_id="request_nodes",
        )
        ask >> work_on_nodes(ask.output) >> release.as_teardown(setups=ask)
    return dag


def _kueue_flow(dag_id: str, operator: type[CreateGKEQueuedJobOperator], doc: str, retries: int) -> DAG:
    with _dag(dag_id, doc) as dag:
        operator(
            deferrable=True,
            task_id="train",
            location="us-central1",
            cluster_name="training-cluster",
            queue_name="dws-queue",
            job={
                "spec": {
                    "template": {
                        "spec": {
                            "nodeSelector": SELECTOR,
                            "tolerations": [dict(t) for t in QUEUED_GPU_TOLERATIONS],
                            "containers": [_container("train")],
                            "restartPolicy": "Never",
                        }
                    },
                    "backoffLimit": 0,
                }
            },
            max_run=timedelta(hours=2),
            max_wait=MAX_WAIT,
            poll_interval=POLL_INTERVAL,
            retries=retries,
            retry_delay=timedelta(seconds=2),
        )
    return dag


request = _request_flow(
    "dws_fault_gke_request", CreateGKEProvisioningRequestOperator, "A ProvisioningRequest's flow.", 0
)
request_kill_after_submit = _request_flow(
    "dws_fault_gke_request_kill_after_submit",
    KillWorkerAfterRequest,
    "The worker dies right after the ProvisioningRequest was created; the retry must adopt it.",
    1,
)
kueue = _kueue_flow("dws_fault_gke_kueue", CreateGKEQueuedJobOperator, "A Kueue Job's flow.", 0)
kueue_kill_after_submit = _kueue_flow(
    "dws_fault_gke_kueue_kill_after_submit",
    KillWorkerAfterJob,
    "The worker dies right after the suspended Job was created; the retry must adopt it.",
    1,
)


def _flex_flow(dag_id: str, operator: type[CreateGKEFlexStartJobOperator], doc: str, retries: int) -> DAG:
    with _dag(dag_id, doc) as dag:
        operator(
            deferrable=True,
            task_id="evaluate",
            location="us-central1",
            cluster_name="training-cluster",
            job={
                "spec": {
                    "template": {
                        "spec": {
                            # The operator adds the flex-start selector and the GPU toleration.
                            "nodeSelector": SELECTOR,
                            "containers": [_container("evaluate")],
                            "restartPolicy": "Never",
                        }
                    },
                    "backoffLimit": 0,
                }
            },
            max_wait=MAX_WAIT,
            poll_interval=POLL_INTERVAL,
            retries=retries,
            retry_delay=timedelta(seconds=2),
        )
    return dag


flex = _flex_flow("dws_fault_gke_flex", CreateGKEFlexStartJobOperator, "A flex-start Job's flow.", 0)
flex_kill_after_submit = _flex_flow(
    "dws_fault_gke_flex_kill_after_submit",
    KillWorkerAfterFlexJob,
    "The worker dies right after the flex-start Job was created; the retry must adopt it.",
    1,
)

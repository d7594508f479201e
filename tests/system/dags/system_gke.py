"""System test: a GKE ProvisioningRequest for one pod of 1 x L4 on a queued-provisioning node
pool, held until Provisioned, then deleted.

Against a real project it needs a cluster with a queued-provisioning L4 node pool:
``SYSTEM_TESTS_GKE_LOCATION`` and ``SYSTEM_TESTS_GKE_CLUSTER`` (docs/system-tests.md). The setup
``request_nodes`` waits for the booking in the triggerer; ``check_booking`` reads what a workload
must carry; the teardown ``release_nodes`` deletes the request and its PodTemplate (the
autoscaler then removes the node); the sweep deletes what is left; the watcher fails the run if
any task failed.
"""

from __future__ import annotations

import os

from airflow.sdk import task
from system_common import (
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

from airflow_provider_dws.operators.gke import (
    CreateGKEProvisioningRequestOperator,
    DeleteGKEProvisioningRequestOperator,
)

LOCATION = os.environ.get("SYSTEM_TESTS_GKE_LOCATION") or "us-central1"
CLUSTER = os.environ.get("SYSTEM_TESTS_GKE_CLUSTER") or "training-cluster"

with system_dag("dws_system_gke") as dag:
    request_nodes = CreateGKEProvisioningRequestOperator(
        task_id="request_nodes",
        project_id=PROJECT_ID,
        location=LOCATION,
        cluster_name=CLUSTER,
        namespace="default",
        pod_template={
            "spec": {
                "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                "containers": [
                    {"name": "work", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ],
                "restartPolicy": "Never",
            }
        },
        count=1,
        max_run=MAX_RUN,
        max_wait=MAX_WAIT,
        labels=LABELS,
        poll_interval=POLL_INTERVAL,
        deferrable=True,
    )

    @task
    def check_booking(nodes: dict) -> None:
        """The request is Provisioned and says what its pods must carry."""
        assert nodes["annotations"] and nodes["node_selector"], nodes
        print(f"DWS SYSTEM TEST: {nodes['name']} Provisioned for {nodes['count']} pod(s)")

    release_nodes = DeleteGKEProvisioningRequestOperator(
        task_id="release_nodes", setup_task_id="request_nodes"
    )

    checked = check_booking(request_nodes.output)
    request_nodes >> checked >> release_nodes.as_teardown(setups=request_nodes)
    release_nodes >> sweep(["request_nodes"])
    watch(dag)

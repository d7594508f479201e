"""Ask DWS for a TPU v5e slice (v5litepod-16), use it, and release it whatever happens.

``request_tpu_slice`` creates a Cloud TPU queued resource and defers until the slice is ACTIVE
(waiting at most 1 hour for capacity); ``train_on_slice`` reads the node list from XCom and
would start the workload on those hosts; ``release_tpu_slice`` is a real Airflow teardown, so the
slice is deleted even when the training task fails: an idle TPU slice is money burning.

Run it locally against the bundled emulator with ``make demo``. The ``DWS_EXAMPLE_*`` variables
exist only so the demo and the tests can run it in seconds.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG, task

from airflow_provider_dws.operators.tpu import (
    CreateTPUQueuedResourceOperator,
    DeleteTPUQueuedResourceOperator,
)

PROJECT_ID = os.environ.get("DWS_EXAMPLE_PROJECT", "my-gcp-project")
ZONE = os.environ.get("DWS_EXAMPLE_TPU_ZONE", "us-west4-a")
MAX_WAIT = timedelta(seconds=int(os.environ.get("DWS_EXAMPLE_TPU_MAX_WAIT_SECONDS", 3600)))
POLL_INTERVAL = float(os.environ.get("DWS_EXAMPLE_POLL_INTERVAL", 30))

with DAG(
    dag_id="dws_tpu_queued_resource",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["dws", "tpu", "example"],
    params={"fail_workload": False},
) as dag:
    request_tpu_slice = CreateTPUQueuedResourceOperator(
        deferrable=True,  # wait in the triggerer, not in a worker slot
        task_id="request_tpu_slice",
        project_id=PROJECT_ID,
        zone=ZONE,
        accelerator_type="v5litepod-16",
        runtime_version="v2-alpha-tpuv5-lite",
        max_wait=MAX_WAIT,
        labels={"team": "research", "pipeline": "tpu-train"},
        poll_interval=POLL_INTERVAL,
    )

    @task
    def train_on_slice(slice_info: dict, params: dict | None = None) -> str:
        """The workload: here it only prints where it would run (ssh/`gcloud ... tpu-vm ssh` in real life)."""
        hosts = slice_info["ip_addresses"]
        print(
            f"TPU SLICE: {slice_info['queued_resource']} {slice_info['accelerator_type']} "
            f"({slice_info['chips']} chips) on {len(hosts)} host(s): {', '.join(hosts)}; "
            f"waited {slice_info['wait_seconds']:.1f}s for capacity"
        )
        for node in slice_info["nodes"]:
            print(f"  node {node['node_id']} {node['state']} {node['ip_addresses']}")
        if params and params.get("fail_workload"):
            raise RuntimeError("the training step failed (simulated); the slice is still released")
        return f"trained on {len(hosts)} hosts"

    release_tpu_slice = DeleteTPUQueuedResourceOperator(
        task_id="release_tpu_slice",
        project_id=PROJECT_ID,
        zone=ZONE,
        setup_task_id="request_tpu_slice",
    )

    work = train_on_slice(request_tpu_slice.output)
    request_tpu_slice >> work >> release_tpu_slice.as_teardown(setups=request_tpu_slice)

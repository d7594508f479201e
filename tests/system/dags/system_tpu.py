"""System test: a Cloud TPU queued resource (v5litepod-1, one chip), held, then deleted.

Setup ``request_slice`` queues the slice and waits for it in the triggerer; ``use_slice`` reads
its hosts; the teardown ``release_slice`` deletes it whatever happened; the sweep deletes what is
still queued or held; the watcher fails the run if any task failed.
"""

from __future__ import annotations

from airflow.sdk import task
from system_common import LABELS, MAX_WAIT, POLL_INTERVAL, PROJECT_ID, sweep, system_dag, watch

from airflow_provider_dws.operators.tpu import (
    CreateTPUQueuedResourceOperator,
    DeleteTPUQueuedResourceOperator,
)

ZONE = "us-central1-a"

with system_dag("dws_system_tpu") as dag:
    request_slice = CreateTPUQueuedResourceOperator(
        task_id="request_slice",
        project_id=PROJECT_ID,
        zone=ZONE,
        accelerator_type="v5litepod-1",
        runtime_version="v2-alpha-tpuv5-lite",
        max_wait=MAX_WAIT,
        labels=LABELS,
        poll_interval=POLL_INTERVAL,
        deferrable=True,
    )

    @task
    def use_slice(slice_info: dict) -> None:
        """The slice is there, with its host."""
        assert slice_info["chips"] == 1 and slice_info["ip_addresses"], slice_info
        print(f"DWS SYSTEM TEST: slice {slice_info['queued_resource']} on {slice_info['ip_addresses']}")

    release_slice = DeleteTPUQueuedResourceOperator(
        task_id="release_slice", project_id=PROJECT_ID, zone=ZONE, setup_task_id="request_slice"
    )

    used = use_slice(request_slice.output)
    request_slice >> used >> release_slice.as_teardown(setups=request_slice)
    release_slice >> sweep(["request_slice"])
    watch(dag)

"""System test: a Cloud TPU flex-start slice (Preview; v6e-1, one chip, a 10-minute run), held,
then deleted.

Setup ``request_flex_slice`` queues the slice with the FLEX_START model through ``v2alpha1`` and
waits for it in the triggerer; ``use_slice`` reads its host; the teardown ``release_flex_slice``
deletes it whatever happened (before its run ends, or SUSPENDED after); the sweep deletes what is
still queued or held; the watcher fails the run if any task failed.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import task
from system_common import LABELS, MAX_WAIT, POLL_INTERVAL, PROJECT_ID, sweep, system_dag, watch

from airflow_provider_dws.operators.tpu import (
    CreateTPUQueuedResourceOperator,
    DeleteTPUQueuedResourceOperator,
)

ZONE = "us-east5-a"  # where Google offers v6e flex-start

with system_dag("dws_system_tpu_flex") as dag:
    request_flex_slice = CreateTPUQueuedResourceOperator(
        task_id="request_flex_slice",
        project_id=PROJECT_ID,
        zone=ZONE,
        accelerator_type="v6e-1",
        runtime_version="v2-alpha-tpuv6e",
        provisioning_model="flex_start",
        max_run=timedelta(minutes=10),
        max_wait=MAX_WAIT,
        labels=LABELS,
        poll_interval=POLL_INTERVAL,
        deferrable=True,
    )

    @task
    def use_slice(slice_info: dict) -> None:
        """The slice is there, with its host."""
        assert slice_info["chips"] == 1 and slice_info["ip_addresses"], slice_info
        print(
            f"DWS SYSTEM TEST: flex-start slice {slice_info['queued_resource']} on {slice_info['ip_addresses']}"
        )

    release_flex_slice = DeleteTPUQueuedResourceOperator(
        task_id="release_flex_slice", project_id=PROJECT_ID, zone=ZONE, setup_task_id="request_flex_slice"
    )

    used = use_slice(request_flex_slice.output)
    request_flex_slice >> used >> release_flex_slice.as_teardown(setups=request_flex_slice)
    release_flex_slice >> sweep(["request_flex_slice"])
    watch(dag)

"""Ask for a TPU v6e slice with Cloud TPU flex-start (Preview) for at most 2 hours, use it, give it
back whatever happens.

``request_flex_slice`` creates a flex-start queued resource (``provisioning_model="flex_start"``:
no tier, no reservation, preemptible quota; TPU v5e and v6e) that may wait up to 1 hour for
capacity and then runs 2 hours (``max_run``), after which Cloud TPU deletes its VMs and the queued
resource is ``SUSPENDED``. The task defers until the slice is ACTIVE and returns its hosts.
``train_on_slice`` reads them from XCom and would start the workload there; ``release_flex_slice``
is an Airflow teardown that deletes the queued resource as soon as the work is done (or failed):
the slice is billed until then, not for the rest of its 2 hours.

Flex-start exists only in Cloud TPU's ``v2alpha1`` API; the provider reaches it through
google-api-python-client (see ``docs/operators/tpu.md``).

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
ZONE = os.environ.get("DWS_EXAMPLE_TPU_FLEX_ZONE", "us-east5-a")
POLL_INTERVAL = float(os.environ.get("DWS_EXAMPLE_POLL_INTERVAL", 30))

with DAG(
    dag_id="dws_tpu_flex_start",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["dws", "tpu", "flex-start", "example"],
) as dag:
    request_flex_slice = CreateTPUQueuedResourceOperator(
        deferrable=True,  # wait in the triggerer, not in a worker slot
        task_id="request_flex_slice",
        project_id=PROJECT_ID,
        zone=ZONE,
        accelerator_type="v6e-8",
        runtime_version="v2-alpha-tpuv6e",
        provisioning_model="flex_start",
        max_run=timedelta(hours=2),
        max_wait=timedelta(hours=1),
        labels={"team": "research", "pipeline": "tpu-flex"},
        poll_interval=POLL_INTERVAL,
    )

    @task
    def train_on_slice(slice_info: dict) -> str:
        """The workload: here it only prints where it would run."""
        hosts = slice_info["ip_addresses"]
        print(
            f"TPU FLEX-START SLICE: {slice_info['queued_resource']} {slice_info['accelerator_type']} "
            f"({slice_info['chips']} chips) on {len(hosts)} host(s): {', '.join(hosts)}"
        )
        return f"trained on {len(hosts)} hosts"

    release_flex_slice = DeleteTPUQueuedResourceOperator(
        task_id="release_flex_slice",
        project_id=PROJECT_ID,
        zone=ZONE,
        setup_task_id="request_flex_slice",
    )

    work = train_on_slice(request_flex_slice.output)
    request_flex_slice >> work >> release_flex_slice.as_teardown(setups=request_flex_slice)

"""Airflow DAGs for the fault matrix: the TPU example's slice, with one twist each.

``CreateTPUQueuedResourceOperator`` as in ``example_dags/tpu_queued_resource.py`` (a queued
resource, a work task, the delete as a teardown), but a v5litepod-4 slice (4 chips) in zone
``<params.region>-a``, so a scenario asks in its own emulator pool and runs side by side with
the others:

* ``dws_fault_tpu_slice``: the plain flow, for the user-action row (its trigger makes the request);
* ``dws_fault_tpu_kill_after_submit``: one retry, and on try 1 the task process SIGKILLs itself
  right after its own create returned, before the task defers;
* ``dws_fault_tpu_flex_slice`` and ``dws_fault_tpu_flex_kill_after_submit``: the same two, for a
  flex-start slice (``v2alpha1``: v6e-4, a 1-hour run) in zone ``<params.region>-a``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, task
from fault_twists import MAX_WAIT, POLL_INTERVAL, killed_after_submit

from airflow_provider_dws.operators.tpu import (
    CreateTPUQueuedResourceOperator,
    DeleteTPUQueuedResourceOperator,
)
from airflow_provider_dws.runtime.tpu import TPUQueuedResourceAdapter

KillWorkerAfterSubmit = killed_after_submit(
    CreateTPUQueuedResourceOperator, TPUQueuedResourceAdapter, "KillWorkerAfterSubmit", "the queued resource"
)


#: What makes a slice flex-start (and the family flex-start is offered on).
FLEX = {
    "accelerator_type": "v6e-4",
    "runtime_version": "v2-alpha-tpuv6e",
    "provisioning_model": "flex_start",
    "max_run": timedelta(hours=1),
}


def _flow(
    dag_id: str, operator: type[CreateTPUQueuedResourceOperator], doc: str, retries: int, **slice_kwargs: Any
) -> DAG:
    with DAG(
        dag_id=dag_id,
        doc_md=doc,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        tags=["dws", "tpu", "fault-matrix"],
        params={"region": "us-west4", "run_seconds": 3},
    ) as dag:
        ask = operator(
            deferrable=True,
            task_id="request_tpu_slice",
            project_id="my-gcp-project",
            zone="{{ params.region }}-a",
            max_wait=MAX_WAIT,
            labels={"team": "research", "pipeline": "tpu-train"},
            poll_interval=POLL_INTERVAL,
            retries=retries,
            retry_delay=timedelta(seconds=2),
            **({"accelerator_type": "v5litepod-4", "runtime_version": "v2-alpha-tpuv5-lite"} | slice_kwargs),
        )

        @task
        def train_on_slice(slice_info: dict, params: dict | None = None) -> int:
            import time

            time.sleep(float((params or {}).get("run_seconds", 0)))
            return len(slice_info["ip_addresses"])

        release = DeleteTPUQueuedResourceOperator(
            task_id="release_tpu_slice",
            project_id="my-gcp-project",
            zone="{{ params.region }}-a",
            setup_task_id="request_tpu_slice",
        )
        ask >> train_on_slice(ask.output) >> release.as_teardown(setups=ask)
    return dag


tpu_slice = _flow("dws_fault_tpu_slice", CreateTPUQueuedResourceOperator, "The TPU example's flow.", 0)
kill_after_submit = _flow(
    "dws_fault_tpu_kill_after_submit",
    KillWorkerAfterSubmit,
    "The worker dies right after the queued resource was created; the retry must adopt it.",
    1,
)
flex_slice = _flow(
    "dws_fault_tpu_flex_slice",
    CreateTPUQueuedResourceOperator,
    "The TPU example's flow, flex-start.",
    0,
    **FLEX,
)
flex_kill_after_submit = _flow(
    "dws_fault_tpu_flex_kill_after_submit",
    KillWorkerAfterSubmit,
    "A flex-start slice: the worker dies right after it was created; the retry must adopt it.",
    1,
    **FLEX,
)

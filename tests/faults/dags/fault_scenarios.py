"""Airflow DAGs for the fault matrix: the example's Flex Start task with one fault-specific twist each.

Every DAG runs ``CreateVertexAIFlexStartJobOperator`` with the worker pool spec, labels and limits of
``example_dags/vertex_flex_start.py``. What differs:

* the region comes from ``params.region``, so each scenario asks in its own emulator pool and
  scenarios can run side by side without taking each other's capacity;
* retries, retry delay and ``execution_timeout`` vary per DAG (``dws_fault_execution_timeout``
  imports its client library in ``pre_execute``, before the timeout counts);
* ``dws_fault_kill_after_submit`` and ``dws_fault_success_while_dead`` SIGKILL their own task
  process on try 1 right after the create call returned, before the task defers;
* ``dws_fault_fail_once`` makes the workload exit 3 on try 1 and 0 afterwards;
* ``dws_fault_hold_after_submit`` holds its task process on try 1 after the create call returned,
  so the harness can SIGKILL the whole Celery worker running it (CeleryExecutor only).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG
from fault_twists import MAX_WAIT, POLL_INTERVAL, killed_after_submit

from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.runtime.vertex_ai import VertexFlexStartAdapter


class _HoldAfterSubmit(VertexFlexStartAdapter):
    submits_in_trigger = False  # the hold is in the worker's own submit

    def submit(self, context: Any, identity: Any, placement: Any, max_wait: timedelta) -> Any:
        status = super().submit(context, identity, placement, max_wait)
        if context["ti"].try_number == 1:
            self.log.warning("FAULT: holding after submitting %s until the worker is killed", status.name)
            time.sleep(HOLD_SECONDS)
        return status


KillWorkerAfterSubmit = killed_after_submit(
    CreateVertexAIFlexStartJobOperator, VertexFlexStartAdapter, "KillWorkerAfterSubmit", "the job"
)


class HoldAfterSubmit(CreateVertexAIFlexStartJobOperator):
    """On try 1, hold the task process after the job exists, until the harness kills its worker."""

    ADAPTER = _HoldAfterSubmit


#: Longer than the harness ever takes to kill the worker; the try fails if nothing kills it.
HOLD_SECONDS = 900


def worker_pool_specs(exit_code: str = "{{ params.exit_code }}") -> list[dict[str, Any]]:
    """The example's pool: 8 x H100 on one a3-highgpu-8g, with the emulator's run time and exit code."""
    return [
        {
            "machine_spec": {
                "machine_type": "a3-highgpu-8g",
                "accelerator_type": "NVIDIA_H100_80GB",
                "accelerator_count": 8,
            },
            "replica_count": 1,
            "container_spec": {
                "image_uri": "us-docker.pkg.dev/my-gcp-project/training/llm-finetune:latest",
                "args": ["--epochs=3", "--output=gs://my-bucket/runs/{{ run_id }}"],
                "env": [
                    {"name": "DWS_EMULATOR_RUN_SECONDS", "value": "{{ params.run_seconds }}"},
                    {"name": "DWS_EMULATOR_EXIT_CODE", "value": exit_code},
                ],
            },
        }
    ]


def fault_dag(
    dag_id: str,
    doc: str,
    operator: type[CreateVertexAIFlexStartJobOperator] = CreateVertexAIFlexStartJobOperator,
    exit_code: str = "{{ params.exit_code }}",
    **task_args: Any,
) -> DAG:
    """One DAG with one ``fine_tune`` task built like the example's."""
    with DAG(
        dag_id=dag_id,
        doc_md=doc,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        tags=["dws", "fault-matrix"],
        params={"run_seconds": 3, "exit_code": 0, "region": "us-central1"},
    ) as dag:
        operator(
            task_id="fine_tune",
            project_id="my-gcp-project",
            region="{{ params.region }}",
            display_name="llm-fine-tune-{{ dag_run.run_after | ds_nodash }}",
            worker_pool_specs=worker_pool_specs(exit_code),
            max_wait=MAX_WAIT,
            max_run=timedelta(hours=6),
            labels={"team": "research", "pipeline": "fine-tune"},
            poll_interval=POLL_INTERVAL,
            deferrable=True,
            **task_args,
        )
    return dag


kill_after_submit = fault_dag(
    "dws_fault_kill_after_submit",
    "The worker dies right after the submit call returned; the retry must reattach.",
    KillWorkerAfterSubmit,
    retries=1,
    retry_delay=timedelta(seconds=2),
)
success_while_dead = fault_dag(
    "dws_fault_success_while_dead",
    "The worker dies after submitting and the job finishes before the retry; the retry takes the result.",
    KillWorkerAfterSubmit,
    retries=1,
    retry_delay=timedelta(seconds=12),
)
fail_once = fault_dag(
    "dws_fault_fail_once",
    "The workload exits 3 on try 1 and 0 afterwards; the retry needs a new job.",
    exit_code="{{ 3 if ti.try_number == 1 else 0 }}",
    retries=1,
    retry_delay=timedelta(seconds=2),
)
user_action = fault_dag(
    "dws_fault_user_action",
    "A user marks the waiting task failed, or clears it, through the REST API.",
)


def import_client_library(context: Any) -> None:
    """Import the Vertex AI client before ``execute``, where ``execution_timeout`` starts counting.

    The row is about a timeout that passes while the job waits; on two busy cores, with every other
    row's worker importing at the same moment, this import alone has taken 40 s, and once (in CI) the
    timeout passed before the submit. Outside the timed window, the window holds only the provider's
    own calls."""
    import google.cloud.aiplatform_v1  # noqa: F401


execution_timeout = fault_dag(
    "dws_fault_execution_timeout",
    "execution_timeout passes while the job waits for capacity.",
    execution_timeout=timedelta(seconds=180),
    pre_execute=import_client_library,
)
hold_after_submit = fault_dag(
    "dws_fault_hold_after_submit",
    "The task holds after submitting on try 1 until its whole Celery worker is SIGKILLed; the retry, on "
    "another worker after the heartbeat timeout, must reattach.",
    HoldAfterSubmit,
    retries=1,
    retry_delay=timedelta(seconds=2),
)

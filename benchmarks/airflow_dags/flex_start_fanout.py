"""DAGs for ``benchmarks/triggerer_airflow.py``: the example's Flex Start task, mapped N times.

``dws_bench_fanout`` maps ``CreateVertexAIFlexStartJobOperator`` over ``DWS_BENCH_TASKS`` display names,
with the worker pool spec, limits and labels of ``example_dags/vertex_flex_start.py`` (8 x H100,
Flex Start) and a zero run time, so each job ends as soon as it gets capacity.
``dws_bench_warmup`` is the same task mapped once; the benchmark runs it first, so the trigger
runner has imported the provider before its idle memory is read.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator

TASKS = int(os.environ.get("DWS_BENCH_TASKS", 500))
POLL_INTERVAL = float(os.environ.get("DWS_BENCH_POLL_INTERVAL", 30))
REGION = os.environ.get("DWS_BENCH_REGION", "us-central1")

WORKER_POOL_SPECS = [
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
                {"name": "DWS_EMULATOR_RUN_SECONDS", "value": "0"},
                {"name": "DWS_EMULATOR_EXIT_CODE", "value": "0"},
            ],
        },
    }
]


def fanout_dag(dag_id: str, tasks: int) -> DAG:
    """One DAG whose only task is the Flex Start job mapped ``tasks`` times."""
    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        tags=["dws", "benchmark"],
    ) as dag:
        CreateVertexAIFlexStartJobOperator.partial(
            task_id="fine_tune",
            project_id="my-gcp-project",
            region=REGION,
            worker_pool_specs=WORKER_POOL_SPECS,
            max_wait=timedelta(hours=2),
            max_run=timedelta(hours=6),
            labels={"team": "research", "pipeline": "fine-tune"},
            poll_interval=POLL_INTERVAL,
            deferrable=True,
        ).expand(display_name=[f"llm-fine-tune-{i:04d}" for i in range(tasks)])
    return dag


warmup = fanout_dag("dws_bench_warmup", 1)
fanout = fanout_dag("dws_bench_fanout", TASKS)

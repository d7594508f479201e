"""One mapped DAG per operator family for ``benchmarks/triggerer_airflow.py``'s family rows.

``dws_bench_family_<name>`` maps the family's operator ``DWS_BENCH_FAMILY_TASKS`` times (over its
``labels``, or for the calendar block its one VM: each task is its own request), with the parameters of ``example_dags/`` and of the
fault matrix's DAGs, made small (one VM, one slice, one node) and quick (workloads run 0 s). Each
asks in an emulator pool of its own (``airflow_bench.families``), so one family's capacity never
serves another's requests.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG

from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator
from airflow_provider_dws.operators.calendar import ReserveCalendarBlockOperator
from airflow_provider_dws.operators.compute import CreateComputeFlexStartVMsOperator
from airflow_provider_dws.operators.gke import QUEUED_GPU_TOLERATIONS, CreateGKEProvisioningRequestOperator
from airflow_provider_dws.operators.gke_kueue import CreateGKEQueuedJobOperator
from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator

TASKS = int(os.environ.get("DWS_BENCH_FAMILY_TASKS", 50))
POLL_INTERVAL = float(os.environ.get("DWS_BENCH_POLL_INTERVAL", 30))
PROJECT = "my-gcp-project"
MAX_WAIT = timedelta(hours=2)
COMMON: dict[str, Any] = {"max_wait": MAX_WAIT, "poll_interval": POLL_INTERVAL, "deferrable": True}
RUN_NOW = {"DWS_EMULATOR_RUN_SECONDS": "0", "DWS_EMULATOR_EXIT_CODE": "0"}
H100_NODE = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}


def _labels() -> list[dict[str, str]]:
    return [{"team": "research", "shard": f"{i:04d}"} for i in range(TASKS)]


def _dag(name: str) -> DAG:
    return DAG(
        dag_id=f"dws_bench_family_{name}",
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        tags=["dws", "benchmark"],
    )


def _pod(node_pool: str) -> dict[str, Any]:
    return {
        "nodeSelector": {**H100_NODE, "cloud.google.com/gke-nodepool": node_pool},
        "tolerations": [dict(t) for t in QUEUED_GPU_TOLERATIONS],
        "containers": [
            {
                "name": "train",
                "image": "us-docker.pkg.dev/my-gcp-project/training/trainer:latest",
                "command": ["python", "-m", "trainer"],
                "resources": {"limits": {"nvidia.com/gpu": "8"}},
                "env": [{"name": k, "value": v} for k, v in RUN_NOW.items()],
            }
        ],
        "restartPolicy": "Never",
    }


with _dag("vertex"):
    CreateVertexAIFlexStartJobOperator.partial(
        task_id="fine_tune",
        project_id=PROJECT,
        region="us-east1",
        display_name="llm-fine-tune",
        worker_pool_specs=[
            {
                "machine_spec": {
                    "machine_type": "a3-highgpu-8g",
                    "accelerator_type": "NVIDIA_H100_80GB",
                    "accelerator_count": 8,
                },
                "replica_count": 1,
                "container_spec": {
                    "image_uri": "us-docker.pkg.dev/my-gcp-project/training/llm-finetune:latest",
                    "env": [{"name": k, "value": v} for k, v in RUN_NOW.items()],
                },
            }
        ],
        max_run=timedelta(hours=6),
        **COMMON,
    ).expand(labels=_labels())

with _dag("batch"):
    CreateBatchFlexStartJobOperator.partial(
        task_id="infer",
        project_id=PROJECT,
        region="us-east1",
        image_uri="us-docker.pkg.dev/my-gcp-project/inference/batch-infer:latest",
        commands=["--output=gs://my-bucket/scores/{{ run_id }}"],
        task_count=1,
        parallelism=1,
        machine_type="g2-standard-8",
        accelerator_type="nvidia-l4",
        accelerator_count=1,
        max_run=timedelta(hours=3),
        environment=RUN_NOW,
        **COMMON,
    ).expand(labels=_labels())

with _dag("tpu"):
    CreateTPUQueuedResourceOperator.partial(
        task_id="request_tpu_slice",
        project_id=PROJECT,
        zone="us-west4-a",
        accelerator_type="v5litepod-16",
        runtime_version="v2-alpha-tpuv5-lite",
        **COMMON,
    ).expand(labels=_labels())

with _dag("compute"):
    CreateComputeFlexStartVMsOperator.partial(
        task_id="ask_for_vms",
        project_id=PROJECT,
        zone="us-west1-a",
        machine_type="a3-highgpu-8g",
        resize_by=1,
        max_run=timedelta(hours=6),
        **COMMON,
    ).expand(labels=_labels())

with _dag("gke"):
    CreateGKEProvisioningRequestOperator.partial(
        task_id="request_nodes",
        project_id=PROJECT,
        location="us-central1",
        cluster_name="training-cluster",
        pod_template={"spec": _pod("bench-gke")},
        count=1,
        max_run=timedelta(hours=2),
        **COMMON,
    ).expand(labels=_labels())

with _dag("kueue"):
    CreateGKEQueuedJobOperator.partial(
        task_id="train",
        project_id=PROJECT,
        location="us-central1",
        cluster_name="training-cluster",
        queue_name="dws-queue",
        job={"spec": {"template": {"spec": _pod("bench-kueue")}, "backoffLimit": 0}},
        max_run=timedelta(hours=2),
        **COMMON,
    ).expand(labels=_labels())

with _dag("calendar"):
    # Every block starts at the run's ``conf["start"]``: delivered at one moment, as the stock
    # tasks' DateTimeTrigger fires at one.
    ReserveCalendarBlockOperator.partial(
        task_id="reserve_block",
        project_id=PROJECT,
        zone="us-central1-b",
        start_time="{{ dag_run.conf['start'] }}",
        duration=timedelta(days=1),
        machine_type="a3-highgpu-8g",
        wait_for_delivery=True,
        poll_interval=POLL_INTERVAL,
        deferrable=True,
    ).expand(vm_count=[1] * TASKS)

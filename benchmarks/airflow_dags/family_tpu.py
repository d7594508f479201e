"""The benchmark's Cloud TPU queued resource family: ``dws_bench_family_tpu`` (see ``bench_family.py``)."""

from __future__ import annotations

from bench_family import COMMON, PROJECT, family_dag, labels

from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator

with family_dag("tpu"):
    CreateTPUQueuedResourceOperator.partial(
        task_id="request_tpu_slice",
        project_id=PROJECT,
        zone="us-west4-a",
        accelerator_type="v5litepod-16",
        runtime_version="v2-alpha-tpuv5-lite",
        **COMMON,
    ).expand(labels=labels())

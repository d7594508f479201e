"""The benchmark's Cloud Batch Flex Start family: ``dws_bench_family_batch`` (see ``bench_family.py``)."""

from __future__ import annotations

from datetime import timedelta

from bench_family import COMMON, PROJECT, RUN_NOW, family_dag, labels

from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator

with family_dag("batch"):
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
    ).expand(labels=labels())

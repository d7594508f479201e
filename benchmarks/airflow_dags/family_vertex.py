"""The benchmark's Vertex AI Flex Start family: ``dws_bench_family_vertex`` (see ``bench_family.py``)."""

from __future__ import annotations

from datetime import timedelta

from bench_family import COMMON, PROJECT, RUN_NOW, family_dag, labels

from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator

with family_dag("vertex"):
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
    ).expand(labels=labels())

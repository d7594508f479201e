"""The benchmark's standalone flex-start VMs family (no MIG): ``dws_bench_family_instances`` (see
``bench_family.py``)."""

from __future__ import annotations

from datetime import timedelta

from bench_family import COMMON, PROJECT, family_dag, labels

from airflow_provider_dws.operators.compute_instances import CreateComputeFlexStartInstancesOperator

with family_dag("instances"):
    CreateComputeFlexStartInstancesOperator.partial(
        task_id="ask_for_vms",
        project_id=PROJECT,
        zone="us-west3-a",
        machine_type="a3-highgpu-8g",
        count=1,
        max_run=timedelta(hours=6),
        **COMMON,
    ).expand(labels=labels())

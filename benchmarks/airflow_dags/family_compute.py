"""The benchmark's Compute Engine flex-start VMs family: ``dws_bench_family_compute`` (see ``bench_family.py``)."""

from __future__ import annotations

from datetime import timedelta

from bench_family import COMMON, PROJECT, family_dag, labels

from airflow_provider_dws.operators.compute import CreateComputeFlexStartVMsOperator

with family_dag("compute"):
    CreateComputeFlexStartVMsOperator.partial(
        task_id="ask_for_vms",
        project_id=PROJECT,
        zone="us-west1-a",
        machine_type="a3-highgpu-8g",
        resize_by=1,
        max_run=timedelta(hours=6),
        **COMMON,
    ).expand(labels=labels())

"""The benchmark's GKE ProvisioningRequest family: ``dws_bench_family_gke`` (see ``bench_family.py``)."""

from __future__ import annotations

from datetime import timedelta

from bench_family import COMMON, PROJECT, family_dag, labels, pod

from airflow_provider_dws.operators.gke import CreateGKEProvisioningRequestOperator

with family_dag("gke"):
    CreateGKEProvisioningRequestOperator.partial(
        task_id="request_nodes",
        project_id=PROJECT,
        location="us-central1",
        cluster_name="training-cluster",
        pod_template={"spec": pod("bench-gke")},
        count=1,
        max_run=timedelta(hours=2),
        **COMMON,
    ).expand(labels=labels())

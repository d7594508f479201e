"""The benchmark's GKE Kueue Job family: ``dws_bench_family_kueue`` (see ``bench_family.py``)."""

from __future__ import annotations

from datetime import timedelta

from bench_family import COMMON, PROJECT, family_dag, labels, pod

from airflow_provider_dws.operators.gke_kueue import CreateGKEQueuedJobOperator

with family_dag("kueue"):
    CreateGKEQueuedJobOperator.partial(
        task_id="train",
        project_id=PROJECT,
        location="us-central1",
        cluster_name="training-cluster",
        queue_name="dws-queue",
        job={"spec": {"template": {"spec": pod("bench-kueue")}, "backoffLimit": 0}},
        max_run=timedelta(hours=2),
        **COMMON,
    ).expand(labels=labels())

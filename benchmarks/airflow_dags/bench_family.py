"""What the per-family benchmark DAGs (``family_<name>.py``) share: their size, their parameters, their DAG.

Each family's mapped DAG is a file of its own, as a team's DAG folder has it: a task process parses
only the file of its own DAG, so it imports one operator module, not the seven of every family.
``dws_bench_family_<name>`` maps the family's operator ``DWS_BENCH_FAMILY_TASKS`` times (over its
``labels``, or for the calendar block its one VM: each task is its own request), with the
parameters of ``example_dags/`` and of the fault matrix's DAGs, made small (one VM, one slice, one
node) and quick (workloads run 0 s). Each asks in an emulator pool of its own
(``airflow_bench.families``), so one family's capacity never serves another's requests. This module
defines no DAG (the dags folder is on the task processes' ``sys.path``).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG

from airflow_provider_dws import facts

TASKS = int(os.environ.get("DWS_BENCH_FAMILY_TASKS", 50))
POLL_INTERVAL = float(os.environ.get("DWS_BENCH_POLL_INTERVAL", 30))
PROJECT = "my-gcp-project"
MAX_WAIT = timedelta(hours=2)
COMMON: dict[str, Any] = {"max_wait": MAX_WAIT, "poll_interval": POLL_INTERVAL, "deferrable": True}
RUN_NOW = {"DWS_EMULATOR_RUN_SECONDS": "0", "DWS_EMULATOR_EXIT_CODE": "0"}
H100_NODE = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}


def labels() -> list[dict[str, str]]:
    """One label set per mapped task: each task is its own request."""
    return [{"team": "research", "shard": f"{i:04d}"} for i in range(TASKS)]


def family_dag(name: str) -> DAG:
    """The family's DAG, ``dws_bench_family_<name>``, triggered by the benchmark only."""
    return DAG(
        dag_id=f"dws_bench_family_{name}",
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        tags=["dws", "benchmark"],
    )


def pod(node_pool: str) -> dict[str, Any]:
    """A one-node H100 pod in the family's own node pool, its workload done at once; it tolerates
    the queued GPU nodes' taints (``facts``, which every operator module loads: a Kueue task process
    need not load the ProvisioningRequest operator's module for them)."""
    return {
        "nodeSelector": {**H100_NODE, "cloud.google.com/gke-nodepool": node_pool},
        "tolerations": [dict(facts.QUEUED_TOLERATION), dict(facts.GPU_TOLERATION)],
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

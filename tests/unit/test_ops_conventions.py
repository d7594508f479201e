"""Airflow conventions: the deployment's default_deferrable, verb-first names, tries in the identity."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_dws.operators import gke, gke_kueue, gke_release, tpu, vertex_ai
from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator
from airflow_provider_dws.runtime.task import task_identity
from airflow_provider_dws.scheduling.identity import LABEL_ATTEMPT, LABEL_TRY
from tests.probe import Probe

ROOT = Path(__file__).resolve().parents[2]
TPU = {"zone": "us-west4-a", "accelerator_type": "v5litepod-16", "runtime_version": "v2-alpha-tpuv5-lite"}

_PROBE = """
import json
from airflow.configuration import conf
from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator
from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator
pool = {"machine_spec": {"machine_type": "a3-highgpu-8g", "accelerator_type": "NVIDIA_H100_80GB",
        "accelerator_count": 8}, "container_spec": {"image_uri": "i"}}
v = CreateVertexAIFlexStartJobOperator(task_id="v", region="us-central1", worker_pool_specs=[pool])
t = CreateTPUQueuedResourceOperator(task_id="t", zone="us-west4-a", accelerator_type="v5litepod-16",
                                    runtime_version="v2-alpha-tpuv5-lite")
b = CreateBatchFlexStartJobOperator(task_id="b", region="us-central1", script="echo", machine_type="g2-standard-4")
print(json.dumps([conf.getboolean("operators", "default_deferrable"), v.deferrable, t.deferrable, b.deferrable]))
"""


@pytest.mark.parametrize(("setting", "expected"), [(None, False), ("True", True), ("False", False)])
def test_deferrable_follows_the_deployment_default(
    tmp_path: Path, setting: str | None, expected: bool, probe: Probe
) -> None:
    # The Airflow convention: [operators] default_deferrable decides (Airflow ships it as false).
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AIRFLOW_HOME": str(tmp_path)}
    env.pop("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", None)
    if setting is not None:
        env["AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"] = setting
    out = probe.run(_PROBE, env=env).check()
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [expected, expected, expected, expected]


@pytest.mark.parametrize(
    ("module", "name"),
    [
        (vertex_ai, "FlexStartCustomJobOperator"),
        (tpu, "TPUQueuedResourceOperator"),
        (gke, "GKEProvisioningRequestOperator"),
        (gke, "DeleteProvisioningRequestOperator"),
        (gke_release, "DeleteProvisioningRequestOperator"),
        (gke_kueue, "GKEQueuedJobOperator"),
    ],
)
def test_one_name_per_operator(module: Any, name: str) -> None:
    """The package was never released with other names: each operator has its verb-first name only."""
    with pytest.raises(AttributeError):
        getattr(module, name)


class TI:
    dag_id, task_id, run_id, map_index = "d", "t", "manual__1", -1

    def __init__(self, try_number: Any) -> None:
        self.try_number = try_number


def test_the_identity_counts_airflow_tries_and_capacity_attempts() -> None:
    op = CreateTPUQueuedResourceOperator(task_id="t", queued_resource_id="slice", **TPU)
    first, retried = (task_identity({"ti": TI(n)}) for n in (1, 3))  # type: ignore[typeddict-item]
    assert first.key == retried.key
    assert op.adapter().id_for(first.with_attempt(2)) == "slice-t1-a2"
    assert op.adapter().id_for(retried) == "slice-t3-a1"
    labels = retried.with_attempt(2).labels()
    assert (labels[LABEL_TRY], labels[LABEL_ATTEMPT]) == ("3", "2")
    # A task instance without a usable try number counts as try 1.
    assert task_identity({"ti": TI(None)}).try_number == 1  # type: ignore[typeddict-item]

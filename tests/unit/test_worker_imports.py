"""What a task process imports to defer a Flex Start task and to resume it (issue 36).

A Google client library costs a task process about as much CPU as the whole of a stock deferring
task (``google.cloud.aiplatform_v1``'s ``__init__`` loads every service and type), so a task whose
trigger makes its request must import none, on the way to its deferral nor on the way back. This
runs both steps in a fresh interpreter (the probe) and names what came in; no timing is read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.probe import Probe

ROOT = Path(__file__).resolve().parents[2]
#: Modules no task process of a trigger-made request may import, by prefix.
HEAVY = (
    "google.cloud",
    "google.api_core",
    "grpc",
    "proto",
    "google.protobuf",
    "kubernetes",
    "googleapiclient",
)

CODE = r"""
import json, sys
from datetime import datetime, timezone
from airflow.exceptions import TaskDeferred
from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator

class TI:
    dag_id, task_id, run_id, map_index, try_number, max_tries = "d", "t", "r", -1, 1, 0
    start_date = datetime(2026, 1, 1, tzinfo=timezone.utc)
    def __init__(self):
        self.xcom = {}
    def xcom_push(self, key, value):
        self.xcom[key] = value
    def xcom_pull(self, **kwargs):
        return None

FAMILY = sys.argv[1] if len(sys.argv) > 1 else "vertex"

def make():
    if FAMILY == "gke":
        from airflow_provider_dws.operators.gke import CreateGKEProvisioningRequestOperator
        pods = {"containers": [{"name": "c", "image": "i:1", "resources": {"limits": {"nvidia.com/gpu": 8}}}],
                "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}}
        return CreateGKEProvisioningRequestOperator(task_id="t", project_id="my-project", location="us-central1",
                                                    cluster_name="c", pod_template=pods, count=1, deferrable=True)
    if FAMILY == "kueue":
        from airflow_provider_dws.operators.gke_kueue import CreateGKEQueuedJobOperator
        return CreateGKEQueuedJobOperator(task_id="t", project_id="my-project", location="us-central1",
                                          cluster_name="c", queue_name="q", image="i:1", gpus=8,
                                          accelerator="nvidia-h100-80gb", deferrable=True)
    pool = {"machine_spec": {"machine_type": "a3-highgpu-8g", "accelerator_type": "NVIDIA_H100_80GB",
            "accelerator_count": 8}, "replica_count": 1, "container_spec": {"image_uri": "us-docker.pkg.dev/p/r/i:1"}}
    return CreateVertexAIFlexStartJobOperator(task_id="t", project_id="my-project", region="us-central1",
                                              worker_pool_specs=[pool], deferrable=True)

before = set(sys.modules)
try:
    make().attempt_loop().run({"ti": TI()})
except TaskDeferred as deferred:
    trigger = deferred.trigger
else:
    raise SystemExit("the task did not defer")
deferral = sorted(set(sys.modules) - before)
timings = {"submitted": "2026-01-01T00:00:00+00:00", "started": "2026-01-01T00:10:00+00:00",
           "finished": "2026-01-01T01:00:00+00:00"}
if FAMILY == "gke":
    name = "dws-t-0123456789abcdef-t1-a1"
    result = {"name": name, "count": 1, "gpus_per_pod": 8, "accelerator": "nvidia-h100-80gb",
              "annotations": {}, "tolerations": [], "node_selector": {}, "state": "Provisioned"}
    state, phase = "Provisioned", "running"
elif FAMILY == "kueue":
    name = "dws-t-0123456789abcdef-t1-a1"
    result = {"name": name, "status": "Complete", "state": "Complete"}
    state, phase = "Complete", "succeeded"
else:
    name = "projects/my-project/locations/us-central1/customJobs/7"
    result = {"name": name, "state": "JOB_STATE_SUCCEEDED"}
    state, phase = "JOB_STATE_SUCCEEDED", "succeeded"
event = {"name": name, "state": state, "phase": phase, "failure": None, "message": "",
         "description": "8 x H100", "timings": timings, "result": result, "resume": trigger.resume}
before = set(sys.modules)
result = make().attempt_loop().complete({"ti": TI()}, event, {})
resume = sorted(set(sys.modules) - before)
print(json.dumps({"deferral": deferral, "resume": resume, "result": result}))
"""


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(HEAVY)]


@pytest.mark.parametrize("family", ["vertex", "gke", "kueue"])
@pytest.mark.parametrize("step", ["deferral", "resume"])
def test_a_task_whose_trigger_makes_its_request_imports_no_client_library(
    family: str, step: str, probe: Probe, tmp_path: Path
) -> None:
    env = dict(os.environ)
    env["AIRFLOW_HOME"] = str(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    done = probe.run(
        f"import sys; sys.argv = ['probe', {family!r}]\n" + CODE, preload=["airflow.sdk"], env=env, cwd=ROOT
    )
    assert done.returncode == 0, f"probe failed:\n{done.stdout}\n{done.stderr}"
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["result"]["name"] and found["result"].get("state")
    # The step ran the provider's code (the check is not vacuous)...
    assert any(m.startswith("airflow_provider_dws.runtime") for m in found["deferral"])
    # ...and brought in no client library.
    assert _heavy(found[step]) == [], f"the {step} imported client libraries: {_heavy(found[step])}"

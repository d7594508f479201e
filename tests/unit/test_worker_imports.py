"""What a task process imports to defer a Flex Start task and to resume it (issue 36).

A Google client library costs a task process about as much CPU as the whole of a stock deferring
task (``google.cloud.aiplatform_v1``'s ``__init__`` loads every service and type), so a task whose
trigger makes its request must import none, on the way to its deferral nor on the way back. This
runs both steps in a fresh interpreter (the probe) and names what came in; no timing is read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
#: What only the triggerer runs of a wait: a deferral builds the trigger to serialize it, no more.
TRIGGERER_ONLY = tuple(
    f"airflow_provider_dws.triggers.{m}"
    for m in ("poller", "give_up", "on_kill", "finish", "log_lines", "outcomes")
)

#: Per family: the operator's import, how to make the task, the name and state of its request
#: when the trigger reports success.
FAMILIES = {
    "vertex_ai": {
        "imports": "from airflow_provider_dws.operators.vertex_ai import CreateVertexAIFlexStartJobOperator",
        "make": """
    pool = {"machine_spec": {"machine_type": "a3-highgpu-8g", "accelerator_type": "NVIDIA_H100_80GB",
            "accelerator_count": 8}, "replica_count": 1, "container_spec": {"image_uri": "us-docker.pkg.dev/p/r/i:1", "args": ["--epochs=3"],
            "env": [{"name": "A", "value": "1"}]}}
    return CreateVertexAIFlexStartJobOperator(task_id="t", project_id="my-project", region="us-central1",
                                              worker_pool_specs=[pool], deferrable=True)
""",
        "name": "projects/my-project/locations/us-central1/customJobs/7",
        "state": "JOB_STATE_SUCCEEDED",
    },
    "batch": {
        "imports": "from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator",
        "make": """
    return CreateBatchFlexStartJobOperator(task_id="t", project_id="my-project", region="us-central1",
                                           image_uri="us-docker.pkg.dev/p/r/i:1", machine_type="g2-standard-8",
                                           deferrable=True)
""",
        "name": "projects/my-project/locations/us-central1/jobs/dws-t-0123456789abcdef-t1-a1",
        "state": "SUCCEEDED",
    },
    "batch_job": {
        "imports": "from airflow_provider_dws.operators.batch import CreateBatchFlexStartJobOperator",
        "make": """
    job = {"task_groups": [{"task_count": 4, "task_spec": {"runnables": [{"script": {"text": "nvidia-smi"}}]}}],
           "allocation_policy": {"instances": [{"policy": {"machine_type": "a3-highgpu-8g"},
                                                "install_gpu_drivers": True}]}}
    return CreateBatchFlexStartJobOperator(task_id="t", project_id="my-project", region="us-central1",
                                           job=job, deferrable=True)
""",
        "name": "projects/my-project/locations/us-central1/jobs/dws-t-0123456789abcdef-t1-a1",
        "state": "SUCCEEDED",
    },
    "tpu": {
        "imports": "from airflow_provider_dws.operators.tpu import CreateTPUQueuedResourceOperator",
        "make": """
    return CreateTPUQueuedResourceOperator(task_id="t", project_id="my-project", zone="us-west4-a",
                                           accelerator_type="v5litepod-16", runtime_version="v2-alpha-tpuv5-lite",
                                           deferrable=True)
""",
        "name": "projects/my-project/locations/us-west4-a/queuedResources/dws-t-0123456789abcdef-t1-a1",
        "state": "ACTIVE",
        "phase": "running",  # the wait ends when the slice is ACTIVE
    },
    "gke": {
        "imports": "from airflow_provider_dws.operators.gke import CreateGKEProvisioningRequestOperator",
        "make": """
    pods = {"containers": [{"name": "c", "image": "i:1", "resources": {"limits": {"nvidia.com/gpu": 8}}}],
            "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}}
    return CreateGKEProvisioningRequestOperator(task_id="t", project_id="my-project", location="us-central1",
                                                cluster_name="c", pod_template=pods, count=1, deferrable=True)
""",
        "name": "dws-t-0123456789abcdef-t1-a1",
        "state": "Provisioned",
        "phase": "running",  # the wait ends when the capacity is provisioned
        "result": {
            "name": "dws-t-0123456789abcdef-t1-a1",
            "count": 1,
            "gpus_per_pod": 8,
            "accelerator": "nvidia-h100-80gb",
            "annotations": {},
            "tolerations": [],
            "node_selector": {},
            "state": "Provisioned",
        },
    },
    "kueue": {
        "imports": "from airflow_provider_dws.operators.gke_kueue import CreateGKEQueuedJobOperator",
        "make": """
    return CreateGKEQueuedJobOperator(task_id="t", project_id="my-project", location="us-central1",
                                      cluster_name="c", queue_name="q", image="i:1", gpus=8,
                                      accelerator="nvidia-h100-80gb", deferrable=True)
""",
        "name": "dws-t-0123456789abcdef-t1-a1",
        "state": "Complete",
        "result": {"name": "dws-t-0123456789abcdef-t1-a1", "status": "Complete", "state": "Complete"},
    },
    "gke_flex": {
        "imports": "from airflow_provider_dws.operators.gke_flex import CreateGKEFlexStartJobOperator",
        "make": """
    return CreateGKEFlexStartJobOperator(task_id="t", project_id="my-project", location="us-central1",
                                         cluster_name="c", image="i:1", gpus=4, accelerator="nvidia-l4",
                                         deferrable=True)
""",
        "name": "dws-t-0123456789abcdef-t1-a1",
        "state": "Complete",
        "result": {"name": "dws-t-0123456789abcdef-t1-a1", "status": "Complete", "state": "Complete"},
    },
    "compute": {
        "imports": "from airflow_provider_dws.operators.compute import CreateComputeFlexStartVMsOperator",
        "make": """
    return CreateComputeFlexStartVMsOperator(task_id="t", project_id="my-project", zone="us-central1-a",
                                             machine_type="a3-highgpu-8g", resize_by=1, max_run=timedelta(hours=2),
                                             deferrable=True)
""",
        "name": (
            "projects/my-project/zones/us-central1-a/instanceGroupManagers/dws-t-0123456789abcdef"
            "/resizeRequests/dws-t-0123456789abcdef-t1-a1"
        ),
        "state": "SUCCEEDED",
        "phase": "running",  # the wait ends when the VMs are held
        "result": {
            "resize_request": "dws-t-0123456789abcdef-t1-a1",
            "resize_by": 1,
            "run_duration_seconds": 7200,
            "machine_type": "a3-highgpu-8g",
            "instances": [{"name": "dws-t-x1", "internal_ip": "10.0.0.2"}],
        },
        "returns": ("resize_request", "dws-t-0123456789abcdef-t1-a1"),
    },
}
#: A calendar block: approved (the reserve's wait ends there), or delivered (``wait_for_delivery``).
_BLOCK = "projects/my-project/zones/us-central1-b/futureReservations/dws-t-0123456789abcdef-t1-a1"
for _family, _state, _phase, _wait in (
    ("calendar", "APPROVED", "provisioning", False),
    ("calendar_delivered", "FULFILLED", "running", True),
):
    FAMILIES[_family] = {
        "imports": "from airflow_provider_dws.operators.calendar import ReserveCalendarBlockOperator",
        "make": f"""
    start = (datetime.now(timezone.utc) + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    return ReserveCalendarBlockOperator(task_id="t", project_id="my-project", zone="us-central1-b",
                                        start_time=start.isoformat(), duration=timedelta(days=1),
                                        machine_type="a3-highgpu-8g", vm_count=1,
                                        wait_for_delivery={_wait}, deferrable=True)
""",
        "name": _BLOCK,
        "state": _state,
        "phase": _phase,
        "result": {
            "future_reservation": _BLOCK,
            "zone": "us-central1-b",
            "end_time": "2026-01-03T00:00:00+00:00",
            "procurement_status": _state,
            "reservation_names": ["dws-t-0123456789abcdef-t1-a1"],
        },
        "returns": ("future_reservation", _BLOCK),
    }

CODE = r"""
import json, sys
from datetime import datetime, timedelta, timezone
from airflow.exceptions import TaskDeferred
IMPORTS

class TI:
    dag_id, task_id, run_id, map_index, try_number, max_tries = "d", "t", "r", -1, 1, 0
    start_date = datetime(2026, 1, 1, tzinfo=timezone.utc)
    def __init__(self):
        self.xcom = {}
    def xcom_push(self, key, value):
        self.xcom[key] = value
    def xcom_pull(self, **kwargs):
        return None

def make():MAKE
before = set(sys.modules)
try:
    make().execute({"ti": TI()})  # the rendered-value checks, then the attempt loop
except TaskDeferred as deferred:
    trigger = deferred.trigger
else:
    raise SystemExit("the task did not defer")
deferral = sorted(set(sys.modules) - before)
name, state = NAME, STATE
if not getattr(trigger, "submit", None):
    raise SystemExit("the trigger does not make the request")
event = {"name": name, "state": state, "phase": PHASE, "failure": None, "message": "",
         "description": "what was asked for",
         "timings": {"submitted": "2026-01-01T00:00:00+00:00", "started": "2026-01-01T00:10:00+00:00",
                     "finished": "2026-01-01T01:00:00+00:00"},
         "result": RESULT, "resume": trigger.resume}
before = set(sys.modules)
result = make().attempt_loop().complete({"ti": TI()}, event, {})
resume = sorted(set(sys.modules) - before)
print(json.dumps({"deferral": deferral, "resume": resume, "result": result}))
"""


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(HEAVY)]


def _code(family: str) -> str:
    spec = FAMILIES[family]
    return (
        CODE.replace("IMPORTS", spec["imports"])
        .replace("MAKE", spec["make"])
        .replace("NAME", repr(spec["name"]))
        .replace("STATE", repr(spec["state"]))
        .replace("PHASE", repr(spec.get("phase", "succeeded")))
        .replace(
            "RESULT", repr(spec.get("result", {"name": spec["name"], "state": spec["state"], "nodes": []}))
        )
    )


@pytest.fixture(scope="module")
def imported(probe: Probe, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict[str, Any]]:
    """What a family's task imported at each step, probed once per family (both steps come from one
    run) in one Airflow home: every probe then forks the same interpreter, which imported
    ``airflow.sdk`` once (a home per test made a new one for each, about a CPU-second apiece)."""
    env = dict(os.environ)
    env["AIRFLOW_HOME"] = str(tmp_path_factory.mktemp("airflow-home"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    found: dict[str, dict[str, Any]] = {}

    def run(family: str) -> dict[str, Any]:
        if family not in found:
            done = probe.run(_code(family), preload=["airflow.sdk"], env=env, cwd=ROOT)
            assert done.returncode == 0, f"probe failed:\n{done.stdout}\n{done.stderr}"
            found[family] = json.loads(done.stdout.splitlines()[-1])
        return found[family]

    return run


@pytest.mark.parametrize("step", ["deferral", "resume"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_task_imports_no_client_library(
    family: str, step: str, imported: Callable[[str], dict[str, Any]]
) -> None:
    found = imported(family)
    key, value = FAMILIES[family].get("returns", ("state", FAMILIES[family]["state"]))
    assert found["result"][key] == value
    # The step ran the provider's code (the check is not vacuous)...
    assert any(m.startswith("airflow_provider_dws.runtime") for m in found["deferral"])
    # ...and brought in no client library.
    heavy = _heavy(found[step])
    assert heavy == [], f"the {step} imported {len(heavy)} client library modules: {heavy[:5]}..."
    if step == "deferral":
        loaded = [m for m in found[step] if m.startswith(TRIGGERER_ONLY)]
        assert loaded == [], f"the deferral imported what only the triggerer runs: {loaded}"

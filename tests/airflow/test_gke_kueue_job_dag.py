"""Ring 3: the GKE Kueue example (a suspended Job admitted by Kueue once DWS has its nodes) by
`airflow dags test` against a live dws-emulator, through its Kubernetes API.

After every run the cluster holds no live pod, no Workload or ProvisioningRequest waiting: a Job
that ended keeps only its own record (as Kubernetes keeps a finished Job), one given up is deleted.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import AirflowHome, ExampleRun, no_record_warnings, records
from tests.kube_view import cluster_objects, live_pods, names, unfinished_workloads

pytestmark = [pytest.mark.airflow, pytest.mark.emulator]

DAG_ID = "dws_gke_kueue_job"
L4 = "us-central1/NVIDIA_L4"
WORKERS = 4
_RESULT = re.compile(
    r"DWS RESULT: Job (?P<name>\S+) (?P<status>\w+): (?P<succeeded>\d+) pod\(s\) succeeded, "
    r"(?P<failed>\d+) failed; waited (?P<waited>[\d.]+)s for admission, ran (?P<ran>[\d.]+)s"
)


def provisioning_requests(emulator: Any) -> list[dict[str, Any]]:
    return [r for r in emulator.control.requests() if r["kind"] == "ProvisioningRequest"]


def assert_nothing_waiting(emulator: Any) -> dict[str, list[dict[str, Any]]]:
    """No live pod, no Workload not finished, no ProvisioningRequest left; the L4 pool whole again."""
    objects = cluster_objects(emulator.address)
    assert live_pods(objects) == []
    assert unfinished_workloads(objects) == []
    assert names(objects["provisioningrequests"]) == []
    assert [(r["name"], r["state"]) for r in provisioning_requests(emulator) if not r["deleted"]] == []
    pool = emulator.control.capacity()[L4]
    assert pool["in_use"] == 0 and pool["queued"] == 0, pool
    return objects


def _job_condition(job: dict[str, Any]) -> str:
    return next(
        c["type"]
        for c in job["status"].get("conditions") or []
        if c["type"] in ("Complete", "Failed") and c["status"] == "True"
    )


def check_example(run: ExampleRun) -> None:
    """The example as `make demo` ran it (`test_dws_page_after_demo.py`)."""
    match = _RESULT.search(run.log)
    assert match is not None, run.log[-4000:]
    assert (match["status"], int(match["succeeded"]), int(match["failed"])) == ("Complete", WORKERS, 0)
    assert float(match["ran"]) >= 2  # 3 s per pod, on timestamps of whole seconds
    assert "Deferring" in run.log
    name = match["name"]
    # The name is the task identity's: a retry finds its own Job and adopts it.
    assert re.fullmatch(r"dws-finetune-[0-9a-f]{16}-t1-a1", name)
    objects = cluster_objects(run.emulator.address)
    [job] = [j for j in objects["jobs"] if j["metadata"]["name"] == name]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "dws-queue"
    assert job["metadata"]["labels"]["dws_dag"] == DAG_ID and job["metadata"]["labels"]["team"] == "research"
    assert job["spec"]["suspend"] is False  # Kueue unsuspended it once admitted
    assert _job_condition(job) == "Complete"
    # Kueue asked DWS for the 4 pods at once, with the example's max_run; and cleaned up after.
    [request] = [r for r in provisioning_requests(run.emulator) if name in r["name"]]
    assert (request["pods"], request["accelerator_count"], request["accelerator_type"]) == (
        WORKERS,
        WORKERS,
        "NVIDIA_L4",
    )
    assert request["max_run_duration_seconds"] == 6 * 3600
    assert request["state"] == "CONSUMED" and request["deleted"]
    no_record_warnings(run.log)
    [rec] = records(run.home, DAG_ID)["finetune"]
    assert (rec.request_name, rec.api, rec.phase, rec.accelerator_count) == (
        name,
        "gke_kueue_job",
        "succeeded",
        4,
    )


def test_capacity_that_never_comes_fails_at_max_wait_and_deletes_the_job(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    # Three L4s for a Job of four pods at once: GKE fails each ProvisioningRequest, Kueue retries
    # with its backoff, and the provider gives up at max wait.
    emulator = dws_emulator_factory({L4: WORKERS - 1})
    result = airflow_home.run_dag_test(
        DAG_ID, emulator.address, tmp_path / "run.log", env={"DWS_EXAMPLE_MAX_WAIT_SECONDS": "5"}
    )
    assert result.returncode != 0
    assert "CapacityNotObtainedError" in result.log, result.log[-4000:]
    assert "DWS RESULT" not in result.log
    objects = assert_nothing_waiting(emulator)
    # Given up: the Job is deleted, and its Workload with it.
    assert names(objects["jobs"]) == [] and names(objects["workloads"]) == []
    requests = provisioning_requests(emulator)
    assert requests and all(r["state"] == "FAILED" and not r["nodes"] for r in requests)
    [rec] = records(airflow_home.home, DAG_ID)["finetune"]
    assert rec.phase == "not_obtained"


def test_a_failing_workload_fails_the_task_as_a_workload_failure(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory({L4: WORKERS})
    result = airflow_home.run_dag_test(
        DAG_ID, emulator.address, tmp_path / "run.log", conf={"exit_code": 3, "run_seconds": 1}
    )
    assert result.returncode != 0
    assert "WorkloadFailedError" in result.log, result.log[-4000:]
    assert "CapacityNotObtainedError" not in result.log
    assert "DWS RESULT" not in result.log
    objects = assert_nothing_waiting(emulator)
    [job] = objects["jobs"]
    assert _job_condition(job) == "Failed"
    [rec] = records(airflow_home.home, DAG_ID)["finetune"]
    assert rec.phase == "failed"

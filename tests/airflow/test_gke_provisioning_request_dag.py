"""Ring 3: the GKE ProvisioningRequest example (setup, a cncf-kubernetes Job on its nodes, teardown)
by `airflow dags test` against a live dws-emulator, through its Kubernetes API.

After every run the cluster holds no ProvisioningRequest, PodTemplate or live pod of the run: the
nodes are given back whatever happened.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import AirflowHome, ExampleRun, no_record_warnings, records
from tests.kube_view import cluster_objects, live_pods, names

pytestmark = [pytest.mark.airflow, pytest.mark.emulator]

DAG_ID = "dws_gke_provisioning_request"
H100 = "us-central1/NVIDIA_H100_80GB"
PODS, GPUS = 2, 8
_RESULT = re.compile(
    r"DWS RESULT: request (?P<name>\S+) Provisioned (?P<pods>\d+) x (?P<gpus>\d+) (?P<accelerator>\S+) "
    r"after [\d.]+s; Job (?P<job>\S+) succeeded (?P<succeeded>\d+) failed (?P<failed>\d+)"
)


def provisioning_requests(emulator: Any) -> list[dict[str, Any]]:
    return [r for r in emulator.control.requests() if r["kind"] == "ProvisioningRequest"]


def assert_nothing_left(emulator: Any) -> list[dict[str, Any]]:
    """Every ProvisioningRequest deleted, no PodTemplate, no live pod; the H100 pool whole again."""
    found = provisioning_requests(emulator)
    assert [(r["name"], r["state"]) for r in found if not r["deleted"]] == []
    objects = cluster_objects(emulator.address)
    assert names(objects["provisioningrequests"]) == []
    assert names(objects["podtemplates"]) == []
    assert live_pods(objects) == []
    pool = emulator.control.capacity()[H100]
    assert pool["in_use"] == 0 and pool["queued"] == 0, pool
    return found


def _history(request: dict[str, Any]) -> list[str]:
    return [step["state"] for step in request["history"]]


def check_example(run: ExampleRun) -> None:
    """The example as `make demo` ran it (`test_dws_page_after_demo.py`)."""
    match = _RESULT.search(run.log)
    assert match is not None, run.log[-4000:]
    assert (int(match["pods"]), int(match["gpus"]), match["accelerator"]) == (PODS, GPUS, "nvidia-h100-80gb")
    assert (int(match["succeeded"]), int(match["failed"])) == (PODS, 0)
    assert "Deferring" in run.log
    # The demo's emulator also holds the Kueue example's request: this one is the example's own.
    [request] = [r for r in provisioning_requests(run.emulator) if r["name"] == f"default/{match['name']}"]
    name = match["name"]
    # The name is the task identity's: a retry or a re-run worker finds it again.
    assert re.fullmatch(r"dws-request-nodes-[0-9a-f]{16}-t1-a1", name)
    assert (request["pods"], request["accelerator_count"], len(request["nodes"])) == (PODS, PODS * GPUS, PODS)
    assert request["labels"]["dws_dag"] == DAG_ID and request["labels"]["dws_task"] == "request_nodes"
    assert request["labels"]["team"] == "research"
    assert request["max_run_duration_seconds"] == 4 * 3600
    # Provisioned, its nodes used by the Job's pods (consumed, so no BookingExpired), then released.
    assert _history(request) == ["ACCEPTED", "PROVISIONED", "CONSUMED", "DELETED"]
    # The pods ran on the request's nodes: the emulator's own line in the Job's pod logs.
    for node in request["nodes"]:
        assert f"started on node {node}" in run.log
    no_record_warnings(run.log)
    tasks = records(run.home, DAG_ID)
    [setup] = tasks["request_nodes"]
    assert (setup.request_name, setup.api, setup.accelerator_count) == (name, "gke_provisioning_request", 16)
    [released] = tasks["release_nodes"]
    assert (released.request_name, released.phase, released.holds) == (name, "succeeded", False)


def test_a_request_that_never_fits_fails_with_the_reason_and_leaves_nothing(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    # One node's worth of H100s for two nodes at once: GKE fails the request (it can never fit).
    emulator = dws_emulator_factory({H100: GPUS})
    result = airflow_home.run_dag_test(DAG_ID, emulator.address, tmp_path / "run.log")
    assert result.returncode != 0
    assert "CapacityNotObtainedError" in result.log, result.log[-4000:]
    assert "FailedToBookCapacity" in result.log and "can never provide more than" in result.log
    assert "DWS RESULT" not in result.log
    # The workload never started: nothing was created for it.
    assert "Building job" not in result.log
    [request] = assert_nothing_left(emulator)
    assert _history(request)[-2:] == ["FAILED", "DELETED"]
    assert not request["nodes"]
    [rec] = records(airflow_home.home, DAG_ID)["request_nodes"]
    assert (rec.phase, rec.holds) == ("not_obtained", False)


def test_a_failing_workload_is_the_workloads_failure_and_the_nodes_are_released(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory({H100: PODS * GPUS})
    result = airflow_home.run_dag_test(
        DAG_ID, emulator.address, tmp_path / "run.log", conf={"exit_code": 3, "run_seconds": 1}
    )
    assert result.returncode != 0
    log = result.log
    # The Job failed (cncf-kubernetes says so: a pod returned a failure, the Job's status Failed);
    # the request did its part: no capacity error.
    assert re.search(r"The job 'job-train-\w+' state: Failed", log), log[-4000:]
    assert re.search(r"Pod job-train-\S+ returned a failure", log)
    assert "CapacityNotObtainedError" not in log and "CapacityRevokedError" not in log
    assert "DWS RESULT" not in log
    [request] = assert_nothing_left(emulator)
    assert _history(request) == ["ACCEPTED", "PROVISIONED", "CONSUMED", "DELETED"]
    [rec] = records(airflow_home.home, DAG_ID)["request_nodes"]
    assert rec.phase == "running"  # the setup's own record: it got its capacity
    [released] = records(airflow_home.home, DAG_ID)["release_nodes"]
    assert (released.phase, released.holds) == ("succeeded", False)

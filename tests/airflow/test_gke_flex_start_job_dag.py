"""Ring 3: the GKE flex-start example (a Job of two pods, each on a flex-start L4 node, all or none)
by `airflow dags test` against a live dws-emulator, through its Kubernetes API.

After every run the cluster holds no live pod and no node still asked for: a Job that ended keeps
only its own record (as Kubernetes keeps a finished Job), one given up is deleted with its pods,
and the nodes that came up for it scale down once empty.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import AirflowHome, ExampleRun, no_record_warnings, records
from tests.kube_view import cluster_objects, live_pods, names

pytestmark = [pytest.mark.airflow, pytest.mark.emulator]

DAG_ID = "dws_gke_flex_start_job"
L4 = "us-central1/NVIDIA_L4"
PODS = 2
#: An L4 flex-start node (g2-standard-48): 4 GPUs, one pod of the example each.
NODE_GPUS = 4
_RESULT = re.compile(
    r"DWS RESULT: Job (?P<name>\S+) (?P<status>\w+): (?P<succeeded>\d+) pod\(s\) succeeded, "
    r"(?P<failed>\d+) failed on (?P<nodes>\d+) node\(s\); waited (?P<waited>[\d.]+)s for nodes, "
    r"ran (?P<ran>[\d.]+)s"
)


def flex_nodes(emulator: Any, job: str | None = None) -> list[dict[str, Any]]:
    """The emulator's flex-start node records (of one Job's pods)."""
    return [
        r
        for r in emulator.control.requests()
        if r["kind"] == "FlexStartNode"
        and (job is None or r["labels"].get("batch.kubernetes.io/job-name") == job)
    ]


def assert_nothing_left(emulator: Any) -> dict[str, list[dict[str, Any]]]:
    """No live pod, no node still asked for or running a pod; once the empty nodes scale down,
    the L4 pool whole again."""
    objects = cluster_objects(emulator.address)
    assert live_pods(objects) == []
    assert [(r["name"], r["state"]) for r in flex_nodes(emulator) if r["state"] == "WAITING"] == []
    assert [r["name"] for r in flex_nodes(emulator) if r["active_pods"]] == []
    emulator.control.set_kube_flex_start(scale_down_seconds=0)
    deadline = time.monotonic() + 60
    while any(r["state"] == "RUNNING" for r in flex_nodes(emulator)) and time.monotonic() < deadline:
        time.sleep(0.5)
    pool = emulator.control.capacity()[L4]
    assert pool["in_use"] == 0 and pool["queued"] == 0, pool
    return objects


def check_example(run: ExampleRun) -> None:
    """The example as `make demo` ran it (`test_dws_page_after_demo.py`, in `make test`): every pod
    got its node, the Job completed (the end-to-end case of every pod on a node: not run again
    here, for the test budget)."""
    match = _RESULT.search(run.log)
    assert match is not None, run.log[-4000:]
    assert (match["status"], int(match["succeeded"]), int(match["failed"]), int(match["nodes"])) == (
        "Complete",
        PODS,
        0,
        PODS,
    )
    assert float(match["ran"]) >= 2  # 3 s per pod, on timestamps of whole seconds
    assert "Deferring" in run.log
    name = match["name"]
    # The name is the task identity's: a retry finds its own Job and adopts it.
    assert re.fullmatch(r"dws-evaluate-[0-9a-f]{16}-t1-a1", name)
    objects = cluster_objects(run.emulator.address)
    [job] = [j for j in objects["jobs"] if j["metadata"]["name"] == name]
    labels = job["metadata"]["labels"]
    assert labels["dws_dag"] == DAG_ID and labels["team"] == "research"
    assert job["spec"]["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-flex-start"] == "true"
    # The run limit after the max wait: Kubernetes counts the deadline from the Job's creation.
    assert job["spec"]["activeDeadlineSeconds"] == int(labels["dws_max_wait"]) + 4 * 3600
    # One node per pod, each asked for and brought up on its own, each ran one of the Job's pods.
    nodes = flex_nodes(run.emulator, name)
    assert len(nodes) == PODS and all(n["start_time"] and len(n["pods"]) == 1 for n in nodes), nodes
    assert all(n["accelerator_count"] == NODE_GPUS and not n["active_pods"] for n in nodes)
    no_record_warnings(run.log)
    [rec] = records(run.home, DAG_ID)["evaluate"]
    assert (rec.request_name, rec.api, rec.phase, rec.accelerator_count) == (
        name,
        "gke_flex_start_job",
        "succeeded",
        PODS * NODE_GPUS,
    )


def test_not_every_pod_on_a_node_by_max_wait_deletes_the_job_and_leaves_nothing(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    # One node's worth of L4s for a Job of two pods: one pod gets a node and runs, the other waits;
    # at the max wait the Job goes, the running pod with it, and the waiting node is withdrawn.
    emulator = dws_emulator_factory({L4: NODE_GPUS})
    result = airflow_home.run_dag_test(
        DAG_ID,
        emulator.address,
        tmp_path / "run.log",
        env={"DWS_EXAMPLE_MAX_WAIT_SECONDS": "8"},
        conf={"run_seconds": 600},
    )
    assert result.returncode != 0
    assert "CapacityNotObtainedError" in result.log, result.log[-4000:]
    assert "(it last said: 1 of 2 pods have a node" in result.log, result.log[-4000:]
    assert "DWS RESULT" not in result.log
    nodes = flex_nodes(emulator)
    assert sorted(n["state"] for n in nodes) in (["RUNNING", "WITHDRAWN"], ["SCALED_DOWN", "WITHDRAWN"]), (
        nodes
    )
    objects = assert_nothing_left(emulator)
    assert names(objects["jobs"]) == []  # given up: deleted, pods and all
    [rec] = records(airflow_home.home, DAG_ID)["evaluate"]
    assert rec.phase == "not_obtained"


def test_a_failing_workload_fails_the_task_as_a_workload_failure(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory({L4: PODS * NODE_GPUS})
    result = airflow_home.run_dag_test(
        DAG_ID, emulator.address, tmp_path / "run.log", conf={"exit_code": 3, "run_seconds": 1}
    )
    assert result.returncode != 0
    assert "WorkloadFailedError" in result.log, result.log[-4000:]
    assert "CapacityNotObtainedError" not in result.log and "DWS RESULT" not in result.log
    objects = assert_nothing_left(emulator)
    [job] = objects["jobs"]  # a failed Job is kept, for its pods' logs
    assert any(c["type"] == "Failed" and c["status"] == "True" for c in job["status"]["conditions"])
    [rec] = records(airflow_home.home, DAG_ID)["evaluate"]
    assert rec.phase == "failed"

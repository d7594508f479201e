"""The CI-sized fault matrix: one real Airflow deployment, the ``ci`` scenarios, every row must PASS.

``make faults`` runs every scenario; this test runs the subset that fits the CI budget (about
three minutes on two cores). It needs the local PostgreSQL server the matrix creates its
throwaway database on, and is skipped, saying so, when that server cannot be reached (outside
CI; under ``CI`` it fails instead, since CI provides the server).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.faults import matrix
from tests.faults.harness import HarnessError, probe_postgres

pytestmark = [pytest.mark.airflow, pytest.mark.emulator]


@pytest.mark.timeout(1200)
def test_ci_fault_matrix(tmp_path: Path) -> None:
    unreachable = probe_postgres()
    if unreachable:
        if os.environ.get("CI"):
            pytest.fail(f"CI provides PostgreSQL on 127.0.0.1:5432, but: {unreachable}")
        pytest.skip(f"the fault matrix needs PostgreSQL: {unreachable}")
    try:
        rows, report = matrix.run(ci=True, workdir=tmp_path)
    except HarnessError as err:
        pytest.fail(f"the fault-matrix deployment failed: {err} (logs in {tmp_path})")
    print(report)
    failed = [row.scenario for row in rows if not row.passed]
    assert not failed, f"FAIL: {', '.join(failed)} (logs in {tmp_path})\n{report}"


def test_executor_selection() -> None:
    """Each executor gets every scenario that runs on it; the Celery-only kill never runs on local."""
    local = [s.name for s in matrix.select(executor="local")]
    celery = [s.name for s in matrix.select(executor="celery")]
    assert "celery_worker_sigkill" in celery
    assert "celery_worker_sigkill" not in local
    assert set(local) <= set(celery)
    assert [s.name for s in matrix.select(["celery_worker_sigkill"], executor="local")] == []
    # The CI subset: the CeleryExecutor added none (make test stays LocalExecutor); Cloud Batch
    # added two rows that run side by side with the others.
    assert [s.name for s in matrix.select(ci=True, executor="local")] == [
        "triggerer_sigkill",
        "worker_sigkill_after_submit",
        "user_marks_failed",
        "execution_timeout",
        "batch_worker_sigkill_after_submit",
        "batch_user_marks_failed",
        "compute_worker_sigkill_after_submit",
        "compute_user_marks_failed",
        "gke_worker_sigkill_after_submit",
        "kueue_user_marks_failed",
        "user_clears_succeeded_task",
    ]


def test_side_by_side_scenarios_have_pools_of_their_own() -> None:
    """Every scenario that runs side by side has a region, and no two share one; each pool exists."""
    from tests.faults.context import H100, L4
    from tests.faults.scenarios import REGIONS, emulator_pools
    from tests.faults.tpu_scenarios import tpu_pool

    side_by_side = [s.name for s in matrix.SCENARIOS if not s.shared]
    assert sorted(REGIONS) == sorted(side_by_side)
    assert len(set(REGIONS.values())) == len(REGIONS)
    pools = emulator_pools()
    assert all(
        pools[f"{r}/{H100}"] == 0 and pools[f"{r}/{L4}"] == 0 and pools[tpu_pool(r)] == 0
        for r in REGIONS.values()
    )


def test_main_runs_each_chosen_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--executor both`` runs LocalExecutor then CeleryExecutor, and skips one no chosen scenario runs on."""
    from tests.faults import __main__ as cli

    seen: list[str] = []

    def fake_run(names: object, ci: bool, keep: bool, executor: str) -> tuple[list[matrix.Row], str]:
        seen.append(executor)
        return [], f"{executor} table"

    monkeypatch.setattr(matrix, "run", fake_run)
    # What is tested is the choice of executors: compiling the whole virtualenv's bytecode (what a
    # real run does first) took minutes of both cores of a fresh clone's `make test`.
    monkeypatch.setattr(cli, "compile_bytecode", lambda *trees: 0.0)
    assert cli.main(["--executor", "both"]) == 0
    assert seen == ["local", "celery"]
    seen.clear()
    assert cli.main(["--only", "celery_worker_sigkill"]) == 0
    assert seen == ["celery"]


def test_a_runs_requests_are_found_among_every_kind() -> None:
    """A ProvisioningRequest of the run is found after a resize request of another (the full
    matrix's emulator holds every kind; the first GKE triggerer rows failed on that)."""
    from airflow_provider_dws.scheduling.identity import RequestIdentity
    from tests.faults.context import RunRef, own_requests

    ref = RunRef("gke", "dws_fault_gke_request", "fm-gke-x-1", "request_nodes")
    other = RequestIdentity("dws_fault_compute_vms", "ask_for_vms", "fm-vm-1").queued_resource_base()
    key = RequestIdentity(ref.dag_id, ref.request_task, ref.run_id).key
    records = [
        {"kind": "ResizeRequest", "display_name": f"{other}-t1-a1", "labels": {}},
        {
            "kind": "ProvisioningRequest",
            "display_name": "dws-request-nodes-x-t1-a1",
            "labels": {"dws_key": key},
        },
    ]
    assert own_requests(records, ref) == records[1:]


def test_a_jobs_flex_start_nodes_are_one_request() -> None:
    """The emulator's flex-start node records of one Job's pods (one identity, try and attempt) are
    one request of the run: WAITING while a node is asked for, RELEASED once its pods ran and ended
    (an empty node left for the autoscaler is not live), DELETED when none came up."""
    from airflow_provider_dws.scheduling.identity import RequestIdentity
    from tests.faults.context import RunRef, cancel_time, is_live, own_requests

    ref = RunRef("gke", "dws_fault_gke_flex", "fm-flex-1", "evaluate")
    labels = {
        **RequestIdentity(ref.dag_id, ref.request_task, ref.run_id).kube_labels(),
        "batch.kubernetes.io/job-name": "dws-evaluate-x-t1-a1",
    }

    def node(state: str, pods: list[str], active: list[str], start: str | None, end: str | None) -> dict:
        return {
            "kind": "FlexStartNode",
            "name": "n",
            "display_name": "p",
            "namespace": "default",
            "labels": labels,
            "state": state,
            "pods": pods,
            "active_pods": active,
            "create_time": "2026-12-07T10:00:00Z",
            "start_time": start,
            "end_time": end,
            "history": [],
        }

    up = node("RUNNING", ["p1"], ["p1"], "2026-12-07T10:00:05Z", None)
    asked = node("WAITING", [], [], None, None)
    [waiting] = own_requests([up, asked], ref)
    assert (waiting["kind"], waiting["state"], waiting["display_name"]) == (
        "FlexStartJob",
        "WAITING",
        "dws-evaluate-x-t1-a1",
    )
    assert is_live(waiting)
    empty = node("RUNNING", ["p1"], [], "2026-12-07T10:00:05Z", None)
    withdrawn = node("WITHDRAWN", [], [], None, "2026-12-07T10:01:00Z")
    [released] = own_requests([empty, withdrawn], ref)
    assert released["state"] == "RELEASED" and not is_live(released)
    [deleted] = own_requests([withdrawn], ref)
    assert deleted["state"] == "DELETED" and cancel_time(deleted) is not None

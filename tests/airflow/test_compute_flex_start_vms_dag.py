"""Ring 3: the Compute Engine flex-start VMs example (setup, work, teardown) by `airflow dags test`
against a live dws-emulator. After every run the emulator must hold no resize request waiting and
no VM running."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import AirflowHome, ExampleRun, no_record_warnings, records

pytestmark = [pytest.mark.airflow, pytest.mark.emulator]

DAG_ID = "dws_compute_flex_start_vms"
H100 = "us-central1/NVIDIA_H100_80GB"


def resize_requests(emulator: Any) -> list[dict[str, Any]]:
    return [r for r in emulator.control.requests() if r["kind"] == "ResizeRequest"]


def assert_nothing_left(emulator: Any) -> list[dict[str, Any]]:
    """No request left waiting or undeleted, no VM left, and the H100 pool is whole again."""
    found = resize_requests(emulator)
    left = [
        (r["name"], r["state"]) for r in found if not r["deleted"] or r["state"] in ("CREATING", "ACCEPTED")
    ]
    assert left == [], f"resize requests left behind: {left}"
    running = [vm for r in found for vm in r["instances"] if vm.get("status") == "RUNNING"]
    assert running == [], f"VMs left running: {running}"
    pool = emulator.control.capacity()[H100]
    assert pool["in_use"] == 0 and pool["queued"] == 0, pool
    return found


def check_example(run: ExampleRun) -> None:
    """The example as `make demo` ran it (`test_dws_page_after_demo.py`)."""
    line = next(line for line in run.log.splitlines() if "DWS VMS:" in line)
    assert "gave 4 x a3-highgpu-8g (32 GPUs) in us-central1-a" in line
    hosts = [line for line in run.log.splitlines() if line.startswith("  host ")]
    assert len(hosts) == 4
    [request] = assert_nothing_left(run.emulator)
    assert request["state"] == "SUCCEEDED" and request["vms_deleted"]
    assert request["requested_run_duration_seconds"] == 6 * 3600
    assert request["accelerator_count"] == 32
    no_record_warnings(run.log)
    by_task = records(run.home, DAG_ID)
    [held] = by_task["ask_for_vms"]
    [released] = by_task["release_vms"]
    assert held.api == "compute_resize_request" and held.accelerator_count == 32
    assert released.request_name == held.request_name == request["name"]
    assert (released.phase, released.holds) == ("succeeded", False)


def test_a_failing_workload_still_releases_the_vms(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory({H100: 32})
    result = airflow_home.run_dag_test(
        DAG_ID, emulator.address, tmp_path / "run.log", conf={"fail_workload": True}
    )
    assert "the training step failed (simulated)" in result.log, result.log[-4000:]
    assert "is released: nothing of it is billed any more" in result.log
    [request] = assert_nothing_left(emulator)
    assert request["state"] == "SUCCEEDED"


def test_capacity_that_never_comes_leaves_no_request_waiting(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory({H100: 16})  # 32 H100s never fit
    result = airflow_home.run_dag_test(
        DAG_ID, emulator.address, tmp_path / "run.log", env={"DWS_EXAMPLE_COMPUTE_MAX_WAIT_SECONDS": "3"}
    )
    assert "CapacityNotObtainedError" in result.log, result.log[-4000:]
    assert "no capacity within max wait 0:00:03 in us-central1-a for 4 VMs" in result.log
    assert "DWS VMS:" not in result.log
    [request] = assert_nothing_left(emulator)
    assert request["state"] == "CANCELLED" and request["instances"] == []

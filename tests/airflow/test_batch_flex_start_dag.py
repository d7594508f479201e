"""Ring 3: the Cloud Batch example DAG run by `airflow dags test` against a live dws-emulator.

As for the Vertex example: the job the DAG reports is the one the emulator recorded, with lower
bounds only on times (a loaded machine makes the processes slower, never the job shorter).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import AirflowHome, ExampleRun, no_record_warnings, records

pytestmark = [pytest.mark.airflow, pytest.mark.emulator]

DAG_ID = "dws_batch_flex_start"
L4 = "us-central1/NVIDIA_L4"
SHARDS = 16
_RESULT = re.compile(r"DWS RESULT: job (?P<name>\S+) (?P<state>[A-Z_]+) \((?P<counts>[^)]*)\); waited")


def _jobs(emulator: Any) -> list[dict[str, Any]]:
    return [r for r in emulator.control.requests() if r.get("kind") == "BatchJob"]


def _states(job: dict[str, Any]) -> list[str]:
    return [step["state"] for step in job["history"]]


def check_example(run: ExampleRun) -> None:
    """The example as `make demo` ran it (`test_dws_page_after_demo.py`)."""
    match = _RESULT.search(run.log)
    assert match is not None, run.log[-4000:]
    assert match["state"] == "SUCCEEDED"
    assert f"'SUCCEEDED': {SHARDS}" in match["counts"]
    assert "Deferring" in run.log
    [job] = _jobs(run.emulator)
    assert job["name"] == match["name"]
    assert job["state"] == "SUCCEEDED"
    assert job["strategy"] == "FLEX_START"
    # All 16 VMs at once, one L4 each: the whole set is what DWS had to find.
    assert (job["vms"], job["accelerator_count"], job["task_count"]) == (SHARDS, SHARDS, SHARDS)
    assert job["labels"]["dws_dag"] == DAG_ID
    assert job["labels"]["dws_task"] == "infer"
    assert job["labels"]["team"] == "research"
    assert _states(job)[-2:] == ["RUNNING", "SUCCEEDED"]
    # The job id is the task identity's, not a random one: a retry finds it again.
    assert re.fullmatch(r"dws-infer-[0-9a-f]{16}-t1-a1", job["name"].rsplit("/", 1)[1])
    # The request record counts the GPUs the emulator's capacity model charged.
    no_record_warnings(run.log)
    [rec] = records(run.home, DAG_ID)["infer"]
    assert (rec.request_name, rec.phase, rec.api) == (job["name"], "succeeded", "batch_job")
    assert rec.accelerator_count == job["accelerator_count"] == SHARDS


def test_max_wait_passing_cancels_the_job_and_fails_with_capacity_message(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    # 15 L4s for a job that needs 16 at once: it waits in the queue until the provider gives up.
    emulator = dws_emulator_factory({L4: SHARDS - 1})
    result = airflow_home.run_dag_test(
        DAG_ID, emulator.address, tmp_path / "run.log", env={"DWS_EXAMPLE_MAX_WAIT_SECONDS": "3"}
    )
    assert result.returncode != 0
    assert "CapacityNotObtainedError" in result.log, result.log[-4000:]
    assert "no capacity within max wait 0:00:03 in us-central1" in result.log
    assert "DWS RESULT" not in result.log
    [job] = _jobs(emulator)
    # Batch has no max-wait field: the provider cancelled the job, and nothing is left waiting.
    assert job["state"] == "CANCELLED", _states(job)
    assert "RUNNING" not in _states(job)
    assert emulator.control.capacity()[L4]["queued"] == 0


def test_failing_shards_fail_the_task_as_a_workload_failure(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory({L4: SHARDS})
    result = airflow_home.run_dag_test(
        DAG_ID, emulator.address, tmp_path / "run.log", conf={"exit_code": 3, "run_seconds": 1}
    )
    assert result.returncode != 0
    assert "WorkloadFailedError" in result.log, result.log[-4000:]
    assert "workload failed" in result.log
    assert "no capacity" not in result.log
    [job] = _jobs(emulator)
    assert job["state"] == "FAILED"
    assert "RUNNING" in _states(job)

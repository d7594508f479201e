"""Ring 3: the TPU setup/work/teardown example DAG by `airflow dags test` against a live dws-emulator.

After every run the emulator must hold no queued resource that is not deleted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import AirflowHome, ExampleRun, no_record_warnings, records

pytestmark = [pytest.mark.airflow, pytest.mark.emulator]

DAG_ID = "dws_tpu_queued_resource"
V5E = "us-west4-a/v5litepod"


def queued_resources(emulator: Any) -> list[dict[str, Any]]:
    return [r for r in emulator.control.requests() if r["kind"] == "QueuedResource"]


def assert_nothing_left(emulator: Any) -> list[dict[str, Any]]:
    """Every queued resource the run created is deleted, and the pool is whole again."""
    records = queued_resources(emulator)
    left = [(r["name"], r["state"]) for r in records if not r["deleted"]]
    assert left == [], f"queued resources left behind: {left}"
    pool = emulator.control.capacity()[V5E]
    assert pool["in_use"] == 0 and pool["queued"] == 0, pool
    return records


def states(record: dict[str, Any]) -> list[str]:
    return [step["state"] for step in record["history"]]


def check_example(run: ExampleRun) -> None:
    """The example as `make demo` ran it (`test_dws_page_after_demo.py`)."""
    slice_line = next(line for line in run.log.splitlines() if "TPU SLICE:" in line)
    assert "v5litepod-16 (16 chips) on 4 host(s)" in slice_line
    assert "Deferring: the request waits in the DWS queue" in run.log
    assert "is gone; the slice is no longer billed" in run.log
    # This example's slice (the demo's calendar example has one of its own).
    [record] = [r for r in assert_nothing_left(run.emulator) if r["labels"].get("dws_dag") == DAG_ID]
    assert "ACTIVE" in states(record)
    assert record["accelerator_type"] == "v5litepod-16"
    assert record["labels"]["dws_task"] == "request_tpu_slice"
    assert record["labels"]["team"] == "research"
    # The records: the slice held by its setup task, then released by its teardown task.
    no_record_warnings(run.log)
    by_task = records(run.home, DAG_ID)
    [held] = by_task["request_tpu_slice"]
    [released] = by_task["release_tpu_slice"]
    assert (held.phase, held.holds, held.accelerator_count) == ("running", True, 16)
    assert held.held_since is not None and held.released is None
    assert released.request_name == held.request_name == record["name"]
    assert (released.phase, released.holds, released.accelerator_count) == ("succeeded", False, 16)
    assert released.released is not None


def test_a_failing_workload_still_releases_the_slice(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory()
    result = airflow_home.run_dag_test(
        DAG_ID, emulator.address, tmp_path / "run.log", conf={"fail_workload": True}
    )
    assert "the training step failed (simulated)" in result.log, result.log[-4000:]
    assert "is gone; the slice is no longer billed" in result.log
    [record] = assert_nothing_left(emulator)
    assert "ACTIVE" in states(record)


def test_capacity_that_never_comes_fails_with_the_capacity_message_and_leaves_nothing(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory({V5E: 0})
    result = airflow_home.run_dag_test(
        DAG_ID, emulator.address, tmp_path / "run.log", env={"DWS_EXAMPLE_TPU_MAX_WAIT_SECONDS": "3"}
    )
    assert "CapacityNotObtainedError" in result.log, result.log[-4000:]
    assert "no TPU capacity within max wait 0:00:03 in us-west4-a for v5litepod-16 (16 chips)" in result.log
    assert "TPU SLICE:" not in result.log
    [record] = assert_nothing_left(emulator)
    assert "ACTIVE" not in states(record)
    assert "FAILED" in states(record)

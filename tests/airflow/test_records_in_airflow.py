"""Ring 3: the request records a real Airflow writes (``airflow dags test`` against a live
dws-emulator, the task SDK's own XCom push and pull), read back from the metadata database."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_dws.records import XCOM_KEY, RequestRecord, read_records
from tests.airflow.conftest import AirflowHome

pytestmark = [pytest.mark.airflow, pytest.mark.emulator]


def records(home: AirflowHome, dag_id: str) -> dict[str, list[RequestRecord]]:
    """Each task's ``dws_requests`` of the DAG's latest run."""
    with sqlite3.connect(home.home / "airflow.db") as db:
        run_id = db.execute(
            "SELECT run_id FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1", (dag_id,)
        ).fetchone()[0]
        rows = db.execute(
            "SELECT task_id, value FROM xcom WHERE dag_id = ? AND run_id = ? AND key = ?",
            (dag_id, run_id, XCOM_KEY),
        ).fetchall()
    out = {}
    for task_id, value in rows:
        decoded: Any = json.loads(value) if isinstance(value, (str, bytes)) else value
        out[task_id] = read_records(json.loads(decoded) if isinstance(decoded, str) else decoded)
    return out


def no_record_warnings(log: str) -> None:
    for warning in (
        "Could not write the request record",
        "Could not read the dws_requests",
        "Could not keep the request records",
        "Could not read the earlier tries",
        "Could not send DWS metric",
    ):
        assert warning not in log


def test_the_vertex_example_records_its_job_succeeded(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory()
    result = airflow_home.run_dag_test("dws_vertex_flex_start", emulator.address, tmp_path / "run.log")
    assert result.returncode == 0, result.log[-4000:]
    no_record_warnings(result.log)
    [record] = records(airflow_home, "dws_vertex_flex_start")["fine_tune"]
    [job] = [r for r in emulator.control.requests() if r.get("kind") == "CustomJob"]
    assert record.request_name == job["name"]
    assert (record.phase, record.outcome, record.api) == ("succeeded", "succeeded", "vertex_custom_job")
    assert record.started and record.ended and record.accelerator_count > 0


def test_the_tpu_example_records_the_slice_held_then_released(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory()
    result = airflow_home.run_dag_test("dws_tpu_queued_resource", emulator.address, tmp_path / "run.log")
    assert result.returncode == 0, result.log[-4000:]
    no_record_warnings(result.log)
    by_task = records(airflow_home, "dws_tpu_queued_resource")
    [held] = by_task["request_tpu_slice"]
    [released] = by_task["release_tpu_slice"]
    assert (held.phase, held.holds, held.accelerator_count) == ("running", True, 16)
    assert held.held_since is not None and held.released is None
    assert released.request_name == held.request_name
    assert (released.phase, released.holds, released.accelerator_count) == ("succeeded", False, 16)
    assert released.released is not None


def test_the_batch_example_records_the_gpus_the_emulator_counted(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory({"us-central1/NVIDIA_L4": 16})
    result = airflow_home.run_dag_test(
        "dws_batch_flex_start", emulator.address, tmp_path / "run.log", conf={"run_seconds": 1}
    )
    assert result.returncode == 0, result.log[-4000:]
    no_record_warnings(result.log)
    [record] = records(airflow_home, "dws_batch_flex_start")["infer"]
    [job] = [r for r in emulator.control.requests() if r.get("kind") == "BatchJob"]
    assert (record.request_name, record.phase, record.api) == (job["name"], "succeeded", "batch_job")
    # The record's count of GPUs is the one the emulator's capacity model charged.
    assert record.accelerator_count == job["accelerator_count"] == 16

"""Ring 3: the example DAG run by `airflow dags test` against a live dws-emulator.

The times the DAG reports are checked against the times the emulator recorded for the job, with
lower bounds only: a loaded machine makes the three processes slower, never the job shorter.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_dws.compat import MISSING_VARIABLE_LOGS_ERROR
from airflow_provider_dws.forecast import span
from airflow_provider_dws.records import parse_time
from tests.airflow.conftest import AirflowHome, DagRunResult, ExampleRun, finish, no_record_warnings, records

pytestmark = [pytest.mark.airflow, pytest.mark.emulator]

DAG_ID = "dws_vertex_flex_start"
H100 = "us-central1/NVIDIA_H100_80GB"
#: A region no other test of the session asks in: its wait history is this module's alone.
ALONE_REGION = "europe-west4"
ALONE = f"{ALONE_REGION}/NVIDIA_H100_80GB"
_RESULT = re.compile(r"waited (?P<wait>[\d.]+)s for capacity, ran (?P<run>[\d.]+)s")


def _jobs(emulator: Any) -> list[dict[str, Any]]:
    return [r for r in emulator.control.requests() if r.get("kind") == "CustomJob"]


def _wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _states(job: dict[str, Any]) -> list[str]:
    return [step["state"] for step in job["history"]]


def _between(job: dict[str, Any], start: str, end: str) -> float:
    """Seconds between two of the emulator's recorded times of ``job``."""

    def at(key: str) -> datetime:
        return datetime.fromisoformat(job[key].replace("Z", "+00:00"))  # 3.10 does not read "Z"

    return (at(end) - at(start)).total_seconds()


# The DWS RESULT line prints tenths of a second; the emulator records milliseconds.
PRINTED = 0.051


def check_example(run: ExampleRun) -> None:
    """The example as `make demo` ran it (`test_dws_page_after_demo.py`)."""
    line = DagRunResult(0, run.log).result_line()
    assert "JOB_STATE_SUCCEEDED" in line
    run_seconds = float(_RESULT.search(line)["run"])  # type: ignore[index]
    assert "Deferring: the request waits in the DWS queue" in run.log
    jobs = [j for j in _jobs(run.emulator) if j["labels"].get("dws_dag") == DAG_ID]  # not the demo's others
    assert len(jobs) == 1
    job = jobs[0]
    # The job's own run time (end - start), and at least the 5 s the example asks for.
    assert run_seconds == pytest.approx(_between(job, "start_time", "end_time"), abs=PRINTED), line
    assert run_seconds >= 5.0 - PRINTED, line
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    assert job["strategy"] == "FLEX_START"
    assert job["labels"]["dws_dag"] == "dws_vertex_flex_start"
    assert job["labels"]["dws_task"] == "fine_tune"
    assert job["labels"]["team"] == "research"
    assert _states(job)[-2:] == ["JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"]
    # The request record the page and the savings read: one, ended succeeded, with its GPUs.
    no_record_warnings(run.log)
    [record] = records(run.home, DAG_ID)["fine_tune"]
    assert record.request_name == job["name"]
    assert (record.phase, record.outcome, record.api) == ("succeeded", "succeeded", "vertex_custom_job")
    assert record.started and record.ended and record.accelerator_count > 0


def test_capacity_arriving_late_defers_then_succeeds_and_the_next_request_is_told_that_wait(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    """A job waits for capacity the test holds back; then a second run of the same shape, in the
    same deployment, reads that wait from the wait history and says it in its log at submit, with
    the most it can cost (docs/forecast.md). The runs are in a region no other test of the session
    uses, so the history they read is their own."""
    emulator = dws_emulator_factory({ALONE: 0})
    log = tmp_path / "run.log"
    proc = airflow_home.start_dag_test(
        DAG_ID, emulator.address, log, env={"DWS_EXAMPLE_REGION": ALONE_REGION}
    )
    try:
        _wait_for(
            lambda: [j for j in _jobs(emulator) if j["state"] == "JOB_STATE_PENDING"], 120, "a pending job"
        )
        held = 2.5
        time.sleep(held)  # the job waits in the queue that long at least
        emulator.control.set_capacity({ALONE: 8})
    finally:
        result = finish(proc, log)
    assert result.returncode == 0, result.log[-4000:]
    match = _RESULT.search(result.result_line())
    assert match is not None
    assert "Waiting for capacity [JOB_STATE_PENDING], waited " in result.log
    jobs = _jobs(emulator)
    assert len(jobs) == 1
    # The wait reported is the job's own (start - create), and covers the time capacity was held back.
    waited = float(match["wait"])
    assert waited == pytest.approx(_between(jobs[0], "create_time", "start_time"), abs=PRINTED)
    assert waited >= held - PRINTED, result.result_line()
    assert "JOB_STATE_PENDING" in _states(jobs[0])
    assert jobs[0]["state"] == "JOB_STATE_SUCCEEDED"
    if MISSING_VARIABLE_LOGS_ERROR:
        # Airflow 3.1: no Variable that may be absent is read, so no error line, and no forecast.
        assert "Variable not found" not in result.log and "Expected wait" not in result.log
        return
    assert "Expected wait: too little history for a forecast (0 similar requests" in result.log

    [record] = records(airflow_home.home, DAG_ID)["fine_tune"]
    recorded = (parse_time(record.started) - parse_time(record.submitted)).total_seconds()  # type: ignore[operator]
    prices = {"NVIDIA_H100_80GB": {"flex_start": 2.5, "standard": 5.0, "spot": 1.5}, "_as_of": "2026-11-01"}
    env = {"DWS_EXAMPLE_REGION": ALONE_REGION, "AIRFLOW_VAR_DWS_PRICES": json.dumps(prices)}
    second = airflow_home.run_dag_test(DAG_ID, emulator.address, tmp_path / "second.log", env=env)
    assert second.returncode == 0, second.log[-4000:]
    assert (
        "Expected wait: too little history for a forecast (1 similar request in the last 30 days, 5 needed; "
        f"Vertex AI custom job in {ALONE_REGION}, nvidia_h100_80gb x 5-8); it waited {span(recorded)}"
    ) in second.log, second.log[-4000:]
    # The most it can cost: 8 GPUs x 6 h (the example's max_run) at the table's prices.
    assert (
        "At most $120.00 for this request: 8 accelerators x 6 h (max_run) x $2.50 (flex_start); "
        "on demand $240.00, Spot $72.00 (prices: Airflow Variable dws_prices, as of 2026-11-01)"
    ) in second.log
    [again] = records(airflow_home.home, DAG_ID)["fine_tune"]
    assert again.max_run_seconds == 6 * 3600
    # Too little history: no forecast is kept on the record, so none is judged later.
    assert again.expected_wait_p50_seconds is None and again.expected_wait_basis == 0


def test_max_wait_passing_fails_with_capacity_message(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory({H100: 0})
    result = airflow_home.run_dag_test(
        DAG_ID, emulator.address, tmp_path / "run.log", env={"DWS_EXAMPLE_MAX_WAIT_SECONDS": "3"}
    )
    assert "CapacityNotObtainedError" in result.log, result.log[-4000:]
    assert "no capacity within max wait 0:00:03 in us-central1 for 8 x NVIDIA_H100_80GB" in result.log
    assert "DWS RESULT" not in result.log
    jobs = _jobs(emulator)
    assert len(jobs) == 1
    assert jobs[0]["state"] == "JOB_STATE_FAILED"
    assert "JOB_STATE_RUNNING" not in _states(jobs[0])


def test_workload_exit_code_fails_with_workload_message(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory()
    result = airflow_home.run_dag_test(
        DAG_ID, emulator.address, tmp_path / "run.log", conf={"exit_code": 3, "run_seconds": 1}
    )
    assert "WorkloadFailedError" in result.log, result.log[-4000:]
    assert "workload failed: exit code 3" in result.log
    assert "no capacity" not in result.log
    jobs = _jobs(emulator)
    assert len(jobs) == 1
    assert jobs[0]["state"] == "JOB_STATE_FAILED"
    assert "JOB_STATE_RUNNING" in _states(jobs[0])


def test_rerun_of_a_task_whose_job_is_running_reattaches(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory()
    conf = {"run_seconds": 600}
    first_log = tmp_path / "first.log"
    first = airflow_home.start_dag_test(DAG_ID, emulator.address, first_log, conf=conf)
    try:
        _wait_for(
            lambda: [j for j in _jobs(emulator) if j["state"] == "JOB_STATE_RUNNING"], 120, "a running job"
        )
    finally:
        # The worker dies while its job runs: nothing gets to cancel or clean up.
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    run_ids = re.findall(r"run_id=(manual__[^\s,]+)", first_log.read_text())
    assert run_ids, first_log.read_text()[-3000:]
    # Run the same task instance again (same dag run), as a retry or a cleared task would.
    second_log = tmp_path / "second.log"
    second = airflow_home.start_task_test(DAG_ID, "fine_tune", run_ids[0], emulator.address, second_log)
    try:
        # The trigger looks the job up after the task defers: wait for its adoption, not the deferral
        # (a cancel before the lookup would leave nothing live to adopt).
        _wait_for(lambda: "Found live request" in second_log.read_text(), 180, "the re-run to adopt the job")
        log = second_log.read_text()
        assert "Found live request" in log
        assert "Submitted Flex Start job" not in log
        [job] = _jobs(emulator)
        assert job["state"] == "JOB_STATE_RUNNING"
        # Cancel it from outside (a 600 s job is not worth waiting for): the re-run sees it end.
        import grpc
        from google.cloud.aiplatform_v1 import JobServiceClient
        from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport

        client = JobServiceClient(
            transport=JobServiceGrpcTransport(channel=grpc.insecure_channel(emulator.address))
        )
        client.cancel_custom_job(name=job["name"])
    finally:
        result = finish(second, second_log)
    assert "RequestCancelledError" in result.log, result.log[-3000:]
    assert len(_jobs(emulator)) == 1

"""Ring 3: the off-peak pipeline (window, deadline, capacity retries, failover) by `airflow dags test`.

Windows and waits are shrunk to seconds through the example's DWS_EXAMPLE_* variables.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import AirflowHome

pytestmark = [pytest.mark.airflow, pytest.mark.emulator]

DAG_ID = "dws_offpeak_pipeline"
CENTRAL = "us-central1/NVIDIA_H100_80GB"
EAST = "us-east4/NVIDIA_H100_80GB"
#: Seconds `airflow dags test` gets to start and reach its first task (a generous bound, not a timing).
STARTUP_MARGIN = 90


def utc_window(opens: datetime, closes: datetime) -> str:
    """A daily window spec in UTC with second resolution (test-sized)."""
    return f"daily {opens:%H:%M:%S}-{closes:%H:%M:%S} UTC"


def jobs(emulator: Any) -> list[dict[str, Any]]:
    return [r for r in emulator.control.requests() if r["kind"] == "CustomJob"]


def live(emulator: Any) -> list[dict[str, Any]]:
    ended = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"}
    return [j for j in jobs(emulator) if j["state"] not in ended]


def env_for(window: str, deadline: datetime, **extra: str) -> dict[str, str]:
    return {
        "DWS_EXAMPLE_WINDOW": window,
        "DWS_EXAMPLE_DEADLINE": deadline.isoformat(),
        "DWS_EXAMPLE_MAX_WAIT_SECONDS": "600",
        "DWS_EXAMPLE_BACKOFF_SECONDS": "1",
        **extra,
    }


def test_task_outside_its_window_defers_and_submits_when_it_opens(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory()
    now = datetime.now(timezone.utc).replace(microsecond=0)
    # The task must find the window still shut: `airflow dags test` took over 40 s to reach it on
    # a loaded 2-core machine, so the window opens well after that.
    opens = now + timedelta(seconds=STARTUP_MARGIN)
    env = env_for(utc_window(opens, opens + timedelta(minutes=3)), now + timedelta(minutes=10))
    result = airflow_home.run_dag_test(DAG_ID, emulator.address, tmp_path / "run.log", env=env)
    assert result.returncode == 0, result.log[-4000:]
    assert "outside the off-peak window" in result.log
    assert "EVALUATE:" in result.log and "after 1 attempt(s)" in result.log
    [job] = jobs(emulator)
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    assert datetime.fromisoformat(job["create_time"]) >= opens


def test_no_capacity_in_home_region_fails_over_and_succeeds(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory({CENTRAL: 0, EAST: 8})
    now = datetime.now(timezone.utc).replace(microsecond=0)
    env = env_for(
        utc_window(now - timedelta(minutes=1), now + timedelta(minutes=30)),
        now + timedelta(minutes=10),
        DWS_EXAMPLE_MAX_WAIT_SECONDS="3",
    )
    result = airflow_home.run_dag_test(DAG_ID, emulator.address, tmp_path / "run.log", env=env)
    assert result.returncode == 0, result.log[-4000:]
    assert "attempt 2 in us-east4 after no capacity in us-central1 within 0:00:03" in result.log
    assert "after 2 attempt(s)" in result.log
    first, second = jobs(emulator)
    assert first["location"] == "us-central1" and first["state"] == "JOB_STATE_FAILED"
    assert first["start_time"] is None
    assert second["location"] == "us-east4" and second["state"] == "JOB_STATE_SUCCEEDED"
    assert first["labels"]["dws_key"] == second["labels"]["dws_key"]
    assert (first["labels"]["dws_attempt"], second["labels"]["dws_attempt"]) == ("1", "2")
    assert live(emulator) == []


def test_a_passing_deadline_ends_the_task_with_the_attempt_summary_and_nothing_queued(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory({CENTRAL: 0, EAST: 0})
    now = datetime.now(timezone.utc).replace(microsecond=0)
    deadline = now + timedelta(seconds=45)
    env = env_for(utc_window(now - timedelta(minutes=1), now + timedelta(minutes=30)), deadline)
    result = airflow_home.run_dag_test(DAG_ID, emulator.address, tmp_path / "run.log", env=env)
    assert result.returncode != 0 or "CapacityNotObtainedError" in result.log
    assert "CapacityNotObtainedError" in result.log, result.log[-4000:]
    assert "EVALUATE:" not in result.log
    assert live(emulator) == []
    submitted = jobs(emulator)
    assert len(submitted) <= 2
    for job in submitted:
        assert job["state"] == "JOB_STATE_FAILED"
        # No wait was allowed to extend past the deadline.
        assert datetime.fromisoformat(job["end_time"]) <= deadline + timedelta(seconds=5)
    if submitted:
        assert "attempt 1 in us-central1" in result.log

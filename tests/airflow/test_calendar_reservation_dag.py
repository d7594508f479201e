"""Ring 3: the calendar-mode example (find a 7-day block, reserve it and a TPU block of the same week,
wait for the delivery, train on the block with the Vertex AI reserved operator, evaluate on a TPU slice
of the other block, release everything) by `airflow dags test` against a live dws-emulator. Both
blocks are booked once, the workloads run on their reservations, and nothing is left afterwards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import AirflowHome, no_record_warnings, records

pytestmark = [pytest.mark.airflow, pytest.mark.emulator]

DAG_ID = "dws_calendar_reservation"
#: The demo's knobs: blocks may start 20 s ahead (the reserve runs before that), poll every second.
FAST = {"DWS_EXAMPLE_CALENDAR_EARLIEST_START_SECONDS": "20", "DWS_EXAMPLE_POLL_INTERVAL": "1"}


def of_kind(emulator: Any, kind: str) -> list[dict[str, Any]]:
    return [r for r in emulator.control.requests() if r["kind"] == kind]


def test_example_reserves_a_week_trains_and_evaluates_on_it_and_releases_it(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory()  # the default inventory: 64 H100s a day in us-central1-a
    result = airflow_home.run_dag_test(DAG_ID, emulator.address, tmp_path / "run.log", env=FAST)
    assert result.returncode == 0, result.log[-6000:]
    line = next(line for line in result.log.splitlines() if "DWS CALENDAR:" in line)
    assert "JOB_STATE_SUCCEEDED on projects/" in line and "(v5litepod-8, 8 chips) in us-west4-a" in line

    gpu, tpu = sorted(of_kind(emulator, "FutureReservation"), key=lambda b: b["location"] != "us-central1-a")
    assert gpu["location"] == "us-central1-a" and tpu["location"] == "us-west4-a"  # each booked once
    assert gpu["deleted"] and tpu["deleted"] and not gpu["reservation_live"] and not tpu["reservation_live"]
    [job] = of_kind(emulator, "CustomJob")
    assert job["state"] == "JOB_STATE_SUCCEEDED" and job["reservation"] == gpu["reservation"]
    [slice_] = of_kind(emulator, "QueuedResource")
    assert slice_["deleted"] and slice_["reservation"].endswith(tpu["reservation"].rsplit("/", 1)[-1])

    no_record_warnings(result.log)
    by_task = records(airflow_home, DAG_ID)
    [trained] = by_task["train"]
    assert (trained.pricing_model, trained.phase) == ("reservation", "succeeded")
    assert trained.reservation and trained.accelerator_count == 64
    [evaluated] = by_task["evaluate_on_tpu"]
    assert evaluated.pricing_model == "reservation" and evaluated.reservation
    assert "workload(s) of this DAG run recorded on it used" in result.log
    assert result.log.count("the 1 workload(s) of this DAG run") == 2  # the job; the slice, counted once

"""Ring 3: the calendar-mode example (find a 7-day block, reserve it and a TPU block of the same
week, wait for the delivery, train on the block with the Vertex AI reserved operator, evaluate on a
TPU slice of the other block, release everything), checked as ``make demo`` ran it against a live
dws-emulator (``test_dws_page_after_demo.py`` runs the demo once for every example). Both blocks
are booked once, the workloads run on their reservations, and nothing is left afterwards."""

from __future__ import annotations

from typing import Any

import pytest

from tests.airflow.conftest import ExampleRun, no_record_warnings, records

pytestmark = [pytest.mark.airflow, pytest.mark.emulator]

DAG_ID = "dws_calendar_reservation"


def of_kind(emulator: Any, kind: str) -> list[dict[str, Any]]:
    """This example's requests of ``kind`` (the demo runs the others on the same emulator)."""
    return [
        r
        for r in emulator.control.requests()
        if r["kind"] == kind and (kind == "FutureReservation" or r["labels"].get("dws_dag") == DAG_ID)
    ]


def check_example(run: ExampleRun) -> None:
    """The example as `make demo` ran it (`test_dws_page_after_demo.py`): both blocks booked once, the
    workloads on their reservations, nothing left afterwards."""
    line = next(line for line in run.log.splitlines() if "DWS CALENDAR:" in line)
    assert "JOB_STATE_SUCCEEDED on projects/" in line and "(v5litepod-8, 8 chips) in us-west4-a" in line

    gpu, tpu = sorted(
        of_kind(run.emulator, "FutureReservation"), key=lambda b: b["location"] != "us-central1-a"
    )
    assert gpu["location"] == "us-central1-a" and tpu["location"] == "us-west4-a"  # each booked once
    assert gpu["deleted"] and tpu["deleted"] and not gpu["reservation_live"] and not tpu["reservation_live"]
    [job] = of_kind(run.emulator, "CustomJob")
    assert job["state"] == "JOB_STATE_SUCCEEDED" and job["reservation"] == gpu["reservation"]
    [slice_] = of_kind(run.emulator, "QueuedResource")
    assert slice_["deleted"] and slice_["reservation"].endswith(tpu["reservation"].rsplit("/", 1)[-1])

    no_record_warnings(run.log)
    by_task = records(run.home, DAG_ID)
    [trained] = by_task["train"]
    assert (trained.pricing_model, trained.phase) == ("reservation", "succeeded")
    assert trained.reservation and trained.accelerator_count == 64
    [evaluated] = by_task["evaluate_on_tpu"]
    assert evaluated.pricing_model == "reservation" and evaluated.reservation
    assert "workload(s) of this DAG run recorded on it used" in run.log
    assert run.log.count("the 1 workload(s) of this DAG run") == 2  # the job; the slice, counted once

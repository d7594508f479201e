"""Ring 3: the calendar-mode example (find a 7-day block, reserve it and a TPU block of the same
week, wait for the delivery, train on the block with the Vertex AI reserved operator, evaluate on a
TPU slice of the other block, release everything), checked as ``make demo`` ran it against a live
dws-emulator (``test_dws_page_after_demo.py`` runs the demo once for every example). Both blocks
are booked once, the workloads run on their reservations, and nothing is left afterwards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dws_emulator.testing import wait_until
from tests.airflow.conftest import (
    AirflowHome,
    ExampleRun,
    dag_test_running,
    finish,
    no_record_warnings,
    records,
)

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
    # Delivered, used, and kept until their end: calendar mode gives no block back early (the
    # releases said so); nothing runs on them any more.
    for block in (gpu, tpu):
        assert not block["deleted"] and block["reservation_live"] and block["reservation_in_use"] == 0
    assert run.log.count("calendar mode gives no block back early") >= 2
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


# -- the ways a block is lost, by `airflow dags test` of the example against its own emulator ------

#: How the demo runs the example: blocks that may start 20 s from now (see the example's docstring).
FAST = {"DWS_EXAMPLE_CALENDAR_EARLIEST_START_SECONDS": "20"}


def blocks(emulator: Any) -> dict[str, dict[str, Any]]:
    """The example's future reservations by zone (``us-central1-a``: the GPU block)."""
    return {b["location"]: b for b in of_kind(emulator, "FutureReservation")}


def pending(emulator: Any, zone: str) -> dict[str, Any] | None:
    block = blocks(emulator).get(zone)
    return block if block and block["state"] == "PENDING_APPROVAL" else None


def assert_nothing_left(emulator: Any) -> dict[str, dict[str, Any]]:
    """No block left waiting, booked or in use: each is deleted, or delivered with nothing on it
    (kept until its end: billed whatever a release does); no job or TPU slice left running."""
    found = blocks(emulator)
    held = {
        zone: (b["state"], b["deleted"], b["reservation_in_use"])
        for zone, b in found.items()
        if not b["deleted"] and not (b["start_time"] and b["reservation_in_use"] == 0)
    }
    assert held == {}, f"blocks left behind: {held}"
    for job in of_kind(emulator, "CustomJob"):
        assert job["state"] not in ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING"), job
    for slice_ in of_kind(emulator, "QueuedResource"):
        assert slice_["deleted"], slice_
    return found


def test_a_declined_block_fails_the_reserve_task_with_the_reason_and_leaves_nothing(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory()
    emulator.control.set_calendar(approval_seconds="manual")  # the test declines them
    log = tmp_path / "run.log"
    # `dags test` runs one task at a time, deferred ones included: each reserve waits for the test's
    # decision in turn (a request still pending at its start would be declined by the emulator).
    proc = airflow_home.start_dag_test(
        DAG_ID, emulator.address, log, env={"DWS_EXAMPLE_CALENDAR_EARLIEST_START_SECONDS": "150"}
    )
    declined: dict[str, dict[str, Any]] = {}

    def decline() -> bool:
        for zone, block in blocks(emulator).items():
            if zone not in declined and block["state"] == "PENDING_APPROVAL":
                emulator.control.decline_future_reservation(block["name"], "no capacity that week")
                declined[zone] = block
        return len(declined) == 2

    with dag_test_running(proc, log):
        wait_until(decline, 180, "both reserve tasks' requests")
    result = finish(proc, log)
    gpu = declined["us-central1-a"]

    assert "CapacityNotObtainedError" in result.log, result.log[-4000:]
    assert f"{gpu['name'].rsplit('/', 1)[-1]} [DECLINED]" in result.log
    assert "Compute Engine declined the request" in result.log  # what DECLINED means, what to do
    assert "DWS CALENDAR:" not in result.log  # nothing trained
    found = assert_nothing_left(emulator)
    # Each deleted by its reserve task at once: a declined request left would block new ones.
    assert {zone: (b["state"], b["deleted"]) for zone, b in found.items()} == {
        "us-central1-a": ("DECLINED", True),
        "us-west4-a": ("DECLINED", True),
    }
    assert of_kind(emulator, "CustomJob") == [] and of_kind(emulator, "QueuedResource") == []
    by_task = records(airflow_home.home, DAG_ID)
    [declined] = by_task["reserve_block"]
    assert (declined.phase, declined.holds) == ("not_obtained", False)
    assert declined.pricing_model == "calendar"


def test_a_workload_on_a_block_that_ended_fails_as_capacity_revoked(
    airflow_home: AirflowHome, dws_emulator_factory: Any, tmp_path: Path
) -> None:
    emulator = dws_emulator_factory()
    # Both blocks start 20 s after find_block runs. On a loaded machine the reserve tasks may book
    # theirs only a moment before that start, and a request still pending at its start is declined
    # (then deleted by its reserve task: the TPU block this test expects kept was gone). Decided at
    # once, a block booked before its start is approved however late the emulator's tick; one whose
    # start has passed before it is booked is found again by its reserve task. Load cannot change
    # the outcome.
    emulator.control.set_calendar(approval_seconds=0)
    log = tmp_path / "run.log"
    # The training job runs ten minutes: the block ends under it long before.
    proc = airflow_home.start_dag_test(DAG_ID, emulator.address, log, env=FAST, conf={"run_seconds": 600})
    with dag_test_running(proc, log):
        job = wait_until(
            lambda: next(
                (j for j in of_kind(emulator, "CustomJob") if j["state"] == "JOB_STATE_RUNNING"), None
            ),
            240,
            "the training job to run on the block",
        )
        gpu = blocks(emulator)["us-central1-a"]
        assert job["reservation"] == gpu["reservation"]
        emulator.control.end_future_reservation(gpu["name"])  # as its end time would
    result = finish(proc, log)

    assert "CapacityRevokedError" in result.log, result.log[-4000:]
    assert "(capacity revoked, not a workload failure)" in result.log
    assert "JobFailedError" not in result.log and "DWS CALENDAR:" not in result.log
    found = assert_nothing_left(emulator)
    gpu_after, tpu_after = found["us-central1-a"], found["us-west4-a"]
    assert gpu_after["deleted"] and not gpu_after["reservation_live"]  # ended: its release deleted it
    assert not tpu_after["deleted"] and tpu_after["reservation_live"]  # delivered: kept until its end
    [stopped] = of_kind(emulator, "CustomJob")
    assert stopped["state"] != "JOB_STATE_SUCCEEDED"
    by_task = records(airflow_home.home, DAG_ID)
    [trained] = by_task["train"]
    assert (trained.phase, trained.outcome, trained.holds) == ("failed", "preempted", False), trained
    assert trained.pricing_model == "reservation" and "ended" in trained.message

"""Ring 2: a deferrable calendar block whose trigger books it (issue 36), end to end on a live
dws-emulator: the Reserve task defers without a call; the trigger (rebuilt from its serialized form,
as the triggerer does) looks the task instance's blocks up in its zone and every zone its Find task
considered, deletes the ended ones, books the block only if its start still lies ahead, waits for its
approval (or delivery) and reads it; the resumed task returns it, and emits its asset event, without
a call. A block an earlier try booked is adopted as booked, with a warning where it differs.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.exceptions import TaskDeferred
from airflow.sdk import DAG

from airflow_provider_dws.backends.calendar import FutureReservationBackend
from airflow_provider_dws.backends.calendar_block import BlockAsk, build_future_reservation
from airflow_provider_dws.catalog import calendar_shape
from airflow_provider_dws.exceptions import BadRequestError
from airflow_provider_dws.operators.calendar import ReserveCalendarBlockOperator
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.triggers.capacity_request import CapacityRequestTrigger, first_event
from airflow_provider_dws.triggers.submit import find_or_submit, is_pending
from dws_emulator.testing import wait_until
from tests.emulator.test_calendar_provider_on_emulator import H100, PROJECT, ZONE, Run, blocks, dag_tasks

pytestmark = pytest.mark.emulator

#: What neither the deferral nor the resumed task may call: the trigger books and reads the block.
CALLS = (
    "compute.futureReservations.insert",
    "compute.futureReservations.get",
    "compute.futureReservations.list",
)


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any) -> Any:
    emu = dws_emulator_server_factory({})
    monkeypatch.setenv("DWS_EMULATOR_HOST", emu.address)
    emu.control.set_calendar(
        approval_seconds=0.3, provision_seconds=0.3, min_lead_seconds=0, pools={H100: 64}, replace=True
    )
    return emu


#: A Find task whose block starts 10 minutes ahead, for the tests that never wait for the delivery:
#: with the emulator's earliest start (5 s ahead) a starved machine took 16 s from the Find to the
#: booking, and the emulator declined a block whose start had passed.
LATER = {"earliest_start": timedelta(minutes=10)}


def tasks(find: dict[str, Any] | None = None, **reserve: Any) -> dict[str, Any]:
    """The calendar DAG's tasks with a deferrable Reserve task (its Find task chooses ``ZONE``: its
    other zone has no H100 in calendar mode)."""
    return dag_tasks(find, deferrable=True, **reserve)


def deferred(run: Run, task: Any, try_number: int = 1) -> tuple[CapacityRequestTrigger, str]:
    """Run ``task`` until it defers; its trigger as the triggerer rebuilds it, and the method to resume."""
    with pytest.raises(TaskDeferred) as raised:
        task.execute(run.context(task.task_id, try_number))
    trigger = raised.value.trigger
    assert isinstance(trigger, CapacityRequestTrigger) and trigger.submit is not None
    return CapacityRequestTrigger(**trigger.serialize()[1]), raised.value.method_name


def calls(emu: Any) -> list[int]:
    return [emu.calls(m) for m in CALLS]


def test_the_trigger_books_the_block_once_and_the_task_resumes_on_it(emulator: Any) -> None:
    run, dag = Run(), tasks(LATER)
    choice = run.execute(dag["find"])
    before = calls(emulator)
    trigger, method = deferred(run, dag["reserve"])
    assert calls(emulator) == before and blocks(emulator) == []  # the worker made no call
    [waiting] = run.records("reserve")
    assert is_pending(waiting.request_name) and waiting.pricing_model == "calendar"
    assert (
        waiting.held_until == (datetime.fromisoformat(choice["start_time"]) + timedelta(days=1)).isoformat()
    )
    # The lookup covers the chosen zone first, then each zone the Find task considered.
    assert trigger.submission is not None
    assert [e["placement"]["location"] for e in trigger.submission.lookup] == [ZONE, "us-central1-b"]

    event = asyncio.run(asyncio.wait_for(first_event(trigger), 60))
    assert event["phase"] == "provisioning" and "result" in event
    who = RequestIdentity("calendar_dag", "reserve", run.id)  # the stand-in task instance's DAG
    assert event["name"] == f"projects/{PROJECT}/zones/{ZONE}/futureReservations/{who.queued_resource_id()}"
    assert event["result"]["start_time"] == choice["start_time"]

    # A second trigger of the same try (a triggerer restarted before it reported) adopts it.
    again, _ = deferred(run, tasks(LATER)["reserve"])
    assert asyncio.run(asyncio.wait_for(first_event(again), 60))["name"] == event["name"]
    assert len(blocks(emulator)) == 1  # found, not booked twice

    before = calls(emulator)
    result = getattr(tasks(LATER)["reserve"], method)(run.context("reserve"), event)
    assert calls(emulator) == before  # the resumed task reads nothing
    assert result["future_reservation"] == event["name"] and result["zone"] == ZONE
    assert result["vm_count"] == 8 and result["accelerator_count"] == 64
    assert run.store[("reserve", "future_reservation_name")] == event["name"]
    [approved] = run.records("reserve")
    assert approved.request_name == event["name"] and approved.console_url


def test_a_delivered_block_emits_the_asset_event_from_the_triggers_read(emulator: Any) -> None:
    run, dag = Run(), tasks(wait_for_delivery=True)
    run.execute(dag["find"])
    trigger, method = deferred(run, dag["reserve"])
    event = asyncio.run(asyncio.wait_for(first_event(trigger), 600))
    assert (event["phase"], event["state"]) == ("running", "FULFILLED")
    task = tasks(wait_for_delivery=True)["reserve"]
    before = calls(emulator)
    result = getattr(task, method)(run.context("reserve"), event)
    assert calls(emulator) == before
    assert result["reservation_names"] == [event["name"].rsplit("/", 1)[-1]]
    assert run.events[task.asset].extra["future_reservation"] == event["name"]


def test_an_earlier_tries_block_is_adopted_as_booked_with_a_warning(emulator: Any) -> None:
    run, dag = Run(), tasks()
    choice = run.execute(dag["find"])
    # Try 1 booked a block of 4 VMs (its parameters have changed since); try 2 asks for 8.
    earlier = RequestIdentity("calendar_dag", "reserve", run.id)
    start = datetime.fromisoformat(choice["start_time"])
    ask = BlockAsk(calendar_shape("a3-highgpu-8g", 4), ZONE, start, timedelta(days=1))
    backend = FutureReservationBackend(PROJECT, ZONE)
    booked, _ = backend.submit(
        build_future_reservation(PROJECT, earlier.queued_resource_id(), ask, "try 1"), earlier
    )

    trigger, _ = deferred(run, tasks()["reserve"], try_number=2)
    assert trigger.submission is not None
    made = asyncio.run(find_or_submit(trigger.kind, trigger.submission))
    assert (made.how, made.status.name) == ("adopted", booked.name)
    assert made.warning and "4 x a3-highgpu-8g" in made.warning and "never booked twice" in made.warning
    assert len(blocks(emulator)) == 1


def test_an_ended_block_is_deleted_before_the_trigger_books_another(emulator: Any) -> None:
    run, dag = Run(), tasks(LATER)
    choice = run.execute(dag["find"])
    # Try 1's block was declined: it holds nothing, but stays listed until deleted.
    emulator.control.set_calendar(approval_seconds=3600)
    earlier = RequestIdentity("calendar_dag", "reserve", run.id)
    ask = BlockAsk(
        calendar_shape("a3-highgpu-8g", 8),
        ZONE,
        datetime.fromisoformat(choice["start_time"]),
        timedelta(days=1),
    )
    backend = FutureReservationBackend(PROJECT, ZONE)
    declined, _ = backend.submit(
        build_future_reservation(PROJECT, earlier.queued_resource_id(), ask, "try 1"), earlier
    )
    emulator.control.decline_future_reservation(declined.name, "no capacity")
    wait_until(lambda: (s := backend.get_status(declined.name)) is not None and s.phase.terminal)
    emulator.control.set_calendar(approval_seconds=0.3)

    retry, _ = deferred(run, tasks(LATER)["reserve"], try_number=2)
    event = asyncio.run(asyncio.wait_for(first_event(retry), 60))
    assert event["phase"] == "provisioning" and event["name"] != declined.name
    assert event["name"].endswith("-t2-a1")
    assert backend.get(declined.name) is None  # deleted by the lookup, not adopted


def test_a_start_that_passes_before_the_trigger_books_it_books_nothing(emulator: Any) -> None:
    run = Run()
    # Ahead when the worker defers (truncated to the second, on a loaded machine), passed when the
    # trigger runs: the test sleeps until then.
    start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=10)
    with DAG("calendar_trigger_dag", schedule=None):
        task = ReserveCalendarBlockOperator(
            task_id="given",
            project_id=PROJECT,
            zone=ZONE,
            start_time=start.isoformat(),
            duration=timedelta(days=1),
            machine_type="a3-highgpu-8g",
            vm_count=8,
            poll_interval=0.2,
            deferrable=True,
        )
    trigger, method = deferred(run, task)
    time.sleep(max(0.0, (start - datetime.now(timezone.utc)).total_seconds()) + 0.5)
    event = asyncio.run(asyncio.wait_for(first_event(trigger), 60))
    # A start the DAG gives is a parameter to change: refused, as the worker refuses it.
    assert (event["phase"], event["failure"]) == ("failed", "bad_request")
    assert "has passed" in event["message"] and blocks(emulator) == []
    # The resumed task fails with it, releasing nothing (nothing was made under the provisional name).
    with pytest.raises(BadRequestError, match="has passed"):
        getattr(task, method)(run.context("given"), event)
    [record] = run.records("given")
    assert record.phase == "failed" and is_pending(record.request_name)

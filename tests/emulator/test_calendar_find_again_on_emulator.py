"""Ring 2: a Reserve task that runs after its Find task's block has started (a busy machine, a slow
scheduler) asks the calendar-mode advice again, once, and books the block found then; a block found
again that has started too fails the task with a clear message and books nothing. Against a live
dws-emulator through the unmodified ``compute_v1`` clients, the tasks run as in
``test_calendar_provider_on_emulator.py``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_provider_dws.exceptions import CapacityNotObtainedError
from airflow_provider_dws.operators.calendar import (
    FindCalendarBlockOperator,
    ReleaseCalendarBlockOperator,
    ReserveCalendarBlockOperator,
)
from airflow_provider_dws.runtime.calendar_find import FOUND_AGAIN_KEY
from tests.emulator.test_calendar_provider_on_emulator import H100, PROJECT, ZONE, Run, blocks

pytestmark = pytest.mark.emulator

#: The Find task's lead: a block found again starts this far from when it is found, so a loaded
#: machine books it long before its start.
LEAD = timedelta(hours=1)


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any) -> Callable[..., Any]:
    """An in-process emulator every hook talks to: H100 blocks in us-central1-a, v6e in us-east5-a,
    approved 0.3 s after their submission."""

    def start() -> Any:
        emu = dws_emulator_server_factory({})
        monkeypatch.setenv("DWS_EMULATOR_HOST", emu.address)
        emu.control.set_calendar(
            pools={H100: 64, "us-east5-a/v6e": 64},
            approval_seconds=0.3,
            provision_seconds=0.3,
            min_lead_seconds=0,
            replace=True,
        )
        return emu

    return start


class Lines:
    """A logger that keeps its lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def _keep(self, message: str, *args: Any, **_: Any) -> None:
        self.lines.append(message % args if args else message)

    info = warning = error = exception = _keep


def dag_tasks(**reserve: Any) -> dict[str, Any]:
    with DAG("calendar_again_dag", schedule=None):
        return {
            "find": FindCalendarBlockOperator(
                task_id="find",
                project_id=PROJECT,
                zones=["us-central1-b", ZONE],
                machine_type="a3-highgpu-8g",
                vm_count=8,
                duration=timedelta(days=1),
                earliest_start=LEAD,
                latest_start=timedelta(days=2),
            ),
            "reserve": ReserveCalendarBlockOperator(
                task_id="reserve",
                project_id=PROJECT,
                find_task_id="find",
                poll_interval=0.2,
                deferrable=False,
                **reserve,
            ),
            "release": ReleaseCalendarBlockOperator(
                task_id="release", project_id=PROJECT, setup_task_id="reserve"
            ),
        }


def found_late(run: Run, tasks: dict[str, Any]) -> str:
    """Run the Find task, then make its block one that started an hour ago, as if the Reserve task
    ran that much later; returns that start."""
    choice = run.execute(tasks["find"])
    missed = (datetime.now(timezone.utc) - timedelta(hours=1)).replace(microsecond=0).isoformat()
    run.store[("find", "return_value")] = dict(choice, start_time=missed)
    return missed


def test_a_block_that_started_before_the_reserve_is_found_again_once_and_booked(
    emulator: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    emu = emulator()
    lines = Lines()
    monkeypatch.setattr(ReserveCalendarBlockOperator, "log", lines)
    tasks, run = dag_tasks(), Run()
    missed = found_late(run, tasks)

    booked = run.execute(tasks["reserve"])
    again = run.store[("reserve", FOUND_AGAIN_KEY)]
    assert again["missed_start_time"] == missed and again["zone"] == booked["zone"] == ZONE
    assert booked["start_time"] == again["start_time"]
    assert datetime.fromisoformat(booked["start_time"]) > datetime.now(timezone.utc) + LEAD / 2
    assert booked["procurement_status"] in ("APPROVED", "PROCURING")
    [block] = blocks(emu)  # the block found again, booked once
    assert block["name"] == booked["future_reservation"]
    said = "\n".join(lines.lines)
    assert f"The calendar block task 'find' chose ({ZONE} from {missed}) started " in said
    assert "ago, before this task could book it" in said
    assert "asking the calendar-mode advice again, once, for the same shape and duration" in said
    assert f"Found again: {ZONE} from {booked['start_time']}" in said

    # The task resumed (a deferral's end, a retry) keeps the block found again: adopted, not booked again.
    resumed = dag_tasks()["reserve"]
    assert run.execute(resumed, try_number=2)["future_reservation"] == booked["future_reservation"]
    assert resumed.start_time == booked["start_time"] and len(blocks(emu)) == 1
    run.execute(tasks["release"])


def test_a_reserve_with_its_own_zone_and_shape_takes_the_start_found_again(
    emulator: Callable[..., Any],
) -> None:
    """A TPU block booked for the week the Find task chose (its own zone and shape, the Find's start)
    follows the start found again."""
    emu = emulator()
    tpu = {"zone": "us-east5-a", "tpu_version": "v6e", "chip_count": 8, "duration": timedelta(days=1)}
    tasks, run = dag_tasks(**tpu), Run()
    found_late(run, tasks)

    booked = run.execute(tasks["reserve"])
    again = run.store[("reserve", FOUND_AGAIN_KEY)]
    assert (booked["zone"], booked["tpu_version"], booked["chip_count"]) == ("us-east5-a", "v6e", 8)
    assert booked["start_time"] == again["start_time"] and again["zone"] == ZONE  # the GPU advice's
    assert [b["location"] for b in blocks(emu)] == ["us-east5-a"]
    run.execute(tasks["release"])


def test_a_block_found_again_that_has_started_too_fails_with_what_to_do(
    emulator: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    emu = emulator()
    tasks, run = dag_tasks(), Run()
    missed = found_late(run, tasks)
    # The Reserve task's clock a day on: the block found again (an hour from now) has started by the
    # time the task would book it, as on a machine that stalls between the advice and the booking.
    late = datetime.now(timezone.utc) + timedelta(days=1)
    monkeypatch.setattr("airflow_provider_dws.runtime.calendar.utcnow", lambda: late)

    with pytest.raises(CapacityNotObtainedError) as failed:
        run.execute(tasks["reserve"])
    message = str(failed.value)
    assert (
        f"the calendar block task 'find' chose started at {missed} before this task could book it" in message
    )
    assert "and the block found again at" in message and "has started too" in message
    assert "Give 'find' a later earliest_start" in message
    assert blocks(emu) == []  # nothing booked

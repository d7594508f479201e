"""A Reserve task's use of its Find task's choice without a server: what it takes, when a start that
passed is found again (only a start from the Find task, never one the DAG gives), and the Find task
asked again as it would ask now, its templates rendered without changing the DAG's task. The
advice itself, found again and booked, is tested on the emulator
(``tests/emulator/test_calendar_find_again_on_emulator.py``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_provider_dws.exceptions import CapacityNotObtainedError
from airflow_provider_dws.operators.calendar import (
    FindCalendarBlockOperator,
    ReserveCalendarBlockOperator,
)
from airflow_provider_dws.runtime.calendar_find import (
    FOUND_AGAIN_KEY,
    _FindNow,
    check_new_start,
    find_again_if_started,
    starts_from_find,
    take_find_choice,
)

NOW = datetime.now(timezone.utc).replace(microsecond=0)
PASSED = NOW - timedelta(hours=1)


class TI:
    """A task instance whose XComs live in a dict shared by the tasks of one run."""

    dag_id, run_id, map_index, try_number = "cal_dag", "manual__1", -1, 1

    def __init__(self, store: dict[tuple[str, str], Any], task_id: str = "reserve_block") -> None:
        self.store, self.task_id = store, task_id

    def xcom_push(self, key: str, value: Any) -> None:
        self.store[(self.task_id, key)] = value

    def xcom_pull(self, task_ids: Any = None, key: str = "return_value", **_: Any) -> Any:
        return self.store.get((task_ids or self.task_id, key))


def choice(start: datetime, zone: str = "us-central1-a") -> dict[str, Any]:
    return {
        "zone": zone,
        "start_time": start.isoformat(),
        "end_time": (start + timedelta(days=7)).isoformat(),
        "duration_seconds": 7 * 86400,
        "machine_type": "a3-highgpu-8g",
        "vm_count": 8,
        "tpu_version": None,
        "chip_count": None,
        "workload_type": "BATCH",
    }


def tasks(**reserve: Any) -> dict[str, Any]:
    with DAG("cal_dag", schedule=None):
        return {
            "find": FindCalendarBlockOperator(
                task_id="find_block",
                project_id="my-project",
                zones="{{ params.zones }}",
                machine_type="a3-highgpu-8g",
                vm_count=8,
                duration=timedelta(days=7),
                latest_start="{{ params.latest }}",
            ),
            "reserve": ReserveCalendarBlockOperator(
                task_id="reserve_block", project_id="my-project", find_task_id="find_block", **reserve
            ),
        }


def test_the_block_found_again_is_taken_instead_of_the_find_task_s_choice() -> None:
    store = {("find_block", "return_value"): choice(PASSED)}
    reserve = tasks()["reserve"]
    take_find_choice(reserve, {"ti": TI(store)})  # type: ignore[arg-type]
    assert (reserve.zone, reserve.start_time) == ("us-central1-a", PASSED.isoformat())
    assert starts_from_find(reserve)
    later = NOW + timedelta(hours=2)
    store[("reserve_block", FOUND_AGAIN_KEY)] = choice(later, "us-east4-b")
    take_find_choice(reserve, {"ti": TI(store)})  # type: ignore[arg-type]
    assert (reserve.zone, reserve.start_time) == ("us-east4-b", later.isoformat())


def test_a_start_the_dag_gives_is_never_found_again() -> None:
    store = {("find_block", "return_value"): choice(NOW + timedelta(days=3))}
    reserve = tasks(start_time=PASSED.isoformat())["reserve"]
    take_find_choice(reserve, {"ti": TI(store)})  # type: ignore[arg-type]
    assert reserve.start_time == PASSED.isoformat() and not starts_from_find(reserve)
    find_again_if_started(reserve, {"ti": TI(store)}, NOW)  # type: ignore[arg-type]
    assert ("reserve_block", FOUND_AGAIN_KEY) not in store
    with pytest.raises(ValueError, match="has passed: a calendar block starts in the future"):
        check_new_start(reserve, PASSED, NOW)


def test_a_start_from_the_find_task_that_passed_before_the_create_fails_retryably() -> None:
    store = {("find_block", "return_value"): choice(PASSED)}
    reserve = tasks()["reserve"]
    take_find_choice(reserve, {"ti": TI(store)})  # type: ignore[arg-type]
    with pytest.raises(CapacityNotObtainedError, match="the task's next try asks the advice again"):
        check_new_start(reserve, PASSED, NOW)
    check_new_start(reserve, NOW + timedelta(hours=1), NOW)  # ahead: booked


def test_without_a_find_task_in_the_dag_a_passed_start_fails_with_what_to_do() -> None:
    store = {("find_block", "return_value"): choice(PASSED)}
    reserve = ReserveCalendarBlockOperator(
        task_id="reserve_block", project_id="my-project", find_task_id="find_block"
    )
    take_find_choice(reserve, {"ti": TI(store)})  # type: ignore[arg-type]
    with pytest.raises(CapacityNotObtainedError, match="is not a FindCalendarBlockOperator of this DAG"):
        find_again_if_started(reserve, {"ti": TI(store)}, NOW)  # type: ignore[arg-type]


def test_the_find_task_asked_again_is_rendered_for_the_run_and_left_as_parsed() -> None:
    find = tasks()["find"]
    latest = (NOW + timedelta(days=9)).isoformat()
    context = {"ti": TI({}), "params": {"zones": "us-east4-b", "latest": latest}}
    now = _FindNow(find, context)  # type: ignore[arg-type]
    assert (now.zones, now.latest_start) == ("us-east4-b", latest)
    assert now.vm_count == 8 and now.task_id == "find_block"  # the rest is the DAG's task
    now.project_id = "set-by-the-run"
    assert find.zones == "{{ params.zones }}" and find.project_id == "my-project"

"""Calendar mode operators without a server: parse-time checks, what a DAG file's parse loads, the
Find task's choice feeding the Reserve task, the records of a block, and the release's accounting."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from airflow.exceptions import TaskDeferred
from airflow.sdk import DAG, Asset

from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.backends.calendar_block import BlockAsk, build_future_reservation
from airflow_provider_dws.catalog import calendar_shape
from airflow_provider_dws.get_provider_info import get_provider_info
from airflow_provider_dws.operators.calendar import (
    FindCalendarBlockOperator,
    ReleaseCalendarBlockOperator,
    ReserveCalendarBlockOperator,
    WaitForCalendarBlockOperator,
)
from airflow_provider_dws.records import XCOM_KEY, RequestRecord, read_records
from airflow_provider_dws.runtime.calendar import resolve_reserve
from airflow_provider_dws.runtime.calendar_release import usage
from airflow_provider_dws.scheduling.phases import Outcome, Phase, RequestTimings
from tests.probe import DAG_PROCESSOR, Probe

ROOT = Path(__file__).resolve().parents[2]
SOON = datetime.now(timezone.utc) + timedelta(days=10)
NAME = "projects/my-project/zones/us-central1-a/futureReservations/dws-reserve-block-0123456789abcdef-t1-a1"


def find(**kwargs: Any) -> FindCalendarBlockOperator:
    args: dict[str, Any] = {
        "task_id": "find_block",
        "project_id": "my-project",
        "zones": ["us-central1-a", "us-east4-b"],
        "machine_type": "a3-highgpu-8g",
        "vm_count": 8,
        "duration": timedelta(days=7),
        "latest_start": timedelta(weeks=4),
    }
    args.update(kwargs)
    return FindCalendarBlockOperator(**args)


def reserve(**kwargs: Any) -> ReserveCalendarBlockOperator:
    args: dict[str, Any] = {
        "task_id": "reserve_block",
        "project_id": "my-project",
        "zone": "us-central1-a",
        "start_time": SOON,
        "duration": timedelta(days=7),
        "machine_type": "a3-highgpu-8g",
        "vm_count": 8,
        "deferrable": True,
    }
    args.update(kwargs)
    return ReserveCalendarBlockOperator(**args)


# -- parse-time checks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"duration": timedelta(hours=23)}, "duration must be 1 to 90 days"),
        ({"duration": timedelta(days=91)}, "at most 90 days"),
        ({"machine_type": "a2-highgpu-8g"}, "not offered in calendar mode"),
        ({"vm_count": 0}, "vm_count must be an integer from 1 to 80"),
        ({"zones": []}, "zones must be a list"),
        ({"zones": ["us-central1-a", "us-central1-a"]}, "distinct"),
        ({"zones": ["us-central1"]}, "zones must be a list"),
        ({"order": "cheapest"}, "order must be one of"),
        ({"latest_start": datetime(2030, 1, 1)}, "must carry a time zone"),
        ({"latest_start": "next week"}, "ISO 8601"),
        (
            {"machine_type": None, "vm_count": None, "tpu_version": "v4", "chip_count": 8},
            "tpu_version must be a TPU version calendar mode offers",
        ),
        ({"machine_type": None, "vm_count": None}, "pass either machine_type"),
    ],
)
def test_find_refuses_at_parse(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        find(**kwargs)


def test_find_accepts_tpus_up_to_120_days_and_templates() -> None:
    op = find(
        machine_type=None, vm_count=None, tpu_version="v5p", chip_count=64, latest_start=timedelta(days=100)
    )
    assert op.duration == timedelta(days=7)
    templated = find(latest_start="{{ params.until }}", zones="{{ params.zones }}")
    assert templated.latest_start == "{{ params.until }}"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"zone": "us-central1"}, "must be a Compute Engine zone"),
        ({"start_time": datetime(2030, 1, 1)}, "must carry a time zone"),
        ({"start_time": "next week"}, "ISO 8601"),
        ({"duration": None}, "pass find_task_id"),
        ({"machine_type": None, "vm_count": None}, "pass find_task_id"),
        ({"wait_for_delivery": "yes"}, "must be True or False"),
        ({"max_wait": timedelta(days=8)}, "max_wait"),
    ],
)
def test_reserve_refuses_at_parse(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        reserve(**kwargs)


def test_reserve_from_a_find_task_needs_nothing_else() -> None:
    op = ReserveCalendarBlockOperator(task_id="reserve_block", find_task_id="find_block")
    assert op.zone is None and op.max_wait == timedelta(hours=1) and op.cancel_on_kill


def test_wait_and_release_parameters() -> None:
    with pytest.raises(ValueError, match="exactly one of reserve_task_id and future_reservation"):
        WaitForCalendarBlockOperator(task_id="w")
    with pytest.raises(ValueError, match="future reservation's full name"):
        WaitForCalendarBlockOperator(task_id="w", future_reservation="my-block")
    wait = WaitForCalendarBlockOperator(
        task_id="w", future_reservation=NAME, asset="x-dws-calendar://training"
    )
    assert wait.home_placement().location == "us-central1-a"
    assert wait.outlets == [Asset("x-dws-calendar://training")]
    with DAG(dag_id="cal_dag", schedule=None, start_date=datetime(2026, 1, 1)):
        default = WaitForCalendarBlockOperator(task_id="w", reserve_task_id="reserve_block")
    assert default.asset == Asset("x-dws-calendar://cal_dag/reserve_block")
    with pytest.raises(ValueError, match="must be a task id"):
        ReleaseCalendarBlockOperator(task_id="r", setup_task_id="")


def test_the_provider_registers_the_operators_and_the_link() -> None:
    info = get_provider_info()
    assert "airflow_provider_dws.operators.calendar" in info["operators"][0]["python-modules"]
    assert "airflow_provider_dws.links.CalendarBlockLink" in info["extra-links"]


DAG_FILE = """
import json, sys
import airflow.dag_processing.processor, airflow.sdk
before = set(sys.modules)
from datetime import datetime, timedelta
from airflow.sdk import DAG
from airflow_provider_dws.operators.calendar import (FindCalendarBlockOperator, ReserveCalendarBlockOperator,
    WaitForCalendarBlockOperator, ReleaseCalendarBlockOperator)
with DAG(dag_id="cal", schedule=None, start_date=datetime(2026, 1, 1)):
    find = FindCalendarBlockOperator(task_id="find", zones=["us-central1-a", "us-east4-b"],
        machine_type="a3-highgpu-8g", vm_count=8, duration=timedelta(days=7), latest_start=timedelta(weeks=4))
    tpu = FindCalendarBlockOperator(task_id="find_tpu", zones=["us-east5-a"], tpu_version="v6e", chip_count=32,
        duration=timedelta(days=2), latest_start=timedelta(weeks=8))
    reserve = ReserveCalendarBlockOperator(task_id="reserve", find_task_id="find")
    wait = WaitForCalendarBlockOperator(task_id="wait", reserve_task_id="reserve")
    release = ReleaseCalendarBlockOperator(task_id="release", setup_task_id="reserve")
print(json.dumps(sorted(m for m in set(sys.modules) - before if m.startswith("airflow_provider_dws"))))
"""
PARSE_PATH = {
    "airflow_provider_dws",
    "airflow_provider_dws.facts",
    "airflow_provider_dws.links",
    "airflow_provider_dws.operators",
    "airflow_provider_dws.operators.base",
    "airflow_provider_dws.operators.checks",
    "airflow_provider_dws.operators.release",
    "airflow_provider_dws.operators.calendar",
    "airflow_provider_dws.registry",
    "airflow_provider_dws.specs",
    "airflow_provider_dws.specs.calendar_block",
    "airflow_provider_dws.specs.roles",
    "airflow_provider_dws.specs.templates",
}


def test_a_dag_file_with_calendar_operators_loads_only_the_parse_path(tmp_path: Path, probe: Probe) -> None:
    dag = tmp_path / "calendar_parse_dag.py"
    dag.write_text(DAG_FILE)
    done = probe.run(path=dag, cwd=ROOT, preload=DAG_PROCESSOR)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert loaded - PARSE_PATH == set(), "loaded at parse beyond the parse path"


# -- the Find task's choice feeds the Reserve task -------------------------------------------------


class TI:
    """A task instance whose XComs live in a dict shared by the tasks of one run."""

    dag_id, run_id, map_index = "cal_dag", "manual__1", -1

    def __init__(self, store: dict[tuple[str, str], Any], task_id: str) -> None:
        self.store, self.task_id, self.try_number = store, task_id, 1
        self.start_date = datetime.now(timezone.utc)

    def xcom_push(self, key: str, value: Any) -> None:
        self.store[(self.task_id, key)] = value

    def xcom_pull(self, task_ids: Any = None, key: str = "return_value", **_: Any) -> Any:
        if isinstance(task_ids, list):
            return [self.store.get((t, key)) for t in task_ids]
        return self.store.get((task_ids or self.task_id, key))


CHOICE = {
    "zone": "us-east4-b",
    "start_time": SOON.isoformat(),
    "duration_seconds": 7 * 86400,
    "machine_type": None,
    "vm_count": None,
    "tpu_version": "v6e",
    "chip_count": 32,
    "workload_type": "BATCH",
}


def test_reserve_takes_what_the_find_task_chose() -> None:
    store: dict[tuple[str, str], Any] = {("find_block", "return_value"): CHOICE}
    op = ReserveCalendarBlockOperator(
        task_id="reserve_block", find_task_id="find_block", project_id="my-project"
    )
    resolve_reserve(op, {"ti": TI(store, "reserve_block")})  # type: ignore[arg-type]
    assert (op.zone, op.start_time, op.duration) == ("us-east4-b", SOON.isoformat(), timedelta(days=7))
    assert (op.tpu_version, op.chip_count, op.machine_type) == ("v6e", 32, None)
    ask = op.adapter().ask()  # type: ignore[attr-defined]
    assert ask.zone == "us-east4-b" and ask.shape.accelerator_type == "v6e-32"
    empty = ReserveCalendarBlockOperator(task_id="reserve_block", find_task_id="find_block")
    with pytest.raises(ValueError, match="left no calendar block"):
        resolve_reserve(empty, {"ti": TI({}, "reserve_block")})  # type: ignore[arg-type]


# -- the records of a block ------------------------------------------------------------------------


def status(phase: Phase, state: str, started: datetime | None = None) -> RequestStatus:
    return RequestStatus(
        name=NAME,
        state=state,
        outcome=Outcome(phase),
        timings=RequestTimings(submitted=datetime.now(timezone.utc) - timedelta(minutes=1), started=started),
        description="8 x a3-highgpu-8g",
    )


def test_an_approved_block_stays_recorded_as_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    op = reserve()
    adapter = op.adapter()
    monkeypatch.setattr(adapter, "find", lambda context, identity: None)
    monkeypatch.setattr(adapter, "submit", lambda *a: status(Phase.WAITING, "PENDING_APPROVAL"))
    monkeypatch.setattr(adapter, "result", lambda context, st: st.name)
    store: dict[tuple[str, str], Any] = {}
    ti = TI(store, "reserve_block")
    with pytest.raises(TaskDeferred) as deferred:
        op.attempt_loop().run({"ti": ti})  # type: ignore[arg-type]
    assert deferred.value.trigger.target == "provisioning"  # type: ignore[attr-defined]
    [waiting] = read_records(store[("reserve_block", XCOM_KEY)])
    assert (waiting.phase, waiting.pricing_model, waiting.accelerator_count) == ("waiting", "calendar", 64)
    event = {**status(Phase.PROVISIONING, "APPROVED").to_event(), "resume": deferred.value.trigger.resume}  # type: ignore[attr-defined]
    assert op.attempt_loop().complete({"ti": ti}, event, {}) == NAME  # type: ignore[arg-type]
    [approved] = read_records(store[("reserve_block", XCOM_KEY)])
    # Booked, not delivered: live, not ended and not held (nothing is billed before the start).
    assert (approved.phase, approved.ended, approved.outcome, approved.holds) == (
        "waiting",
        None,
        None,
        False,
    )


def test_a_delivered_block_is_recorded_as_held_from_its_start(monkeypatch: pytest.MonkeyPatch) -> None:
    op = WaitForCalendarBlockOperator(
        task_id="wait", future_reservation=NAME, project_id="my-project", deferrable=True
    )
    adapter = op.adapter()
    ask = BlockAsk(calendar_shape("a3-highgpu-8g", 8), "us-central1-a", SOON, timedelta(days=7))
    adapter._blocks[NAME] = build_future_reservation("my-project", "n", ask, "d")  # type: ignore[attr-defined]
    monkeypatch.setattr(adapter, "result", lambda context, st: st.name)
    store: dict[tuple[str, str], Any] = {}
    event = status(Phase.RUNNING, "FULFILLED", started=SOON).to_event()
    op.attempt_loop().complete({"ti": TI(store, "wait")}, event, {})  # type: ignore[arg-type]
    [held] = read_records(store[("wait", XCOM_KEY)])
    assert (held.phase, held.holds, held.ended) == ("running", True, None)
    assert held.held_since == held.started == SOON.isoformat()


# -- what the release says it cost ------------------------------------------------------------------


def test_usage_counts_reserved_delivered_and_recorded_use() -> None:
    from google.cloud import compute_v1

    start = datetime(2026, 12, 1, tzinfo=timezone.utc)
    ask = BlockAsk(calendar_shape("a3-highgpu-8g", 2), "us-central1-a", start, timedelta(days=2))
    fr = build_future_reservation("my-project", "block-t1-a1", ask, "d")
    fr.status = compute_v1.FutureReservationStatus(
        procurement_status="FULFILLED",
        auto_created_reservations=[
            "https://x/compute/v1/projects/my-project/zones/us-central1-a/reservations/block-t1-a1"
        ],
    )

    def record(reservation: str | None, hours: float, count: int = 8) -> RequestRecord:
        began = start + timedelta(hours=1)
        return RequestRecord(
            api="vertex_custom_job",
            kind="k",
            project="p",
            location="us-central1",
            request_name=f"job-{reservation}-{hours}",
            phase="succeeded",
            accelerator_count=count,
            started=began.isoformat(),
            ended=(began + timedelta(hours=hours)).isoformat(),
            reservation=reservation,
        )

    records = [
        record("projects/my-project/zones/us-central1-a/reservations/block-t1-a1", 10),
        record("other", 5),
        record(None, 3),
    ]
    cost = usage(
        fr,
        "projects/my-project/zones/us-central1-a/futureReservations/block-t1-a1",
        records,
        start + timedelta(days=1),
    )
    assert cost["accelerators"] == 16 and cost["accelerator_type"] == "nvidia-h100-80gb"
    assert cost["reserved_hours"] == 16 * 48
    assert cost["delivered_hours"] == 16 * 24  # released after one day of two
    assert (cost["workloads"], cost["used_hours"]) == (1, 80.0)  # 8 GPUs x 10 h on this block only


def test_a_failed_wait_gives_up_only_a_block_still_waiting_for_approval() -> None:
    """The last try's wait ended on an error (``wait_error``): a pending block is cancelled like
    any queued request; an approved one is booked, and the release task's to give back."""
    reserving = reserve().adapter()
    assert reserving.kept_after_failed_wait(status(Phase.WAITING, "PENDING_APPROVAL")) is None
    assert "release task" in str(reserving.kept_after_failed_wait(status(Phase.PROVISIONING, "APPROVED")))
    waiting = WaitForCalendarBlockOperator(task_id="wait", reserve_task_id="reserve_block").adapter()
    assert "reserve task" in str(waiting.kept_after_failed_wait(status(Phase.PROVISIONING, "PROCURING")))

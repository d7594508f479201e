"""Ring 2: calendar mode end to end against a live dws-emulator (its REST front), through the
unmodified ``compute_v1`` clients: find a block, reserve it (once, whatever retries), wait for its
delivery (one shared list per zone), release it; a decline, a max wait and a partial delivery leave
nothing. Nothing of the provider is mocked; the tasks run their ``execute`` with a stand-in task
instance, waiting in the worker (``deferrable=False``) on the same trigger the triggerer runs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_provider_dws.backends.base import WAIT_ERROR, RequestStatus
from airflow_provider_dws.backends.calendar import FutureReservationBackend
from airflow_provider_dws.exceptions import CapacityNotObtainedError, WaitFailedError
from airflow_provider_dws.operators.calendar import (
    FindCalendarBlockOperator,
    ReleaseCalendarBlockOperator,
    ReserveCalendarBlockOperator,
    WaitForCalendarBlockOperator,
)
from airflow_provider_dws.records import XCOM_KEY, read_records
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import Outcome, Phase, RequestTimings
from airflow_provider_dws.triggers import poller
from dws_emulator.testing import wait_until

pytestmark = pytest.mark.emulator

PROJECT = "emu-calendar"
ZONE = "us-central1-a"
H100 = f"{ZONE}/NVIDIA_H100_80GB"
_runs = iter(range(10**6))


class FakeTI:
    """Identity fields and XComs, in a store the tasks of one run share."""

    dag_id = "calendar_dag"
    map_index = -1

    def __init__(
        self, store: dict[tuple[str, str], Any], task_id: str, run_id: str, try_number: int = 1
    ) -> None:
        self.store, self.task_id, self.run_id, self.try_number = store, task_id, run_id, try_number
        self.start_date = datetime.now(timezone.utc)

    def xcom_push(self, key: str, value: Any) -> None:
        self.store[(self.task_id, key)] = value

    def xcom_pull(self, task_ids: Any = None, key: str = "return_value", **_: Any) -> Any:
        if isinstance(task_ids, list):
            return [self.store.get((t, key)) for t in task_ids]
        return self.store.get((task_ids or self.task_id, key))


class Run:
    """One DAG run of the calendar tasks: ``run.context("reserve")`` is a task's context."""

    def __init__(self) -> None:
        self.id = f"manual__{next(_runs)}_{time.monotonic_ns()}"
        self.store: dict[tuple[str, str], Any] = {}
        self.events = OutletEventAccessors()

    def context(self, task_id: str, try_number: int = 1) -> Any:
        return {"ti": FakeTI(self.store, task_id, self.id, try_number), "outlet_events": self.events}

    def execute(self, task: Any, try_number: int = 1) -> Any:
        """Run ``task`` as Airflow would (its return value is its XCom)."""
        result = task.execute(self.context(task.task_id, try_number))
        self.store[(task.task_id, "return_value")] = result
        return result

    def records(self, task_id: str) -> list[Any]:
        return read_records(self.store.get((task_id, XCOM_KEY)))


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch, dws_emulator_server_factory: Any) -> Callable[..., Any]:
    def start(approval: float | str = 0.3, pools: dict[str, int] | None = None) -> Any:
        emu = dws_emulator_server_factory({})
        monkeypatch.setenv("DWS_EMULATOR_HOST", emu.address)
        emu.control.call(
            "SetCalendar",
            {
                "pools": pools if pools is not None else {H100: 64, "us-east5-a/v6e": 64},
                "approval_seconds": approval,
                "provision_seconds": 0.3,
                "min_lead_seconds": 0,
                "replace": True,
            },
        )
        return emu

    return start


def dag_tasks(find: dict[str, Any] | None = None, **reserve: Any) -> dict[str, Any]:
    """The calendar DAG's tasks; ``find``: more arguments of its Find task (e.g. an
    ``earliest_start`` far enough ahead that a starved machine still books before it)."""
    with DAG("calendar_dag", schedule=None):
        tasks = {
            "find": FindCalendarBlockOperator(
                task_id="find",
                project_id=PROJECT,
                zones=["us-central1-b", ZONE],
                machine_type="a3-highgpu-8g",
                vm_count=8,
                duration=timedelta(days=1),
                latest_start=timedelta(days=2),
                **(find or {}),
            ),
            "reserve": ReserveCalendarBlockOperator(
                task_id="reserve",
                project_id=PROJECT,
                find_task_id="find",
                poll_interval=0.2,
                **{"deferrable": False, **reserve},
            ),
            "wait": WaitForCalendarBlockOperator(
                task_id="wait",
                project_id=PROJECT,
                reserve_task_id="reserve",
                poll_interval=0.2,
                deferrable=False,
            ),
            "release": ReleaseCalendarBlockOperator(
                task_id="release", project_id=PROJECT, setup_task_id="reserve"
            ),
        }
    return tasks


def blocks(emu: Any) -> list[dict[str, Any]]:
    return [r for r in emu.control.requests() if r["kind"] == "FutureReservation"]


def test_find_reserve_wait_and_release(emulator: Callable[..., Any]) -> None:
    emu = emulator()
    tasks, run = dag_tasks(), Run()
    choice = run.execute(tasks["find"])
    # us-central1-b has no H100 in calendar mode: the block is in us-central1-a, and starts soon.
    assert choice["zone"] == ZONE and choice["vm_count"] == 8 and choice["accelerator_count"] == 64
    assert "us-central1-b" in choice["unavailable"]
    start = datetime.fromisoformat(choice["start_time"])
    assert datetime.now(timezone.utc) < start < datetime.now(timezone.utc) + timedelta(minutes=5)

    booked = run.execute(tasks["reserve"])
    assert booked["zone"] == ZONE and booked["start_time"] == start.isoformat()
    assert booked["procurement_status"] in ("APPROVED", "PROCURING", "PROVISIONING", "FULFILLED")
    assert booked["future_reservation"].endswith("/futureReservations/" + booked["reservation_name"])
    # A retried reserve (a lost reply, a re-run worker, try 2) adopts its block: never booked twice.
    again = run.execute(tasks["reserve"], try_number=2)
    assert again["future_reservation"] == booked["future_reservation"]
    assert len(blocks(emu)) == 1
    [record] = run.records("reserve")
    assert (record.phase, record.pricing_model, record.accelerator_count) == ("waiting", "calendar", 64)

    delivered = run.execute(tasks["wait"])
    assert delivered["procurement_status"] == "FULFILLED"
    reservation = f"projects/{PROJECT}/zones/{ZONE}/reservations/{booked['reservation_name']}"
    assert delivered["reservations"] == [reservation]
    event = run.events[tasks["wait"].asset]
    assert (
        event.extra["reservations"] == [reservation]
        and event.extra["future_reservation"] == booked["future_reservation"]
    )
    [held] = run.records("wait")
    assert held.holds and held.phase == "running" and held.started == start.isoformat()

    # Delivered: calendar mode gives no block back before its end. The release says so and
    # succeeds (nothing more can be done for it); a release after the end deletes the record.
    out = run.execute(tasks["release"])
    assert out["released"] == [] and [k["state"] for k in out["kept"]] == ["FULFILLED"]
    assert out["kept"][0]["until"] == (start + timedelta(days=1)).isoformat()
    assert out["usage"][0]["reserved_hours"] == 64 * 24
    [block] = blocks(emu)
    assert not block["deleted"] and block["reservation_live"]
    emu.control.end_future_reservation(booked["future_reservation"])  # as its end time would
    out = run.execute(tasks["release"], try_number=2)
    assert out["released"] == [booked["future_reservation"]] and out["states_before"] == ["FULFILLED"]
    [block] = blocks(emu)
    assert block["deleted"] and not block["reservation_live"]
    [released] = run.records("release")
    assert (released.phase, released.holds, released.released is not None) == ("succeeded", False, True)
    # Already gone is success.
    assert run.execute(tasks["release"], try_number=2)["released"] == []


def _reserve_in_thread(task: Any, context: Any) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def go() -> None:
        try:
            task.execute(context)
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread, errors


def _choice(run: Run, days: float = 0.001) -> None:
    start = datetime.now(timezone.utc) + timedelta(days=days)
    run.store[("find", "return_value")] = {
        "zone": ZONE,
        "start_time": start.isoformat(),
        "duration_seconds": 86400,
        "machine_type": "a3-highgpu-8g",
        "vm_count": 8,
        "tpu_version": None,
        "chip_count": None,
        "workload_type": "BATCH",
    }


def test_a_declined_request_fails_with_the_reason_and_leaves_nothing(emulator: Callable[..., Any]) -> None:
    emu = emulator(approval="manual")
    tasks, run = dag_tasks(), Run()
    _choice(run, days=1)
    thread, errors = _reserve_in_thread(tasks["reserve"], run.context("reserve"))
    [pending] = wait_until(lambda: blocks(emu) or None, what="the future reservation")
    emu.control.call("DeclineFutureReservation", {"name": pending["name"], "reason": "no H100 that week"})
    thread.join(120)
    assert not thread.is_alive()
    [error] = errors
    assert isinstance(error, CapacityNotObtainedError) and "DECLINED" in str(error), error
    assert "Compute Engine declined the request" in str(error)
    [block] = blocks(emu)
    assert block["state"] == "DECLINED" and block["deleted"]  # nothing left


def test_a_request_not_approved_within_max_wait_is_cancelled(emulator: Callable[..., Any]) -> None:
    emu = emulator(approval="manual")
    tasks, run = dag_tasks(max_wait=timedelta(seconds=1)), Run()
    _choice(run, days=1)
    with pytest.raises(CapacityNotObtainedError, match="not approved within max wait 0:00:01"):
        run.execute(tasks["reserve"])
    [block] = blocks(emu)
    assert block["state"] == "CANCELLED" and block["deleted"]


def test_a_partial_delivery_fails_the_wait_and_the_release_deletes_it_after_its_end(
    emulator: Callable[..., Any],
) -> None:
    emu = emulator()
    tasks, run = dag_tasks(), Run()
    _choice(run, days=0.0001)  # starts in about 9 s, for a day
    booked = run.execute(tasks["reserve"])
    emu.control.call("PartlyFulfilFutureReservation", {"name": booked["future_reservation"], "count": 3})
    with pytest.raises(CapacityNotObtainedError, match="3 of 8 reserved slots were delivered"):
        run.execute(tasks["wait"])
    # The part delivered is billed until the block's end, like a whole block: kept until then.
    out = run.execute(tasks["release"])
    assert [k["state"] for k in out["kept"]] == ["FAILED_PARTIALLY_FULFILLED"]
    emu.control.end_future_reservation(booked["future_reservation"])
    out = run.execute(tasks["release"], try_number=2)
    assert out["states_before"] == ["FAILED_PARTIALLY_FULFILLED"]
    [block] = blocks(emu)
    assert block["deleted"] and not block["reservation_live"]


def test_an_approved_block_released_before_its_start_is_cancelled(emulator: Callable[..., Any]) -> None:
    emu = emulator()
    tasks, run = dag_tasks(), Run()
    _choice(run, days=10)  # lock time is a day after the approval: still cancellable
    booked = run.execute(tasks["reserve"])
    assert booked["procurement_status"] == "APPROVED"
    reservation = f"projects/{PROJECT}/zones/{ZONE}/reservations/{booked['reservation_name']}"
    backend = FutureReservationBackend(PROJECT, ZONE)
    assert backend.get_reservation(reservation).status == "INACTIVE"  # created at the approval
    out = run.execute(tasks["release"])
    assert out["states_before"] == ["APPROVED"]
    [block] = blocks(emu)
    assert block["state"] == "CANCELLED" and block["deleted"]
    assert backend.get_reservation(reservation) is None and not block["reservation_live"]  # nothing left
    assert out["usage"][0]["delivered_hours"] == 0


def test_every_wait_of_a_zone_costs_one_list_per_round(emulator: Callable[..., Any]) -> None:
    emu = emulator()
    names = []
    for index, days in enumerate((5, 20, 40)):  # the starts are days and weeks away
        tasks, run = dag_tasks(), Run()
        _choice(run, days=days)
        names.append(run.execute(tasks["reserve"])["future_reservation"])
        assert index + 1 == len(blocks(emu))
    backend = FutureReservationBackend(PROJECT, ZONE)
    lists = emu.calls("compute.futureReservations.list")
    gets = emu.calls("compute.futureReservations.get")

    async def follow() -> set[str]:
        subs = [poller.shared_poller(backend.kind, backend.spec(), n).subscribe(n, 3600.0) for n in names]
        assert len({id(s.poller) for s in subs}) == 1  # one poller for the zone
        states = set()
        for sub in subs:
            status = await asyncio.wait_for(sub.next(), 60)
            assert status is not None
            states.add(status.state)
        for sub in subs:
            sub.close()
        return states

    assert asyncio.run(follow()) <= {"APPROVED", "PROCURING"}
    assert emu.calls("compute.futureReservations.list") - lists == 1  # three waits, one list
    assert emu.calls("compute.futureReservations.get") == gets
    for name in names:
        backend.discard(name)


def test_the_identity_finds_every_attempt_without_xcom(emulator: Callable[..., Any]) -> None:
    """The release finds its block by the reserve's identity when the reserve's XCom is lost."""
    emu = emulator()
    tasks, run = dag_tasks(), Run()
    _choice(run, days=10)
    booked = run.execute(tasks["reserve"])
    for key in list(run.store):
        if key[0] == "reserve":
            del run.store[key]
    who = RequestIdentity("calendar_dag", "reserve", run.id)
    assert [s.name for s in FutureReservationBackend(PROJECT, ZONE).find(who)] == [
        booked["future_reservation"]
    ]
    out = run.execute(tasks["release"])
    assert out["released"] == [booked["future_reservation"]]
    assert all(b["deleted"] for b in blocks(emu))


def test_a_tpu_block_is_delivered_with_the_name_a_queued_resource_consumes(
    emulator: Callable[..., Any],
) -> None:
    emulator()
    run = Run()
    with DAG("calendar_dag", schedule=None):
        reserve = ReserveCalendarBlockOperator(
            task_id="reserve",
            project_id=PROJECT,
            zone="us-east5-a",
            # Booked and approved before its start, or the emulator declines it as Compute Engine
            # does: 3 s was too short for a niced process on a busy machine (the oldest ring of
            # `make test`), 10 s is the test's whole wait (delivery comes at the start).
            start_time=datetime.now(timezone.utc) + timedelta(seconds=10),
            duration=timedelta(days=1),
            tpu_version="v6e",
            chip_count=32,
            wait_for_delivery=True,  # one task: approved, then delivered
            poll_interval=0.2,
            deferrable=False,
        )
        release = ReleaseCalendarBlockOperator(task_id="release", project_id=PROJECT, setup_task_id="reserve")
    booked = run.execute(reserve)
    assert booked["procurement_status"] == "FULFILLED"
    assert (booked["accelerator_type"], booked["accelerator_count"]) == ("v6e-32", 32)
    # Delivered in the reserve task: it ends as a wait task would (the same result and asset event).
    tpu_name = f"projects/{PROJECT}/locations/us-east5-a/reservations/{booked['reservation_name']}"
    assert booked["tpu_reservation_names"] == [tpu_name]
    assert reserve.asset.uri == "x-dws-calendar://calendar_dag/reserve"
    assert run.events[reserve.asset].extra["tpu_reservation_names"] == [tpu_name]
    [held] = run.records("reserve")
    assert held.holds and held.accelerator_type == "v6e-32"
    wait = WaitForCalendarBlockOperator(
        task_id="wait", project_id=PROJECT, future_reservation=booked["future_reservation"]
    )
    delivered = run.execute(wait)
    assert {k: v for k, v in delivered.items() if k != "procurement_status"} == {
        k: v for k, v in booked.items() if k != "procurement_status"
    }
    assert [k["state"] for k in run.execute(release)["kept"]] == ["FULFILLED"]  # until its end


def test_the_trigger_cancel_leaves_a_delivered_block_alone(emulator: Callable[..., Any]) -> None:
    """``arelease`` (a user killed the waiting task) cancels a block awaiting approval, never more:
    an approved one is booked, and its release task's (as when the worker's task is killed)."""
    emu = emulator(approval="manual")
    tasks, run = dag_tasks(), Run()
    _choice(run, days=10)
    adapter = tasks["reserve"].adapter()
    tasks["reserve"].resolve_block(run.context("reserve"))
    who = RequestIdentity("calendar_dag", "reserve", run.id)
    backend = FutureReservationBackend(PROJECT, ZONE)
    status, created = backend.submit(adapter.build(who), who, who.request_uuid())
    assert created and status.state == "PENDING_APPROVAL"
    assert asyncio.run(backend.arelease(status.name)) is True
    assert backend.get_status(status.name).state == "CANCELLED"  # type: ignore[union-attr]
    assert asyncio.run(backend.arelease(status.name)) is False  # ended: nothing to cancel
    backend.discard(status.name)
    assert asyncio.run(backend.arelease(status.name)) is False  # gone
    assert [b["state"] for b in blocks(emu)] == ["CANCELLED"]
    again = who.with_attempt(2)  # a new block (the first one is deleted)
    approved, _ = backend.submit(adapter.build(again), again, again.request_uuid())
    emu.control.approve_future_reservation(approved.name)
    assert asyncio.run(backend.arelease(approved.name)) is False  # booked: the release's to give back
    assert backend.get_status(approved.name).state == "APPROVED"  # type: ignore[union-attr]
    backend.discard(approved.name)  # before its lock time: cancelled and deleted


def _submitted(tasks: dict[str, Any], run: Run) -> tuple[FutureReservationBackend, str]:
    """The reserve's block, made as its first attempt would (without waiting on it)."""
    reserve = tasks["reserve"]
    reserve.resolve_block(run.context("reserve"))
    who = RequestIdentity("calendar_dag", "reserve", run.id)
    backend = FutureReservationBackend(PROJECT, ZONE)
    status, _ = backend.submit(reserve.adapter().build(who), who, who.request_uuid())
    return backend, status.name


def _failed_wait(name: str) -> dict[str, Any]:
    """The trigger's last word on the last try: the block still pending (as it last saw it), and an error."""
    event = RequestStatus(
        name=name,
        state="PENDING_APPROVAL",
        outcome=Outcome(Phase.WAITING),
        timings=RequestTimings(submitted=datetime.now(timezone.utc)),
    ).to_event()
    event[WAIT_ERROR] = "PermissionDeniedApiError: the credentials lost access"
    return event


def test_a_failed_last_wait_keeps_a_block_approved_since(emulator: Callable[..., Any]) -> None:
    """The trigger saw it pending; it was approved since: booked, kept for the release task."""
    emu = emulator(approval="manual")
    tasks, run = dag_tasks(), Run()
    _choice(run, days=10)
    backend, name = _submitted(tasks, run)
    emu.control.call("ApproveFutureReservation", {"name": name})
    with pytest.raises(WaitFailedError, match=r"the request was kept \(the block is APPROVED"):
        tasks["reserve"].complete_attempt(run.context("reserve"), _failed_wait(name))
    [block] = blocks(emu)
    assert (block["state"], block["deleted"]) == ("APPROVED", False)
    backend.discard(name)


def test_a_failed_last_wait_keeps_a_block_delivered_since(emulator: Callable[..., Any]) -> None:
    emu = emulator()
    tasks, run = dag_tasks(), Run()
    _choice(run, days=0.00005)  # starts in about 4 s
    backend, name = _submitted(tasks, run)
    wait_until(lambda: backend.get_status(name).state == "FULFILLED", what="the delivery")  # type: ignore[union-attr]
    with pytest.raises(WaitFailedError, match=r"kept \(the block is FULFILLED"):
        tasks["reserve"].complete_attempt(run.context("reserve"), _failed_wait(name))
    [block] = blocks(emu)
    assert (block["state"], block["deleted"], block["reservation_live"]) == ("FULFILLED", False, True)
    emu.control.end_future_reservation(name)
    backend.discard(name)


def test_a_failed_last_wait_gives_up_a_block_still_pending(emulator: Callable[..., Any]) -> None:
    emu = emulator(approval="manual")
    tasks, run = dag_tasks(), Run()
    _choice(run, days=10)
    _, name = _submitted(tasks, run)
    with pytest.raises(WaitFailedError, match="so the request was cancelled"):
        tasks["reserve"].complete_attempt(run.context("reserve"), _failed_wait(name))
    [block] = blocks(emu)
    assert (block["state"], block["deleted"]) == ("CANCELLED", True)


def test_the_give_up_at_max_wait_cancels_only_a_block_awaiting_approval(emulator: Callable[..., Any]) -> None:
    """``agive_up`` (the trigger at the max wait): an approval that just landed, or a block already
    locked for procurement, is not cancelled; its status is the wait's end."""
    emu = emulator(approval="manual")
    tasks, run = dag_tasks(), Run()
    _choice(run, days=10)
    backend, approved = _submitted(tasks, run)
    emu.control.call("ApproveFutureReservation", {"name": approved})
    now = asyncio.run(backend.agive_up(approved))
    assert now is not None and (now.state, now.phase) == ("APPROVED", Phase.PROVISIONING)
    locked_run = Run()
    _choice(locked_run, days=2)  # starts within 4 days: locked at its approval
    _, locked = _submitted(dag_tasks(), locked_run)
    emu.control.call("ApproveFutureReservation", {"name": locked})
    assert asyncio.run(backend.agive_up(locked)).state == "PROCURING"  # type: ignore[union-attr]
    pending_run = Run()
    _choice(pending_run, days=10)
    _, pending = _submitted(dag_tasks(), pending_run)
    assert asyncio.run(backend.agive_up(pending)) is None
    assert {b["name"]: b["state"] for b in blocks(emu)} == {
        approved: "APPROVED",
        locked: "PROCURING",
        pending: "CANCELLED",
    }
    for name in (approved, pending):
        backend.discard(name)


def test_a_retry_finds_its_block_in_a_zone_its_find_task_no_longer_chooses(
    emulator: Callable[..., Any],
) -> None:
    """Try 1 booked in us-central1-a; the Find task ran again and chose us-central1-b, later: try 2
    looks in every zone Find considered and adopts try 1's block instead of booking a second one."""
    emu = emulator()
    tasks, run = dag_tasks(), Run()
    _choice(run, days=10)
    booked = run.execute(tasks["reserve"])
    choice = dict(run.store[("find", "return_value")])
    choice.update(
        zone="us-central1-b", start_time=(datetime.now(timezone.utc) + timedelta(days=12)).isoformat()
    )
    run.store[("find", "return_value")] = choice
    again = run.execute(dag_tasks()["reserve"], try_number=2)
    assert again["future_reservation"] == booked["future_reservation"] and again["zone"] == ZONE
    assert len(blocks(emu)) == 1
    run.execute(tasks["release"])

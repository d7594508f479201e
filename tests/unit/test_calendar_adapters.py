"""Calendar mode's adapters without a server: when a block's start is checked, what a wait task and a
failed wait may give up, which zones a retry looks in, what is deleted of an earlier try's block, the
result of a delivered block, and the messages that tell the user what happened."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_provider_dws.backends.base import RequestStatus
from airflow_provider_dws.backends.calendar import FutureReservationBackend
from airflow_provider_dws.operators.calendar import (
    FindCalendarBlockOperator,
    ReserveCalendarBlockOperator,
)
from airflow_provider_dws.runtime.loop import AttemptLoop
from airflow_provider_dws.scheduling.identity import RequestIdentity
from airflow_provider_dws.scheduling.phases import Outcome, Phase, RequestTimings
from airflow_provider_dws.scheduling.policies import Placement
from airflow_provider_dws.specs.calendar_block import search_range

PAST = datetime(2020, 1, 1, tzinfo=timezone.utc)
SOON = datetime.now(timezone.utc) + timedelta(days=10)
WHO = RequestIdentity("cal_dag", "reserve_block", "manual__1")
ZONE = "us-central1-a"


class TI:
    """A task instance whose XComs live in a dict shared by the tasks of one run."""

    dag_id, run_id, map_index, task_id = "cal_dag", "manual__1", -1, "reserve_block"

    def __init__(self, store: dict[tuple[str, str], Any] | None = None, try_number: int = 1) -> None:
        self.store = {} if store is None else store
        self.try_number, self.max_tries = try_number, 0
        self.start_date = datetime.now(timezone.utc)

    def xcom_push(self, key: str, value: Any) -> None:
        self.store[(self.task_id, key)] = value

    def xcom_pull(self, task_ids: Any = None, key: str = "return_value", **_: Any) -> Any:
        if isinstance(task_ids, list):
            return [self.store.get((t, key)) for t in task_ids]
        return self.store.get((task_ids or self.task_id, key))


def reserve(**kwargs: Any) -> ReserveCalendarBlockOperator:
    args: dict[str, Any] = {
        "task_id": "reserve_block",
        "project_id": "my-project",
        "zone": ZONE,
        "start_time": SOON,
        "duration": timedelta(days=7),
        "machine_type": "a3-highgpu-8g",
        "vm_count": 8,
    }
    args.update(kwargs)
    return ReserveCalendarBlockOperator(**args)


def status(state: str, phase: Phase, name: str | None = None, **details: Any) -> RequestStatus:
    return RequestStatus(
        name=name or FutureReservationBackend("my-project", ZONE).name_of(WHO.queued_resource_id()),
        state=state,
        outcome=Outcome(phase),
        timings=RequestTimings(submitted=datetime.now(timezone.utc) - timedelta(minutes=5)),
        description="8 x a3-highgpu-8g",
        details=details,
    )


# -- B1: a literal start that passed breaks nothing -------------------------------------------------


def test_a_literal_time_that_passed_still_parses_and_renders() -> None:
    """A DAG file keeps parsing once its block started, and a retry still renders its task."""
    op = reserve(start_time=PAST)
    op.check_parameters(rendered=True)
    found = FindCalendarBlockOperator(
        task_id="find",
        zones=[ZONE],
        machine_type="a3-highgpu-8g",
        vm_count=8,
        duration=timedelta(days=7),
        latest_start=PAST,
    )
    found.check_parameters(rendered=True)
    with pytest.raises(ValueError, match="has passed"):
        search_range(found)  # when the Find task runs


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        # Absolute times: a relative one past the horizon, or after the latest, is refused at parse
        # time (tests/unit/test_parse_mistakes_times.py).
        ({"latest_start": datetime.now(timezone.utc) + timedelta(days=61)}, "more than 60 days ahead"),
        ({"latest_start": PAST}, "has passed"),
        ({"earliest_start": datetime.now(timezone.utc) + timedelta(weeks=5)}, "is before earliest_start"),
    ],
)
def test_the_find_range_is_checked_when_the_task_runs(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {
        "task_id": "find",
        "zones": [ZONE],
        "machine_type": "a3-highgpu-8g",
        "vm_count": 8,
        "duration": timedelta(days=7),
        "latest_start": timedelta(weeks=4),
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        search_range(FindCalendarBlockOperator(**args))


def _backend(monkeypatch: pytest.MonkeyPatch, existing: RequestStatus | None) -> list[str]:
    """The reserve's backend answers ``existing`` for its name; returns the creates it was asked for."""
    created: list[str] = []
    monkeypatch.setattr(FutureReservationBackend, "get_status", lambda self, name: existing)

    def create(self: Any, what: str, make: Any, adopt: Any) -> tuple[RequestStatus, bool]:
        created.append(what)
        return status("PENDING_APPROVAL", Phase.WAITING), True

    monkeypatch.setattr(FutureReservationBackend, "_create", create)
    return created


def test_a_new_block_must_start_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    created = _backend(monkeypatch, None)
    adapter = reserve(start_time=PAST).adapter()
    with pytest.raises(ValueError, match="start_time 2020-01-01T00:00:00\\+00:00 has passed"):
        adapter.submit({"ti": TI()}, WHO, Placement(ZONE), timedelta(hours=1))
    assert created == []
    adapter = reserve(start_time=SOON + timedelta(days=60)).adapter()
    with pytest.raises(ValueError, match="more than 60 days ahead"):
        adapter.submit({"ti": TI()}, WHO, Placement(ZONE), timedelta(hours=1))
    assert created == []


def test_an_adopted_block_is_taken_whenever_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A try whose reply was lost adopts the block it made, even after its start time."""
    made = status("FULFILLED", Phase.RUNNING)
    created = _backend(monkeypatch, made)
    adapter = reserve(start_time=PAST).adapter()
    assert adapter.submit({"ti": TI()}, WHO, Placement(ZONE), timedelta(hours=1)) is made
    assert created == []


# -- B2: a wait task never gives its block up ------------------------------------------------------


def _wait(**kwargs: Any) -> Any:
    from airflow_provider_dws.operators.calendar import WaitForCalendarBlockOperator

    name = FutureReservationBackend("my-project", ZONE).name_of(WHO.queued_resource_id())
    return WaitForCalendarBlockOperator(
        task_id="wait", project_id="my-project", future_reservation=name, **kwargs
    )


def test_the_wait_s_trigger_cancels_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = _wait(cancel_on_kill=True).adapter()
    pending = status("PENDING_APPROVAL", Phase.WAITING, start_time=SOON.isoformat())
    trigger = AttemptLoop(adapter.op, adapter).trigger(pending, Placement(ZONE), timedelta(days=7), {})
    assert trigger.releases is False and trigger.serialize()[1]["releases"] is False


def test_the_wait_s_cancel_leaves_the_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cleared, killed or timed-out wait (every path to the adapter's cancel) leaves the block."""
    released: list[str] = []
    monkeypatch.setattr(FutureReservationBackend, "release", lambda self, name, **_: released.append(name))
    monkeypatch.setattr(FutureReservationBackend, "discard", lambda self, name: released.append(name))
    adapter = _wait().adapter()
    assert "reserve task" in str(adapter.release_or_keep(status("APPROVED", Phase.PROVISIONING).name))
    assert released == []


def test_a_cleared_wait_follows_its_block_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Try 2 of a wait whose try 1 was cleared while deferred adopts the block (nothing is submitted)."""
    from airflow.providers.common.compat.sdk import TaskDeferred

    op = _wait(deferrable=True)
    block = status("APPROVED", Phase.PROVISIONING, start_time=SOON.isoformat())
    adapter = op.adapter()
    monkeypatch.setattr(op, "adapter", lambda: adapter)
    monkeypatch.setattr(adapter, "find", lambda context, identity: _found(block))
    monkeypatch.setattr(FutureReservationBackend, "release", lambda *a, **k: pytest.fail("released"))

    class Store(dict[str, Any]):
        def set(self, key: str, value: Any) -> None:
            self[key] = value

        def delete(self, key: str) -> None:
            self.pop(key, None)

    store = Store({"dws_requests": {"records": [], "waiting": {"request": block.name, "try": 1}}})
    with pytest.raises(TaskDeferred):
        op.attempt_loop().run({"ti": TI(try_number=2), "task_state_store": store})


def _found(block: RequestStatus) -> Any:
    from airflow_provider_dws.runtime.adapter import Found

    return Found(block, Placement(ZONE), 1)


# -- B3: a failed wait on the last try acts on the block as it is now --------------------------------


def _block(state: str) -> Any:
    from google.cloud import compute_v1

    from airflow_provider_dws.backends.calendar_block import BlockAsk, build_future_reservation
    from airflow_provider_dws.catalog import calendar_shape

    ask = BlockAsk(calendar_shape("a3-highgpu-8g", 8), ZONE, SOON, timedelta(days=7))
    fr = build_future_reservation("my-project", WHO.queued_resource_id(), ask, "d")
    fr.status = compute_v1.FutureReservationStatus(procurement_status=state)
    return fr


def test_a_refused_cancel_after_a_failed_wait_says_to_cancel_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_provider_dws.backends.base import WAIT_ERROR
    from airflow_provider_dws.errors import ConflictError
    from airflow_provider_dws.exceptions import WaitFailedError

    def refuse(self: Any, name: str) -> bool:
        raise ConflictError("The future reservation is locked")

    deleted: list[str] = []
    monkeypatch.setattr(FutureReservationBackend, "get", lambda self, name: _block("PENDING_APPROVAL"))
    monkeypatch.setattr(FutureReservationBackend, "cancel", refuse)
    monkeypatch.setattr(FutureReservationBackend, "discard", lambda self, name: deleted.append(name))
    event = status("PENDING_APPROVAL", Phase.WAITING).to_event()
    event[WAIT_ERROR] = "PermissionDeniedApiError: the credentials lost access"
    with pytest.raises(WaitFailedError, match="cancelling the request failed: cancel it by hand"):
        reserve().complete_attempt({"ti": TI()}, event)  # type: ignore[arg-type]
    assert deleted == []


# -- B5: an adopted block that differs from the ask is said so --------------------------------------


def test_block_differences_name_the_zone_window_and_shape() -> None:
    from airflow_provider_dws.backends.calendar_block import BlockAsk, block_differences
    from airflow_provider_dws.catalog import calendar_shape

    fr = _block("APPROVED")
    fr.self_link = "https://compute.googleapis.com/compute/v1/" + status("APPROVED", Phase.PROVISIONING).name
    same = BlockAsk(calendar_shape("a3-highgpu-8g", 8), ZONE, SOON.replace(microsecond=0), timedelta(days=7))
    fr.time_window.start_time = same.start.strftime("%Y-%m-%dT%H:%M:%SZ")
    fr.time_window.end_time = same.end.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert block_differences(fr, same) == []
    other = BlockAsk(
        calendar_shape("a3-highgpu-8g", 4), "us-east4-b", same.start + timedelta(days=1), same.duration
    )
    zone, window, shape = block_differences(fr, other)
    assert zone == f"zone {ZONE}, not us-east4-b"
    assert window.startswith(f"from {same.start.isoformat()}")
    assert shape == "8 x a3-highgpu-8g (64 x nvidia-h100-80gb), not 4 x a3-highgpu-8g (32 x nvidia-h100-80gb)"


# -- B7: an earlier try's delivered block is the release's ---------------------------------------------


def test_delete_ended_leaves_a_delivered_block_to_the_release(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = FutureReservationBackend("my-project", ZONE)
    names = {
        state: backend.name_of(f"dws-reserve-block-0123456789abcdef-t{i}-a1")
        for i, state in enumerate(
            ("FAILED_PARTIALLY_FULFILLED", "FULFILLED", "DECLINED", "CANCELLED"), start=1
        )
    }
    ended = [
        status(state, Phase.SUCCEEDED if state == "FULFILLED" else Phase.NOT_OBTAINED, name=name)
        for state, name in names.items()
    ]
    monkeypatch.setattr(FutureReservationBackend, "find", lambda self, identity: ended)
    monkeypatch.setattr(FutureReservationBackend, "get", lambda self, name: None)
    discarded: list[str] = []
    monkeypatch.setattr(FutureReservationBackend, "discard", lambda self, name: discarded.append(name) or [])
    adapter = reserve().adapter()
    adapter.find({"ti": TI()}, WHO)
    adapter.delete_ended()
    assert discarded == [names["DECLINED"], names["CANCELLED"]]


# -- D2: a block delivered in the reserve task ends as a wait's -------------------------------------


def test_a_reserve_that_waits_for_delivery_has_the_wait_s_asset() -> None:
    with DAG("cal_dag", schedule=None):
        op = reserve(wait_for_delivery=True)
        wait = _wait()
    assert op.asset is not None and op.asset.uri == "x-dws-calendar://cal_dag/reserve_block"
    assert op.asset in op.outlets
    assert reserve().asset is None
    with pytest.raises(ValueError, match="asset is emitted on delivery"):
        reserve(asset="x-dws-calendar://x/y")
    assert wait.asset.uri == "x-dws-calendar://cal_dag/block"


def test_a_delivered_block_s_result_names_its_reservations_once() -> None:
    """One function for a reserve's and a wait's result: a delivered TPU block's reservation is named
    as Compute Engine and Cloud TPU consumers name it; an approved one has none yet."""
    from google.cloud import compute_v1

    from airflow_provider_dws.backends.calendar_block import BlockAsk, block_result, build_future_reservation
    from airflow_provider_dws.catalog import calendar_shape

    ask = BlockAsk(calendar_shape(None, None, "v6e", 32), "us-east5-a", SOON, timedelta(days=2))
    fr = build_future_reservation("my-project", "tpu-block", ask, "d")
    name = "projects/my-project/zones/us-east5-a/futureReservations/tpu-block"
    fr.status = compute_v1.FutureReservationStatus(procurement_status="APPROVED")
    approved = block_result(fr, name)
    assert approved["reservations"] == approved["tpu_reservation_names"] == []
    fr.status = compute_v1.FutureReservationStatus(procurement_status="FULFILLED")
    result = block_result(fr, name)
    assert result["reservations"] == ["projects/my-project/zones/us-east5-a/reservations/tpu-block"]
    assert result["tpu_reservation_names"] == [
        "projects/my-project/locations/us-east5-a/reservations/tpu-block"
    ]


# -- M: messages that say what happened ---------------------------------------------------------------


class Lines:
    """A logger that keeps its lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def _keep(self, message: str, *args: Any, **_: Any) -> None:
        self.lines.append(message % args if args else message)

    info = warning = error = exception = _keep


def test_an_approval_is_timed_from_its_submission(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = Lines()
    monkeypatch.setattr(ReserveCalendarBlockOperator, "log", lines)
    reserve().adapter().ended({"ti": TI()}, status("APPROVED", Phase.PROVISIONING))  # type: ignore[arg-type]
    [line] = lines.lines
    assert "is approved [APPROVED], 0:05:00 after it was submitted" in line


def test_a_wait_that_gives_up_says_the_block_was_not_delivered() -> None:
    from airflow_provider_dws.exceptions import CapacityNotObtainedError
    from airflow_provider_dws.scheduling.phases import FailureKind

    given_up = RequestStatus(
        name=status("PENDING_APPROVAL", Phase.WAITING).name,
        state="PENDING_APPROVAL",
        outcome=Outcome(Phase.NOT_OBTAINED, FailureKind.CAPACITY_NOT_OBTAINED, "the wait's deadline passed"),
        timings=RequestTimings(),
        description="8 x a3-highgpu-8g",
    )
    error = _wait().adapter().error(given_up, Placement(ZONE), timedelta(days=7))
    assert isinstance(error, CapacityNotObtainedError)
    assert "was not delivered" in str(error) and "1 day, 0:00:00 after its start" in str(error)
    assert "max wait" not in str(error) and "reserve task" in str(error)


def test_the_release_does_not_claim_a_use_nobody_recorded() -> None:
    from airflow_provider_dws.runtime.calendar_release import _log_cost

    lines = Lines()
    op = type("Op", (), {"log": lines})()
    cost = {
        "accelerator_type": "nvidia-h100-80gb",
        "accelerators": 64,
        "reserved_hours": 64 * 24.0,
        "delivered_hours": 64 * 2.0,
        "used_hours": 0.0,
        "workloads": 0,
    }
    _log_cost(op, "block", cost)
    _log_cost(op, "block", {**cost, "workloads": 1, "used_hours": 32.0})
    unknown, counted = lines.lines
    assert "no consumer records of this DAG run name this reservation" in unknown and "used 0" not in unknown
    assert "the 1 workload(s) of this DAG run recorded on it used 32.0 (25% of the delivered)" in counted


def test_a_zone_the_advice_also_recommends_is_not_unavailable() -> None:
    from google.cloud import compute_v1

    from airflow_provider_dws.backends.calendar_advice import read_offers

    response = compute_v1.CalendarModeAdviceResponse(
        recommendations=[
            compute_v1.CalendarModeRecommendation(
                recommendations_per_spec={
                    "block": compute_v1.FutureResourcesRecommendation(
                        location="zones/us-central1-a",
                        start_time="2026-12-21T08:00:00Z",
                        end_time="2026-12-28T08:00:00Z",
                        other_locations={
                            "zones/us-central1-b": compute_v1.FutureResourcesRecommendationOtherLocation(
                                status="RECOMMENDED", details="fits there too"
                            ),
                            "zones/us-central1-c": compute_v1.FutureResourcesRecommendationOtherLocation(
                                status="NO_CAPACITY", details="full"
                            ),
                        },
                    )
                }
            )
        ]
    )
    offers, unavailable = read_offers(response, ["us-central1-a", "us-central1-b", "us-central1-c"])
    assert [o.zone for o in offers] == ["us-central1-a"]
    assert unavailable == {"us-central1-c": "NO_CAPACITY: full"}


def test_one_region_refusing_the_advice_is_that_region_s_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    from google.cloud import compute_v1

    from airflow_provider_dws.errors import InvalidRequestError
    from airflow_provider_dws.exceptions import BadRequestError
    from airflow_provider_dws.runtime.calendar_find import find_block

    start = (SOON.replace(microsecond=0)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def advise(self: Any, region: str, request: Any) -> Any:
        if region == "us-east4":
            raise InvalidRequestError("calendar mode is not offered to this project in us-east4")
        item = compute_v1.FutureResourcesRecommendation(
            location=f"zones/{ZONE}", start_time=start, end_time=start
        )
        return compute_v1.CalendarModeAdviceResponse(
            recommendations=[compute_v1.CalendarModeRecommendation(recommendations_per_spec={"block": item})]
        )

    monkeypatch.setattr(FutureReservationBackend, "advise", advise)
    monkeypatch.setattr(FindCalendarBlockOperator, "log", Lines())
    find = FindCalendarBlockOperator(
        task_id="find",
        project_id="my-project",
        zones=["us-east4-b", ZONE],
        machine_type="a3-highgpu-8g",
        vm_count=8,
        duration=timedelta(days=7),
        latest_start=timedelta(weeks=4),
    )
    choice = find_block(find, {"ti": TI()})  # type: ignore[arg-type]
    assert choice["zone"] == ZONE
    assert "refused: calendar mode is not offered" in choice["unavailable"]["us-east4-b"]
    find.zones = ["us-east4-b"]
    with pytest.raises(BadRequestError, match="refused the calendar-mode advice \\(us-east4: calendar mode"):
        find_block(find, {"ti": TI()})  # type: ignore[arg-type]


# -- issue 36: the trigger books a block whose start lies ahead --------------------------------------


def test_a_deferrable_reserve_hands_its_block_to_the_trigger_until_its_start_passes() -> None:
    from airflow_provider_dws.backends.calendar_block import ask_from_spec

    adapter = reserve(deferrable=True).adapter()
    assert adapter.makes_in_trigger()
    spec = adapter.request_spec(WHO, Placement(ZONE), timedelta(hours=1))
    assert ask_from_spec(spec["ask"]) == adapter.ask()
    assert spec["horizon_seconds"] == timedelta(days=60).total_seconds() and spec["start_from_find"] is False
    # Passed: the worker looks the block up, and finds one again where its Find task chose it.
    assert not reserve(deferrable=True, start_time=PAST).adapter().makes_in_trigger()


@pytest.mark.parametrize(("from_find", "failure"), [(True, "capacity_not_obtained"), (False, "bad_request")])
def test_the_trigger_books_no_block_whose_start_passed(
    monkeypatch: pytest.MonkeyPatch, from_find: bool, failure: str
) -> None:
    from airflow_provider_dws.backends.calendar_block import BlockAsk, ask_to_spec
    from airflow_provider_dws.catalog import calendar_shape
    from airflow_provider_dws.triggers.submit import refused

    created = _backend(monkeypatch, None)
    ask = BlockAsk(calendar_shape("a3-highgpu-8g", 8), ZONE, PAST, timedelta(days=1))
    spec = {"ask": ask_to_spec(ask), "horizon_seconds": 60 * 86400, "start_from_find": from_find}
    with pytest.raises(ValueError, match="has passed") as raised:
        FutureReservationBackend("my-project", ZONE).submit_spec(spec, WHO)
    assert created == []
    # A missed choice of the Find task is capacity not obtained (retryable), a given start a bad request.
    assert refused("submitting/x/t1/a1", raised.value).outcome.failure.value == failure
    # One a lost reply made is adopted whatever its start.
    made = status("APPROVED", Phase.PROVISIONING)
    _backend(monkeypatch, made)
    assert FutureReservationBackend("my-project", ZONE).submit_spec(spec, WHO) == (made, False)

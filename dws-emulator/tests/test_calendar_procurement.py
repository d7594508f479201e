"""Calendar mode's procurement on the emulator's clock, through the unmodified ``compute_v1`` clients
and the control API: approval (automatic and manual), decline, lock, delivery, partial and failed
delivery, cancel and delete rules, the end of the block."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import grpc
import pytest
from google.api_core import exceptions
from test_calendar_routes import (
    DAY,
    H100_A,
    LINK,
    ZONE,
    Clients,
    P,
    deliver,
    fr_path,
    get,
    gpu_block,
    insert,
    reason,
    record,
    res_path,
    start_emulator,
    status,
    tpu_block,
)

from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def emulator(dws_emulator_server_factory: Any, clock: FakeClock) -> Any:
    return start_emulator(dws_emulator_server_factory, clock)


@pytest.fixture
def gce(emulator: Any) -> Clients:
    return Clients(emulator.server.rest_url)


def _day(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).date().isoformat()


def states(emulator: Any, name: str) -> list[str]:
    return [h["state"] for h in record(emulator, name)["history"]]


def test_a_gpu_block_goes_from_submitted_to_fulfilled_then_ends_with_its_reservation(
    gce, clock, emulator
) -> None:
    start = clock() + 3600
    insert(gce, gpu_block("block", start, days=2, count=2))
    assert status(gce, "block") == "PENDING_APPROVAL"
    clock.advance(1)  # the approval delay: the calendar has room
    fr = get(gce, "block")
    assert fr.status.procurement_status == "PROCURING"  # starts within 4 days: locked at approval
    assert fr.status.lock_time
    assert emulator.control.capacity()[f"{H100_A}@block-res"]["total"] == 0  # declared, empty
    clock.advance(3599.5)  # the start has come; provisioning lasts 1 s
    fr = get(gce, "block")
    assert fr.status.procurement_status == "PROVISIONING" and fr.status.fulfilled_count == 0
    clock.advance(1)
    fr = get(gce, "block")
    assert fr.status.procurement_status == "FULFILLED" and fr.status.fulfilled_count == 2
    assert list(fr.status.auto_created_reservations) == [LINK + res_path("block-res")]
    assert emulator.control.capacity()[f"{H100_A}@block-res"]["total"] == 16
    assert emulator.control.calendar()["bookings"][0]["units"] == 16

    clock.advance(2 * DAY)
    assert status(gce, "block") == "FULFILLED"  # the request keeps its status after its block
    with pytest.raises(exceptions.NotFound):
        gce.reservations.get(project=P, zone=ZONE, reservation="block-res")
    assert emulator.control.capacity()[f"{H100_A}@block-res"]["total"] == 0
    assert emulator.control.calendar()["bookings"] == []
    assert states(emulator, "block") == [
        "PENDING_APPROVAL",
        "APPROVED",
        "PROCURING",
        "PROVISIONING",
        "FULFILLED",
        "RESERVATION_DELETED",
    ]
    rec = record(emulator, "block")
    assert rec["kind"] == "FutureReservation" and rec["strategy"] == "CALENDAR"
    assert rec["accelerator_type"] == "NVIDIA_H100_80GB" and rec["accelerator_count"] == 16
    assert rec["machine_type"] == "a3-highgpu-8g" and rec["count"] == 2 and rec["fulfilled_count"] == 2
    assert rec["reservations"] == [res_path("block-res")] and rec["location"] == ZONE
    assert rec["block_start"] and rec["block_end"] and rec["end_time"] and rec["error"] is None
    gce.frs.delete_unary(project=P, zone=ZONE, future_reservation="block")  # after its end: allowed
    assert record(emulator, "block")["deleted"]


def test_a_far_start_stays_approved_until_its_lock_time(gce, clock) -> None:
    insert(gce, gpu_block("far", clock() + 40 * DAY))
    clock.advance(1)
    fr = get(gce, "far")
    assert fr.status.procurement_status == "APPROVED"
    clock.advance(10 * DAY - 2)  # the lock time is the start - 30 days
    assert status(gce, "far") == "APPROVED"
    clock.advance(2)
    assert status(gce, "far") == "PROCURING"
    with pytest.raises(exceptions.PreconditionFailed) as locked:
        gce.frs.cancel_unary(project=P, zone=ZONE, future_reservation="far")
    assert reason(locked.value) == "conditionNotMet" and "PROCURING" in locked.value.message

    insert(gce, gpu_block("grace", clock() + 10 * DAY))  # at least 4 days ahead: 24 hours to cancel
    clock.advance(1)
    assert status(gce, "grace") == "APPROVED"
    clock.advance(DAY)
    assert status(gce, "grace") == "PROCURING"


def test_manual_approval_approve_and_decline_with_a_reason(gce, clock, emulator) -> None:
    emulator.control.set_calendar(approval_seconds="manual")
    insert(gce, gpu_block("yes", clock() + 600))
    insert(gce, gpu_block("no", clock() + 600))
    clock.advance(300)
    assert status(gce, "yes") == status(gce, "no") == "PENDING_APPROVAL"
    approved = emulator.control.approve_future_reservation(fr_path("yes"))
    assert approved["state"] == "PROCURING" and approved["approve_time"]
    declined = emulator.control.decline_future_reservation(fr_path("no"), "no H100s that week")
    assert declined["state"] == "DECLINED"
    assert declined["error"] == {"code": "DECLINED", "message": "no H100s that week"}
    assert status(gce, "no") == "DECLINED"
    with pytest.raises(grpc.RpcError) as again:
        emulator.control.approve_future_reservation(fr_path("no"))
    assert again.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as missing:
        emulator.control.decline_future_reservation(fr_path("nope"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND

    insert(gce, gpu_block("late", clock() + 60))
    clock.advance(61)  # never approved before its start
    assert status(gce, "late") == "DECLINED"
    assert "not approved before its start time" in record(emulator, "late")["error"]["message"]


def test_a_late_tick_decides_an_approval_as_of_when_it_was_due(gce, clock, emulator) -> None:
    """A busy machine ticks late: a block whose approval was due before its start is approved (and
    delivered) whatever tick sees it first; one whose approval comes after its start is declined."""
    insert(gce, gpu_block("due", clock() + 10))  # the approval is due 1 s after the insert
    insert(gce, gpu_block("after", clock() + 0.5))  # its approval is due after its start
    clock.advance(11.5)  # the first tick since the inserts: past both starts and the delivery
    assert states(emulator, "due")[:3] == ["PENDING_APPROVAL", "APPROVED", "PROCURING"]
    assert status(gce, "due") == "FULFILLED"
    assert record(emulator, "due")["approve_time"] < record(emulator, "due")["start_time"]
    assert status(gce, "after") == "DECLINED"
    assert "not approved before its start time" in record(emulator, "after")["error"]["message"]


def test_the_calendar_declines_what_does_not_fit_and_frees_what_is_cancelled(gce, clock, emulator) -> None:
    start = clock() + 40 * DAY
    insert(gce, gpu_block("a", start, count=6))  # 48 of 64 GPUs a day
    clock.advance(1)
    assert status(gce, "a") == "APPROVED"
    insert(gce, gpu_block("b", start + 3 * DAY, count=3))  # overlaps: 48 + 24 > 64
    clock.advance(1)
    assert status(gce, "b") == "DECLINED"
    assert "not enough capacity for 3 x a3-highgpu-8g" in record(emulator, "b")["error"]["message"]
    insert(gce, gpu_block("c", start + 7 * DAY, count=8))  # right after a's block: the whole zone
    insert(gce, gpu_block("d", start, count=1), zone="us-east1-b")  # no calendar there
    clock.advance(1)
    assert status(gce, "c") == "APPROVED"
    assert status(gce, "d", "us-east1-b") == "DECLINED"
    assert (
        "offers no NVIDIA_H100_80GB in us-east1-b" in record(emulator, "d", "us-east1-b")["error"]["message"]
    )

    gce.frs.cancel_unary(project=P, zone=ZONE, future_reservation="a")
    assert status(gce, "a") == "CANCELLED"
    insert(gce, gpu_block("e", start + 3 * DAY, count=3, days=3))  # ends before c starts
    clock.advance(1)
    assert status(gce, "e") == "APPROVED"

    emulator.control.set_calendar(days={_day(start + 20 * DAY): {H100_A: 0}})
    insert(gce, gpu_block("f", start + 20 * DAY, count=1, days=1))
    clock.advance(1)
    assert status(gce, "f") == "DECLINED"  # that one day has no capacity


def test_partial_and_failed_delivery(gce, clock, emulator) -> None:
    insert(gce, gpu_block("part", clock() + 60, count=4))
    insert(gce, tpu_block("none", clock() + 60, chips=16), zone="us-west4-a")
    clock.advance(1)
    emulator.control.partly_fulfil_future_reservation(fr_path("part"), 1)
    emulator.control.partly_fulfil_future_reservation(fr_path("none", "us-west4-a"), 0)
    with pytest.raises(grpc.RpcError) as too_many:
        emulator.control.partly_fulfil_future_reservation(fr_path("part"), 4)
    assert too_many.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    clock.advance(61)
    fr = get(gce, "part")
    assert fr.status.procurement_status == "FAILED_PARTIALLY_FULFILLED" and fr.status.fulfilled_count == 1
    assert list(fr.status.auto_created_reservations) == [LINK + res_path("part-res")]
    res = gce.reservations.get(project=P, zone=ZONE, reservation="part-res")
    assert res.specific_reservation.count == 1
    assert emulator.control.capacity()[f"{H100_A}@part-res"]["total"] == 8
    failed = get(gce, "none", "us-west4-a")
    assert failed.status.procurement_status == "FAILED" and not failed.status.auto_created_reservations
    # Created at the approval, never delivered: INACTIVE until deleted.
    assert gce.reservations.get(project=P, zone="us-west4-a", reservation="none-res").status == "INACTIVE"
    with pytest.raises(grpc.RpcError) as delivered:
        emulator.control.partly_fulfil_future_reservation(fr_path("part"), 0)
    assert delivered.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    gce.frs.delete_unary(project=P, zone="us-west4-a", future_reservation="none")  # FAILED: deletable


def test_cancel_and_delete_rules(gce, clock, emulator) -> None:
    insert(gce, gpu_block("pending", clock() + 60))
    with pytest.raises(exceptions.PreconditionFailed) as not_yet:
        gce.frs.delete_unary(project=P, zone=ZONE, future_reservation="pending")
    assert "cancel it first" in not_yet.value.message
    gce.frs.cancel_unary(project=P, zone=ZONE, future_reservation="pending")
    assert status(gce, "pending") == "CANCELLED"
    with pytest.raises(exceptions.PreconditionFailed):
        gce.frs.cancel_unary(project=P, zone=ZONE, future_reservation="pending")
    gce.frs.delete_unary(project=P, zone=ZONE, future_reservation="pending")
    with pytest.raises(exceptions.NotFound):
        gce.frs.cancel_unary(project=P, zone=ZONE, future_reservation="pending")

    insert(gce, gpu_block("draft", clock() + 60, submitted=False))
    gce.frs.delete_unary(project=P, zone=ZONE, future_reservation="draft")

    insert(gce, gpu_block("approved", clock() + 40 * DAY))
    clock.advance(1)
    gce.frs.cancel_unary(project=P, zone=ZONE, future_reservation="approved")  # before its lock time
    rec = record(emulator, "approved")
    assert rec["state"] == "CANCELLED" and rec["error"]["code"] == "CANCELLED"

    insert(gce, gpu_block("live", clock() + 60))
    deliver(gce, clock, "live")
    # Delivered: neither the request nor its reservation goes before the block's end.
    with pytest.raises(exceptions.PreconditionFailed) as early:
        gce.frs.delete_unary(project=P, zone=ZONE, future_reservation="live")
    assert "can be deleted only after its end time" in early.value.message
    with pytest.raises(exceptions.PreconditionFailed) as early:
        gce.reservations.delete_unary(project=P, zone=ZONE, reservation="live-res")
    assert "it is deleted then, with everything on it, not before" in early.value.message
    assert gce.reservations.get(project=P, zone=ZONE, reservation="live-res").status == "READY"
    clock.advance(7 * DAY)  # the end: the reservation is gone with it, the request may be deleted
    with pytest.raises(exceptions.NotFound):
        gce.reservations.get(project=P, zone=ZONE, reservation="live-res")
    gce.frs.delete_unary(project=P, zone=ZONE, future_reservation="live")
    rec = record(emulator, "live")
    assert rec["deleted"] and "its block ended at" in rec["ended_reason"]
    assert [h["state"] for h in rec["history"]][-2:] == ["RESERVATION_DELETED", "DELETED"]


def test_end_now_ends_a_delivered_block_as_if_its_end_time_came(gce, clock, emulator) -> None:
    insert(gce, gpu_block("block", clock() + 60))
    with pytest.raises(grpc.RpcError) as early:
        emulator.control.end_future_reservation(fr_path("block"))
    assert early.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    deliver(gce, clock, "block")
    ended = emulator.control.end_future_reservation(fr_path("block"))
    assert ended["state"] == "FULFILLED" and not ended["reservation_live"] and ended["end_time"]
    assert "its block ended at" in ended["ended_reason"]
    with pytest.raises(exceptions.NotFound):
        gce.reservations.get(project=P, zone=ZONE, reservation="block-res")


def test_a_tpu_block_and_a_name_prefix(gce, clock, emulator) -> None:
    start = clock() + 60
    insert(gce, tpu_block("tpus", start, chips=32), zone="us-west4-a")
    insert(gce, gpu_block("prefixed", start, prefix="train"))
    deliver(gce, clock, "prefixed")
    assert status(gce, "tpus", "us-west4-a") == "FULFILLED"
    assert emulator.control.capacity()["us-west4-a/v5litepod@tpus-res"]["total"] == 32
    rec = record(emulator, "tpus", "us-west4-a")
    assert (
        rec["unit"] == "chips" and rec["accelerator_type"] == "v5litepod" and rec["accelerator_count"] == 32
    )
    name = get(gce, "prefixed").status.auto_created_reservations[0].rsplit("/", 1)[1]
    assert name.startswith("train-") and name.endswith("-0001") and len(name.split("-")[1]) == 8
    assert gce.reservations.get(project=P, zone=ZONE, reservation=name).name == name


def test_settings_come_from_the_environment(monkeypatch, dws_emulator_server_factory) -> None:
    monkeypatch.setenv("DWS_EMULATOR_CALENDAR_APPROVAL_SECONDS", "manual")
    monkeypatch.setenv("DWS_EMULATOR_CALENDAR_MIN_LEAD_SECONDS", "30")
    monkeypatch.setenv("DWS_EMULATOR_CALENDAR_PROVISION_SECONDS", "0")
    started = dws_emulator_server_factory({})
    assert started.control.calendar()["settings"] == {
        "approval_seconds": "manual",
        "min_lead_seconds": 30.0,
        "provision_seconds": 0.0,
    }
    assert started.control.calendar()["pools"][H100_A] == 64  # the default calendar


def test_the_cli_shows_a_block_and_parses_the_calendar_options(gce, clock, emulator, capsys) -> None:
    from dws_emulator.cli import build_parser, main

    insert(gce, gpu_block("shown", clock() + 60))
    deliver(gce, clock, "shown")
    assert main(["requests", "--port", str(emulator.port)]) == 0
    out = capsys.readouterr().out
    assert "CALENDAR" in out and "16 x NVIDIA_H100_80GB" in out and "FULFILLED" in out
    assert f"FutureReservation {fr_path('shown')}" in out and f"reservation: {res_path('shown-res')}" in out
    serve = "serve --calendar-approval-seconds manual --calendar-min-lead-seconds 30"
    serve += f" --calendar-provision-seconds 0 --calendar-capacity {H100_A}=8"
    args = build_parser().parse_args(serve.split())
    assert (args.calendar_approval_seconds, args.calendar_min_lead_seconds) == ("manual", 30.0)
    assert args.calendar_provision_seconds == 0.0 and args.calendar_capacity == [f"{H100_A}=8"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--calendar-min-lead-seconds", "-1"])

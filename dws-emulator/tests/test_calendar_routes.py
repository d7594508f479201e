"""Calendar mode's routes in the emulator, through the unmodified ``compute_v1`` clients: future
reservations (insert, requestId replay, get, list, aggregated list, cancel, delete), the
reservations they deliver, and the validation errors.

Each test runs a private in-process emulator with a ``FakeClock`` (every call ticks the model).
The helpers here are shared by the other ``test_calendar_*`` modules.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

import pytest
from google.api_core import exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from dws_emulator.testing import FakeClock

pytestmark = pytest.mark.emulator

P = "cal-test"
ZONE = "us-central1-a"
ZONE_B = "us-central1-b"
REGION = "us-central1"
DAY = 86400
H100_A = f"{ZONE}/NVIDIA_H100_80GB"
H100_B = f"{ZONE_B}/NVIDIA_H100_80GB"
V5E = "us-west4-a/v5litepod"
DONE = compute_v1.Operation.Status.DONE
LINK = "https://www.googleapis.com/compute/v1/"


class Clients:
    """The compute_v1 clients of calendar mode, on the emulator's REST front."""

    def __init__(self, url: str) -> None:
        opts = {"client_options": ClientOptions(api_endpoint=url), "credentials": AnonymousCredentials()}
        self.frs = compute_v1.FutureReservationsClient(**opts)
        self.advice = compute_v1.AdviceClient(**opts)
        self.reservations = compute_v1.ReservationsClient(**opts)
        self.zone_ops = compute_v1.ZoneOperationsClient(**opts)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def start_emulator(factory: Any, clock: FakeClock, capacity: dict[str, int] | None = None) -> Any:
    """A private emulator with fixed calendar settings and inventory (64 H100s a day in
    us-central1-a, 16 in us-central1-b, 64 v5e chips in us-west4-a)."""
    emulator = factory({"us-central1/NVIDIA_H100_80GB": 8} if capacity is None else capacity, clock=clock)
    emulator.control.set_calendar(
        approval_seconds=1,
        min_lead_seconds=0,
        provision_seconds=1,
        pools={H100_A: 64, H100_B: 16, V5E: 64},
        replace=True,
    )
    return emulator


@pytest.fixture
def emulator(dws_emulator_server_factory: Any, clock: FakeClock) -> Any:
    return start_emulator(dws_emulator_server_factory, clock)


@pytest.fixture
def gce(emulator: Any) -> Clients:
    return Clients(emulator.server.rest_url)


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat().replace("+00:00", "Z")


def epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()  # 3.10 reads no "Z"


def gpu_block(
    name: str,
    start: float,
    days: float = 7,
    count: int = 2,
    machine: str = "a3-highgpu-8g",
    reservation: str | None = "",
    prefix: str | None = None,
    submitted: bool = True,
) -> compute_v1.FutureReservation:
    """A calendar-mode GPU future reservation as the provider would build it."""
    fr = compute_v1.FutureReservation(
        name=name,
        reservation_mode="CALENDAR",
        planning_status="SUBMITTED" if submitted else "DRAFT",
        time_window=compute_v1.FutureReservationTimeWindow(
            start_time=rfc3339(start), duration=compute_v1.Duration(seconds=int(days * DAY))
        ),
        specific_sku_properties=compute_v1.FutureReservationSpecificSKUProperties(
            instance_properties=compute_v1.AllocationSpecificSKUAllocationReservedInstanceProperties(
                machine_type=machine
            ),
            total_count=count,
        ),
        deployment_type="DENSE",
        specific_reservation_required=True,
        auto_delete_auto_created_reservations=True,
    )
    if prefix is not None:
        fr.name_prefix = prefix
    elif reservation is not None:
        fr.reservation_name = reservation or f"{name}-res"
    return fr


def tpu_block(name: str, start: float, chips: int = 16, days: float = 3, family: str = "CT5LP") -> Any:
    """A calendar-mode TPU future reservation (aggregate reservation of chips)."""
    families = {
        "CT5LP": "VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT5LP",
        "CT6E": "VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT6E",
        "CT5P": "VM_FAMILY_CLOUD_TPU_POD_SLICE_CT5P",
        "CT4P": "VM_FAMILY_CLOUD_TPU_POD_SLICE_CT4P",
    }
    return compute_v1.FutureReservation(
        name=name,
        reservation_mode="CALENDAR",
        planning_status="SUBMITTED",
        time_window=compute_v1.FutureReservationTimeWindow(
            start_time=rfc3339(start), end_time=rfc3339(start + days * DAY)
        ),
        aggregate_reservation=compute_v1.AllocationAggregateReservation(
            vm_family=families[family],
            workload_type="BATCH",
            reserved_resources=[
                compute_v1.AllocationAggregateReservationReservedResourceInfo(
                    accelerator=compute_v1.AllocationAggregateReservationReservedResourceInfoAccelerator(
                        accelerator_count=chips, accelerator_type="ct5lp"
                    )
                )
            ],
        ),
        reservation_name=f"{name}-res",
        deployment_type="DENSE",
    )


def insert(
    gce: Clients, fr: compute_v1.FutureReservation, zone: str = ZONE, request_id: str = ""
) -> compute_v1.Operation:
    request = compute_v1.InsertFutureReservationRequest(project=P, zone=zone, future_reservation_resource=fr)
    if request_id:
        request.request_id = request_id
    return gce.frs.insert_unary(request=request)


def get(gce: Clients, name: str, zone: str = ZONE) -> compute_v1.FutureReservation:
    return gce.frs.get(project=P, zone=zone, future_reservation=name)


def status(gce: Clients, name: str, zone: str = ZONE) -> str:
    return get(gce, name, zone).status.procurement_status


def fr_path(name: str, zone: str = ZONE) -> str:
    return f"projects/{P}/zones/{zone}/futureReservations/{name}"


def res_path(name: str, zone: str = ZONE) -> str:
    return f"projects/{P}/zones/{zone}/reservations/{name}"


def record(emulator: Any, name: str, zone: str = ZONE) -> dict[str, Any]:
    return next(r for r in emulator.control.requests() if r["name"] == fr_path(name, zone))


def deliver(gce: Clients, clock: FakeClock, name: str, lead: float = 60, zone: str = ZONE) -> None:
    """Move time through approval, the start (``lead`` seconds after the insert) and provisioning:
    the block is FULFILLED."""
    clock.advance(1)
    assert status(gce, name, zone) in ("APPROVED", "PROCURING")
    clock.advance(lead - 0.999)  # just past the start (the wire keeps microseconds)
    assert status(gce, name, zone) == "PROVISIONING"
    clock.advance(1)
    assert status(gce, name, zone) == "FULFILLED"


def reason(exc: exceptions.GoogleAPICallError) -> str:
    return exc.errors[0]["reason"]


# -- future reservations ---------------------------------------------------------------------------


def test_insert_returns_a_zone_operation_and_get_shows_the_server_fields(gce, clock) -> None:
    op = insert(gce, gpu_block("block", clock() + 60))
    assert op.operation_type == "insert" and op.status == compute_v1.Operation.Status.RUNNING
    assert op.target_link == LINK + fr_path("block") and op.zone == LINK + f"projects/{P}/zones/{ZONE}"
    done = gce.zone_ops.wait(project=P, zone=ZONE, operation=op.name)
    assert done.status == DONE and done.progress == 100
    fr = get(gce, "block")
    assert fr.kind == "compute#futureReservation" and fr.id > 0 and fr.creation_timestamp
    assert fr.self_link == LINK + fr_path("block")
    assert fr.self_link_with_id == LINK + f"projects/{P}/zones/{ZONE}/futureReservations/{fr.id}"
    assert fr.zone == LINK + f"projects/{P}/zones/{ZONE}"
    assert fr.planning_status == "SUBMITTED" and fr.reservation_mode == "CALENDAR"
    assert fr.status.procurement_status == "PENDING_APPROVAL"
    assert fr.specific_sku_properties.total_count == 2 and fr.reservation_name == "block-res"

    draft = gpu_block("draft", clock() + 60, submitted=False)
    insert(gce, draft)
    clock.advance(10)
    assert status(gce, "draft") == "DRAFTING"  # a draft is never evaluated


def test_request_id_replays_within_an_hour_and_a_duplicate_name_is_409(gce, clock, emulator) -> None:
    request_id = str(uuid.uuid4())
    first = insert(gce, gpu_block("block", clock() + 7200), request_id=request_id)
    again = insert(gce, gpu_block("block", clock() + 7200), request_id=request_id)
    assert again.name == first.name
    assert [r["name"] for r in emulator.control.requests()] == [fr_path("block")]

    with pytest.raises(exceptions.Conflict) as conflict:
        insert(gce, gpu_block("block", clock() + 7200))
    assert conflict.value.code == 409 and reason(conflict.value) == "alreadyExists"

    clock.advance(3600)  # the API remembers a requestId for 60 minutes: later it is a new call
    with pytest.raises(exceptions.Conflict):
        insert(gce, gpu_block("block", clock() + 7200), request_id=request_id)

    with pytest.raises(exceptions.BadRequest) as bad:
        insert(gce, gpu_block("other", clock() + 7200), request_id="not-a-uuid")
    assert "requestId" in bad.value.message


def test_cancel_and_delete_replay_their_request_id(gce, clock) -> None:
    insert(gce, gpu_block("block", clock() + 40 * DAY))
    request_id = str(uuid.uuid4())
    cancel = compute_v1.CancelFutureReservationRequest(
        project=P, zone=ZONE, future_reservation="block", request_id=request_id
    )
    first = gce.frs.cancel_unary(request=cancel)
    assert first.operation_type == "cancel"
    assert gce.frs.cancel_unary(request=cancel).name == first.name  # not a 412 on CANCELLED
    assert status(gce, "block") == "CANCELLED"
    delete = compute_v1.DeleteFutureReservationRequest(
        project=P, zone=ZONE, future_reservation="block", request_id=str(uuid.uuid4())
    )
    op = gce.frs.delete_unary(request=delete)
    assert gce.frs.delete_unary(request=delete).name == op.name
    assert gce.zone_ops.wait(project=P, zone=ZONE, operation=op.name).status == DONE
    with pytest.raises(exceptions.NotFound) as missing:
        get(gce, "block")
    assert reason(missing.value) == "notFound" and fr_path("block") in missing.value.message


def test_list_pages_filter_and_aggregated_list(gce, clock, emulator) -> None:
    for i in range(5):
        insert(gce, gpu_block(f"fr-{i}", clock() + 60), zone=ZONE if i < 3 else ZONE_B)
    emulator.server.stats.reset()
    pager = gce.frs.list(
        request=compute_v1.ListFutureReservationsRequest(project=P, zone=ZONE, max_results=2)
    )
    assert [fr.name for fr in pager] == ["fr-0", "fr-1", "fr-2"]
    assert emulator.calls("compute.futureReservations.list") == 2
    named = gce.frs.list(
        request=compute_v1.ListFutureReservationsRequest(project=P, zone=ZONE, filter='name = "fr-1"')
    )
    assert [fr.name for fr in named] == ["fr-1"]
    clock.advance(1)  # approved
    pending = gce.frs.list(
        request=compute_v1.ListFutureReservationsRequest(
            project=P, zone=ZONE, filter="status.procurementStatus = PENDING_APPROVAL"
        )
    )
    assert list(pending) == []

    pages = gce.frs.aggregated_list(
        request=compute_v1.AggregatedListFutureReservationsRequest(project=P, max_results=2)
    )
    # A page's scopes are a map (no order): sort what was seen.
    seen = sorted((scope, fr.name) for scope, scoped in pages for fr in scoped.future_reservations)
    assert seen == [(f"zones/{ZONE}", f"fr-{i}") for i in range(3)] + [
        (f"zones/{ZONE_B}", "fr-3"),
        (f"zones/{ZONE_B}", "fr-4"),
    ]
    assert emulator.calls("compute.futureReservations.aggregatedList") == 3
    with pytest.raises(exceptions.BadRequest):
        list(
            gce.frs.list(
                request=compute_v1.ListFutureReservationsRequest(project=P, zone=ZONE, filter="labels.x = y")
            )
        )


# -- delivered reservations ------------------------------------------------------------------------


def test_reservations_get_list_aggregated_list_and_delete(gce, clock, emulator) -> None:
    start = clock() + 60
    insert(gce, gpu_block("block", start, count=3))
    insert(gce, tpu_block("tpus", start, chips=16), zone="us-west4-a")
    with pytest.raises(exceptions.NotFound):
        gce.reservations.get(project=P, zone=ZONE, reservation="block-res")  # not delivered yet
    deliver(gce, clock, "block")
    fr = get(gce, "block")
    assert list(fr.status.auto_created_reservations) == [LINK + res_path("block-res")]
    assert fr.status.fulfilled_count == 3

    res = gce.reservations.get(project=P, zone=ZONE, reservation="block-res")
    assert res.kind == "compute#reservation" and res.status == "READY" and res.name == "block-res"
    assert res.self_link == LINK + res_path("block-res") and res.specific_reservation_required
    assert res.specific_reservation.count == 3 and res.specific_reservation.in_use_count == 0
    assert res.specific_reservation.instance_properties.machine_type == "a3-highgpu-8g"
    assert abs(epoch(res.delete_at_time) - (start + 7 * DAY)) < 0.01  # deleted at the block's end
    tpu = gce.reservations.get(project=P, zone="us-west4-a", reservation="tpus-res")
    assert tpu.aggregate_reservation.reserved_resources[0].accelerator.accelerator_count == 16
    assert tpu.aggregate_reservation.in_use_resources[0].accelerator.accelerator_count == 0
    assert tpu.aggregate_reservation.vm_family == "VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT5LP"

    assert [r.name for r in gce.reservations.list(project=P, zone=ZONE)] == ["block-res"]
    scoped = {
        scope: [r.name for r in s.reservations] for scope, s in gce.reservations.aggregated_list(project=P)
    }
    assert scoped == {f"zones/{ZONE}": ["block-res"], "zones/us-west4-a": ["tpus-res"]}
    assert emulator.control.capacity()[f"{H100_A}@block-res"] == {
        "total": 24,
        "in_use": 0,
        "free": 24,
        "queued": 0,
    }

    with pytest.raises(exceptions.PreconditionFailed):  # a calendar block's: it goes at its end
        gce.reservations.delete_unary(project=P, zone=ZONE, reservation="block-res")
    emulator.control.end_future_reservation(fr_path("block"))  # as its end time would
    with pytest.raises(exceptions.NotFound):
        gce.reservations.get(project=P, zone=ZONE, reservation="block-res")
    assert status(gce, "block") == "FULFILLED"  # the request keeps its status; its block is over
    rec = record(emulator, "block")
    assert rec["end_time"] and not rec["reservation_live"]

    # The reservation of a block that will not come (cancelled) is INACTIVE, and may be deleted.
    insert(gce, gpu_block("later", clock() + 40 * DAY))
    clock.advance(1)
    gce.frs.cancel_unary(project=P, zone=ZONE, future_reservation="later")
    op = gce.reservations.delete_unary(project=P, zone=ZONE, reservation="later-res")
    assert op.operation_type == "delete" and op.target_link == LINK + res_path("later-res")
    assert gce.zone_ops.wait(project=P, zone=ZONE, operation=op.name).status == DONE
    assert emulator.control.capacity()[f"{H100_A}@block-res"]["total"] == 0


# -- validation ------------------------------------------------------------------------------------


def _serving(fr: compute_v1.FutureReservation) -> compute_v1.FutureReservation:
    fr.aggregate_reservation.workload_type = "SERVING"
    return fr


def _with(fr: compute_v1.FutureReservation, **changes: Any) -> compute_v1.FutureReservation:
    for key, value in changes.items():
        setattr(fr, key, value)
    return fr


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda t: _with(gpu_block("x", t), reservation_mode="DEFAULT"), "resource.reservationMode"),
        (lambda t: gpu_block("x", t, machine="a2-highgpu-8g"), "instanceProperties.machineType"),
        (lambda t: gpu_block("x", t, machine="ct5lp-hightpu-4t"), "instanceProperties.machineType"),
        (lambda t: tpu_block("x", t, family="CT4P"), "aggregateReservation.vmFamily"),
        (lambda t: gpu_block("x", t, days=0.5), "resource.timeWindow.duration"),
        (lambda t: gpu_block("x", t, days=91), "resource.timeWindow.duration"),
        (lambda t: tpu_block("x", t, days=0.9), "resource.timeWindow.endTime"),
        (lambda t: gpu_block("x", t - 120), "resource.timeWindow.startTime"),
        (lambda t: gpu_block("x", t, count=0), "specificSkuProperties.totalCount"),
        (lambda t: tpu_block("x", t, chips=0), "acceleratorCount"),
        (lambda t: tpu_block("x", t + 121 * DAY), "120 days"),
        (lambda t: gpu_block("x", t + 61 * DAY), "60 days"),
        (lambda t: gpu_block("x", t, count=81), "from 1 to 80 VMs"),
        (lambda t: tpu_block("x", t, chips=12), "one of 1, 4, 8, 16"),
        (lambda t: _serving(tpu_block("x", t, chips=16)), "one of 1, 4, 8 chips"),
        (lambda t: gpu_block("x", t, reservation=None), "resource.reservationName"),
        (lambda t: gpu_block("x", t, prefix="a-prefix-longer-than-20"), "resource.namePrefix"),
        (lambda t: gpu_block("x", t, reservation="Bad_Name"), "resource.reservationName"),
        (lambda t: gpu_block("Bad_Name", t), "resource.name"),
        (
            lambda t: _with(gpu_block("x", t), aggregate_reservation=tpu_block("y", t).aggregate_reservation),
            "Exactly one",
        ),
    ],
)
def test_invalid_future_reservations_are_400(gce, clock, build, field) -> None:
    with pytest.raises(exceptions.BadRequest) as bad:
        insert(gce, build(clock() + 60))
    assert bad.value.code == 400 and field in bad.value.message


def test_min_lead_time_and_the_time_window_rules(gce, clock, emulator) -> None:
    emulator.control.set_calendar(min_lead_seconds=3600)
    with pytest.raises(exceptions.BadRequest) as early:
        insert(gce, gpu_block("x", clock() + 600))
    assert "at least 3600s" in early.value.message
    insert(gce, gpu_block("x", clock() + 3601))
    both = gpu_block("y", clock() + 7200)
    both.time_window.end_time = rfc3339(clock() + 7200 + 2 * DAY)
    with pytest.raises(exceptions.BadRequest) as twice:
        insert(gce, both)
    assert "Exactly one of timeWindow.endTime and timeWindow.duration" in twice.value.message


def test_a_reservation_name_is_one_live_request_at_a_time(gce, clock) -> None:
    insert(gce, gpu_block("a", clock() + 60, reservation="shared"))
    with pytest.raises(exceptions.Conflict) as conflict:
        insert(gce, gpu_block("b", clock() + 60, reservation="shared"))
    assert "shared" in conflict.value.message
    gce.frs.cancel_unary(project=P, zone=ZONE, future_reservation="a")
    insert(gce, gpu_block("b", clock() + 60, reservation="shared"))  # the cancelled one let it go


def test_a_lost_insert_reply_is_recovered_by_its_request_id(gce, clock, emulator) -> None:
    emulator.control.set_faults(["compute.futureReservations.insert=DEADLINE_EXCEEDEDx1"])
    request_id = str(uuid.uuid4())
    with pytest.raises(exceptions.GatewayTimeout):
        insert(gce, gpu_block("block", clock() + 60), request_id=request_id)
    assert status(gce, "block") == "PENDING_APPROVAL"  # applied, then the answer was lost
    retried = insert(gce, gpu_block("block", clock() + 60), request_id=request_id)
    assert retried.target_link == LINK + fr_path("block")  # the first call's operation, no 409
    assert [r["name"] for r in emulator.control.requests()] == [fr_path("block")]
    emulator.control.set_faults(["compute.advice.calendarMode=UNAVAILABLE"])
    with pytest.raises(exceptions.ServiceUnavailable):
        gce.advice.calendar_mode(
            project=P,
            region=REGION,
            calendar_mode_advice_request_resource=compute_v1.CalendarModeAdviceRequest(),
        )
    emulator.control.clear_faults()


def test_a_block_s_reservation_exists_inactive_from_its_approval(gce, clock, emulator) -> None:
    """``FutureReservation.reservation_name``: created at approval, INACTIVE until the start; READY
    (the same resource) at delivery; a cancelled block's stays INACTIVE until deleted, and one still
    to be delivered cannot be deleted."""
    insert(gce, gpu_block("block", clock() + 60, count=3))
    insert(gce, gpu_block("gone", clock() + 40 * DAY))
    with pytest.raises(exceptions.NotFound):
        gce.reservations.get(project=P, zone=ZONE, reservation="block-res")  # pending: not yet
    clock.advance(1)
    inactive = gce.reservations.get(project=P, zone=ZONE, reservation="block-res")
    assert inactive.status == "INACTIVE" and inactive.specific_reservation.count == 3
    assert inactive.specific_reservation.assured_count == 0
    assert {r.name: r.status for r in gce.reservations.list(project=P, zone=ZONE)} == {
        "block-res": "INACTIVE",
        "gone-res": "INACTIVE",
    }
    with pytest.raises(exceptions.PreconditionFailed, match="cancel that first"):
        gce.reservations.delete_unary(project=P, zone=ZONE, reservation="gone-res")
    gce.frs.cancel_unary(project=P, zone=ZONE, future_reservation="gone")
    gce.frs.delete_unary(project=P, zone=ZONE, future_reservation="gone")
    assert gce.reservations.get(project=P, zone=ZONE, reservation="gone-res").status == "INACTIVE"
    gce.reservations.delete_unary(project=P, zone=ZONE, reservation="gone-res")
    with pytest.raises(exceptions.NotFound):
        gce.reservations.get(project=P, zone=ZONE, reservation="gone-res")
    clock.advance(60)
    clock.advance(1)
    ready = gce.reservations.get(project=P, zone=ZONE, reservation="block-res")
    assert (ready.status, ready.id, ready.specific_reservation.assured_count) == ("READY", inactive.id, 3)
